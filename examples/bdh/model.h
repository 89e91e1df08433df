// BDH-GPU (the BDH paper's tensor form, pathwaycom/bdh's bdh.py) with its attention replaced by
// the rho-attention operator, as burn_dragon's RWKV8 variant does:
//
//   x = LN(embed(token))
//   per layer:  x_ln = LN(x)
//               q    = ReLU(x_ln · encoder)                    [B,T,H,L]  sparse, non-negative
//               c    = rho_attention(q, v = x_ln, a)           [B,T,H,E]  one shared value head
//               y    = ReLU(LN(c) · encoder_v)                 [B,T,H,L]
//               x    = LN(x + LN((q ⊙ y) · decoder))
//   logits = x · lm_head
//
// with a = sigmoid(decay_logit[layer]) of shape [H, L]. encoder, encoder_v and decoder are shared
// by all layers (as in bdh.py); each layer has its own decay. LayerNorms have no parameters.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "attention.h"

namespace bdh {

struct Config {
  int64_t layers = 4;
  int64_t heads = 4;    // H
  int64_t latent = 64;  // L: neurons per head
  int64_t embd = 64;    // E
  int64_t vocab = 256;  // bytes

  std::map<std::string, std::string> to_metadata() const;
  static Config from_metadata(const std::map<std::string, std::string>& metadata,
                              const std::string& label);
  std::string describe() const;  // "layers=4 heads=4 latent=64 embd=64 vocab=256"
};

// Per-forward statistics that BDH is known for.
struct ForwardStats {
  double q_zero_fraction = 0;  // fraction of exact zeros in q, averaged over layers
};

class ModelImpl : public torch::nn::Module {
 public:
  explicit ModelImpl(const Config& config);

  // idx [B, T] (int64). `states` holds one state per layer, or is empty (fresh sequences).
  // Returns logits [B, T, vocab] and each layer's final state.
  std::pair<torch::Tensor, std::vector<RhoState>> forward(const torch::Tensor& idx,
                                                          const std::vector<RhoState>& states,
                                                          AttentionImpl impl,
                                                          ForwardStats* stats = nullptr);

  // One token per sequence: token [B] (int64), states as returned by zero_states / forward.
  // Returns logits [B, vocab] and the new states; O(1) in the number of tokens seen.
  std::pair<torch::Tensor, std::vector<RhoState>> step(const torch::Tensor& token,
                                                       const std::vector<RhoState>& states,
                                                       AttentionImpl impl);

  std::vector<RhoState> zero_states(int64_t batch) const;

  // Parameters with weight decay (the matrices) and without (the decays).
  std::vector<torch::Tensor> decayed_parameters();

  const Config config;
  torch::Tensor embed;        // [vocab, E]
  torch::Tensor encoder;      // [H, E, L]
  torch::Tensor encoder_v;    // [H, E, L]
  torch::Tensor decoder;      // [H*L, E]
  torch::Tensor lm_head;      // [E, vocab]
  torch::Tensor decay_logit;  // [layers, H, L]

 private:
  torch::Tensor encoder_flat() const;  // [E, H*L]
};
TORCH_MODULE(Model);

// Detaches every state (the truncation point of truncated BPTT).
std::vector<RhoState> detach_states(const std::vector<RhoState>& states);

}  // namespace bdh
