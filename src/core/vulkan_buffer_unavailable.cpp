// rhoscan::VulkanBuffer in a build without the Vulkan backend: the header is always installed,
// so the class exists, and constructing one says why it cannot work.
#include "rhoscan/vulkan.h"

namespace rhoscan {

struct VulkanBuffer::Impl {};

VulkanBuffer::VulkanBuffer(std::size_t) {
  throw Error(ErrorKind::backend_unavailable,
              "rhoscan::VulkanBuffer: the Vulkan backend is not compiled into this build (configure with -DRHOSCAN_VULKAN=ON)");
}
VulkanBuffer::~VulkanBuffer() = default;
VulkanBuffer::VulkanBuffer(VulkanBuffer&&) noexcept = default;
VulkanBuffer& VulkanBuffer::operator=(VulkanBuffer&&) noexcept = default;
std::size_t VulkanBuffer::size() const noexcept { return 0; }
void* VulkanBuffer::data() const noexcept { return nullptr; }
void VulkanBuffer::upload(const void*, std::size_t, std::size_t) {}
void VulkanBuffer::download(void*, std::size_t, std::size_t) const {}
TensorView VulkanBuffer::view(DType, std::initializer_list<int64_t>, std::size_t) const { return {}; }
TensorView VulkanBuffer::view(DType, std::initializer_list<int64_t>, std::initializer_list<int64_t>, std::size_t) const {
  return {};
}

}  // namespace rhoscan
