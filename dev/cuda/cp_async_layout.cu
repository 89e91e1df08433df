// What the cp.async writes into padded shared-memory rows cost, against the layouts that avoid
// their excess wavefronts: the question behind docs/CUDA.md's "What is left" (fifteenth round). In
// every tensor-core kernel's profile the ldmatrix reads are conflict-free (rows padded by 16
// bytes), while the LDGSTS writes of the same tiles take 2-2.6x their ideal wavefronts
// (quad_readback_mma 46.5 M of 77.5 M; the kernels are L2-bound, so whether that costs time is
// what this measures).
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/cp_async_layout.cu -o /tmp/cp_async_layout && /tmp/cp_async_layout
//
// Tiles of 64 rows of RB bytes of bf16 (RB = 128: an M tile of quad_readback_mma; 256: its operand
// tile), 16 MiB of them (L2-resident after the first launch, as the kernels' tiles mostly are). Two blocks of 256 threads per SM; per step a block copies one tile into one of two
// stages by cp.async (16-byte pieces), waits for the previous step's, and reads that whole tile by
// ldmatrix.x4 (warp w: rows 8w .. 8w+7, every 16-byte column), summing the words it gets (uint32,
// wrapping: the order does not matter). Layouts:
//   padded      rows RB + 16 bytes apart, piece p = tid + 256 k at row p / U, column p % U (U = RB /
//               16): the kernels' mapping (a group of 8 lanes writes 128 bytes that start off a
//               128-byte boundary);
//   padded-seq  the same rows, the pieces in address order: p runs over the rows' U + 1 units
//               (the padding unit written with zeros, src-size 0), so 8 lanes write one aligned
//               128-byte line;
//   swizzled    rows RB apart, column unit c stored at c ^ (row % 8): aligned writes and
//               conflict-free ldmatrix, no padding (what CUTLASS-style kernels do);
//   plain       rows RB apart, no swizzle: aligned writes, 8-way conflicted ldmatrix (reference).
// Prints µs per step and bytes per clock per SM received; checks every block's sum against the
// host's (PASS / FAIL; exit 0 when all pass). --small: one launch of 8 steps per configuration
// (for compute-sanitizer); under `ncu --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,...`
// it gives each layout's shared wavefronts.
//
// Measured on the H200 (bench/results/round15-h200-2026-12-03/cp_async_layout-0215832.txt): padded
// 22.7-22.9 B/clk per SM (0.365 us per 8 KiB tile, 0.724 per 16 KiB), padded in address order the
// same, swizzled 33.0-34.6 (0.251, 0.478 us: 1.45-1.51x faster), plain 12.5-13.7. Nsight Compute
// counts the same shared wavefronts for padded and swizzled: the difference is in the fill path.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/mma.cuh"
#include "harness.cuh"

using namespace rhoscan::cuda_detail;  // cp_async16_u32, ldsm_x4_u32, smem_addr

constexpr int kThreads = 256, kRows = 64;
// 16 MiB of tiles of either width: L2-resident after the first launch (the H200's L2: 60 MiB)
template <int kRB>
constexpr int kTiles = (16 << 20) / (kRows * kRB);
enum Layout { kPadded = 0, kPaddedSeq = 1, kSwizzled = 2, kPlain = 3 };
const char* layout_name(int l) {
  return l == kPadded ? "padded" : l == kPaddedSeq ? "padded-seq" : l == kSwizzled ? "swizzled" : "plain";
}

__host__ __device__ constexpr int row_bytes(int layout, int rb) { return layout <= kPaddedSeq ? rb + 16 : rb; }
// The shared byte offset of (row, 16-byte column unit) in a tile.
template <int kLayout, int kRB>
__device__ __forceinline__ uint32_t unit_offset(int row, int unit) {
  constexpr int S = row_bytes(kLayout, kRB);
  if constexpr (kLayout == kSwizzled) return row * S + 16 * (unit ^ (row & 7));
  return row * S + 16 * unit;
}

template <int kLayout, int kRB>
__global__ void __launch_bounds__(kThreads, 2) copy_kernel(const uint4* tiles, uint32_t* sums, int steps) {
  constexpr int U = kRB / 16, S = row_bytes(kLayout, kRB), kStage = kRows * S;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s0 = smem_addr(smem);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  auto fetch = [&](int step, int stage) {
    const uint4* t = tiles + size_t((blockIdx.x * 7 + step) % kTiles<kRB>) * kRows * U;
    const uint32_t base = s0 + stage * kStage;
    if constexpr (kLayout == kPaddedSeq) {
      for (int p = tid; p < kRows * (U + 1); p += kThreads) {
        const int row = p / (U + 1), unit = p % (U + 1);
        const bool pad = unit == U;
        cp_async16_u32(base + row * S + 16 * unit, t + row * U + (pad ? 0 : unit), pad ? 0u : 16u);
      }
    } else {
      for (int p = tid; p < kRows * U; p += kThreads)
        cp_async16_u32(base + unit_offset<kLayout, kRB>(p / U, p % U), t + p, 16u);
    }
    cp_async_commit();
  };
  uint32_t acc = 0;
  fetch(0, 0);
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) {
      fetch(s + 1, (s + 1) & 1);  // into the stage read at step s - 1 (the barrier below)
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t base = s0 + (s & 1) * kStage;
    // warp w: rows 8w + (lane % 8), column units 4 m + lane / 8 (one x4 per 4 units)
    const int row = 8 * warp + (lane & 7);
#pragma unroll
    for (int m = 0; m < U / 4; ++m) {
      uint32_t r[4];
      ldsm_x4_u32(r, base + unit_offset<kLayout, kRB>(row, 4 * m + lane / 8));
      acc += r[0] + r[1] + r[2] + r[3];
    }
    __syncthreads();  // the stage is refilled at step s + 1
  }
  // the warp's sum, then the block's (fixed order; uint32 wraps, so any order gives the same)
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ uint32_t warp_sums[kThreads / 32];
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (tid == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    sums[blockIdx.x] = total;
  }
}

template <int kLayout, int kRB>
bool run(int sms, const uint4* tiles, const std::vector<uint32_t>& tile_sums, int steps, int launches) {
  auto kernel = copy_kernel<kLayout, kRB>;
  const int smem = 2 * kRows * row_bytes(kLayout, kRB), blocks = 2 * sms;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  uint32_t* sums = nullptr;
  CHECK(cudaMalloc(&sums, sizeof(uint32_t) * blocks));
  const std::vector<float> ms = timed_launches(launches > 0 ? launches : 1, launches > 0 ? 1 : 0,
                                               [&] { kernel<<<blocks, kThreads, smem>>>(tiles, sums, steps); });
  std::vector<uint32_t> got(blocks);
  CHECK(cudaMemcpy(got.data(), sums, sizeof(uint32_t) * blocks, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int b = 0; b < blocks && ok; ++b) {
    uint32_t want = 0;
    for (int s = 0; s < steps; ++s) want += tile_sums[(b * 7 + s) % kTiles<kRB>];
    if (got[b] != want) {
      std::printf("    block %d: sum %u, expected %u\n", b, got[b], want);
      ok = false;
    }
  }
  const double us = 1e3 * ms[ms.size() / 2] / steps, clk = us * 1e3 * 1.98;  // at 1.98 GHz
  std::printf("  %3d-byte rows, %-10s (rows %3d bytes apart): %6.3f us per step, %5.1f B/clk received per SM  %s\n", kRB,
              layout_name(kLayout), row_bytes(kLayout, kRB), us, 2.0 * kRows * kRB / clk, ok ? "PASS" : "FAIL");
  CHECK(cudaFree(sums));
  return ok;
}

template <int kRB>
bool all_layouts(int sms, int steps, int launches) {
  constexpr int U = kRB / 16;
  std::vector<uint4> host(size_t(kTiles<kRB>) * kRows * U);
  std::vector<uint32_t> tile_sums(kTiles<kRB>, 0);
  for (size_t i = 0; i < host.size(); ++i) {
    const uint32_t x = uint32_t(i * 2654435761u);
    host[i] = make_uint4(x, x ^ 0x9e3779b9u, x + 12345u, ~x);
    tile_sums[i / (kRows * U)] += host[i].x + host[i].y + host[i].z + host[i].w;
  }
  uint4* tiles = nullptr;
  CHECK(cudaMalloc(&tiles, sizeof(uint4) * host.size()));
  CHECK(cudaMemcpy(tiles, host.data(), sizeof(uint4) * host.size(), cudaMemcpyHostToDevice));
  bool ok = run<kPadded, kRB>(sms, tiles, tile_sums, steps, launches);
  ok &= run<kPaddedSeq, kRB>(sms, tiles, tile_sums, steps, launches);
  ok &= run<kSwizzled, kRB>(sms, tiles, tile_sums, steps, launches);
  ok &= run<kPlain, kRB>(sms, tiles, tile_sums, steps, launches);
  CHECK(cudaFree(tiles));
  return ok;
}

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  cudaDeviceProp prop{};
  if (!first_device(prop)) return 0;
  std::printf("%s, %d SMs, L2 %d MiB; 2 blocks of %d threads per SM, tiles of 64 rows\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, kThreads);
  const int steps = small ? 8 : 2000, launches = small ? 0 : 7;
  bool ok = all_layouts<128>(prop.multiProcessorCount, steps, launches);
  ok &= all_layouts<256>(prop.multiProcessorCount, steps, launches);
  std::printf(ok ? "ALL PASS\n" : "FAIL: a sum differs\n");
  return ok ? 0 : 1;
}
