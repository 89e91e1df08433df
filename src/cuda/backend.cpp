// The CUDA backend's BackendImpl: availability, supported problems, and dispatch to the
// kernels (forward.cu, backward.cu, step.cu, values.cu).
#include <cuda_runtime.h>

#include "core/backend.h"
#include "cuda/ops.h"

namespace rhoscan::detail {
namespace {

class CudaBackend final : public BackendImpl {
 public:
  Backend id() const override { return Backend::cuda; }
  Device device() const override { return Device::cuda; }

  std::string unavailable_reason() const override { return cuda_detail::runtime_unavailable_reason(); }

  std::string unsupported_reason(const Problem& p) const override {
    if (p.dtype == DType::float64)
      return "float64 q/v/context are not supported on CUDA (use float32, bfloat16 or float16, or the cpu backend)";
    if (p.state_dtype == DType::float64)
      return "float64 states are not supported on CUDA: the states are float32 (decay may be float64)";
    return "";
  }

  bool values_satisfy(const TensorView& view, ValueRule rule, const Options& options) const override {
    if (view.device != Device::cuda) return BackendImpl::values_satisfy(view, rule, options);
    return cuda_detail::run_values_satisfy(view, rule == ValueRule::unit_interval, options);
  }

  // forward.cu, backward.cu and step.cu settle the checks (cuda/value_gate.h)
  bool defers_value_checks() const override { return true; }

  bool reads_saved() const override { return true; }
  SavedHeader saved_header(const TensorView& saved, const Options& options) const override {
    return cuda_detail::read_saved_header(saved, options);
  }
  std::optional<SavedHeader> cached_saved_header(const TensorView& saved) const override {
    return cuda_detail::cached_saved_header(saved.device_index, saved.data);
  }

  void forward(const ForwardParams& params) const override { cuda_detail::run_forward(params); }
  void backward(const BackwardParams& params) const override { cuda_detail::run_backward(params); }
  void step(const StepParams& params) const override { cuda_detail::run_step(params); }
};

}  // namespace

const BackendImpl& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace rhoscan::detail
