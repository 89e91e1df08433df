#version 450
// One workgroup per (bh, chunk): a [Cc x Cc] matrix of pair products inside the chunk
// (t, j are offsets in the chunk, C <= 64), contracted over a dimension tiled by 16:
//   mode 0 (scores):  S[t, j] = sum_l q'_t[l] a_l^(t-1-j) q_j[l]  for j < t, else 0
//                     (X = q', Y = q, dimension L; t-1-j >= 0: never a negative power)
//   mode 1 (gram):    M[t, j] = sum_e X_t[e] Y_j[e]  for all t, j  (X = dcontext, Y = v)
// out is [BH, NC, C, C]; entries outside the chunk's length are 0.
// With tiles = n > 1 the contraction is split in n consecutive slices, one workgroup each (more
// workgroups when a group has few chunks: BDH-8k has 256 (bh, chunk) pairs for 132 SMs), and out
// is [n, BH, NC, C, C], partial sums that sum_parts.comp adds in slice order (deterministic).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer Xb { float X[]; };
layout(std430, binding = 1) readonly buffer Yb { float Y[]; };
layout(std430, binding = 2) readonly buffer Pb { float P[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };

const uint KB = 16u;
shared float Xs[64][KB + 1u];
shared float Ys[64][KB + 1u];
shared float Ps[65][KB + 1u];

void main() {
  uint g = linear_group();
  if (g >= pc.total) return;
  uint parts = max(pc.tiles, 1u), part = g % parts;
  g /= parts;
  uint c = g % pc.NC, bh = g / pc.NC, h = head(bh);
  uint t0 = c * pc.C, Cc = min(pc.C, pc.T - t0);
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  bool scores = pc.mode == 0u;
  uint D = scores ? pc.L : pc.E;
  uint span = ((D + parts - 1u) / parts + KB - 1u) / KB * KB;  // whole tiles per slice
  uint d_begin = min(D, part * span), d_end = min(D, d_begin + span);

  float acc[4][4];
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) acc[i][j] = 0.0;

  for (uint d0 = d_begin; d0 < d_end; d0 += KB) {
    for (uint r = 0; r < 4u; ++r) {  // 64 rows x 16 columns: 1024 values per operand
      uint idx = tid + 256u * r, row = idx / KB, k = idx % KB, d = d0 + k;
      bool ok = row < Cc && d < d_end;
      uint src = (bh * pc.T + t0 + row) * D + d;
      Xs[row][k] = ok ? X[src] : 0.0;
      Ys[row][k] = ok ? Y[src] : 0.0;
    }
    if (scores)
      for (uint idx = tid; idx < (pc.C + 1u) * KB; idx += 256u) {
        uint p = idx / KB, k = idx % KB, d = d0 + k;
        Ps[p][k] = d < d_end ? POW(P, h, p, d) : 0.0;
      }
    barrier();
    for (uint k = 0; k < KB; ++k)
      for (uint i = 0; i < 4u; ++i) {
        uint t = ty + 16u * i;
        float xv = Xs[t][k];
        for (uint j = 0; j < 4u; ++j) {
          uint s = tx + 16u * j;
          if (!scores)
            acc[i][j] += xv * Ys[s][k];
          else if (s < t)
            acc[i][j] += xv * Ps[t - 1u - s][k] * Ys[s][k];
        }
      }
    barrier();
  }
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) {
      uint t = ty + 16u * i, s = tx + 16u * j;
      if (t < pc.C && s < pc.C)
        O[(((part * pc.BH + bh) * pc.NC + c) * pc.C + t) * pc.C + s] = (t < Cc && s < Cc) ? acc[i][j] : 0.0;
    }
}
