// What a tile shared by a cluster's blocks costs when one bulk copy (TMA) per slice multicasts it
// to all of them, against each block copying the whole tile from the L2 itself: the question behind
// the cluster items of docs/CUDA.md's "What is left" (quad_readback_mma reloads M's 16 KiB block for
// every 128-latent tile and runs at ~75 % of the L2's throughput; chunk_scan_mma's column-tile
// blocks fetch the same Xq, Kq and P tiles).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/cuda/tma_multicast.cu -o /tmp/tma_multicast && /tmp/tma_multicast
//
// One block of 128 threads per SM (a 160 KiB shared-memory request), as many clusters as the device
// holds at once; per step a block receives one 16 KiB tile into a ring of 4 or 8 stages and reads all of
// it from shared memory (each thread 32 floats, summed: the consumer). Unicast: thread 0 of each
// block issues one cp.async.bulk of the whole tile for its own mbarrier. Multicast (clusters of 2,
// 4, 8): rank r issues the tile's r-th slice (16 KiB / CS) to every block of the cluster
// (.multicast::cluster, ctaMask all), each block's "full" mbarrier expecting the whole tile; before
// rank r refills a stage it waits on its "empty" mbarrier of that stage, on which every block of
// the cluster arrives (remotely) when it has consumed the stage. The tiles (1024 of 16 KiB) stay in
// the L2 after the first launch, as M's blocks do in quad_readback_mma. Prints µs per step, the
// bytes each SM receives per cycle (at 1.98 GHz) and the L2 bytes read per SM and cycle; checks the
// sums against the host's (PASS / FAIL; exit 0 when all pass). --small: one launch of 8 steps per
// configuration (for compute-sanitizer).
//
// Measured on the H200 (bench/results/cluster-h200-2026-12-02/tma_multicast-9d3f472.txt): unicast
// 0.30 µs per tile (27.8 B/clk per SM from the L2); multicast 0.91-0.96 µs at clusters of 2, 1.13-1.26
// at 4, 1.84-1.90 at 8, with either refill and 4 or 8 stages: slower at every size.
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "harness.cuh"

namespace cg = cooperative_groups;
namespace ptx = cuda::ptx;

constexpr int kTileBytes = 16384, kTileFloats = kTileBytes / 4, kThreads = 128;
constexpr int kTiles = 1024;  // 16 MiB of tiles: L2-resident on an H100 / H200 (50 MB)
constexpr int kSmem = 160 * 1024;  // one block per SM (a ring of 4 or 8 stages: 64 or 128 KiB)

// The tile that cluster `cluster` reads at step s (the blocks of a cluster read the same tiles).
__host__ __device__ inline int tile_of(int cluster, int s) { return (cluster * 7 + s) % kTiles; }

__device__ inline void wait_parity(uint64_t* bar, uint32_t parity) {
  while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster, bar, parity)) {
  }
}

// kMulticast false: each block copies whole tiles itself (any cluster size; launched with 1).
// kProducer false: thread 0 consumes and refills (after a multicast stage's handshake, which then
// sits on every step's critical path); true: a 5th warp refills (its lane 0 waits on the "empty"
// barriers, the 4 consumer warps only arrive on them), as warp-specialised kernels do.
template <bool kMulticast, int kStages, bool kProducer>
__global__ void __launch_bounds__(kThreads + 32) tiles_kernel(const float* tiles, float* sums, int steps) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* ring = reinterpret_cast<float*>(smem);                                   // [kStages][kTileFloats]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kTileBytes);     // [kStages]
  uint64_t* empty = full + kStages;                                              // [kStages]
  cg::cluster_group cluster = cg::this_cluster();
  const int CS = kMulticast ? int(cluster.num_blocks()) : 1;
  const int rank = kMulticast ? int(cluster.block_rank()) : 0;
  const int cid = blockIdx.x / CS, tid = threadIdx.x;
  const uint32_t slice = kTileBytes / CS;
  if (tid == 0) {
    for (int k = 0; k < kStages; ++k) {
      ptx::mbarrier_init(&full[k], 1);    // this block's arrive.expect_tx, plus the bytes
      ptx::mbarrier_init(&empty[k], CS);  // one arrival per block of the cluster
    }
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
  }
  if (kMulticast)
    cluster.sync();  // every block's barriers exist before any copy or remote arrival reaches them
  else
    __syncthreads();
  // Step s into stage s % kStages: the block expects the whole tile; it issues its slice (multicast)
  // or the whole tile (unicast).
  auto issue = [&](int s) {
    const int k = s % kStages;
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &full[k], kTileBytes);
    const float* src = tiles + size_t(tile_of(cid, s)) * kTileFloats;
    if (kMulticast) {
      const uint16_t all = uint16_t((1u << CS) - 1);
      ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, ring + k * kTileFloats + rank * (slice / 4),
                         src + rank * (slice / 4), slice, &full[k], all);
    } else {
      ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, ring + k * kTileFloats, src, kTileBytes, &full[k]);
    }
  };
  // this block consumed stage k: one arrival on stage k's "empty" barrier of every block of the cluster
  auto release = [&](int k) {
    for (int r = 0; r < CS; ++r)
      ptx::mbarrier_arrive(ptx::sem_release, ptx::scope_cluster, ptx::space_cluster, cluster.map_shared_rank(&empty[k], r));
  };
  if (kProducer && tid >= kThreads) {  // the producer warp
    if (tid == kThreads) {
      for (int s = 0; s < steps; ++s) {
        if (s >= kStages) wait_parity(&empty[s % kStages], uint32_t(s / kStages - 1) & 1u);
        issue(s);
      }
    }
    __syncwarp();
  } else {
    if (!kProducer && tid == 0)
      for (int s = 0; s < steps && s < kStages; ++s) issue(s);
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
      const int k = s % kStages;
      const uint32_t parity = uint32_t(s / kStages) & 1u;
      wait_parity(&full[k], parity);
      const float* t = ring + k * kTileFloats;
#pragma unroll 8
      for (int i = 0; i < kTileFloats / kThreads; ++i) acc += t[tid + kThreads * i];
      if (kProducer) {
        asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");  // the consumers are done with stage k
        if (tid == 0 && s + kStages < steps) release(k);
      } else {
        __syncthreads();  // the block is done with stage k
        if (tid == 0 && s + kStages < steps) {
          if (kMulticast) {
            // every block of the cluster must have consumed stage k before this block's slice
            // overwrites it everywhere
            release(k);
            wait_parity(&empty[k], parity);
          }
          issue(s + kStages);
        }
      }
    }
    sums[size_t(blockIdx.x) * kThreads + tid] = acc;
  }
  if (kMulticast) cluster.sync();  // no block exits while others may still write into it
}

struct Result {
  bool ran = false, ok = false;
  double us_per_step = 0;
};

template <bool kMulticast, int kStages, bool kProducer>
Result run(int cs, int sms, const float* tiles, const std::vector<float>& host_tiles, int steps, int launches) {
  Result res;
  auto kernel = tiles_kernel<kMulticast, kStages, kProducer>;
  ClusterLaunch launch(kernel, cs, kThreads + (kProducer ? 32 : 0), kSmem, sms);
  if (launch.clusters == 0) {
    std::printf("  cluster %d: not runnable here\n", cs);
    return res;
  }
  const int blocks = launch.clusters * cs;
  float* sums = nullptr;
  CHECK(cudaMalloc(&sums, sizeof(float) * blocks * kThreads));
  // (the first launch warms the L2; with no timed launches (--small) that one is the result)
  const std::vector<float> ms = timed_launches(std::max(launches, 1), launches > 0 ? 1 : 0,
                                               [&] { CHECK(cudaLaunchKernelEx(&launch.config, kernel, tiles, sums, steps)); });
  std::vector<float> got(size_t(blocks) * kThreads);
  CHECK(cudaMemcpy(got.data(), sums, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int blk = 0; blk < blocks && ok; ++blk) {
    const int cid = blk / cs;
    for (int tid = 0; tid < kThreads; ++tid) {
      float acc = 0.0f;  // the kernel's order of adds
      for (int s = 0; s < steps; ++s)
        for (int i = 0; i < kTileFloats / kThreads; ++i)
          acc += host_tiles[size_t(tile_of(cid, s)) * kTileFloats + tid + kThreads * i];
      if (acc != got[size_t(blk) * kThreads + tid]) {
        std::printf("    block %d thread %d: %g, expected %g\n", blk, tid, got[size_t(blk) * kThreads + tid], acc);
        ok = false;
        break;
      }
    }
  }
  res.ran = true, res.ok = ok;
  res.us_per_step = 1e3 * ms[ms.size() / 2] / steps;
  const double clk = res.us_per_step * 1e3 * 1.98;  // cycles per step at 1.98 GHz
  std::printf("  %-9s %s %d stages, cluster %d, %3d blocks: %6.3f us per step, %5.1f B/clk received per SM, %5.1f B/clk read from L2 per SM  %s\n",
              kMulticast ? "multicast" : "unicast", kProducer ? "producer warp," : "thread 0,     ", kStages, cs, blocks, res.us_per_step, kTileBytes / clk,
              kTileBytes / cs / clk, ok ? "PASS" : "FAIL");
  CHECK(cudaFree(sums));
  return res;
}

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  cudaDeviceProp prop{};
  if (!first_device(prop)) return 0;
  std::printf("%s, %d SMs, L2 %d MiB; tiles of %d KiB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, kTileBytes / 1024);
  std::vector<float> host(size_t(kTiles) * kTileFloats);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(int(i % 1000003) % 97) * 0.25f;  // exact sums
  float* tiles = nullptr;
  CHECK(cudaMalloc(&tiles, sizeof(float) * host.size()));
  CHECK(cudaMemcpy(tiles, host.data(), sizeof(float) * host.size(), cudaMemcpyHostToDevice));
  const int steps = small ? 8 : 2000, launches = small ? 0 : 7;
  bool ok = true;
  auto both = [&](auto stages, auto producer) {
    constexpr int S = decltype(stages)::value;
    constexpr bool P = decltype(producer)::value;
    const Result uni = run<false, S, P>(1, prop.multiProcessorCount, tiles, host, steps, launches);
    ok &= uni.ok;
    for (int cs : {2, 4, 8}) {
      const Result r = run<true, S, P>(cs, prop.multiProcessorCount, tiles, host, steps, launches);
      if (r.ran) {
        ok &= r.ok;
        std::printf("    multicast against unicast: %.2fx the time per step\n", r.us_per_step / uni.us_per_step);
      }
    }
  };
  both(std::integral_constant<int, 4>{}, std::false_type{});
  both(std::integral_constant<int, 8>{}, std::false_type{});
  both(std::integral_constant<int, 4>{}, std::true_type{});
  both(std::integral_constant<int, 8>{}, std::true_type{});
  CHECK(cudaFree(tiles));
  std::printf(ok ? "ALL PASS\n" : "FAIL: a sum differs\n");
  return ok ? 0 : 1;
}
