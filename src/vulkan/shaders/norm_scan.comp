#version 450
// The normaliser scan, one thread per (bh, l), sequential in t:
//   q'_t[l] = q_t[l] / s_t / (N_t[l] + eps),  N_{t+1} = a N_t + q_t
// Steps [seg_begin, seg_end) per dispatch, N carried in Nfinal.
// flags: bit 0 an initial N0 is given, bit 1 store N_t for every t (the backward needs it).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float q[]; };
layout(std430, binding = 1) readonly buffer Sb { float s[]; };
layout(std430, binding = 2) readonly buffer Ab { float a[]; };
layout(std430, binding = 3) readonly buffer N0b { float N0[]; };
layout(std430, binding = 4) writeonly buffer QPb { float qp[]; };
layout(std430, binding = 5) writeonly buffer NTb { float Nt[]; };
layout(std430, binding = 6) buffer NFb { float Nfinal[]; };  // also the carry between segments

void main() {
  uint l = gl_GlobalInvocationID.x, bh = gl_WorkGroupID.y;
  if (l >= pc.L) return;
  float decay = a[head(bh) * pc.L + l];
  float N = pc.seg_begin > 0u ? Nfinal[bh * pc.L + l] : (pc.flags & 1u) != 0u ? N0[bh * pc.L + l] : 0.0;
  bool keep = (pc.flags & 2u) != 0u;
  for (uint t = pc.seg_begin; t < pc.seg_end; ++t) {
    uint i = (bh * pc.T + t) * pc.L + l;
    float x = q[i];
    if (keep) Nt[i] = N;
    qp[i] = (x / s[bh * pc.T + t]) / (N + kEps);
    N = decay * N + x;
  }
  Nfinal[bh * pc.L + l] = N;
}
