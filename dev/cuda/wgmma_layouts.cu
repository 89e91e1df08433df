// Whether mma.cuh's wgmma descriptors mean on the GPU what the kernels (quad_readback_wgmma,
// final_state_wgmma) and the host emulation (dev/cuda/host_emulation/shim.h) take them to mean: one
// warpgroup multiplies a 64 × 64 A by a 64 × N B (N = 64, 128, 256; four k steps of m64nNk16, the
// start address moved per k step as the kernels move it) for each storage of the operands,
//   A K-major (rows m, 64 k along them)  or  M-major (rows k, 64 m along them),
//   B K-major (rows n, 64 k along them)  or  N-major (rows k, 64 n along them; N > 64: 64-wide
//     tiles of 8 KiB one after the other, the descriptor's LBO = 8 KiB),
//   and A from registers (N = 64: wgmma_m64n64k16_bf16_rs, loaded by ldmatrix from a K-major tile),
// every tile 128-byte swizzled (16-byte chunk c of row r at c ^ (r % 8)) on a 1024-byte boundary,
// and compares D with a float64 product of the same bf16 values on the host. A K-major k step
// moves the start by 32 bytes, an M/N-major one by 2048 (two 8-row atoms). Prints PASS / FAIL per
// combination and, on a failure, the first wrong elements; exit 0 when all pass.
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/wgmma_layouts.cu -o /tmp/wgmma_layouts && /tmp/wgmma_layouts
//
// (--small is accepted, for cuda_device_run.sh's sanitize stage: the run is small anyway.)
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "../../dev/cuda/harness.cuh"
#include "cuda/mma.cuh"

using namespace rhoscan::cuda_detail;

// The byte offset of element (row, column) of a swizzled tile of 64-element rows.
__host__ __device__ inline uint32_t swz(int row, int col) {
  return row * 128 + ((((col / 8) ^ (row % 8))) << 4) + 2 * (col % 8);
}

// a: A as [m][k] bf16 (64 × 64), b: B as [k][n] (64 × kN); d: D [m][n] float32. kTransA: A stored
// M-major, kTransB: B stored N-major.
template <int kN, int kTransA, int kTransB>
__global__ void __launch_bounds__(128) product_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  unsigned char* base = smem_raw + (s0 - s_raw);
  unsigned char* at = base;          // A's tile: 8 KiB
  unsigned char* bt = base + 8192;   // B's tiles: kN / 64 of 8 KiB
  for (int e = threadIdx.x; e < 64 * 64; e += blockDim.x) {
    const int r = e / 64, c = e % 64;  // element (r, c) of the stored tile: rows of 64
    // A K-major: row m = r, k = c; M-major: row k = r, m = c
    const __nv_bfloat16 av = kTransA ? a[c * 64 + r] : a[r * 64 + c];
    *reinterpret_cast<__nv_bfloat16*>(at + swz(r, c)) = av;
  }
  for (int e = threadIdx.x; e < 64 * kN; e += blockDim.x) {
    // B K-major: row n of 64 k (rows n one after the other, 8-row atoms); N-major: tile n / 64, row
    // k, column n % 64
    const int k = e / kN, n = e % kN;
    const uint32_t off = kTransB ? (n / 64) * 8192 + swz(k, n % 64) : swz(n, k);
    *reinterpret_cast<__nv_bfloat16*>(bt + off) = b[k * kN + n];
  }
  fence_proxy_async();
  __syncthreads();
  float acc[kN / 2] = {};
  const uint64_t da = wgmma_desc_sw128(s0, kTransA ? kWgmmaAtom : 0, kWgmmaAtom);
  const uint64_t db = wgmma_desc_sw128(s0 + 8192, kTransB ? 8192 : 0, kWgmmaAtom);
  const uint64_t sa = kTransA ? 2 * kWgmmaAtom / 16 : 32 / 16, sb = kTransB ? 2 * kWgmmaAtom / 16 : 32 / 16;
  wgmma_fence_operand(acc);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) wgmma_m64k16_bf16<kN, kTransA, kTransB>(acc, da + k * sa, db + k * sb);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int row = 16 * warp + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
    d[row * kN + col] = acc[i];
  }
}

// The same product with A from registers (wgmma_m64n64k16_bf16_rs): A stored K-major (rows m, 64
// k along them, swizzled), each warp's 16 rows loaded per k step by ldmatrix.x4 as for mma.sync
// (lane row 16 w + lane % 16, 8 k at logical chunk 2 k16 + lane / 16: the XOR of the lane's chunk
// with 2 k16); B as in product_kernel (N = 64).
template <int kTransB>
__global__ void __launch_bounds__(128) product_rs_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  unsigned char* base = smem_raw + (s0 - s_raw);
  for (int e = threadIdx.x; e < 64 * 64; e += blockDim.x) {
    const int r = e / 64, c = e % 64;
    *reinterpret_cast<__nv_bfloat16*>(base + swz(r, c)) = a[r * 64 + c];  // A K-major: row m = r, k = c
    *reinterpret_cast<__nv_bfloat16*>(base + 8192 + swz(r, c)) = kTransB ? b[r * 64 + c] : b[c * 64 + r];
  }
  fence_proxy_async();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int row = 16 * warp + (lane & 15);
  const uint32_t la = s0 + row * 128 + (((lane >> 4) ^ (row & 7)) << 4);
  uint32_t af[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) ldsm_x4_u32(af[k], la ^ (32u * k));
  float acc[32] = {};
  const uint64_t db = wgmma_desc_sw128(s0 + 8192, kTransB ? kWgmmaAtom : 0, kWgmmaAtom);
  const uint64_t sb = kTransB ? 2 * kWgmmaAtom / 16 : 32 / 16;
  wgmma_fence_operand(acc);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) wgmma_m64n64k16_bf16_rs<kTransB>(acc, af[k], db + k * sb);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(acc);
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int r = 16 * warp + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
    d[r * 64 + col] = acc[i];
  }
}

template <int kN, int kTransA, int kTransB, bool kRegsA = false>
bool check(const char* name, const std::vector<__nv_bfloat16>& a, const std::vector<__nv_bfloat16>& b) {
  __nv_bfloat16 *da, *db;
  float* dd;
  CHECK(cudaMalloc(&da, 64 * 64 * 2));
  CHECK(cudaMalloc(&db, 64 * kN * 2));
  CHECK(cudaMalloc(&dd, 64 * kN * 4));
  CHECK(cudaMemcpy(da, a.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), 64 * kN * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dd, 0xFF, 64 * kN * 4));  // NaN: an element never written shows
  const int smem = 8192 + 128 * kN + kWgmmaAtom;
  static_assert(!kRegsA || (kN == 64 && kTransA == 0), "A from registers: K-major, N 64");
  auto kernel = kRegsA ? product_rs_kernel<kTransB> : product_kernel<kN, kTransA, kTransB>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(da, db, dd);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> d(64 * kN);
  CHECK(cudaMemcpy(d.data(), dd, 64 * kN * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  int shown = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < kN; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < 64; ++k) {
        const double t = double(__bfloat162float(a[m * 64 + k])) * double(__bfloat162float(b[k * kN + n]));
        ref += t, mag += std::fabs(t);
      }
      const double err = std::fabs(d[m * kN + n] - ref) / (mag + 1e-30);
      if (!(err <= 1e-5) && shown++ < 4) std::printf("    D[%d][%d] = %g, expected %g\n", m, n, d[m * kN + n], ref);
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    }
  const bool ok = worst <= 1e-5;
  std::printf("  %s %-28s max error / magnitude %.2e\n", ok ? "PASS" : "FAIL:", name, worst);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dd));
  return ok;
}

int main() {
  cudaDeviceProp prop;
  if (!first_device(prop)) return 0;
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("wgmma needs compute capability 9.0; device is %d.%d: nothing checked\n", prop.major, prop.minor);
    return 0;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> a(64 * 64), b(64 * 256);  // B as [k][n]: rows of N (the first 64 N values)
  for (auto& x : a) x = __float2bfloat16(u(rng));
  for (auto& x : b) x = __float2bfloat16(u(rng));
  std::printf("wgmma m64nNk16 bf16, 128-byte swizzled tiles, 4 k steps (%s)\n", prop.name);
  bool ok = check<64, 0, 0>("N 64, A K-major, B K-major", a, b);
  ok &= check<64, 1, 0>("N 64, A M-major, B K-major", a, b);
  ok &= check<64, 0, 1>("N 64, A K-major, B N-major", a, b);
  ok &= check<64, 1, 1>("N 64, A M-major, B N-major", a, b);
  ok &= check<128, 1, 1>("N 128, A M-major, B N-major", a, b);
  ok &= check<128, 1, 0>("N 128, A M-major, B K-major", a, b);
  ok &= check<256, 1, 1>("N 256, A M-major, B N-major", a, b);
  ok &= check<64, 0, 0, true>("N 64, A registers, B K-major", a, b);
  ok &= check<64, 0, 1, true>("N 64, A registers, B N-major", a, b);
  std::printf("%s\n", ok ? "ALL PASS" : "FAIL");
  return ok ? 0 : 1;
}
