#include "support/device_memory.h"

#include <cstring>
#include <stdexcept>

#include "rhoscan/vulkan.h"

#ifdef RHOSCAN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rhoscan::testing {
namespace {

// Device memory holding a copy of `bytes` bytes of `src`, and the handle that frees it.
std::shared_ptr<void> device_copy(Device device, const void* src, size_t bytes, void** data) {
  if (device == Device::vulkan) {
    auto buffer = std::make_shared<VulkanBuffer>(bytes);
    buffer->upload(src, bytes);
    *data = buffer->data();
    return buffer;
  }
#ifdef RHOSCAN_HAVE_CUDA
  if (device == Device::cuda) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
    if (cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) throw std::runtime_error("cudaMemcpy failed");
    *data = p;
    return owner;
  }
#endif
  (void)src, (void)bytes, (void)data;
  throw std::runtime_error(std::string("tests cannot allocate on ") + device_name(device));
}

void copy_to_host(Device device, void* dst, const std::shared_ptr<void>& owner, const void* src, size_t bytes) {
  if (device == Device::vulkan) {
    static_cast<const VulkanBuffer*>(owner.get())->download(dst, bytes);
    return;
  }
#ifdef RHOSCAN_HAVE_CUDA
  if (device == Device::cuda) {
    if (cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) throw std::runtime_error("cudaMemcpy failed");
    return;
  }
#endif
  (void)dst, (void)src, (void)bytes;
  throw std::runtime_error("no device copy");
}

}  // namespace

bool device_memory_available(Device device) {
  if (device == Device::cpu) return true;
  if (device == Device::vulkan) return backend_unavailable_reason(Backend::vulkan).empty();
#ifdef RHOSCAN_HAVE_CUDA
  int count = 0;
  return device == Device::cuda && cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

MirroredProblem::MirroredProblem(Problem& host, Device device) : host_(host), device_(device) {}

MirroredProblem::~MirroredProblem() = default;

TensorView MirroredProblem::mirror(const HostTensor& t) const {
  TensorView v = t.view();
  if (device_ == Device::cpu) return v;
  void* d = nullptr;
  std::shared_ptr<void> owner = device_copy(device_, t.data(), t.bytes(), &d);
  buffers_.push_back({&t, d, owner});
  v.data = d;
  v.device = device_;
  return v;
}
ForwardArgs MirroredProblem::forward_args() const {
  ForwardArgs a = host_.forward_args();
  if (device_ == Device::cpu) return a;
  a.q = mirror(host_.q);
  a.v = mirror(host_.v);
  a.decay = mirror(host_.decay);
  if (host_.rho) a.rho = mirror(*host_.rho);
  if (host_.rho_norm) a.rho_norm = mirror(*host_.rho_norm);
  a.context = mirror(host_.context);
  a.rho_out = mirror(host_.rho_out);
  a.rho_norm_out = mirror(host_.rho_norm_out);
  return a;
}

BackwardArgs MirroredProblem::backward_args() const {
  BackwardArgs a = host_.backward_args();
  if (device_ == Device::cpu) return a;
  a.q = mirror(host_.q);
  a.v = mirror(host_.v);
  a.decay = mirror(host_.decay);
  if (host_.rho) a.rho = mirror(*host_.rho);
  if (host_.rho_norm) a.rho_norm = mirror(*host_.rho_norm);
  a.grad_context = mirror(host_.grad_context);
  if (host_.grad_rho_out) a.grad_rho_out = mirror(*host_.grad_rho_out);
  if (host_.grad_rho_norm_out) a.grad_rho_norm_out = mirror(*host_.grad_rho_norm_out);
  a.grad_q = mirror(host_.grad_q);
  a.grad_v = mirror(host_.grad_v);
  a.grad_decay = mirror(host_.grad_decay);
  a.grad_rho = mirror(host_.grad_rho);
  a.grad_rho_norm = mirror(host_.grad_rho_norm);
  return a;
}

void MirroredProblem::copy_back(const HostTensor& t) {
  if (device_ == Device::cpu) return;
  for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it)
    if (it->host == &t) {
      copy_to_host(device_, t.data(), it->owner, it->device, t.bytes());
      return;
    }
}

void MirroredProblem::copy_outputs_to_host() {
  for (const HostTensor* o : {&host_.context, &host_.rho_out, &host_.rho_norm_out, &host_.grad_q, &host_.grad_v,
                              &host_.grad_decay, &host_.grad_rho, &host_.grad_rho_norm})
    copy_back(*o);
}

}  // namespace rhoscan::testing
