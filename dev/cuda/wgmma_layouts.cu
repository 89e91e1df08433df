// Whether mma.cuh's wgmma descriptors mean on the GPU what the kernels (quad_readback_wgmma) and
// the host emulation (dev/cuda/host_emulation/shim.h) take them to mean: one warpgroup multiplies
// a 64 × 64 A by a 64 × 64 B (four k steps of m64n64k16, the start address moved per k step as the
// kernels move it) for each storage of the operands,
//   A K-major (rows m, 64 k along them)  or  M-major (rows k, 64 m along them),
//   B K-major (rows n, 64 k along them)  or  N-major (rows k, 64 n along them),
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

// a: A as [m][k] bf16, b: B as [k][n]; d: D [m][n] float32. kTransA: A stored M-major, kTransB: B
// stored N-major.
template <int kTransA, int kTransB>
__global__ void __launch_bounds__(128) product_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  unsigned char* base = smem_raw + (s0 - s_raw);
  unsigned char* at = base;          // A's tile: 8 KiB
  unsigned char* bt = base + 8192;   // B's tile
  for (int e = threadIdx.x; e < 64 * 64; e += blockDim.x) {
    const int r = e / 64, c = e % 64;  // element (r, c) of the stored tile: rows of 64
    // A K-major: row m = r, k = c; M-major: row k = r, m = c. B K-major: row n = r, k = c; N-major: row k = r, n = c.
    const __nv_bfloat16 av = kTransA ? a[c * 64 + r] : a[r * 64 + c];
    const __nv_bfloat16 bv = kTransB ? b[r * 64 + c] : b[c * 64 + r];
    *reinterpret_cast<__nv_bfloat16*>(at + swz(r, c)) = av;
    *reinterpret_cast<__nv_bfloat16*>(bt + swz(r, c)) = bv;
  }
  fence_proxy_async();
  __syncthreads();
  float acc[32] = {};
  const uint64_t da = wgmma_desc_sw128(s0, kTransA ? kWgmmaAtom : 0, kWgmmaAtom);
  const uint64_t db = wgmma_desc_sw128(s0 + 8192, kTransB ? kWgmmaAtom : 0, kWgmmaAtom);
  const uint64_t sa = kTransA ? 2 * kWgmmaAtom / 16 : 32 / 16, sb = kTransB ? 2 * kWgmmaAtom / 16 : 32 / 16;
  wgmma_fence_operand(acc);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) wgmma_m64n64k16_bf16<kTransA, kTransB>(acc, da + k * sa, db + k * sb);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int row = 16 * warp + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
    d[row * 64 + col] = acc[i];
  }
}

template <int kTransA, int kTransB>
bool check(const char* name, const std::vector<__nv_bfloat16>& a, const std::vector<__nv_bfloat16>& b) {
  __nv_bfloat16 *da, *db;
  float* dd;
  CHECK(cudaMalloc(&da, 64 * 64 * 2));
  CHECK(cudaMalloc(&db, 64 * 64 * 2));
  CHECK(cudaMalloc(&dd, 64 * 64 * 4));
  CHECK(cudaMemcpy(da, a.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dd, 0xFF, 64 * 64 * 4));  // NaN: an element never written shows
  const int smem = 16384 + kWgmmaAtom;
  CHECK(cudaFuncSetAttribute(product_kernel<kTransA, kTransB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  product_kernel<kTransA, kTransB><<<1, 128, smem>>>(da, db, dd);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> d(64 * 64);
  CHECK(cudaMemcpy(d.data(), dd, 64 * 64 * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  int shown = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < 64; ++k) {
        const double t = double(__bfloat162float(a[m * 64 + k])) * double(__bfloat162float(b[k * 64 + n]));
        ref += t, mag += std::fabs(t);
      }
      const double err = std::fabs(d[m * 64 + n] - ref) / (mag + 1e-30);
      if (!(err <= 1e-5) && shown++ < 4) std::printf("    D[%d][%d] = %g, expected %g\n", m, n, d[m * 64 + n], ref);
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
  std::vector<__nv_bfloat16> a(64 * 64), b(64 * 64);
  for (auto& x : a) x = __float2bfloat16(u(rng));
  for (auto& x : b) x = __float2bfloat16(u(rng));
  std::printf("wgmma m64n64k16 bf16, 128-byte swizzled tiles, 4 k steps (%s)\n", prop.name);
  bool ok = check<0, 0>("A K-major, B K-major", a, b);
  ok &= check<1, 0>("A M-major, B K-major", a, b);
  ok &= check<0, 1>("A K-major, B N-major", a, b);
  ok &= check<1, 1>("A M-major, B N-major", a, b);
  std::printf("%s\n", ok ? "ALL PASS" : "FAIL");
  return ok ? 0 : 1;
}
