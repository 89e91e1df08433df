// Host entry points of the CUDA backend (implemented in the .cu files beside this one).
// They receive validated params (core/params.h) whose tensors live in CUDA memory.
#pragma once

#include <cstdint>
#include <optional>

#include "core/params.h"
#include "core/saved.h"

namespace rhoscan::cuda_detail {

void run_forward(const detail::ForwardParams& params);
void run_backward(const detail::BackwardParams& params);
void run_step(const detail::StepParams& params);
// Whether every element of a device tensor is finite (and in [0, 1] when unit_interval).
bool run_values_satisfy(const TensorView& view, bool unit_interval, const Options& options);
// The saved buffer's header (saved.cu): written on `stream` (a cudaStream_t) by the forward, read
// back on options.stream for the backward's validation.
void write_saved_header(float* saved, const detail::SavedHeader& header, void* stream);
detail::SavedHeader read_saved_header(const TensorView& saved, const Options& options);
// The headers this process's forwards wrote, by device and address (the latest at each; a bounded
// set): the backward's validation takes the header from here and compares it with the device's in
// stream order (value_gate.h) instead of waiting for a read. A difference drops the entry.
void remember_saved_header(int device, const void* saved, const detail::SavedHeader& header);
std::optional<detail::SavedHeader> cached_saved_header(int device, const void* saved);
void forget_saved_header(int device, const void* saved);
// Why the kernels cannot run here ("" when they can): no driver, no device, no kernel image
// for this device's architecture.
std::string runtime_unavailable_reason();

// Chunk length used when options.chunk_size is 0, and the largest accepted (larger requests
// are clamped: the in-block tiles hold at most 64 tokens).
inline constexpr int64_t kDefaultChunk = 64;
inline constexpr int64_t kMaxChunk = 64;
// Default caps of the device workspace one call may allocate (options.max_workspace_bytes = 0):
// the forward's (chunk-start states included) and the backward's. The backward needs about 199 MiB
// per (b, h) pair at BDH-8k: 3.5 GiB runs its 32 pairs in 2 batches instead of 4 (22.8 against
// 24.6 ms on the H200), within issue 5's 4 GiB for the backward's memory.
inline constexpr int64_t kDefaultWorkspaceCap = int64_t{2} << 30;
inline constexpr int64_t kDefaultBackwardWorkspaceCap = int64_t{7} << 29;

}  // namespace rhoscan::cuda_detail
