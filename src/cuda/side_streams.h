// Side streams for independent kernels of one call. In the quadratic forward final_state_mma and
// cross_scores_mma depend only on the normaliser's operands and the packed values, as
// chunk_scores_mma does, and write disjoint buffers; in the quadratic backward quad_dv_mma needs
// only the scores and the packed G, beside cross_values_mma, quad_readback_mma and bwd_local (since
// round 37 also the cross scores where the backward computes them, and, where the forward saved the
// sums and diagonal scores, norm_apply's keys beside the values' packing and cross_values_mma); on
// the chunked paths the forward's chunk_states_mma (where chunk_scan_mma does not apply) runs
// beside chunk_scores_mma, and the backward's forward chunk states beside the reverse ones and
// dv's products. They run on more streams of the device (forked from the caller's stream by an
// event, joined back by events before their outputs are read and when the batch's scope ends,
// also when an exception leaves it: to the caller it is one stream's work, and the workspace is
// freed in the caller's stream order after them). Measured on the H200 (BDH-8k forward, b9436eb /
// 8eea7a7): 1.24-1.25 ms against 1.30 on one stream in four runs of five (the kernels' tails and
// their different bottlenecks overlap; final_state_mma at one block per SM, to leave room for the
// others, was slower: 1.41-1.42); the chunked paths' (round 15, long-T8192): forward+backward
// 3.74-3.77 against 3.77-3.81 ms, the forward within the runs' spread. Streams per thread and
// device, created once and kept (as the context is): calls from different threads do not share
// them, so one thread's stream capture does not meet another's work. RHOSCAN_CUDA_SIDE_STREAMS=0
// (environment, per call) or -DRHOSCAN_SIDE_STREAMS=0 (build) keeps every kernel on the caller's
// stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "cuda/common.cuh"

#ifndef RHOSCAN_SIDE_STREAMS
#define RHOSCAN_SIDE_STREAMS 1
#endif

namespace rhoscan::cuda_detail {

inline bool side_streams_on() {
  if (const char* env = std::getenv("RHOSCAN_CUDA_SIDE_STREAMS"); env != nullptr && std::strcmp(env, "0") == 0)
    return false;
  return RHOSCAN_SIDE_STREAMS;
}
// Side stream `index` of the current device for this thread.
inline cudaStream_t side_stream(int index) {
  thread_local std::map<std::pair<int, int>, cudaStream_t> streams;
  int dev = 0;
  RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
  cudaStream_t& s = streams[{dev, index}];
  if (s == nullptr) RHOSCAN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
// `to` waits for the work enqueued on `from` so far (an event, destroyed at once: the wait is
// already enqueued); the first error, or cudaSuccess.
inline cudaError_t try_stream_wait(cudaStream_t to, cudaStream_t from) noexcept {
  cudaEvent_t e = nullptr;
  cudaError_t status = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (status != cudaSuccess) return status;
  status = cudaEventRecord(e, from);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(to, e, 0);
  const cudaError_t destroyed = cudaEventDestroy(e);
  return status != cudaSuccess ? status : destroyed;
}
inline void stream_wait(cudaStream_t to, cudaStream_t from) {
  RHOSCAN_CUDA_CHECK(try_stream_wait(to, from));
}
// An event recorded on a stream at construction where `record` (else e stays null), destroyed with
// the object: for a wait on part of a side stream's work (cudaStreamWaitEvent(to, event.e)); an event
// may be destroyed once the waits on it are enqueued.
struct RecordedEvent {
  cudaEvent_t e = nullptr;
  RecordedEvent(bool record, cudaStream_t on) {
    if (!record) return;
    RHOSCAN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    RHOSCAN_CUDA_CHECK(cudaEventRecord(e, on));
  }
  ~RecordedEvent() {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  RecordedEvent(const RecordedEvent&) = delete;
  RecordedEvent& operator=(const RecordedEvent&) = delete;
};
// Joins side streams (null: none) into the caller's stream when a batch's scope ends (errors
// ignored: it also runs while an exception unwinds).
struct SideStreamsJoin {
  cudaStream_t main = nullptr, s1 = nullptr, s2 = nullptr;
  ~SideStreamsJoin() {
    for (cudaStream_t s : {s1, s2})
      if (s != nullptr) (void)try_stream_wait(main, s);
  }
};

}  // namespace rhoscan::cuda_detail
