#version 450
// out[i] = sum over k < parts, in order, of part[k * n + i], for i < n: adds the partial sums of a
// contraction split in slices (chunk_pairs.comp with tiles > 1) in a fixed order (deterministic).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint n, parts, unused2, unused3, unused4, unused5, unused6, unused7, unused8, unused9, unused10, total;
} pc;
layout(std430, binding = 0) readonly buffer Pb { float part[]; };
layout(std430, binding = 1) writeonly buffer Ob { float O[]; };

void main() {
  uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // linear (host splits x, y)
  uint i = group * 256u + gl_LocalInvocationID.x;
  if (group >= pc.total || i >= pc.n) return;
  float acc = 0.0;
  for (uint k = 0; k < pc.parts; ++k) acc += part[k * pc.n + i];
  O[i] = acc;
}
