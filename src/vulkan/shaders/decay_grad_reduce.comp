#version 450
// The decay gradient of one group, summed in a fixed order (deterministic), in two passes:
//   mode 0, per (bh, l):  da2[bh, l] += sum_k part[bh, k, l]   over k in [seg_begin, seg_end)
//                         (k runs over chunks x embedding tiles; da2 starts as the normaliser's share)
//   mode 1, per (h, l):   da[h, l] = (seg_begin > 0 || flags & 1 ? da[h, l] : 0) + sum_bh da2[bh, l]
//                         over the group's rows bh in [seg_begin, seg_end) of head h
// flags bit 0: a later group, which adds to the earlier groups' sum (groups run in order).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Pb { float part[]; };  // [BH, NC * nE, L]
layout(std430, binding = 1) buffer Db { float da2[]; };            // [BH, L]
layout(std430, binding = 2) buffer Ob { float da[]; };             // [H, L]

void main() {
  uint l = gl_GlobalInvocationID.x;
  if (l >= pc.L) return;
  if (pc.mode == 0u) {
    uint bh = gl_WorkGroupID.y, per_row = pc.NC * ((pc.E + 63u) / 64u);
    float acc = da2[bh * pc.L + l];
    for (uint k = pc.seg_begin; k < pc.seg_end; ++k) acc += part[(bh * per_row + k) * pc.L + l];
    da2[bh * pc.L + l] = acc;
  } else {
    uint h = gl_WorkGroupID.y;
    float acc = pc.seg_begin > 0u || (pc.flags & 1u) != 0u ? da[h * pc.L + l] : 0.0;
    for (uint bh = pc.seg_begin; bh < pc.seg_end; ++bh)
      if (head(bh) == h) acc += da2[bh * pc.L + l];
    da[h * pc.L + l] = acc;
  }
}
