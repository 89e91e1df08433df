// The rho-attention operator as the BDH example calls it: either the rhoscan library's op
// (rhoscan::pt, autograd included) or a per-token pure-libtorch loop written from SPEC.md, kept
// to check the library against and to run where rhoscan_torch is not built.
#pragma once

#include <string>
#include <tuple>

#include <torch/torch.h>

namespace bdh {

enum class AttentionImpl { rhoscan, naive };

AttentionImpl parse_attention(const std::string& name);  // "rhoscan" or "naive"
const char* attention_name(AttentionImpl impl);
bool rhoscan_attention_available();  // built with rhoscan_torch
AttentionImpl default_attention();   // rhoscan when built with it, naive otherwise

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
