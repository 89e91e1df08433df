// rhoscan: device-resident memory for the Vulkan backend.
//
// A VulkanBuffer owns a storage buffer on the Vulkan backend's device (the one
// RHOSCAN_VULKAN_DEVICE or the default choice picks; see docs/VULKAN.md). TensorViews over it
// have Device::vulkan and go to forward / backward / step like CUDA pointers do: nothing is
// copied between host and device. Tensors on the Vulkan device must be float32 (q, v, context,
// decay, states and gradients); every layout that TensorView describes is accepted.
//
// data() is an address that stands for the buffer: the buffer reserves an address range of its
// size (inaccessible, never dereferenced) so that pointer arithmetic on views works as for host
// memory, and the backend maps [data(), data() + size()) back to the buffer. Do not read or write
// through it; use upload() and download().
//
// Lifetime: a view does not keep its buffer alive. A call with a view of a destroyed buffer is an
// Error (its address range is no longer registered) unless a newer buffer has since reserved the
// same addresses, which the operating system may do: destroy buffers only after their last use.
// Buffers destroyed while the process exits (static objects) leak their device memory on
// purpose: the GPU driver may already be torn down by then, and the exit frees it anyway.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "rhoscan/rhoscan.h"

namespace rhoscan {

class VulkanBuffer {
 public:
  // Allocates `bytes` of device memory. Throws Error(backend_unavailable) when the Vulkan
  // backend is not compiled in or has no device (with the reason), Error(out_of_memory) when the
  // device cannot hold it.
  explicit VulkanBuffer(std::size_t bytes);
  ~VulkanBuffer();
  VulkanBuffer(VulkanBuffer&&) noexcept;
  VulkanBuffer& operator=(VulkanBuffer&&) noexcept;
  VulkanBuffer(const VulkanBuffer&) = delete;
  VulkanBuffer& operator=(const VulkanBuffer&) = delete;

  std::size_t size() const noexcept;  // 0 after being moved from
  void* data() const noexcept;        // the buffer's address range (never dereference it)

  // Copies `bytes` between host memory and the buffer at byte `offset`; waits for the copy.
  // Throws Error(invalid_argument) when [offset, offset + bytes) is outside the buffer.
  void upload(const void* src, std::size_t bytes, std::size_t offset = 0);
  void download(void* dst, std::size_t bytes, std::size_t offset = 0) const;

  // A view of the buffer's memory from byte `offset`: row-major, or with explicit strides (in
  // elements). Throws Error(invalid_argument) when the view's extent passes the buffer's end.
  TensorView view(DType dtype, std::initializer_list<int64_t> shape, std::size_t offset = 0) const;
  TensorView view(DType dtype, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides,
                  std::size_t offset = 0) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rhoscan
