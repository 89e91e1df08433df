#version 450
// Per (bh, chunk, 64-latent tile), outputs indexed by t and l (t an offset in the chunk):
//   mode 0 (GRt[t,l] = sum_e dcontext_t[e] R_t[l,e]):
//     a_l^t  sum_e Z_t[e] St[l,e]  +  sum_{j<t} a_l^(t-1-j) W_j[l] M[t, j]
//     Z = dcontext, St = R at the chunk start, W = q, M = dcontext.v gram
//   mode 1 (AV[t,l] = sum_e A_{t+1}[l,e] v_t[e]):
//     a_l^(Cc-1-t)  sum_e Z_t[e] St[l,e]  +  sum_{j>t} a_l^(j-1-t) W_j[l] M[j, t]
//     Z = v, St = A at the chunk end, W = q', M = the same gram
// The powers come from a per-workgroup shared copy of the [C+1, 64] decay-power table.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer Zb { float Z[]; };    // [BH, T, E]
layout(std430, binding = 1) readonly buffer Sb { float St[]; };   // [BH, NC+1, L, E]
layout(std430, binding = 2) readonly buffer Wb { float W[]; };    // [BH, T, L]
layout(std430, binding = 3) readonly buffer Mb { float M[]; };    // [BH, NC, C, C]
layout(std430, binding = 4) readonly buffer Pb { float P[]; };    // [H, C+1, L]
layout(std430, binding = 5) writeonly buffer Ob { float O[]; };   // [BH, T, L]

shared float As[16][64];  // part 1: [e][t];  part 2: W as [j][l]
shared float Bs[16][64];  // part 1: [e][l];  part 2: M as [j][t]
shared float Ps[65][64];  // [power][l]

void main() {
  uint g = linear_group();
  if (g >= pc.total) return;
  uint nL = (pc.L + 63u) / 64u;
  uint lt = g % nL, c = (g / nL) % pc.NC, bh = g / (nL * pc.NC);
  uint l0 = lt * 64u, h = head(bh);
  uint t0 = c * pc.C, Cc = min(pc.C, pc.T - t0);
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  bool av = pc.mode == 1u;
  uint slot = av ? c + 1u : c;
  uint state = (bh * (pc.NC + 1u) + slot) * pc.L;
  uint mbase = (bh * pc.NC + c) * pc.C * pc.C;

  for (uint idx = tid; idx < (pc.C + 1u) * 64u; idx += 256u) {
    uint p = idx / 64u, ll = idx % 64u, l = l0 + ll;
    Ps[p][ll] = l < pc.L ? POW(P, h, p, l) : 0.0;
  }

  float acc[4][4];
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) acc[i][j] = 0.0;

  for (uint e0 = 0; e0 < pc.E; e0 += 16u) {
    for (uint r = 0; r < 4u; ++r) {
      uint idx = tid + 256u * r;
      uint row = idx / 16u, k = idx % 16u, e = e0 + k;
      As[k][row] = (row < Cc && e < pc.E) ? Z[(bh * pc.T + t0 + row) * pc.E + e] : 0.0;
      uint l = l0 + row;
      Bs[k][row] = (l < pc.L && e < pc.E) ? St[(state + l) * pc.E + e] : 0.0;
    }
    barrier();
    for (uint k = 0; k < 16u; ++k)
      for (uint i = 0; i < 4u; ++i) {
        float z = As[k][ty + 16u * i];
        for (uint j = 0; j < 4u; ++j) acc[i][j] += z * Bs[k][tx + 16u * j];
      }
    barrier();
  }
  for (uint i = 0; i < 4u; ++i) {
    uint t = ty + 16u * i;
    uint p = t < Cc ? (av ? Cc - 1u - t : t) : 0u;
    for (uint j = 0; j < 4u; ++j) acc[i][j] *= Ps[p][tx + 16u * j];
  }
  for (uint j0 = 0; j0 < Cc; j0 += 16u) {
    for (uint r = 0; r < 4u; ++r) {
      uint idx = tid + 256u * r;
      uint k = idx / 64u, ll = idx % 64u, j = j0 + k, l = l0 + ll;
      As[k][ll] = (j < Cc && l < pc.L) ? W[(bh * pc.T + t0 + j) * pc.L + l] : 0.0;
      uint tt = ll;  // the same 64 x 16 sweep, read as [j][t]
      Bs[k][tt] = (j < Cc && tt < Cc) ? M[mbase + (av ? j * pc.C + tt : tt * pc.C + j)] : 0.0;
    }
    barrier();
    for (uint k = 0; k < 16u; ++k) {
      uint j = j0 + k;
      for (uint i = 0; i < 4u; ++i) {
        uint t = ty + 16u * i;
        bool live = av ? (j > t && j < Cc) : (j < t);
        if (!live || t >= Cc) continue;
        uint d = av ? j - 1u - t : t - 1u - j;
        float m = Bs[k][t];
        for (uint jj = 0; jj < 4u; ++jj) {
          uint ll = tx + 16u * jj;
          acc[i][jj] += Ps[d][ll] * As[k][ll] * m;
        }
      }
    }
    barrier();
  }
  for (uint i = 0; i < 4u; ++i)
    for (uint j = 0; j < 4u; ++j) {
      uint t = ty + 16u * i, l = l0 + tx + 16u * j;
      if (t < Cc && l < pc.L) O[(bh * pc.T + t0 + t) * pc.L + l] = acc[i][j];
    }
}
