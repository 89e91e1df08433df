// Host emulation of the CUDA constructs that the emulated kernels use: one std::thread per CUDA
// thread, std::barrier for __syncthreads and for the warp exchange of __shfl_xor_sync, a block's
// dynamic shared memory as one buffer. Slow (a thread per CUDA thread) and for index logic and
// synchronisation only: float arithmetic follows the same source, not the GPU's rounding of
// contracted FMAs. No tensor-core instructions (mma.sync, ldmatrix, cp.async).
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __align__(n) alignas(n)
#define __launch_bounds__(...)

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 blockIdx, threadIdx;
inline Dim3 gridDim, blockDim;
using std::min;

struct float4 {
  float x, y, z, w;
};
// bf16 as the float it rounds to (round to nearest even), enough for the operands' values.
struct __nv_bfloat16 {
  float v;
};
inline __nv_bfloat16 __float2bfloat16_rn(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return {y};
}
template <typename T>
inline T from_float(float x);
template <>
inline float from_float<float>(float x) {
  return x;
}
template <>
inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
constexpr float kEpsF = 1e-6f;
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline float load(const void* base, int64_t offset) {
  return float(__ldg(static_cast<const T*>(base) + offset));
}

namespace emu {
inline unsigned char* smem = nullptr;
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline std::vector<float> lanes;

// Runs f() as `grid` blocks of `block` threads, one block after the other, with `smem_bytes` of
// dynamic shared memory (16-byte aligned) that f reaches through emu::smem.
template <typename F>
void launch(unsigned grid, unsigned block, size_t smem_bytes, F f) {
  gridDim.x = grid;
  blockDim.x = block;
  std::vector<unsigned char> buf(smem_bytes + 16);
  smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) & ~uintptr_t(15));
  lanes.assign(block, 0.0f);
  for (unsigned b = 0; b < grid; ++b) {
    std::barrier<> bar(block);
    block_barrier = &bar;
    warp_barriers.clear();
    for (unsigned w = 0; w < (block + 31) / 32; ++w)
      warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - 32 * w)));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([&, b, t] {
        blockIdx.x = b;
        threadIdx.x = t;
        f();
      });
    for (auto& t : threads) t.join();
  }
}
}  // namespace emu

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
// Every lane of the warp must call it together (as the kernels do).
inline float __shfl_xor_sync(unsigned, float x, int o) {
  const unsigned t = threadIdx.x, w = t / 32;
  emu::warp_barriers[w]->arrive_and_wait();
  emu::lanes[t] = x;
  emu::warp_barriers[w]->arrive_and_wait();
  const float y = emu::lanes[(t & ~31u) | ((t & 31u) ^ unsigned(o))];
  emu::warp_barriers[w]->arrive_and_wait();
  return y;
}
