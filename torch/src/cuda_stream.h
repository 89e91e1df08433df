// PyTorch's current CUDA stream as an opaque handle for rhoscan::Options::stream. Defined in
// cuda_stream.cpp, which is compiled only against a PyTorch with CUDA (it needs CUDA headers).
#pragma once

namespace rhoscan::pt::detail {

void* current_cuda_stream(int device_index);  // a cudaStream_t

}  // namespace rhoscan::pt::detail
