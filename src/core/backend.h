// The interface every backend implements, and the registry the dispatcher reads.
#pragma once

#include <optional>
#include <string>

#include "core/params.h"
#include "core/saved.h"
#include "rhoscan/rhoscan.h"

namespace rhoscan::detail {

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;

  virtual Backend id() const = 0;
  virtual Device device() const = 0;  // where the tensors it accepts live
  // Every device whose tensors it accepts (the Vulkan backend: host and Vulkan tensors).
  virtual bool accepts(Device d) const { return d == device(); }
  // Whether a view's memory is usable by this backend ("" when it is, else why): the Vulkan
  // backend checks that a Vulkan tensor lies inside a live VulkanBuffer. Checked before anything
  // is read or written.
  virtual std::string memory_reason(const TensorView&) const { return ""; }

  // Runtime availability (driver, device). Returns "" when usable, else the reason.
  virtual std::string unavailable_reason() const { return ""; }

  // Whether this backend can run a validated problem. Returns "" when it can, else the reason
  // (dtype or size limits). Checked before anything is written.
  virtual std::string unsupported_reason(const Problem&) const { return ""; }

  // Value checks that validation needs (decay in [0, 1]; finite-checking). The defaults read
  // host memory; backends whose tensors live on a device override them (on options.stream, so
  // that the check sees what the caller's stream wrote).
  enum class ValueRule { finite, unit_interval };
  virtual bool values_satisfy(const TensorView& view, ValueRule rule, const Options& options) const;
  // Whether validation hands its value checks to the backend (params' `deferred`, DeferredCheck)
  // instead of calling values_satisfy; such a backend settles them before its first write.
  virtual bool defers_value_checks() const { return false; }

  // Whether the backend fills and reads the forward's saved buffer (core/saved.h); if so, its
  // header, copied from wherever the buffer lives (validation checks it before the backward).
  virtual bool reads_saved() const { return false; }
  virtual SavedHeader saved_header(const TensorView& /*saved*/, const Options& /*options*/) const { return {}; }
  // The header the backend's own forward last wrote at saved.data, if it remembers one: validation
  // then takes it without reading the device, and defers a comparison with the device's header
  // (DeferredCheck::Kind::saved_header).
  virtual std::optional<SavedHeader> cached_saved_header(const TensorView& /*saved*/) const { return std::nullopt; }

  virtual void forward(const ForwardParams& params) const = 0;
  virtual void backward(const BackwardParams& params) const = 0;
  virtual void step(const StepParams& params) const = 0;
};

// Each is compiled in only with its option; the dispatcher declares what it links.
const BackendImpl& reference_backend();
#ifdef RHOSCAN_HAVE_CPU_FAST
const BackendImpl& cpu_fast_backend();
#endif
#ifdef RHOSCAN_HAVE_CUDA
const BackendImpl& cuda_backend();
#endif
#ifdef RHOSCAN_HAVE_VULKAN
const BackendImpl& vulkan_backend();
#endif

// null when the backend is not compiled in.
const BackendImpl* find_backend(Backend id);

}  // namespace rhoscan::detail
