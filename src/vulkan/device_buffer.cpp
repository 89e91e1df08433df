// rhoscan::VulkanBuffer and the registry of their address ranges (see device_buffer.h).
//
// Why an address range: TensorView{void* data, strides} is how every entry point describes
// memory, and callers build views by pointer arithmetic (an offset into a buffer, a permuted
// layout). Reserving an inaccessible range of the buffer's size (mmap with PROT_NONE: address
// space only, no memory) gives every buffer addresses that no other buffer or host allocation
// has, so that arithmetic needs no new API and validation's overlap checks keep working; the
// backend maps a pointer back to (buffer, offset) here.
#include "vulkan/device_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "rhoscan/vulkan.h"

namespace rhoscan {

struct VulkanBuffer::Impl {
  void* base = nullptr;       // the reserved address range
  std::size_t reserved = 0;   // its length (at least one page)
  std::size_t size = 0;       // the buffer's size in bytes
  std::unique_ptr<vulkan::Buffer> buffer;
};

namespace vulkan {
namespace {

std::mutex g_registry_mutex;
// start address -> buffer. Heap-held and never destroyed (buffers may outlive static destructors).
std::map<uintptr_t, const VulkanBuffer::Impl*>& registry() {
  static auto* r = new std::map<uintptr_t, const VulkanBuffer::Impl*>();
  return *r;
}

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// Transfers up to this size (the decay's range check reads [H, L] back on every call) reuse one
// staging buffer: allocating host-visible memory is a call into the kernel driver.
constexpr uint64_t kSmallTransfer = uint64_t{4} << 20;

// A host-visible staging buffer and one copy between it and `buffer`, under the context's lock.
void staged_copy(const Buffer& buffer, uint64_t offset, void* host, uint64_t bytes, bool to_device) {
  if (bytes == 0) return;
  Context& ctx = Context::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  static std::unique_ptr<Buffer>& small = *new std::unique_ptr<Buffer>();  // never destroyed (exit)
  std::unique_ptr<Buffer> large;
  if (bytes <= kSmallTransfer && !small) small = std::make_unique<Buffer>(ctx, kSmallTransfer, true);
  if (bytes > kSmallTransfer) large = std::make_unique<Buffer>(ctx, bytes, true);
  Buffer& staging = large ? *large : *small;
  if (to_device) std::memcpy(staging.mapped(), host, bytes);
  Recording rec(ctx);
  if (to_device) rec.copy(staging, 0, buffer, offset, bytes);
  else rec.copy(buffer, offset, staging, 0, bytes);
  rec.submit_and_wait();
  if (!to_device) std::memcpy(host, staging.mapped(), bytes);
}

}  // namespace

std::string find_device_span(const void* p, uint64_t bytes, DeviceSpan* out) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  auto& r = registry();
  auto it = r.upper_bound(a);
  if (it == r.begin() || a >= std::prev(it)->first + std::max<std::size_t>(std::prev(it)->second->reserved, 1))
    return "address " + hex(p) + " is in no live rhoscan::VulkanBuffer (a Vulkan tensor's data must point into one; "
           "was the buffer destroyed?)";
  const VulkanBuffer::Impl& b = *std::prev(it)->second;
  const uint64_t offset = a - std::prev(it)->first;
  if (offset + bytes > b.size)
    return "the view spans bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
           ") of a VulkanBuffer of " + std::to_string(b.size) + " bytes";
  out->buffer = b.buffer.get();
  out->offset = offset;
  return "";
}

uint64_t view_extent_bytes(const TensorView& t) {
  if (t.numel() == 0) return 0;
  uint64_t last = 0;
  for (int i = 0; i < t.rank; ++i) last += static_cast<uint64_t>(t.shape[i] - 1) * static_cast<uint64_t>(t.strides[i]);
  return (last + 1) * dtype_size(t.dtype);
}

void copy_to_device(const Buffer& buffer, uint64_t offset, const void* src, uint64_t bytes) {
  staged_copy(buffer, offset, const_cast<void*>(src), bytes, true);
}

void copy_to_host(const Buffer& buffer, uint64_t offset, void* dst, uint64_t bytes) {
  staged_copy(buffer, offset, dst, bytes, false);
}

}  // namespace vulkan

VulkanBuffer::VulkanBuffer(std::size_t bytes) : impl_(std::make_unique<Impl>()) {
  vulkan::Context& ctx = vulkan::Context::get();  // throws backend_unavailable with the reason
  impl_->size = bytes;
  impl_->reserved = std::max<std::size_t>(bytes, 1);
  void* base = mmap(nullptr, impl_->reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    throw Error(ErrorKind::out_of_memory,
                "rhoscan::VulkanBuffer: cannot reserve an address range of " + std::to_string(bytes) + " bytes");
  impl_->base = base;
  try {
    impl_->buffer = std::make_unique<vulkan::Buffer>(ctx, bytes, false);
  } catch (...) {
    munmap(base, impl_->reserved);
    throw;
  }
  std::lock_guard<std::mutex> lock(vulkan::g_registry_mutex);
  vulkan::registry()[reinterpret_cast<uintptr_t>(base)] = impl_.get();
}

VulkanBuffer::~VulkanBuffer() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(vulkan::g_registry_mutex);
    vulkan::registry().erase(reinterpret_cast<uintptr_t>(impl_->base));
  }
  impl_->buffer.reset();  // a no-op at exit (see vulkan::Context::exiting)
  munmap(impl_->base, impl_->reserved);
}

VulkanBuffer::VulkanBuffer(VulkanBuffer&&) noexcept = default;

VulkanBuffer& VulkanBuffer::operator=(VulkanBuffer&& other) noexcept {
  if (this != &other) {
    VulkanBuffer dead(std::move(*this));
    impl_ = std::move(other.impl_);
  }
  return *this;
}

std::size_t VulkanBuffer::size() const noexcept { return impl_ ? impl_->size : 0; }
void* VulkanBuffer::data() const noexcept { return impl_ ? impl_->base : nullptr; }

namespace {
void check_range(const char* what, std::size_t offset, std::size_t bytes, std::size_t size) {
  if (offset > size || bytes > size - offset)
    throw Error(ErrorKind::invalid_argument, std::string("rhoscan::VulkanBuffer::") + what + ": bytes [" +
                                                 std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                                                 ") are outside the buffer of " + std::to_string(size) + " bytes");
}
}  // namespace

void VulkanBuffer::upload(const void* src, std::size_t bytes, std::size_t offset) {
  check_range("upload", offset, bytes, size());
  if (bytes) vulkan::copy_to_device(*impl_->buffer, offset, src, bytes);
}

void VulkanBuffer::download(void* dst, std::size_t bytes, std::size_t offset) const {
  check_range("download", offset, bytes, size());
  if (bytes) vulkan::copy_to_host(*impl_->buffer, offset, dst, bytes);
}

TensorView VulkanBuffer::view(DType dtype, std::initializer_list<int64_t> shape, std::size_t offset) const {
  char* p = static_cast<char*>(data()) + std::min(offset, size());
  TensorView t = TensorView::contiguous(p, dtype, shape, Device::vulkan);
  check_range("view", offset, vulkan::view_extent_bytes(t), size());
  return t;
}

TensorView VulkanBuffer::view(DType dtype, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides,
                              std::size_t offset) const {
  char* p = static_cast<char*>(data()) + std::min(offset, size());
  TensorView t = TensorView::strided(p, dtype, shape, strides, Device::vulkan);
  for (int i = 0; i < t.rank; ++i)
    if (t.strides[i] < 0 || t.shape[i] < 0)
      throw Error(ErrorKind::invalid_argument, "rhoscan::VulkanBuffer::view: negative size or stride in shape " +
                                                   t.shape_string());
  check_range("view", offset, vulkan::view_extent_bytes(t), size());
  return t;
}

}  // namespace rhoscan
