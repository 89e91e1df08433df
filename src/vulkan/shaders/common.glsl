// Shared by every rhoscan compute shader: the push-constant block and the workgroup index.
//
// All buffers are float32, packed contiguously by the host per group of (batch, head) pairs
// ("bh", 0 <= bh < BH); a row index bh * T + t addresses [BH, T, *] buffers. The decay and its
// power table cover all H heads; head(bh) maps a group row back to its head.
layout(push_constant) uniform Push {
  uint BH;    // (batch, head) pairs in this group
  uint T;     // time steps
  uint L;     // latents
  uint E;     // embedding
  uint C;     // chunk size
  uint NC;    // chunks: ceil(T / C)
  uint H;     // heads
  uint bh0;   // first (b*H + h) index of the group
  uint mode;  // shader-specific variant
  uint flags; // shader-specific bits (optional inputs)
  uint tiles; // shader-specific: number of tiles along the decomposed dimension
  uint total; // workgroups that do work (the grid may be rounded up)
  uint seg_begin, seg_end;  // the sequential shaders' range of steps or chunks in this dispatch
} pc;

const float kEps = 1e-6;

uint head(uint bh) { return (pc.bh0 + bh) % pc.H; }

// Linear workgroup index: the host spreads large grids over x and y (each at most 65535).
uint linear_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// Why sequential shaders work in segments: Mesa's llvmpipe / lavapipe ends a shader invocation's
// loops after 65535 iterations in total (its guard against endless loops), so one dispatch walks
// at most a few thousand steps or chunks and the next continues from the state it stored.

// a^k for head h, latent l, 0 <= k <= C (table built by decay_powers.comp).
#define POW(P, h, k, l) P[((h) * (pc.C + 1u) + (k)) * pc.L + (l)]
