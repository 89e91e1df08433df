// Input validation: public arguments in, a backend and its params struct out, or an Error.
// Nothing is written by validation; every check of SPEC.md "Inputs that are errors" lives here.
#pragma once

#include "core/backend.h"
#include "core/params.h"

namespace rhoscan::detail {

struct ValidatedForward {
  ForwardParams params;
  const BackendImpl* backend = nullptr;
};
struct ValidatedBackward {
  BackwardParams params;
  const BackendImpl* backend = nullptr;
};
struct ValidatedStep {
  StepParams params;
  const BackendImpl* backend = nullptr;
};

ValidatedForward validate_forward(const ForwardArgs& args, const Options& options);
// cached_header: take the saved buffer's header from the backend's cache where it has one
// (BackendImpl::cached_saved_header); false after SavedHeaderChanged.
ValidatedBackward validate_backward(const BackwardArgs& args, const Options& options, bool cached_header = true);
ValidatedStep validate_step(const StepArgs& args, const Options& options);

// The backend that runs tensors on `device` for the requested choice (throws when it cannot).
const BackendImpl& select_backend(const char* op, Backend requested, Device device);

}  // namespace rhoscan::detail
