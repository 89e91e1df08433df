// How much of a chain of dependent kernels is the gap between them, and how much programmatic
// dependent launch (PDL, sm_90: cudaLaunchAttributeProgrammaticStreamSerialization with
// griddepcontrol.wait / launch_dependents in the kernels) takes back. The backward at BDH-base
// runs 17 kernels and the forward 10; their kernel durations add up to 0.945 ms of 1.02 ms
// measured (eleventh round), so the boundaries may be worth ~2-4 µs each.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/cuda/launch_gaps.cu -o /tmp/launch_gaps && /tmp/launch_gaps
//
// Each kernel of the chain adds 1 to every element of a buffer that the next reads (a real
// dependency; the final values are checked), with `blocks` blocks of 256 threads and `work`
// dependent multiply-adds per element (so that a kernel lasts a few to tens of µs). Prints per
// configuration the median time per kernel over 20 runs of the chain: plain launches, PDL with the
// trigger at each block's start, and PDL with the trigger at each block's end; and whether the
// chain's result is right (PASS / FAIL). Exit status 0 when all are right.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "harness.cuh"

__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void allow_next_grid() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// trigger: 0 none, 1 at the block's start (after the wait), 2 at its end
template <int kTrigger>
__global__ void step_kernel(const float* in, float* out, int n, int work) {
  wait_for_previous_grid();
  if (kTrigger == 1) allow_next_grid();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float x = in[i], y = 0.0f;
    for (int k = 0; k < work; ++k) y = y * 0.5f + 1.0f;  // y -> 2, a dependent chain
    out[i] = x + 1.0f + (y - y);
  }
  if (kTrigger == 2) allow_next_grid();
}

// Holds the stream for ~0.5 ms, so that the host has queued the whole chain before it starts: the
// times are then the GPU's, not the host's launch rate.
__global__ void hold_kernel() {
  for (int k = 0; k < 500; ++k) __nanosleep(1000);
}

template <int kTrigger>
void launch(bool pdl, const float* in, float* out, int n, int blocks, int work, cudaStream_t s) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(256);
  config.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, step_kernel<kTrigger>, in, out, n, work));
}

int main() {
  const int kChain = 20, kRuns = 20;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  bool all_ok = true;
  std::printf("%8s %8s %6s  %-22s %10s  %s\n", "n", "blocks", "work", "launch", "us/kernel", "check");
  for (int n : {1 << 16, 1 << 20, 1 << 23})
    for (int work : {0, 64}) {
      const int blocks = std::min(132 * 8, (n + 255) / 256);
      float *a, *b;
      CHECK(cudaMalloc(&a, n * sizeof(float)));
      CHECK(cudaMalloc(&b, n * sizeof(float)));
      for (int mode = 0; mode < 4; ++mode) {
        const char* names[] = {"plain", "PDL, no trigger", "PDL, trigger at start", "PDL, trigger at end"};
        std::vector<float> times;
        bool ok = true;
        for (int r = 0; r < kRuns + 2; ++r) {
          CHECK(cudaMemsetAsync(a, 0, n * sizeof(float), s));
          hold_kernel<<<1, 32, 0, s>>>();
          CHECK(cudaEventRecord(e0, s));
          for (int k = 0; k < kChain; ++k) {
            const float* in = k % 2 ? b : a;
            float* out = k % 2 ? a : b;
            if (mode == 0) launch<0>(false, in, out, n, blocks, work, s);
            if (mode == 1) launch<0>(true, in, out, n, blocks, work, s);
            if (mode == 2) launch<1>(true, in, out, n, blocks, work, s);
            if (mode == 3) launch<2>(true, in, out, n, blocks, work, s);
          }
          CHECK(cudaEventRecord(e1, s));
          CHECK(cudaEventSynchronize(e1));
          float ms = 0;
          CHECK(cudaEventElapsedTime(&ms, e0, e1));
          if (r >= 2) times.push_back(ms * 1000.0f / kChain);
          std::vector<float> h(n);
          CHECK(cudaMemcpy(h.data(), kChain % 2 ? b : a, n * sizeof(float), cudaMemcpyDeviceToHost));
          for (int i = 0; i < n; i += 997) ok &= h[i] == float(kChain);
        }
        std::sort(times.begin(), times.end());
        std::printf("%8d %8d %6d  %-22s %10.2f  %s\n", n, blocks, work, names[mode], times[times.size() / 2],
                    ok ? "PASS" : "FAIL");
        all_ok &= ok;
      }
      CHECK(cudaFree(a));
      CHECK(cudaFree(b));
    }
  return all_ok ? 0 : 1;
}
