// The public entry points: validate, pick the backend, run. And the backend registry.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/saved.h"
#include "core/validate.h"
#include "rhoscan/rhoscan.h"

namespace rhoscan {
namespace detail {

const BackendImpl* find_backend(Backend id) {
  switch (id) {
    case Backend::reference: return &reference_backend();
#ifdef RHOSCAN_HAVE_CPU_FAST
    case Backend::cpu: return &cpu_fast_backend();
#endif
#ifdef RHOSCAN_HAVE_CUDA
    case Backend::cuda: return &cuda_backend();
#endif
#ifdef RHOSCAN_HAVE_VULKAN
    case Backend::vulkan: return &vulkan_backend();
#endif
    default: return nullptr;
  }
}

// Host-memory value checks, walking any strides.
bool BackendImpl::values_satisfy(const TensorView& t, ValueRule rule, const Options& /*options*/) const {
  int64_t index[kMaxRank] = {};
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < t.rank; ++d) offset += index[d] * t.strides[d];
    double x = load_as_double(t.data, t.dtype, offset);
    if (!std::isfinite(x)) return false;
    if (rule == ValueRule::unit_interval && (x < 0.0 || x > 1.0)) return false;
    for (int d = t.rank - 1; d >= 0; --d) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
  return true;
}

}  // namespace detail

Backend resolve_backend(Backend requested, Device device) {
  if (requested != Backend::automatic) return requested;
  switch (device) {
    case Device::cuda: return Backend::cuda;
    case Device::vulkan: return Backend::vulkan;
    case Device::cpu:
#ifdef RHOSCAN_HAVE_CPU_FAST
      return Backend::cpu;
#else
      return Backend::reference;
#endif
  }
  return Backend::reference;
}

std::vector<Backend> available_backends() {
  std::vector<Backend> out;
  for (Backend b : {Backend::reference, Backend::cpu, Backend::cuda, Backend::vulkan})
    if (backend_unavailable_reason(b).empty()) out.push_back(b);
  return out;
}

std::string backend_unavailable_reason(Backend backend) {
  if (backend == Backend::automatic) return "";
  const detail::BackendImpl* impl = detail::find_backend(backend);
  if (impl == nullptr) return std::string("backend ") + backend_name(backend) + " is not compiled into this build";
  return impl->unavailable_reason();
}

int64_t saved_numel(int64_t B, int64_t H, int64_t T, int64_t L, DType dtype, bool has_rho, int64_t chunk_size,
                    bool with_keys) {
  if (B < 0 || H < 0 || T < 0 || L < 1 || chunk_size < 0)
    throw Error(ErrorKind::invalid_argument,
                "rhoscan.saved_numel: expected B, H, T >= 0, L >= 1 and chunk_size >= 0, got B=" + std::to_string(B) +
                    ", H=" + std::to_string(H) + ", T=" + std::to_string(T) + ", L=" + std::to_string(L) +
                    ", chunk_size=" + std::to_string(chunk_size));
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) > 3)
    throw Error(ErrorKind::invalid_argument,
                "rhoscan.saved_numel: unsupported dtype code " + std::to_string(static_cast<int>(dtype)));
  // The sections are at most about 2 B·H·T·L + B·H·T floats (Nc when T = 1), the keys B·H·T·(L + 63)
  // more: refuse what overflows.
  int64_t bound = 4;
  for (int64_t x : {B, H, std::max<int64_t>(T, 1), std::min<int64_t>(L, INT64_MAX - 64) + 64})
    if (__builtin_mul_overflow(bound, x, &bound))
      throw Error(ErrorKind::invalid_argument, "rhoscan.saved_numel: B·H·T·L = " + std::to_string(B) + "·" +
                                                   std::to_string(H) + "·" + std::to_string(T) + "·" +
                                                   std::to_string(L) + " overflows a 64-bit count");
  return detail::saved_layout(B, H, T, L, dtype, has_rho, chunk_size, with_keys).total;
}

void forward(const ForwardArgs& args, const Options& options) {
  detail::ValidatedForward v = detail::validate_forward(args, options);
  v.backend->forward(v.params);
}

void backward(const BackwardArgs& args, const Options& options) {
  detail::ValidatedBackward v = detail::validate_backward(args, options);
  try {
    v.backend->backward(v.params);
  } catch (const detail::SavedHeaderChanged&) {
    // the cached header was stale (nothing written yet): again, with the device's header
    v = detail::validate_backward(args, options, false);
    v.backend->backward(v.params);
  }
}

void step(const StepArgs& args, const Options& options) {
  detail::ValidatedStep v = detail::validate_step(args, options);
  v.backend->step(v.params);
}

const char* version() noexcept { return RHOSCAN_VERSION; }

}  // namespace rhoscan
