#version 450
// Chunk-boundary states, one workgroup per (bh, 64-latent tile, 64-embedding tile), walking
// the chunks in order with its 64x64 state tile in registers (4x4 per thread):
//   mode 0 (forward, R):  out[c] = R_{c*C};  R <- a^Cc R + sum_j a^(Cc-1-j) X_j (x) Y_j
//                         (X = q, Y = v; out[NC] = the final state)
//   mode 1 (reverse, A):  out[c+1] = A_{(c+1)*C};  A <- a^Cc A + sum_j a^j X_j (x) Y_j
//                         (X = q', Y = dcontext; out[0] = the initial-state gradient)
// j is the offset inside the chunk and Cc its length; only non-negative powers of a appear.
// The chunk's contribution is a [64 x Cc] x [Cc x 64] product tiled through shared memory.
// Chunks [seg_begin, seg_end) of the walk per dispatch; a later segment starts from the state
// the previous one stored.
// flags bit 0: an initial state (R_0 or the upstream A_T) is given, else zeros.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer Xb { float X[]; };     // [BH, T, L]
layout(std430, binding = 1) readonly buffer Yb { float Y[]; };     // [BH, T, E]
layout(std430, binding = 2) readonly buffer Pb { float P[]; };     // [H, C+1, L]
layout(std430, binding = 3) readonly buffer Ib { float init[]; };  // [BH, L, E]
layout(std430, binding = 4) buffer Ob { float O[]; };    // [BH, NC+1, L, E]

const uint TB = 16u;  // time steps per shared-memory block
shared float Xs[TB][64];
shared float Ys[TB][64];

void main() {
  uint g = linear_group();
  if (g >= pc.total) return;
  uint nE = (pc.E + 63u) / 64u, nL = (pc.L + 63u) / 64u;
  uint et = g % nE, lt = (g / nE) % nL, bh = g / (nE * nL);
  uint e0 = et * 64u, l0 = lt * 64u, h = head(bh);
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  bool reverse = pc.mode == 1u;

  float st[4][4];
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) {
      uint l = l0 + ty + 16u * i, e = e0 + tx + 16u * j;
      uint from = reverse ? pc.NC - pc.seg_begin : pc.seg_begin;
      if (l >= pc.L || e >= pc.E)
        st[i][j] = 0.0;
      else if (pc.seg_begin > 0u)
        st[i][j] = O[((bh * (pc.NC + 1u) + from) * pc.L + l) * pc.E + e];
      else
        st[i][j] = (pc.flags & 1u) != 0u ? init[(bh * pc.L + l) * pc.E + e] : 0.0;
    }

  for (uint ci = pc.seg_begin; ci < pc.seg_end; ++ci) {
    uint c = reverse ? pc.NC - 1u - ci : ci;
    uint t0 = c * pc.C, Cc = min(pc.C, pc.T - t0);
    uint slot = reverse ? c + 1u : c;
    for (uint i = 0; i < 4u; ++i) {
      uint l = l0 + ty + 16u * i;
      if (l >= pc.L) continue;
      float aC = POW(P, h, Cc, l);
      for (uint j = 0; j < 4u; ++j) {
        uint e = e0 + tx + 16u * j;
        if (e < pc.E) O[((bh * (pc.NC + 1u) + slot) * pc.L + l) * pc.E + e] = st[i][j];
        st[i][j] *= aC;
      }
    }
    for (uint tb = 0; tb < Cc; tb += TB) {
      for (uint r = 0; r < 4u; ++r) {
        uint idx = tid + 256u * r, k = idx / 64u, m = idx % 64u;
        uint j = tb + k, l = l0 + m, e = e0 + m;
        float x = 0.0, y = 0.0;
        if (j < Cc) {
          uint row = bh * pc.T + t0 + j;
          if (l < pc.L) x = X[row * pc.L + l] * POW(P, h, reverse ? j : Cc - 1u - j, l);
          if (e < pc.E) y = Y[row * pc.E + e];
        }
        Xs[k][m] = x;
        Ys[k][m] = y;
      }
      barrier();
      for (uint k = 0; k < TB; ++k) {
        float yv[4];
        for (uint j = 0; j < 4u; ++j) yv[j] = Ys[k][tx + 16u * j];
        for (uint i = 0; i < 4u; ++i) {
          float xv = Xs[k][ty + 16u * i];
          for (uint j = 0; j < 4u; ++j) st[i][j] += xv * yv[j];
        }
      }
      barrier();
    }
  }
  uint last = reverse ? pc.NC - pc.seg_end : pc.seg_end;
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) {
      uint l = l0 + ty + 16u * i, e = e0 + tx + 16u * j;
      if (l < pc.L && e < pc.E) O[((bh * (pc.NC + 1u) + last) * pc.L + l) * pc.E + e] = st[i][j];
    }
}
