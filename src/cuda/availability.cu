// Whether the CUDA kernels can run on this machine: a driver, a device, and machine code for
// the device's architecture in this build (CMAKE_CUDA_ARCHITECTURES). Never crashes without a
// GPU: every failure becomes a reason string.
#include "cuda/chunk_kernels.cuh"
#include "cuda/ops.h"

namespace rhoscan::cuda_detail {

std::string runtime_unavailable_reason() {
  int count = 0;
  cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA driver or device (cudaGetDeviceCount: ") + cudaGetErrorString(st) + ")";
  }
  if (count == 0) return "no CUDA device found";
  cudaFuncAttributes attr;
  st = cudaFuncGetAttributes(&attr, decay_to_f32_kernel);
  if (st != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop;
    std::string dev = "the current device";
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess)
      dev = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    return "this build has no kernel image for " + dev +
           ": rebuild with CMAKE_CUDA_ARCHITECTURES naming it (" + cudaGetErrorString(st) + ")";
  }
  return "";
}

}  // namespace rhoscan::cuda_detail
