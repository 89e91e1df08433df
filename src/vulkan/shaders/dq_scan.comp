#version 450
// The reverse normaliser scan and dq, one thread per (bh, l), t from T-1 down to 0:
//   gw_t  = GRt_t / (N_t + eps)
//   dq_t  = (gw_t - dot_t) / s_t + AV_t + B_{t+1}
//   da2  += B_{t+1} N_t                    (the normaliser's share of the decay gradient)
//   B_t   = -q'_t gw_t + a B_{t+1}         (B_T = the upstream dLoss/dN_T, or 0)
// and B_0 = dLoss/dN_0. Reverse steps [seg_begin, seg_end) per dispatch, carried in dN0 / da2. flags bit 0: the upstream gradient of the final rho_norm is given.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer QPb { float qp[]; };    // [BH, T, L]
layout(std430, binding = 1) readonly buffer GRb { float GRt[]; };   // [BH, T, L]
layout(std430, binding = 2) readonly buffer NTb { float Nt[]; };    // [BH, T, L]
layout(std430, binding = 3) readonly buffer Sb { float s[]; };      // [BH, T]
layout(std430, binding = 4) readonly buffer Db { float dotw[]; };   // [BH, T]
layout(std430, binding = 5) readonly buffer AVb { float AV[]; };    // [BH, T, L]
layout(std430, binding = 6) readonly buffer Ab { float a[]; };      // [H, L]
layout(std430, binding = 7) readonly buffer GNb { float GN[]; };    // [BH, L]
layout(std430, binding = 8) writeonly buffer DQb { float dq[]; };   // [BH, T, L]
layout(std430, binding = 9) buffer DNb { float dN0[]; };  // [BH, L]; the carries between segments
layout(std430, binding = 10) buffer DAb { float da2[]; }; // [BH, L]

void main() {
  uint l = gl_GlobalInvocationID.x, bh = gl_WorkGroupID.y;
  if (l >= pc.L) return;
  float decay = a[head(bh) * pc.L + l];
  bool first = pc.seg_begin == 0u;
  float Bn = !first ? dN0[bh * pc.L + l] : (pc.flags & 1u) != 0u ? GN[bh * pc.L + l] : 0.0;
  float acc = first ? 0.0 : da2[bh * pc.L + l];
  for (uint k = pc.seg_begin; k < pc.seg_end; ++k) {  // k counts steps from the end
    uint t = pc.T - 1u - k, row = bh * pc.T + t, i = row * pc.L + l;
    float n = Nt[i];
    float gw = GRt[i] / (n + kEps);
    dq[i] = (gw - dotw[row]) / s[row] + AV[i] + Bn;
    acc += Bn * n;
    Bn = -qp[i] * gw + decay * Bn;
  }
  dN0[bh * pc.L + l] = Bn;
  da2[bh * pc.L + l] = acc;
}
