#version 450
// One row per workgroup, a fixed-order tree reduction (deterministic).
//   mode 0: out[row] = sum_l X[row, l] + eps          (s_t = sum_l q_t[l] + eps)
//   mode 1: out[row] = sum_l X[row, l] * Y[row, l]    (sum_l gw_t[l] w_t[l] = sum_l GRt * q')
// Rows have length L; there are BH * T rows.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Xb { float X[]; };
layout(std430, binding = 1) readonly buffer Yb { float Y[]; };
layout(std430, binding = 2) writeonly buffer Ob { float O[]; };
shared float part[256];

void main() {
  uint row = linear_group();
  if (row >= pc.total) return;
  uint tid = gl_LocalInvocationID.x;
  uint base = row * pc.L;
  float acc = 0.0;
  for (uint l = tid; l < pc.L; l += 256u) acc += pc.mode == 0u ? X[base + l] : X[base + l] * Y[base + l];
  part[tid] = acc;
  barrier();
  for (uint w = 128u; w > 0u; w >>= 1) {
    if (tid < w) part[tid] += part[tid + w];
    barrier();
  }
  if (tid == 0u) O[row] = pc.mode == 0u ? part[0] + kEps : part[0];
}
