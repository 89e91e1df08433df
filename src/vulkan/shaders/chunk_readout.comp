#version 450
// Per (bh, chunk, 64-embedding tile), outputs indexed by t and e (t an offset in the chunk):
//   out[t, e] = sum_l X_t[l] a_l^p(t) St[l, e]  +  sum_j M(t, j) Y_j[e]
//   mode 0 (context):  X = q', p = t,        St = R at the chunk start, M(t, j) = S[t, j], Y = v
//   mode 1 (dv):       X = q,  p = Cc-1-t,   St = A at the chunk end,   M(t, j) = S[j, t], Y = dcontext
// The first term reads the chunk-boundary state, the second the intra-chunk scores (strictly
// causal: S is zero on and above its diagonal). Both are [64 x K] x [K x 64] products tiled by 16.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer Xb { float X[]; };    // [BH, T, L]
layout(std430, binding = 1) readonly buffer Sb { float St[]; };   // [BH, NC+1, L, E]
layout(std430, binding = 2) readonly buffer Mb { float M[]; };    // [BH, NC, C, C]
layout(std430, binding = 3) readonly buffer Yb { float Y[]; };    // [BH, T, E]
layout(std430, binding = 4) readonly buffer Pb { float P[]; };    // [H, C+1, L]
layout(std430, binding = 5) writeonly buffer Ob { float O[]; };   // [BH, T, E]

shared float As[16][64];  // [k][t]
shared float Bs[16][64];  // [k][e]

void main() {
  uint g = linear_group();
  if (g >= pc.total) return;
  uint nE = (pc.E + 63u) / 64u;
  uint et = g % nE, c = (g / nE) % pc.NC, bh = g / (nE * pc.NC);
  uint e0 = et * 64u, h = head(bh);
  uint t0 = c * pc.C, Cc = min(pc.C, pc.T - t0);
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  bool dv = pc.mode == 1u;
  uint slot = dv ? c + 1u : c;
  uint state = (bh * (pc.NC + 1u) + slot) * pc.L;
  uint mbase = (bh * pc.NC + c) * pc.C * pc.C;

  float acc[4][4];
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) acc[i][j] = 0.0;

  for (uint l0 = 0; l0 < pc.L; l0 += 16u) {
    for (uint r = 0; r < 4u; ++r) {
      uint idx = tid + 256u * r;
      uint tt = idx / 16u, k = idx % 16u, l = l0 + k;
      float x = 0.0;
      if (tt < Cc && l < pc.L) x = X[(bh * pc.T + t0 + tt) * pc.L + l] * POW(P, h, dv ? Cc - 1u - tt : tt, l);
      As[k][tt] = x;
      uint k2 = idx / 64u, ee = idx % 64u, l2 = l0 + k2, e = e0 + ee;
      Bs[k2][ee] = (l2 < pc.L && e < pc.E) ? St[(state + l2) * pc.E + e] : 0.0;
    }
    barrier();
    for (uint k = 0; k < 16u; ++k)
      for (uint i = 0; i < 4u; ++i) {
        float a = As[k][ty + 16u * i];
        for (uint j = 0; j < 4u; ++j) acc[i][j] += a * Bs[k][tx + 16u * j];
      }
    barrier();
  }
  for (uint j0 = 0; j0 < Cc; j0 += 16u) {
    for (uint r = 0; r < 4u; ++r) {
      uint idx = tid + 256u * r;
      uint tt = idx / 16u, k = idx % 16u, j = j0 + k;
      bool causal = dv ? j > tt : j < tt;  // S is zero elsewhere; skipping keeps C = 1 free of it
      As[k][tt] = (tt < Cc && j < Cc && causal) ? M[mbase + (dv ? j * pc.C + tt : tt * pc.C + j)] : 0.0;
      uint k2 = idx / 64u, ee = idx % 64u, j2 = j0 + k2, e = e0 + ee;
      Bs[k2][ee] = (j2 < Cc && e < pc.E) ? Y[(bh * pc.T + t0 + j2) * pc.E + e] : 0.0;
    }
    barrier();
    for (uint k = 0; k < 16u; ++k)
      for (uint i = 0; i < 4u; ++i) {
        float m = As[k][ty + 16u * i];
        for (uint j = 0; j < 4u; ++j) acc[i][j] += m * Bs[k][tx + 16u * j];
      }
    barrier();
  }
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) {
      uint t = ty + 16u * i, e = e0 + tx + 16u * j;
      if (t < Cc && e < pc.E) O[(bh * pc.T + t0 + t) * pc.E + e] = acc[i][j];
    }
}
