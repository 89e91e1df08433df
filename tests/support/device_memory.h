// Mirrors host tensors onto a backend's device for tests, and copies results back.
#pragma once

#include <memory>
#include <vector>

#include "support/problem.h"

namespace rhoscan::testing {

// Device copies of a Problem's tensors; views() point at device memory when the backend's
// tensors live on a device, else at the host tensors themselves.
class MirroredProblem {
 public:
  MirroredProblem(Problem& host, Device device);
  ~MirroredProblem();
  MirroredProblem(const MirroredProblem&) = delete;
  MirroredProblem& operator=(const MirroredProblem&) = delete;

  ForwardArgs forward_args() const;
  BackwardArgs backward_args() const;
  // Copies every output tensor back into the host Problem.
  void copy_outputs_to_host();
  // Copies the latest device mirror of `t` back into it.
  void copy_back(const HostTensor& t);
  // A device copy of any host tensor (a new one per call; the host tensor itself on the CPU).
  TensorView mirror(const HostTensor& t) const;

 private:
  Problem& host_;
  Device device_;
  struct Buffer {
    const HostTensor* host;
    void* device;                   // what views point at
    std::shared_ptr<void> owner;    // frees the memory (cudaFree, or a rhoscan::VulkanBuffer)
  };
  mutable std::vector<Buffer> buffers_;
};

// Whether tests can allocate memory on `device` (cuda, or vulkan tensors) in this build and machine.
bool device_memory_available(Device device);

}  // namespace rhoscan::testing
