// The Vulkan device and buffer layer of the Vulkan backend: small enough to read in one sitting.
//
// The loader (libvulkan.so.1) is opened with dlopen on first use, so librhoscan loads on
// machines without Vulkan; every entry point is fetched through vkGetInstanceProcAddr /
// vkGetDeviceProcAddr. One process-wide Context holds the instance, the chosen physical device
// (a discrete GPU first; RHOSCAN_VULKAN_DEVICE picks by index or by a substring of the name),
// one compute queue, and one compute pipeline per shader, built on first use and cached.
// Every failure becomes rhoscan::Error with a message that says what failed.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rhoscan::vulkan {

// Every Vulkan function the backend calls, loaded at run time.
struct Functions {
#define RHOSCAN_VK_FUNCTIONS(X)                                                                    \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)              \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)               \
  X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define RHOSCAN_VK_DEVICE_FUNCTIONS(X)                                                             \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)                      \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory)       \
  X(vkMapMemory) X(vkUnmapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule)                 \
  X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout)         \
  X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)                      \
  X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) X(vkResetDescriptorPool)                    \
  X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateCommandPool)                     \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers)                      \
  X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets)    \
  X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) \
  X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkCreateQueryPool) X(vkDestroyQueryPool)         \
  X(vkGetQueryPoolResults) X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)
#define RHOSCAN_VK_DECLARE(name) PFN_##name name = nullptr;
  RHOSCAN_VK_FUNCTIONS(RHOSCAN_VK_DECLARE)
  RHOSCAN_VK_DEVICE_FUNCTIONS(RHOSCAN_VK_DECLARE)
#undef RHOSCAN_VK_DECLARE
};

// Throws rhoscan::Error for a failed call: out_of_memory for the two out-of-memory results,
// internal (with the result's name) for the rest, e.g. VK_ERROR_DEVICE_LOST.
void check(VkResult result, const char* what);

// The number of push-constant words every shader declares (shaders/common.glsl).
inline constexpr int kPushWords = 14;
// Storage-buffer bindings in every pipeline's layout (unused ones get a dummy buffer).
inline constexpr int kMaxBindings = 11;

class Context;

// A storage buffer in device memory; host-visible (mapped) when made for transfers.
class Buffer {
 public:
  Buffer(Context& ctx, uint64_t bytes, bool host_visible);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  VkBuffer handle() const { return buffer_; }
  uint64_t bytes() const { return bytes_; }
  float* mapped() const { return static_cast<float*>(mapped_); }  // null unless host_visible

 private:
  Context& ctx_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  uint64_t bytes_ = 0;
  void* mapped_ = nullptr;
};

// A buffer bound to a shader from byte `offset` (a multiple of the device's
// minStorageBufferOffsetAlignment) for `range` bytes; a plain Buffer* binds all of it.
struct Slice {
  Slice(const Buffer* b = nullptr) : buffer(b) {}  // NOLINT: implicit, so that {b["q"], nullptr} works
  Slice(const Buffer* b, uint64_t off, uint64_t bytes) : buffer(b), offset(off), range(bytes) {}
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;
  uint64_t range = VK_WHOLE_SIZE;
};

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
};

// The objects a recording needs (command buffer, fence, timestamp queries, descriptor pools),
// kept by the context for the next recording: creating each is a call into the kernel driver,
// slow under virtualisation (the H200 machine runs gVisor) and paid on every call otherwise.
struct RecordingKit {
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkQueryPool queries = VK_NULL_HANDLE;  // null when the queue has no timestamps
  std::vector<VkDescriptorPool> pools;
};

// One command buffer being recorded: dispatches separated by full compute barriers, buffer
// copies, then submit() and wait. Descriptor sets come from a pool owned by the recording.
class Recording {
 public:
  explicit Recording(Context& ctx, bool timed = false);
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  // Binds buffers[i] at binding i, pushes `push`, dispatches groups_x * groups_y workgroups,
  // then a barrier so that the next command sees the results.
  void dispatch(const char* shader, const std::vector<Slice>& buffers,
                const uint32_t (&push)[kPushWords], uint32_t groups_x, uint32_t groups_y);
  // A 1-D grid of `groups` workgroups spread over x and y (each at most 65535); the shader
  // recovers the index with linear_group() and ignores those >= push[11] (`total`).
  void dispatch_linear(const char* shader, const std::vector<Slice>& buffers,
                       uint32_t (&push)[kPushWords], uint64_t groups);
  void copy(const Buffer& src, uint64_t src_offset, const Buffer& dst, uint64_t dst_offset,
            uint64_t bytes);
  void fill_zero(const Buffer& dst, uint64_t bytes);  // the first `bytes` (a multiple of 4)
  // Submits, waits for completion, and returns the device time between begin and end in
  // milliseconds when timed (else 0). With RHOSCAN_VULKAN_PROFILE=1 in the environment, a timed
  // recording also prints each command's device time to stderr.
  double submit_and_wait();
  // A timestamp at this point of a timed recording (slot 0 when untimed); after submit_and_wait,
  // between_ms(a, b) is the device time between two marks.
  uint32_t mark();
  double between_ms(uint32_t a, uint32_t b) const;

 private:
  void barrier();
  Context& ctx_;
  RecordingKit kit_;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkQueryPool queries_ = VK_NULL_HANDLE;  // kit_.queries when timed
  size_t pools_used_ = 0;                 // of kit_.pools
  std::vector<std::string> labels_;  // one per timestamp after the first: a command's name or "" (a mark)
  std::vector<uint64_t> stamps_;
  void stamp(const char* label);
  uint32_t sets_in_pool_ = 0;
  bool submitted_ = false;
  bool reusable_ = true;  // false after a failed submit: the kit is not given back
};

class Context {
 public:
  // The process-wide context, created on first call. Throws Error(backend_unavailable) with the
  // reason (no loader, no device, no compute queue, a bad RHOSCAN_VULKAN_DEVICE) every time
  // when creation failed.
  static Context& get();
  // "" when get() succeeds, else the reason it throws.
  static std::string unavailable_reason();
  ~Context();

  const Functions& vk() const { return vk_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  VkCommandPool command_pool() const { return command_pool_; }
  VkPipelineLayout pipeline_layout() const { return pipeline_layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  const VkPhysicalDeviceProperties& properties() const { return properties_; }
  const VkPhysicalDeviceMemoryProperties& memory() const { return memory_; }
  const Buffer& dummy() const { return *dummy_; }
  bool timestamps() const { return timestamp_valid_bits_ != 0; }
  // The largest buffer this device binds as one storage buffer.
  uint64_t max_buffer_bytes() const;
  std::string device_description() const;
  // Mesa's llvmpipe (lavapipe): ends a shader invocation's loops after 65535 iterations in total.
  bool loop_limited() const;
  // The pipeline for a shader of embedded_shaders(), built on first use.
  VkPipeline pipeline(const char* shader);
  // Serialises use of the queue, the pipeline cache and the recording kits between threads.
  std::mutex& mutex() { return mutex_; }
  // A recording kit, spare or new (under mutex()); give_back returns one whose fence is unsignaled
  // and whose descriptor pools are reset.
  RecordingKit take_kit();
  void give_back(RecordingKit kit) { spare_kits_.push_back(std::move(kit)); }
  // True once the process has begun to exit (set by an atexit handler registered right after the
  // driver was loaded, so it runs before the exit-time destructors of every object that existed
  // before the driver). Vulkan objects destroyed after that are leaked: the driver's own teardown
  // may already have run (NVIDIA's driver crashes the exiting process otherwise).
  static bool exiting();

 private:
  Context() = default;
  void create();
  void* loader_ = nullptr;
  Functions vk_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties properties_{};
  VkPhysicalDeviceMemoryProperties memory_{};
  uint32_t queue_family_ = 0;
  uint32_t timestamp_valid_bits_ = 0;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  std::map<std::string, Pipeline> pipelines_;
  std::unique_ptr<Buffer> dummy_;
  std::vector<RecordingKit> spare_kits_;
  std::mutex mutex_;
};

}  // namespace rhoscan::vulkan
