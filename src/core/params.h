// The one description of a validated problem that every backend receives.
//
// Validation (validate.cpp) turns the public TensorViews into these structs: every shape has
// been checked, the decay has been normalised to [H, L], and every stride is in elements and
// indexed in the fixed logical order written beside it. A backend never re-validates.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/saved.h"
#include "rhoscan/rhoscan.h"

namespace rhoscan::detail {

struct Problem {
  int64_t B = 0, H = 0, Hv = 0, T = 0, L = 0, E = 0;
  DType dtype = DType::float32;        // q, v, context and their gradients
  DType decay_dtype = DType::float32;  // decay and grad_decay: float32 or float64
  DType state_dtype = DType::float32;  // every state tensor: float32 or float64
  Device device = Device::cpu;
  int device_index = 0;
};

// A value check that validation leaves to the backend (BackendImpl::defers_value_checks): the
// backend queues it on its stream and settles it before its first write to an output, so that
// the host's wait for the device overlaps work already queued (a check that waits before the
// first launch leaves the GPU idle while the host launches). The checks are settled in this
// order; the first that fails throws Error(invalid_argument, message), the error validation would
// have thrown.
struct DeferredCheck {
  enum class Kind {
    finite,         // every element of view finite
    unit_interval,  // every element of view finite and in [0, 1]
    saved_header,   // the header at view.data equal to `header` (a header the backend cached when its
                    // forward wrote it): on a difference, SavedHeaderChanged instead of an Error
  };
  Kind kind = Kind::finite;
  TensorView view;
  std::string message;
  SavedHeader header;
};
using DeferredChecks = std::vector<DeferredCheck>;

// Thrown by a backend whose deferred saved-header comparison found a header other than the cached
// one (the buffer was overwritten since its forward): nothing has been written, and the backward is
// validated again with the header read from the device (rhoscan::backward). Not an rhoscan::Error:
// it never reaches the caller.
struct SavedHeaderChanged : std::exception {
  const char* what() const noexcept override { return "rhoscan: the saved buffer's header changed since its forward"; }
};

// Strides are in elements. v's head stride is 0 when Hv == 1, so that v(b, h, t, e) is the
// same expression for both cases; backends that want to exploit Hv == 1 test problem.Hv.
struct ForwardParams {
  Problem p;
  const void* q = nullptr;         int64_t q_stride[4] = {};         // b, h, t, l
  const void* v = nullptr;         int64_t v_stride[4] = {};         // b, h, t, e
  const void* decay = nullptr;     int64_t decay_stride[2] = {};     // h, l
  const void* rho0 = nullptr;      int64_t rho0_stride[4] = {};      // b, h, l, e  (null: zeros)
  const void* rho_norm0 = nullptr; int64_t rho_norm0_stride[3] = {}; // b, h, l     (null: zeros)
  void* context = nullptr;         int64_t context_stride[4] = {};   // b, h, t, e
  void* rho = nullptr;             int64_t rho_stride[4] = {};       // b, h, l, e  (may == rho0)
  void* rho_norm = nullptr;        int64_t rho_norm_stride[3] = {};  // b, h, l     (may == rho_norm0)
  float* saved = nullptr;  // null, or contiguous with saved_layout(...).total floats (core/saved.h)
  bool saved_keys = false;  // whether `saved` has the layout with the keys (saved_layout's with_keys)
  Options options;
  DeferredChecks deferred;  // empty unless the backend defers its value checks
};

struct BackwardParams {
  Problem p;
  const void* q = nullptr;         int64_t q_stride[4] = {};
  const void* v = nullptr;         int64_t v_stride[4] = {};
  const void* decay = nullptr;     int64_t decay_stride[2] = {};
  const void* rho0 = nullptr;      int64_t rho0_stride[4] = {};
  const void* rho_norm0 = nullptr; int64_t rho_norm0_stride[3] = {};
  const void* grad_context = nullptr;  int64_t grad_context_stride[4] = {};   // b, h, t, e
  const void* grad_rho_out = nullptr;  int64_t grad_rho_out_stride[4] = {};   // null: zeros
  const void* grad_rho_norm_out = nullptr; int64_t grad_rho_norm_out_stride[3] = {};
  void* grad_q = nullptr;          int64_t grad_q_stride[4] = {};
  void* grad_v = nullptr;          int64_t grad_v_stride[4] = {};    // b, hv, t, e (real Hv stride)
  void* grad_decay = nullptr;      int64_t grad_decay_stride[2] = {};
  void* grad_rho0 = nullptr;       int64_t grad_rho0_stride[4] = {};       // null: not wanted
  void* grad_rho_norm0 = nullptr;  int64_t grad_rho_norm0_stride[3] = {};  // null: not wanted
  // The forward's saved buffer, given only to a backend that reads it (its header checked against
  // this problem); saved_filled: the header's kSaved* flags (core/saved.h).
  const float* saved = nullptr;
  uint32_t saved_filled = 0;
  bool saved_keys = false;  // whether it has the layout with the keys (the forward filled them where kSavedKeys)
  Options options;
  DeferredChecks deferred;  // empty unless the backend defers its value checks
};

struct StepParams {
  Problem p;  // T == 1
  const void* q = nullptr;     int64_t q_stride[3] = {};        // b, h, l
  const void* v = nullptr;     int64_t v_stride[3] = {};        // b, h, e (head stride 0 if Hv == 1)
  const void* decay = nullptr; int64_t decay_stride[2] = {};
  void* rho = nullptr;         int64_t rho_stride[4] = {};      // in place
  void* rho_norm = nullptr;    int64_t rho_norm_stride[3] = {}; // in place
  void* context = nullptr;     int64_t context_stride[3] = {};  // b, h, e
  Options options;
  DeferredChecks deferred;  // empty unless the backend defers its value checks
};

}  // namespace rhoscan::detail
