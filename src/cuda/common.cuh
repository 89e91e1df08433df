// Shared device helpers of the CUDA backend: dtype loads and stores, launch sizing, error checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "rhoscan/rhoscan.h"

namespace rhoscan::cuda_detail {

constexpr float kEpsF = static_cast<float>(kEps);

// Throws Error(internal) naming the failed call; every CUDA call goes through it.
void check_cuda(cudaError_t status, const char* what);
#define RHOSCAN_CUDA_CHECK(call) ::rhoscan::cuda_detail::check_cuda((call), #call)
// After a launch: the launch's own error (bad configuration) as an internal error.
#define RHOSCAN_CUDA_LAUNCHED(name) ::rhoscan::cuda_detail::check_cuda(cudaGetLastError(), name)

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(double x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ double from_float<double>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

template <typename T>
__device__ __forceinline__ float load(const void* base, int64_t offset) {
  return to_float(__ldg(static_cast<const T*>(base) + offset));
}
template <typename T>
__device__ __forceinline__ void store(void* base, int64_t offset, float x) {
  static_cast<T*>(base)[offset] = from_float<T>(x);
}

// a^n for n >= 0 by repeated squaring: never a negative power, 0^0 = 1.
__device__ __forceinline__ float ipow(float a, int n) {
  float r = 1.0f, b = a;
  while (n > 0) {
    if (n & 1) r *= b;
    b *= b;
    n >>= 1;
  }
  return r;
}

// ipow(a, m * 2^k) bit for bit, 2^k = p2 (a power of two): ipow's first k steps only square b (the
// exponent's low k bits are 0), so b = a^(2^k) by k squarings, then ipow(b, m): the same
// multiplications in the same order, with k + bits(m) steps instead of k + bits(m) loop trips of
// ipow's test-and-shift (cross_scores_wgmma's factors a^(D C): round 36's source profile, an H100,
// had ipow's loop at ~10 % of the kernel's stall samples).
__device__ __forceinline__ float ipow_times_pow2(float a, int p2, int m) {
  for (int s = 1; s < p2; s <<= 1) a *= a;
  return ipow(a, m);
}
// a^(m c), bit for bit ipow(a, m c): by c's squarings (ipow_times_pow2) where c is a power of two.
__device__ __forceinline__ float ipow_of_product(float a, int m, int c) {
  return (c & (c - 1)) == 0 ? ipow_times_pow2(a, c, m) : ipow(a, m * c);
}

// ipow for V lanes with one exponent: each lane the same products as ipow (bitwise), one loop.
template <int V>
__device__ __forceinline__ void ipow_lanes(const float (&a)[V], int n, float (&r)[V]) {
  float b[V];
#pragma unroll
  for (int v = 0; v < V; ++v) r[v] = 1.0f, b[v] = a[v];
  while (n > 0) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (n & 1) r[v] *= b[v];
      b[v] *= b[v];
    }
    n >>= 1;
  }
}

// x / y, bitwise the IEEE division for every x and y, for numerators that are often zero (the
// read weights q / (s (N + eps)) of a ReLU q: about half are). The inline division sends a zero
// numerator to its slow subroutine (its range check, FCHK, takes an exponent field of 0 as out of
// range): in norm_apply at BDH-8k a third of the executed instructions were that subroutine (H200,
// Nsight Compute source counters at 7a37574). Here the division always sees a non-zero numerator;
// for x = ±0 the result is x · (1 / y): ±0 with the sign of x xor y, NaN for y = 0 or NaN, as x / y.
__device__ __forceinline__ float div_sparse(float x, float y) {
  const bool zero = x == 0.0f;
  const float r = (zero ? 1.0f : x) / y;
  return zero ? x * r : r;
}

// x / y by a reciprocal and a product, subnormals flushed (div.approx.ftz.f32: MUFU.RCP and an
// FMUL, within 2 ulp where |y| < 2^126; 0 for |y| in (2^126, 2^128), where callers scale). Without
// ftz (__fdividef) the compiler adds a range test and two scalings for subnormal operands: 8
// instructions instead of 5 per read weight in norm_scores_mma (Nsight Compute's SASS page, H200).
// (The host emulation has no __CUDA_ARCH__: the IEEE division there.)
__device__ __forceinline__ float div_approx_ftz(float x, float y) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
#else
  return x / y;
#endif
}

// v to p (global memory, 16-byte aligned) as one 16-byte store. A plain float4 assignment is not
// always one: in bwd_local's dqp stores NVVM emitted four 4-byte st.global.f32 (the PTX of 6f88d92),
// so that each warp-wide store touched 16 sectors for 4 bytes each (Nsight Compute on the H200:
// 36 % of that kernel's global sectors were excess, 1.7 GB of L2 traffic per call at BDH-8k).
// __stwb is st.global.wb.v4.f32, the default write-back policy. (The host emulation has no
// __CUDA_ARCH__: a plain store there.)
__device__ __forceinline__ void store_float4(float* p, float4 v) {
#ifdef __CUDA_ARCH__
  __stwb(reinterpret_cast<float4*>(p), v);
#else
  *reinterpret_cast<float4*>(p) = v;
#endif
}

// One digit of a mixed-radix work-item counter advanced by the grid's size (decomposed in the same
// radices): x += dx + carry_in, wrapped into [0, n) (dx < n, so one subtraction); returns the carry
// into the next digit. Persistent kernels walk their items this way instead of dividing an item
// index per item (64-bit divisions cost ~70 instructions each).
template <typename I>
__device__ __forceinline__ int carry_add(I& x, I dx, int carry_in, I n) {
  x += dx + carry_in;
  const int carry = x >= n;
  x -= carry ? n : I{0};
  return carry;
}

// Programmatic dependent launch (PDL, sm_90 and later): a kernel launched by launch_kernel may be
// scheduled while the kernel before it in the stream is finishing, instead of after its grid
// has completed; it must then wait here, as its first statement, before it reads anything that
// earlier work wrote (griddepcontrol.wait: the previous grid complete and its memory visible).
// Every kernel of the backend begins with it (scripts/check_grid_dependency_waits.py, a test);
// without PDL it returns at once. dev/cuda/launch_gaps.cu measured 1.0-1.7 µs less per kernel
// boundary on the H200 (the library's forward and backward launch 10-20 kernels each).
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Block counts for grid-stride loops: every kernel loops over its work items, so no launch
// dimension grows with B·T or B·T·L (grid.x stays far under 2^31 - 1, y and z are 1).
inline unsigned grid_for(int64_t items, int64_t per_block = 1, int64_t max_blocks = 1 << 16) {
  int64_t blocks = (items + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

// A build-time default that the environment variable `name` (read per call: tests and A/B runs)
// overrides with 0 or 1; another value counts as unset.
inline bool env_switch(const char* name, bool fallback) {
  if (const char* v = std::getenv(name)) {
    if (std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "1") == 0) return true;
  }
  return fallback;
}

// The current device's compute capability as 10 major + minor (0 when unknown), once per device.
int device_compute_capability();
// Whether the current device takes PDL launches (compute capability 9.0 or later).
bool programmatic_launch_supported();

#ifndef RHOSCAN_PDL
#define RHOSCAN_PDL 1  // -DRHOSCAN_PDL=0: plain launches (the A/B)
#endif

// kernel<<<grid, block, smem, stream>>>(args...), with PDL where the device has it (the kernel
// begins with grid_dependency_wait()); the launch's own error as an internal error naming it.
template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &pdl;
  config.numAttrs = RHOSCAN_PDL && programmatic_launch_supported() ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), name);
}

}  // namespace rhoscan::cuda_detail
