// The one place that needs PyTorch's CUDA headers: rhoscan runs on the stream PyTorch is
// currently using, so its kernels are ordered with the surrounding PyTorch work.
#include "cuda_stream.h"

#include <c10/cuda/CUDAStream.h>

namespace rhoscan::pt::detail {

void* current_cuda_stream(int device_index) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index)).stream());
}

}  // namespace rhoscan::pt::detail
