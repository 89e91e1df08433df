#version 450
// The decay gradient of one group, summed in a fixed order (deterministic): for each (h, l),
//   da[h, l] = sum over the group's rows bh of head h of ( da2[bh, l] + sum_c sum_et part[bh, c, et, l] )
// Heads with no row in the group get 0; the host adds the groups in order.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Pb { float part[]; };  // [BH, NC, nE, L]
layout(std430, binding = 1) readonly buffer Db { float da2[]; };   // [BH, L]
layout(std430, binding = 2) writeonly buffer Ob { float da[]; };   // [H, L]

void main() {
  uint l = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y;
  if (l >= pc.L) return;
  uint nE = (pc.E + 63u) / 64u, per_row = pc.NC * nE;
  float sum = 0.0;
  for (uint bh = 0; bh < pc.BH; ++bh) {
    if (head(bh) != h) continue;
    float row = da2[bh * pc.L + l];
    for (uint k = 0; k < per_row; ++k) row += part[(bh * per_row + k) * pc.L + l];
    sum += row;
  }
  da[h * pc.L + l] = sum;
}
