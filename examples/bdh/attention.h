// The rho-attention operator as the BDH example calls it, three ways:
//   rhoscan: the library's op (rhoscan::pt, with its own backward), when rhoscan_torch is built;
//   rhoscan-bf16: the same op with q, v and the context in bfloat16 (the states stay float32):
//            the CUDA backend's tensor-core path, where float32 takes its exact FFMA path;
//   chunked: SPEC.md's chunked form in plain libtorch ops (autograd), the fallback for training;
//   naive:   SPEC.md's per-token loop in libtorch ops, the plainest statement, for checking.
#pragma once

#include <string>
#include <tuple>

#include <torch/torch.h>

namespace bdh {

enum class AttentionImpl { rhoscan, rhoscan_bf16, chunked, naive };

AttentionImpl parse_attention(const std::string& name);  // "rhoscan", "rhoscan-bf16", "chunked", "naive"
const char* attention_name(AttentionImpl impl);
bool rhoscan_attention_available();  // built with rhoscan_torch
AttentionImpl default_attention();   // rhoscan when built with it, chunked otherwise

struct RhoState {
  torch::Tensor rho;       // [B, H, L, E]
  torch::Tensor rho_norm;  // [B, H, L]
  bool defined() const { return rho.defined(); }
};

// q [B, T, H, L], v [B, T, 1, E] (the "bthl" layout), decay [H, L] in [0, 1], optional initial
// state. Returns context [B, T, H, E] and the final state; differentiable in all inputs, the
// initial state included, and through the final state (truncated BPTT).
std::tuple<torch::Tensor, RhoState> rho_attention(AttentionImpl impl, const torch::Tensor& q,
                                                  const torch::Tensor& v,
                                                  const torch::Tensor& decay,
                                                  const RhoState& state);

// One token: q [B, H, L], v [B, 1, E], state as above (required). Returns context [B, H, E] and
// the new state. O(H·L·E) work per token, independent of how many tokens came before.
std::tuple<torch::Tensor, RhoState> rho_attention_step(AttentionImpl impl, const torch::Tensor& q,
                                                       const torch::Tensor& v,
                                                       const torch::Tensor& decay,
                                                       const RhoState& state);

}  // namespace bdh
