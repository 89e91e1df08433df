// The Vulkan device and buffer layer (see context.h).
#include "vulkan/context.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rhoscan/rhoscan.h"
#include "vulkan/embedded_shaders.h"

namespace rhoscan::vulkan {

namespace {

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
  }
}

// Thrown while creating the context: becomes the backend's unavailable reason.
struct Unavailable {
  std::string why;
};

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

// Lower is preferred: discrete, integrated, virtual, CPU (lavapipe), other.
int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

uint32_t find_memory_type(const VkPhysicalDeviceMemoryProperties& mem, uint32_t allowed,
                          VkMemoryPropertyFlags want, VkMemoryPropertyFlags nice) {
  int best = -1;
  for (uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    VkMemoryPropertyFlags f = mem.memoryTypes[i].propertyFlags;
    if (!(allowed & (1u << i)) || (f & want) != want) continue;
    if (best < 0 || ((f & nice) == nice && (mem.memoryTypes[best].propertyFlags & nice) != nice))
      best = static_cast<int>(i);
  }
  if (best < 0)
    throw Error(ErrorKind::internal, "rhoscan vulkan: the device has no suitable memory type");
  return static_cast<uint32_t>(best);
}

}  // namespace

void check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  std::string m = std::string("rhoscan vulkan: ") + what + " failed: " + result_name(r);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw Error(ErrorKind::out_of_memory,
                m + " (reduce the batch, or set Options::max_workspace_bytes to work in smaller groups)");
  if (r == VK_ERROR_DEVICE_LOST)
    throw Error(ErrorKind::internal, m + " (the GPU driver reset the device; results are lost)");
  throw Error(ErrorKind::internal, m);
}

// ---- buffers ---------------------------------------------------------------------------------

Buffer::Buffer(Context& ctx, uint64_t bytes, bool host_visible) : ctx_(ctx), bytes_(std::max<uint64_t>(bytes, 16)) {
  const Functions& vk = ctx.vk();
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = bytes_;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vk.vkCreateBuffer(ctx.device(), &info, nullptr, &buffer_), "vkCreateBuffer");
  VkMemoryRequirements req;
  vk.vkGetBufferMemoryRequirements(ctx.device(), buffer_, &req);
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = req.size;
  try {
    alloc.memoryTypeIndex = host_visible
        ? find_memory_type(ctx.memory(), req.memoryTypeBits,
                           VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                           VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
        : find_memory_type(ctx.memory(), req.memoryTypeBits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    VkResult r = vk.vkAllocateMemory(ctx.device(), &alloc, nullptr, &memory_);
    if (r != VK_SUCCESS)
      check(r, ("allocating " + std::to_string(bytes_) + " bytes of " +
                (host_visible ? "host-visible" : "device") + " memory").c_str());
    check(vk.vkBindBufferMemory(ctx.device(), buffer_, memory_, 0), "vkBindBufferMemory");
    if (host_visible) check(vk.vkMapMemory(ctx.device(), memory_, 0, VK_WHOLE_SIZE, 0, &mapped_), "vkMapMemory");
  } catch (...) {
    if (memory_) vk.vkFreeMemory(ctx.device(), memory_, nullptr);
    vk.vkDestroyBuffer(ctx.device(), buffer_, nullptr);
    throw;
  }
}

Buffer::~Buffer() {
  if (Context::exiting()) return;  // leaked on purpose: see Context::exiting()
  const Functions& vk = ctx_.vk();
  if (mapped_) vk.vkUnmapMemory(ctx_.device(), memory_);
  vk.vkDestroyBuffer(ctx_.device(), buffer_, nullptr);
  vk.vkFreeMemory(ctx_.device(), memory_, nullptr);
}

// ---- recording -------------------------------------------------------------------------------

namespace {
constexpr uint32_t kSetsPerPool = 64;
constexpr uint32_t kMaxQueries = 256;
bool profiling() {
  static const bool on = [] {
    const char* e = std::getenv("RHOSCAN_VULKAN_PROFILE");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return on;
}
}  // namespace

uint32_t Recording::mark() {
  if (!queries_ || labels_.size() + 2 >= kMaxQueries) return 0;
  labels_.push_back("");
  const uint32_t slot = static_cast<uint32_t>(labels_.size());
  ctx_.vk().vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, slot);
  return slot;
}

double Recording::between_ms(uint32_t a, uint32_t b) const {
  if (b <= a || b >= stamps_.size()) return 0.0;
  return static_cast<double>(stamps_[b] - stamps_[a]) * ctx_.properties().limits.timestampPeriod * 1e-6;
}

void Recording::stamp(const char* label) {
  // profile stamps leave room for the marks (and the final stamp)
  if (!queries_ || !profiling() || labels_.size() + 8 >= kMaxQueries) return;
  labels_.push_back(label);
  ctx_.vk().vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_,
                                static_cast<uint32_t>(labels_.size()));
}

Recording::Recording(Context& ctx, bool timed) : ctx_(ctx), kit_(ctx.take_kit()) {
  const Functions& vk = ctx.vk();
  cmd_ = kit_.cmd;
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vk.vkBeginCommandBuffer(cmd_, &begin), "vkBeginCommandBuffer");  // resets it (pool flag)
  if (timed && kit_.queries) {
    queries_ = kit_.queries;
    vk.vkCmdResetQueryPool(cmd_, queries_, 0, kMaxQueries);
    vk.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
  }
}

Recording::~Recording() {
  const Functions& vk = ctx_.vk();
  if (!reusable_ || Context::exiting()) return;  // leaked: the device is lost, or the process exits
  for (size_t i = 0; i < pools_used_; ++i) vk.vkResetDescriptorPool(ctx_.device(), kit_.pools[i], 0);
  if (submitted_) vk.vkResetFences(ctx_.device(), 1, &kit_.fence);
  ctx_.give_back(std::move(kit_));
}

RecordingKit Context::take_kit() {
  if (!spare_kits_.empty()) {
    RecordingKit kit = std::move(spare_kits_.back());
    spare_kits_.pop_back();
    return kit;
  }
  RecordingKit kit;
  VkCommandBufferAllocateInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  info.commandPool = command_pool_;
  info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  info.commandBufferCount = 1;
  check(vk_.vkAllocateCommandBuffers(device_, &info, &kit.cmd), "vkAllocateCommandBuffers");
  VkFenceCreateInfo finfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkResult r = vk_.vkCreateFence(device_, &finfo, nullptr, &kit.fence);
  if (r == VK_SUCCESS && timestamps()) {
    VkQueryPoolCreateInfo q{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    q.queryType = VK_QUERY_TYPE_TIMESTAMP;
    q.queryCount = kMaxQueries;
    r = vk_.vkCreateQueryPool(device_, &q, nullptr, &kit.queries);
  }
  if (r != VK_SUCCESS) {
    if (kit.fence) vk_.vkDestroyFence(device_, kit.fence, nullptr);
    vk_.vkFreeCommandBuffers(device_, command_pool_, 1, &kit.cmd);
    check(r, "creating a fence and a timestamp query pool");
  }
  return kit;
}

void Recording::barrier() {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  ctx_.vk().vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void Recording::dispatch(const char* shader, const std::vector<Slice>& buffers,
                         const uint32_t (&push)[kPushWords], uint32_t groups_x, uint32_t groups_y) {
  if (groups_x == 0 || groups_y == 0) return;
  const Functions& vk = ctx_.vk();
  if (pools_used_ == 0 || sets_in_pool_ == kSetsPerPool) {
    if (pools_used_ == kit_.pools.size()) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
      VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
      info.maxSets = kSetsPerPool;
      info.poolSizeCount = 1;
      info.pPoolSizes = &size;
      VkDescriptorPool pool;
      check(vk.vkCreateDescriptorPool(ctx_.device(), &info, nullptr, &pool), "vkCreateDescriptorPool");
      kit_.pools.push_back(pool);
    }
    ++pools_used_;
    sets_in_pool_ = 0;
  }
  VkDescriptorSetLayout layout = ctx_.set_layout();
  VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  alloc.descriptorPool = kit_.pools[pools_used_ - 1];
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &layout;
  VkDescriptorSet set;
  check(vk.vkAllocateDescriptorSets(ctx_.device(), &alloc, &set), "vkAllocateDescriptorSets");
  ++sets_in_pool_;
  VkDescriptorBufferInfo infos[kMaxBindings];
  VkWriteDescriptorSet writes[kMaxBindings];
  for (int i = 0; i < kMaxBindings; ++i) {
    const Slice b = i < static_cast<int>(buffers.size()) && buffers[i].buffer ? buffers[i] : Slice(&ctx_.dummy());
    infos[i] = {b.buffer->handle(), b.offset, b.range};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vk.vkUpdateDescriptorSets(ctx_.device(), kMaxBindings, writes, 0, nullptr);
  vk.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_.pipeline(shader));
  vk.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_.pipeline_layout(), 0, 1, &set, 0, nullptr);
  vk.vkCmdPushConstants(cmd_, ctx_.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push), push);
  vk.vkCmdDispatch(cmd_, groups_x, groups_y, 1);
  barrier();
  stamp(shader);
}

void Recording::dispatch_linear(const char* shader, const std::vector<Slice>& buffers,
                                uint32_t (&push)[kPushWords], uint64_t groups) {
  if (groups == 0) return;
  const uint64_t x = std::min<uint64_t>(groups, 65535), y = (groups + x - 1) / x;
  if (y > 65535)
    throw Error(ErrorKind::unsupported, "rhoscan vulkan: " + std::to_string(groups) +
                                            " workgroups exceed the grid limit (65535 x 65535)");
  push[11] = static_cast<uint32_t>(groups);
  dispatch(shader, buffers, push, static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

void Recording::copy(const Buffer& src, uint64_t src_offset, const Buffer& dst, uint64_t dst_offset,
                     uint64_t bytes) {
  if (bytes == 0) return;
  VkBufferCopy region{src_offset, dst_offset, bytes};
  ctx_.vk().vkCmdCopyBuffer(cmd_, src.handle(), dst.handle(), 1, &region);
  barrier();
  stamp("copy");
}

void Recording::fill_zero(const Buffer& dst, uint64_t bytes) {
  if (bytes == 0) return;
  ctx_.vk().vkCmdFillBuffer(cmd_, dst.handle(), 0, bytes, 0u);
  barrier();
  stamp("fill");
}

double Recording::submit_and_wait() {
  const Functions& vk = ctx_.vk();
  const uint32_t last = static_cast<uint32_t>(labels_.size()) + 1;
  if (queries_) vk.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, last);
  check(vk.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd_;
  VkResult r = vk.vkQueueSubmit(ctx_.queue(), 1, &submit, kit_.fence);
  if (r == VK_SUCCESS) r = vk.vkWaitForFences(ctx_.device(), 1, &kit_.fence, VK_TRUE, UINT64_MAX);
  submitted_ = true;
  reusable_ = r == VK_SUCCESS;
  check(r, "running the compute work (vkQueueSubmit / vkWaitForFences)");
  if (!queries_) return 0.0;
  std::vector<uint64_t>& stamps = stamps_;
  stamps.assign(last + 1, 0);
  check(vk.vkGetQueryPoolResults(ctx_.device(), queries_, 0, last + 1, stamps.size() * sizeof(uint64_t), stamps.data(),
                                 sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  const double ms_per_tick = ctx_.properties().limits.timestampPeriod * 1e-6;
  for (size_t i = 0; i < labels_.size(); ++i)  // grouped by label would hide the order; print each
    if (profiling() && !labels_[i].empty())
      std::fprintf(stderr, "[rhoscan vulkan profile] %-18s %9.3f ms\n", labels_[i].c_str(),
                 static_cast<double>(stamps[i + 1] - stamps[i]) * ms_per_tick);
  return static_cast<double>(stamps[last] - stamps[0]) * ms_per_tick;
}

// ---- the context -----------------------------------------------------------------------------

namespace {
std::once_flag g_once;
Context* g_context = nullptr;  // never destroyed: tearing Vulkan down from static destructors
                               // races the driver's own (the process exit frees everything)
std::string g_unavailable;
std::atomic<bool> g_exiting{false};
void mark_exiting() { g_exiting = true; }
}  // namespace

bool Context::exiting() { return g_exiting; }

Context& Context::get() {
  std::call_once(g_once, [] {
    Context* ctx = new Context();
    try {
      ctx->create();
      g_context = ctx;
    } catch (const Unavailable& u) {
      g_unavailable = u.why;
    } catch (const Error& e) {
      g_unavailable = e.what();
    }
  });
  if (!g_context) throw Error(ErrorKind::backend_unavailable, "rhoscan vulkan: " + g_unavailable);
  return *g_context;
}

std::string Context::unavailable_reason() {
  try {
    get();
    return "";
  } catch (const Error&) {
    return g_unavailable;
  }
}

Context::~Context() = default;

uint64_t Context::max_buffer_bytes() const { return properties_.limits.maxStorageBufferRange; }

bool Context::loop_limited() const {
  return properties_.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU &&
         lower(properties_.deviceName).find("llvmpipe") != std::string::npos;
}

std::string Context::device_description() const {
  return std::string(properties_.deviceName) + " (" + type_name(properties_.deviceType) + ", Vulkan " +
         std::to_string(VK_API_VERSION_MAJOR(properties_.apiVersion)) + "." +
         std::to_string(VK_API_VERSION_MINOR(properties_.apiVersion)) + ")";
}

void Context::create() {
  loader_ = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!loader_) {
    const char* e = dlerror();
    throw Unavailable{std::string("no Vulkan loader: libvulkan.so.1 could not be opened (") +
                      (e ? e : "?") + "); install the Vulkan loader (Debian: libvulkan1) and a driver"};
  }
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(loader_, "vkGetInstanceProcAddr"));
  if (!gipa) throw Unavailable{"no Vulkan loader: libvulkan.so.1 has no vkGetInstanceProcAddr"};
  auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa(nullptr, "vkCreateInstance"));
  if (!create_instance) throw Unavailable{"the Vulkan loader does not provide vkCreateInstance"};

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "rhoscan";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  VkResult r = create_instance(&ici, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    throw Unavailable{"no Vulkan driver: the loader found no driver (ICD) supporting Vulkan 1.1 "
                      "(install mesa-vulkan-drivers or the GPU vendor's driver)"};
  if (r != VK_SUCCESS) throw Unavailable{std::string("vkCreateInstance failed: ") + result_name(r)};
#define RHOSCAN_VK_LOAD(name)                                                          \
  vk_.name = reinterpret_cast<PFN_##name>(gipa(instance_, #name));                      \
  if (!vk_.name) throw Unavailable{"the Vulkan loader does not provide " #name};
  RHOSCAN_VK_FUNCTIONS(RHOSCAN_VK_LOAD)
#undef RHOSCAN_VK_LOAD

  uint32_t count = 0;
  vk_.vkEnumeratePhysicalDevices(instance_, &count, nullptr);
  std::vector<VkPhysicalDevice> devices(count);
  if (count) vk_.vkEnumeratePhysicalDevices(instance_, &count, devices.data());
  devices.resize(count);
  if (devices.empty()) throw Unavailable{"no Vulkan device: the driver reports no physical devices"};

  struct Candidate {
    VkPhysicalDevice device;
    VkPhysicalDeviceProperties props;
    int family;  // a compute queue family, or -1
  };
  std::vector<Candidate> all;
  std::string listing;
  for (uint32_t i = 0; i < count; ++i) {
    Candidate c{devices[i], {}, -1};
    vk_.vkGetPhysicalDeviceProperties(devices[i], &c.props);
    uint32_t nf = 0;
    vk_.vkGetPhysicalDeviceQueueFamilyProperties(devices[i], &nf, nullptr);
    std::vector<VkQueueFamilyProperties> families(nf);
    vk_.vkGetPhysicalDeviceQueueFamilyProperties(devices[i], &nf, families.data());
    for (uint32_t f = 0; f < nf && c.family < 0; ++f)
      if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) c.family = static_cast<int>(f);
    listing += (i ? ", " : "") + std::to_string(i) + ": " + c.props.deviceName + " (" +
               type_name(c.props.deviceType) + ")";
    all.push_back(c);
  }

  int chosen = -1;
  const char* env = std::getenv("RHOSCAN_VULKAN_DEVICE");
  if (env && *env) {
    std::string want = env;
    bool digits = std::all_of(want.begin(), want.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
    if (digits) {
      unsigned long idx = std::strtoul(want.c_str(), nullptr, 10);
      if (want.size() > 6 || idx >= all.size())
        throw Unavailable{"RHOSCAN_VULKAN_DEVICE=" + want + " is not a device index; the devices are " + listing};
      chosen = static_cast<int>(idx);
    } else {
      for (size_t i = 0; i < all.size() && chosen < 0; ++i)
        if (lower(all[i].props.deviceName).find(lower(want)) != std::string::npos) chosen = static_cast<int>(i);
      if (chosen < 0)
        throw Unavailable{"RHOSCAN_VULKAN_DEVICE=" + want + " matches no device name; the devices are " + listing};
    }
    if (all[chosen].family < 0)
      throw Unavailable{std::string("no compute queue: device ") + all[chosen].props.deviceName +
                        " (chosen by RHOSCAN_VULKAN_DEVICE) has no compute queue family"};
  } else {
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].family >= 0 &&
          (chosen < 0 || type_rank(all[i].props.deviceType) < type_rank(all[chosen].props.deviceType)))
        chosen = static_cast<int>(i);
    if (chosen < 0) throw Unavailable{"no compute queue: no Vulkan device has a compute queue family (" + listing + ")"};
  }
  const Candidate& pick = all[chosen];
  if (pick.props.apiVersion < VK_API_VERSION_1_1)
    throw Unavailable{std::string("device ") + pick.props.deviceName + " supports only Vulkan 1.0; 1.1 is needed"};
  physical_ = pick.device;
  properties_ = pick.props;
  queue_family_ = static_cast<uint32_t>(pick.family);
  vk_.vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
  {
    uint32_t nf = 0;
    vk_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nf, nullptr);
    std::vector<VkQueueFamilyProperties> families(nf);
    vk_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nf, families.data());
    if (properties_.limits.timestampPeriod > 0) timestamp_valid_bits_ = families[queue_family_].timestampValidBits;
  }

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  r = vk_.vkCreateDevice(physical_, &dci, nullptr, &device_);
  if (r != VK_SUCCESS)
    throw Unavailable{std::string("vkCreateDevice failed on ") + properties_.deviceName + ": " + result_name(r)};
#define RHOSCAN_VK_LOAD(name)                                                          \
  vk_.name = reinterpret_cast<PFN_##name>(vk_.vkGetDeviceProcAddr(device_, #name));     \
  if (!vk_.name) throw Unavailable{"the Vulkan driver does not provide " #name};
  RHOSCAN_VK_DEVICE_FUNCTIONS(RHOSCAN_VK_LOAD)
#undef RHOSCAN_VK_LOAD
  vk_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  check(vk_.vkCreateCommandPool(device_, &pci, nullptr, &command_pool_), "vkCreateCommandPool");

  VkDescriptorSetLayoutBinding bindings[kMaxBindings];
  for (int i = 0; i < kMaxBindings; ++i)
    bindings[i] = {static_cast<uint32_t>(i), VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo lci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  lci.bindingCount = kMaxBindings;
  lci.pBindings = bindings;
  check(vk_.vkCreateDescriptorSetLayout(device_, &lci, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushWords * sizeof(uint32_t)};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  plci.setLayoutCount = 1;
  plci.pSetLayouts = &set_layout_;
  plci.pushConstantRangeCount = 1;
  plci.pPushConstantRanges = &range;
  check(vk_.vkCreatePipelineLayout(device_, &plci, nullptr, &pipeline_layout_), "vkCreatePipelineLayout");
  dummy_ = std::make_unique<Buffer>(*this, 16, false);
  std::atexit(mark_exiting);  // after the driver's own exit handlers: see exiting()
}

VkPipeline Context::pipeline(const char* shader) {
  auto it = pipelines_.find(shader);
  if (it != pipelines_.end()) return it->second.pipeline;
  const EmbeddedShader* found = nullptr;
  for (const EmbeddedShader& s : embedded_shaders())
    if (std::strcmp(s.name, shader) == 0) found = &s;
  if (!found) throw Error(ErrorKind::internal, std::string("rhoscan vulkan: no embedded shader ") + shader);
  VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mci.codeSize = found->word_count * sizeof(uint32_t);
  mci.pCode = found->words;
  VkShaderModule module;
  check(vk_.vkCreateShaderModule(device_, &mci, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = module;
  cpi.stage.pName = "main";
  cpi.layout = pipeline_layout_;
  VkPipeline pipeline;
  VkResult r = vk_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipeline);
  vk_.vkDestroyShaderModule(device_, module, nullptr);
  check(r, (std::string("building the compute pipeline for ") + shader).c_str());
  pipelines_[shader].pipeline = pipeline;
  return pipeline;
}

}  // namespace rhoscan::vulkan
