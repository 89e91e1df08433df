// Device workspace of one call: one stream-ordered allocation (cudaMallocAsync, so repeated
// calls reuse the pool's memory), carved into aligned float buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common.cuh"

namespace rhoscan::cuda_detail {

class Workspace {
 public:
  // Bytes of `count` floats (or doubles) rounded up to the carving alignment.
  static int64_t floats(int64_t count) { return round_up(count * 4); }
  static int64_t doubles(int64_t count) { return round_up(count * 8); }
  template <typename X>
  static int64_t bytes(int64_t count) { return round_up(count * static_cast<int64_t>(sizeof(X))); }

  Workspace(int64_t bytes, cudaStream_t stream);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  float* take_floats(int64_t count) { return static_cast<float*>(take(floats(count))); }
  double* take_doubles(int64_t count) { return static_cast<double*>(take(doubles(count))); }
  template <typename X>
  X* take_array(int64_t count) { return static_cast<X*>(take(bytes<X>(count))); }
  void reset() { used_ = 0; }

 private:
  static int64_t round_up(int64_t b) { return (b + 255) / 256 * 256; }
  void* take(int64_t bytes);
  char* base_ = nullptr;
  int64_t bytes_ = 0, used_ = 0;
  cudaStream_t stream_;
};

// The cap of options.max_workspace_bytes (0: the direction's default, kDefault*WorkspaceCap of ops.h).
int64_t workspace_cap(int64_t option, int64_t backend_default);

// Sets the CUDA device of the tensors for the lifetime of the guard, then restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace rhoscan::cuda_detail
