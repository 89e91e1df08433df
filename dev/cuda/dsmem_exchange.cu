// What a cluster's per-chunk exchange costs, as the cluster forward (cluster_scan_mma, measured and
// removed: docs/CUDA.md, "The cluster forward"; the code is at 40f0361) did it: each block of a
// cluster writes its 64 × 256 float32 share of the chunk's context into shared memory, the cluster
// waits at its barrier, and each block sums its 256 / CS columns of every block's share (rank order,
// distributed shared memory) into global memory, then the cluster waits again. That design rested
// on this being well under its ~1-2 µs of tensor-core work per chunk; on the H200 it is not: 3.3-3.9
// µs per exchange at every cluster size from 1 to 8 (1: a block's own share summed and stored, no
// remote reads, 3.9 µs; 0.8 µs of each the two barriers), 5.5 µs at 16
// (bench/results/cluster-h200-2026-12-02/): the shares' global stores and the barriers cost about
// the same with or without remote reads, so the printed B/clk (remote bytes over the whole step) is
// a lower bound on the network's rate, not its rate. Kept for the next design that would move data
// between a cluster's blocks.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/dsmem_exchange.cu -o /tmp/dsmem_exchange && /tmp/dsmem_exchange
//
// One block of 256 threads per multiprocessor (a 200 KiB shared-memory request), a grid of whole
// clusters over every multiprocessor that holds them; `steps` exchanges a launch. Per cluster size
// (1, 2, 4, 8, and 16 where the device takes it) and element type (float32, and bf16 shares summed
// in float32): µs per exchange (median of 9 launches, CUDA events), and the remote bytes each
// multiprocessor read per exchange and per cycle of a 1.98 GHz clock. Also the exchange alone with
// the two barriers and no loads (the barriers' cost). The sums are checked (PASS / FAIL); exit 0
// when all are right. --small: one launch of 2 steps per configuration (for compute-sanitizer).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/cluster.cuh"  // the library's cluster primitives, as the kernel uses them
#include "harness.cuh"

using namespace rhoscan::cuda_detail;

constexpr int kRows = 64, kCols = 256, kThreads = 256, kSmem = 200 * 1024;

__device__ __forceinline__ uint2 ld2(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared::cluster.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
  return v;
}

// kBf16: shares stored as bf16 (4 per 8-byte load); kLoads false: the barriers only
template <bool kBf16, bool kLoads>
__global__ void exchange_kernel(float* out, int steps) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, CS = int(cluster_blocks()), rank = int(cluster_rank());
  const int cluster = blockIdx.x / CS, W = kCols / CS;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  for (int step = 0; step < steps; ++step) {
    // the block's share: element (t, e) = rank + 1 + step (a sum over ranks CS (CS + 1) / 2 + CS step)
    const float v = float(rank + 1 + step);
    for (int x = tid; x < kRows * kCols; x += kThreads) {
      if (kBf16)
        reinterpret_cast<__nv_bfloat16*>(smem)[x] = __float2bfloat16_rn(v);
      else
        reinterpret_cast<float*>(smem)[x] = v;
    }
    cluster_arrive();
    cluster_wait();
    if (kLoads) {
      float* o = out + (size_t(cluster) * kRows) * kCols + W * rank;
      for (int idx = tid; idx < kRows * W / 4; idx += kThreads) {
        const int t = idx / (W / 4), k = idx % (W / 4);
        const int el = t * kCols + W * rank + 4 * k;
        float4 s = {0, 0, 0, 0};
        for (int r = 0; r < CS; ++r) {
          if (kBf16) {
            const uint2 w = ld2(cluster_map(base + 2 * el, unsigned(r)));
            s.x += __uint_as_float(w.x << 16), s.y += __uint_as_float(w.x & 0xffff0000u);
            s.z += __uint_as_float(w.y << 16), s.w += __uint_as_float(w.y & 0xffff0000u);
          } else {
            const float4 w = ld_cluster_f4(cluster_map(base + 4 * el, unsigned(r)));
            s.x += w.x, s.y += w.y, s.z += w.z, s.w += w.w;
          }
        }
        *reinterpret_cast<float4*>(o + t * kCols + 4 * k) = s;
      }
    }
    cluster_arrive();
    cluster_wait();
  }
}

template <bool kBf16, bool kLoads>
bool run(int cs, int sms, int steps, int launches, bool& ok_all) {
  ClusterLaunch launch(exchange_kernel<kBf16, kLoads>, cs, kThreads, kSmem, sms);
  if (launch.clusters == 0) {
    std::printf("  cluster %2d: not runnable here\n", cs);
    return false;
  }
  const int clusters = launch.clusters;
  float* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(float) * clusters * kRows * kCols));
  const std::vector<float> ms = timed_launches(launches, 0, [&] {
    CHECK(cudaLaunchKernelEx(&launch.config, exchange_kernel<kBf16, kLoads>, out, steps));
  });
  bool ok = true;
  if (kLoads) {
    std::vector<float> h(size_t(clusters) * kRows * kCols);
    CHECK(cudaMemcpy(h.data(), out, sizeof(float) * h.size(), cudaMemcpyDeviceToHost));
    const float want = float(cs * (cs + 1) / 2 + cs * (steps - 1));
    for (float x : h) ok &= x == want;
  }
  const double us = 1e3 * ms[ms.size() / 2] / steps;
  const double remote = double(kRows) * kCols * (kBf16 ? 2 : 4) * (cs - 1) / cs;  // bytes a block reads remotely
  std::printf("  cluster %2d, %2d clusters, %s%s: %7.3f us per exchange, %6.0f remote bytes per block, %5.1f B/clk per SM  %s\n",
              cs, clusters, kBf16 ? "bf16 " : "float", kLoads ? "" : " (barriers only)", us, kLoads ? remote : 0.0,
              kLoads ? remote / (us * 1e3 * 1.98) : 0.0, ok ? "PASS" : "FAIL");
  ok_all &= ok;
  CHECK(cudaFree(out));
  return true;
}

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  cudaDeviceProp prop{};
  if (!first_device(prop)) return 0;
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const int steps = small ? 2 : 200, launches = small ? 1 : 9;
  bool ok = true;
  for (int cs : {1, 2, 4, 8, 16}) {
    if (!run<false, true>(cs, prop.multiProcessorCount, steps, launches, ok)) continue;
    run<true, true>(cs, prop.multiProcessorCount, steps, launches, ok);
    run<false, false>(cs, prop.multiProcessorCount, steps, launches, ok);
  }
  std::printf(ok ? "ALL PASS\n" : "FAIL: a sum differs\n");
  return ok ? 0 : 1;
}
