// Vulkan tensors: the registry that maps the address ranges of rhoscan::VulkanBuffer
// (include/rhoscan/vulkan.h) back to their device buffers, and host <-> buffer copies.
#pragma once

#include <cstdint>
#include <string>

#include "rhoscan/rhoscan.h"
#include "vulkan/context.h"

namespace rhoscan::vulkan {

// Where a Vulkan tensor's memory lives: its buffer and the byte offset of the view's origin.
struct DeviceSpan {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;
};

// The live VulkanBuffer whose address range holds bytes [p, p + bytes): "" with *out set, or
// why not (in no live buffer; past the end of the one that holds p).
std::string find_device_span(const void* p, uint64_t bytes, DeviceSpan* out);

// Bytes from the view's origin to the end of its last element (0 when it has no elements).
uint64_t view_extent_bytes(const TensorView& t);

// Copies between host memory and `buffer` at byte `offset`, waiting for the copy.
void copy_to_device(const Buffer& buffer, uint64_t offset, const void* src, uint64_t bytes);
void copy_to_host(const Buffer& buffer, uint64_t offset, void* dst, uint64_t bytes);

}  // namespace rhoscan::vulkan
