// What the standalone dev/cuda harnesses share (each is still one nvcc command: this header sits
// beside them): an exit on any CUDA error, a grid of whole clusters over the multiprocessors that
// hold them, and timed launches by CUDA events.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));                 \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

// Device 0's properties into prop, or false (after saying so) where there is no CUDA device: the
// harnesses then measure nothing and exit 0.
inline bool first_device(cudaDeviceProp& prop) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing measured\n");
    return false;
  }
  CHECK(cudaGetDeviceProperties(&prop, 0));
  return true;
}

// A launch of `kernel` in 1-D clusters of `cs` blocks of `block` threads and `smem` bytes of dynamic
// shared memory, as many clusters as the device holds at once, at most sms / cs (config's attrs
// point into this object: not copyable). clusters == 0: the device cannot run that cluster size.
struct ClusterLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attr{};
  int clusters = 0;

  template <typename... Params>
  ClusterLaunch(void (*kernel)(Params...), int cs, int block, int smem, int sms) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (cs > 8) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = smem;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cs, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    config.attrs = &attr, config.numAttrs = 1;
    config.gridDim = dim3(cs);
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &config) != cudaSuccess || fit == 0) {
      (void)cudaGetLastError();
      return;
    }
    clusters = std::min(fit, sms / cs);
    config.gridDim = dim3(clusters * cs);
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// launch() `launches` times, each between two CUDA events (after `warmups` untimed runs): the
// times in ms, sorted.
template <typename F>
std::vector<float> timed_launches(int launches, int warmups, F launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < warmups + launches; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= warmups) ms.push_back(t);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms;
}
