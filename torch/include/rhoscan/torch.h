// rhoscan for libtorch programs: the operator on torch::Tensor, with autograd.
//
// These call the ops registered as torch.ops.rhoscan.* (TORCH_LIBRARY(rhoscan, ...)), so they
// work on CPU and CUDA tensors and are differentiable with respect to q, v, decay and both
// initial states; the final states' gradients (truncated BPTT) flow too.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include <torch/torch.h>

namespace rhoscan::pt {

// q [B,H,T,L] (or [B,T,H,L] with layout "bthl"), v [B,Hv,T,E] (or [B,T,Hv,E]),
// decay [H,L] or [1,H,L], rho [B,H,L,E], rho_norm [B,H,L] (optional initial state).
// Returns (context [B,H,T,E] (or [B,T,H,E]), final rho, final rho_norm).
// Errors raise c10::Error whose message is the library's (argument names and shapes).
// save_keys: on CUDA with gradients, the forward also keeps the normalised keys for the backward
// (twice q's bytes for 16-bit q, held until the backward), which then skips its normaliser pass.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rho_attention(
    const at::Tensor& q, const at::Tensor& v, const at::Tensor& decay,
    const std::optional<at::Tensor>& rho = std::nullopt,
    const std::optional<at::Tensor>& rho_norm = std::nullopt, const std::string& layout = "bhtl",
    int64_t chunk_size = 0, bool save_keys = false);

// One token: q [B,H,L], v [B,Hv,E]; returns (context [B,H,E], new rho, new rho_norm).
// rho / rho_norm are not modified (the functional form; use the returned tensors).
std::tuple<at::Tensor, at::Tensor, at::Tensor> rho_attention_step(
    const at::Tensor& q, const at::Tensor& v, const at::Tensor& decay, const at::Tensor& rho,
    const at::Tensor& rho_norm);

}  // namespace rhoscan::pt
