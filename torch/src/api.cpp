// rhoscan::pt (rhoscan/torch.h): the registered ops called through the dispatcher, so that C++
// programs get exactly what Python gets: CPU and CUDA kernels and autograd.
#include "rhoscan/torch.h"

namespace rhoscan::pt {
namespace {

using OptTensor = c10::optional<at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

OptTensor to_c10(const std::optional<at::Tensor>& t) { return t ? OptTensor(*t) : OptTensor(); }

}  // namespace

Triple rho_attention(const at::Tensor& q, const at::Tensor& v, const at::Tensor& decay,
                     const std::optional<at::Tensor>& rho, const std::optional<at::Tensor>& rho_norm,
                     const std::string& layout, int64_t chunk_size, bool save_keys) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("rhoscan::rho_attention", "")
                       .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const OptTensor&, const OptTensor&, c10::string_view, int64_t, bool)>();
  return op.call(q, v, decay, to_c10(rho), to_c10(rho_norm), c10::string_view(layout), chunk_size, save_keys);
}

Triple rho_attention_step(const at::Tensor& q, const at::Tensor& v, const at::Tensor& decay,
                          const at::Tensor& rho, const at::Tensor& rho_norm) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("rhoscan::rho_attention_step", "")
                       .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const OptTensor&, const OptTensor&)>();
  return op.call(q, v, decay, rho, rho_norm);
}

}  // namespace rhoscan::pt
