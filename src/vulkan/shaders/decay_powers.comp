#version 450
// P[h, k, l] = a[h, l]^k for k = 0..C, by repeated multiplication: exact for a = 0 and a = 1,
// and never a negative power (SPEC.md: a^(-j) overflows).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer Pw { float P[]; };

void main() {
  uint l = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y;
  if (l >= pc.L) return;
  float x = a[h * pc.L + l], p = 1.0;
  for (uint k = 0; k <= pc.C; ++k) {
    POW(P, h, k, l) = p;
    p *= x;
  }
}
