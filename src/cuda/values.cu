// Value checks on device tensors (validation's decay range check, the finite checks, the saved
// header's comparison), queued on the call's stream and settled by ValueGate (value_gate.h).
#include <cstring>
#include <string>

#include "cuda/chunk_kernels.cuh"
#include "cuda/ops.h"
#include "cuda/value_gate.h"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {
namespace {

struct View5 {
  const void* p;
  int rank;
  int64_t shape[kMaxRank], strides[kMaxRank];
};

// One pass with a grid-stride loop; a block with a failing element writes 1 into its verdict (one
// store per block, not per element: the verdict lives in host memory).
template <typename T>
__global__ void values_kernel(View5 t, int64_t n, bool unit_interval, volatile int* verdict) {
  grid_dependency_wait();
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (rest % t.shape[d]) * t.strides[d];
      rest /= t.shape[d];
    }
    double x;
    if constexpr (std::is_same_v<T, double>) x = static_cast<const double*>(t.p)[off];
    else x = to_float(static_cast<const T*>(t.p)[off]);
    bad |= !(isfinite(x) && (!unit_interval || (x >= 0.0 && x <= 1.0)));
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *verdict = 1;
}

struct HeaderWords {
  uint32_t w[detail::kSavedHeaderFloats];
};

__global__ void header_differs_kernel(const uint32_t* saved, HeaderWords expected, volatile int* verdict) {
  grid_dependency_wait();
  const int i = threadIdx.x;
  const bool differs = i < detail::kSavedHeaderFloats && saved[i] != expected.w[i];
  if (__syncthreads_or(differs) && threadIdx.x == 0) *verdict = 1;
}

// The verdicts of this thread's calls: pinned, mapped, portable (any device), allocated once.
// One gate per thread is alive at a time (the ops do not nest), and it waits for its checks
// before it goes, so the next gate may reset the slots.
constexpr int kMaxVerdicts = 64;
struct VerdictSlots {
  int* host = nullptr;
  bool in_use = false;
  ~VerdictSlots() {
    if (host != nullptr) cudaFreeHost(host);  // (at thread exit; an error then is of no use)
  }
};
thread_local VerdictSlots verdict_slots;

}  // namespace

ValueGate::ValueGate(const detail::DeferredChecks& checks, cudaStream_t stream) : checks_(checks) {
  if (checks.empty()) return;
  if (static_cast<int>(checks.size()) > kMaxVerdicts || verdict_slots.in_use)
    throw Error(ErrorKind::internal, "rhoscan cuda: " + std::to_string(checks.size()) +
                                         " deferred value checks, or a second gate on this thread (a bug)");
  if (verdict_slots.host == nullptr)
    RHOSCAN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&verdict_slots.host), kMaxVerdicts * sizeof(int),
                                     cudaHostAllocMapped | cudaHostAllocPortable));
  int* device_slots = nullptr;
  RHOSCAN_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_slots), verdict_slots.host, 0));
  for (size_t k = 0; k < checks.size(); ++k) verdict_slots.host[k] = 0;
  for (size_t k = 0; k < checks.size(); ++k) {
    const detail::DeferredCheck& c = checks[k];
    volatile int* verdict = device_slots + k;
    if (c.kind == detail::DeferredCheck::Kind::saved_header) {
      HeaderWords words{};
      std::memcpy(words.w, &c.header, sizeof c.header);
      header_differs_kernel<<<1, detail::kSavedHeaderFloats, 0, stream>>>(static_cast<const uint32_t*>(c.view.data),
                                                                          words, verdict);
      RHOSCAN_CUDA_LAUNCHED("header_differs_kernel");
      continue;
    }
    const TensorView& view = c.view;
    View5 t{view.data, view.rank, {}, {}};
    for (int d = 0; d < view.rank; ++d) {
      t.shape[d] = view.shape[d];
      t.strides[d] = view.strides[d];
    }
    const int64_t n = view.numel();
    const bool unit = c.kind == detail::DeferredCheck::Kind::unit_interval;
    const unsigned grid = grid_for(n, 256, 4096);
    switch (view.dtype) {
      case DType::float64: values_kernel<double><<<grid, 256, 0, stream>>>(t, n, unit, verdict); break;
      case DType::float32: values_kernel<float><<<grid, 256, 0, stream>>>(t, n, unit, verdict); break;
      case DType::bfloat16: values_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(t, n, unit, verdict); break;
      case DType::float16: values_kernel<__half><<<grid, 256, 0, stream>>>(t, n, unit, verdict); break;
    }
    RHOSCAN_CUDA_LAUNCHED("values_kernel");
  }
  RHOSCAN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(done_, stream);
  if (recorded != cudaSuccess) {
    cudaEventDestroy(done_);
    check_cuda(recorded, "cudaEventRecord(value checks)");
  }
  verdicts_ = verdict_slots.host;
  verdict_slots.in_use = true;
  settled_ = false;
}

ValueGate::~ValueGate() {
  if (settled_) return;
  cudaEventSynchronize(done_);  // (an exception is on its way: its error wins over this one)
  cudaEventDestroy(done_);
  verdict_slots.in_use = false;
}

void ValueGate::settle() {
  if (settled_) return;
  settled_ = true;
  const cudaError_t waited = cudaEventSynchronize(done_);
  cudaEventDestroy(done_);
  verdict_slots.in_use = false;
  check_cuda(waited, "value checks on the device");
  for (size_t k = 0; k < checks_.size(); ++k) {
    if (verdicts_[k] == 0) continue;
    const detail::DeferredCheck& c = checks_[k];
    if (c.kind == detail::DeferredCheck::Kind::saved_header) {
      forget_saved_header(c.view.device_index, c.view.data);
      throw detail::SavedHeaderChanged();
    }
    throw Error(ErrorKind::invalid_argument, c.message);
  }
}

// One check, settled at once (BackendImpl::values_satisfy; validation itself defers its checks).
bool run_values_satisfy(const TensorView& view, bool unit_interval, const Options& options) {
  DeviceGuard guard(view.device_index);
  detail::DeferredChecks one(1);
  one[0].kind = unit_interval ? detail::DeferredCheck::Kind::unit_interval : detail::DeferredCheck::Kind::finite;
  one[0].view = view;
  if (view.numel() == 0) return true;
  ValueGate gate(one, static_cast<cudaStream_t>(options.stream));
  try {
    gate.settle();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::invalid_argument) throw;
    return false;
  }
  return true;
}

}  // namespace rhoscan::cuda_detail
