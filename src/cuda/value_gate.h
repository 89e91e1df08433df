// The deferred value checks of one call (core/params.h, DeferredCheck), in flight on its stream.
//
// Until the eleventh round validation waited for each check before the first launch: the GPU
// then sat idle while the host launched the call's first kernels, once per forward and twice per
// backward (the decay check, the saved header's read). Now the constructor queues the checks on
// the call's stream, each writing its verdict into host-mapped memory, and records an event; the
// backend queues the work that writes only its workspace, then calls settle() before its first
// write to an output (SPEC.md: nothing written on an error). settle() waits for the event, not for
// the stream, so the GPU runs the queued work while the host waits and launches the rest.
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"

namespace rhoscan::cuda_detail {

class ValueGate {
 public:
  ValueGate(const detail::DeferredChecks& checks, cudaStream_t stream);
  // Waits for the checks if settle() did not (an exception on the way), so that the host slots are
  // free for the next call on this thread.
  ~ValueGate();
  ValueGate(const ValueGate&) = delete;
  ValueGate& operator=(const ValueGate&) = delete;

  // Waits for the checks; throws the first failing check's Error (validation's message), or
  // detail::SavedHeaderChanged where the saved buffer's header differs from the cached one (whose
  // cache entry is then dropped). Later calls return at once.
  void settle();
  bool settled() const { return settled_; }

 private:
  const detail::DeferredChecks& checks_;
  volatile int* verdicts_ = nullptr;  // host-mapped, one per check: 0 passed, 1 failed
  cudaEvent_t done_ = nullptr;
  bool settled_ = true;
};

}  // namespace rhoscan::cuda_detail
