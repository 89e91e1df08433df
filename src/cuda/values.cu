// Value checks on device tensors (validation's decay range check and finite checks): one pass
// with a grid-stride loop; any failing element sets a flag (an integer OR, order-free).
#include "cuda/chunk_kernels.cuh"
#include "cuda/ops.h"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {
namespace {

struct View5 {
  const void* p;
  int rank;
  int64_t shape[kMaxRank], strides[kMaxRank];
};

template <typename T>
__global__ void values_kernel(View5 t, int64_t n, bool unit_interval, int* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (rest % t.shape[d]) * t.strides[d];
      rest /= t.shape[d];
    }
    double x;
    if constexpr (std::is_same_v<T, double>) x = static_cast<const double*>(t.p)[off];
    else x = to_float(static_cast<const T*>(t.p)[off]);
    const bool ok = isfinite(x) && (!unit_interval || (x >= 0.0 && x <= 1.0));
    if (!ok) atomicOr(bad, 1);
  }
}

}  // namespace

// On the caller's stream (options.stream), so that the check reads what that stream wrote; the
// flag from the stream-ordered pool (the legacy default stream, cudaMalloc and cudaFree, as
// until the tenth round, waited for the whole device and raced with work queued on a
// non-blocking stream). One wait for the flag.
bool run_values_satisfy(const TensorView& view, bool unit_interval, const Options& options) {
  DeviceGuard guard(view.device_index);
  const cudaStream_t stream = static_cast<cudaStream_t>(options.stream);
  View5 t{view.data, view.rank, {}, {}};
  for (int d = 0; d < view.rank; ++d) {
    t.shape[d] = view.shape[d];
    t.strides[d] = view.strides[d];
  }
  const int64_t n = view.numel();
  int* bad = nullptr;
  RHOSCAN_CUDA_CHECK(cudaMallocAsync(&bad, sizeof(int), stream));
  int host = 0;
  cudaError_t st = cudaMemsetAsync(bad, 0, sizeof(int), stream);
  if (st == cudaSuccess) {
    const unsigned grid = grid_for(n, 256, 4096);
    switch (view.dtype) {
      case DType::float64: values_kernel<double><<<grid, 256, 0, stream>>>(t, n, unit_interval, bad); break;
      case DType::float32: values_kernel<float><<<grid, 256, 0, stream>>>(t, n, unit_interval, bad); break;
      case DType::bfloat16: values_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(t, n, unit_interval, bad); break;
      case DType::float16: values_kernel<__half><<<grid, 256, 0, stream>>>(t, n, unit_interval, bad); break;
    }
    st = cudaGetLastError();
    if (st == cudaSuccess) st = cudaMemcpyAsync(&host, bad, sizeof(int), cudaMemcpyDeviceToHost, stream);
  }
  const cudaError_t freed = cudaFreeAsync(bad, stream);
  if (st == cudaSuccess) st = freed;
  if (st == cudaSuccess) st = cudaStreamSynchronize(stream);
  check_cuda(st, "value check on the device");
  return host == 0;
}

}  // namespace rhoscan::cuda_detail
