#include "model.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace bdh {
namespace {

torch::Tensor ln(const torch::Tensor& x) { return torch::layer_norm(x, {x.size(-1)}); }

int64_t parse_positive(const std::map<std::string, std::string>& metadata, const std::string& key,
                       const std::string& label) {
  auto it = metadata.find(key);
  if (it == metadata.end())
    throw std::runtime_error(label + ": missing metadata '" + key + "' (not a bdh checkpoint?)");
  try {
    size_t used = 0;
    int64_t value = std::stoll(it->second, &used);
    if (used != it->second.size() || value <= 0) throw std::invalid_argument("range");
    return value;
  } catch (const std::exception&) {
    throw std::runtime_error(label + ": metadata '" + key + "' = '" + it->second +
                             "' is not a positive integer");
  }
}

// y = ReLU(LN(c) · encoder_v) per head: c [N, H, E] -> [N, H, L], one batched product.
torch::Tensor readout_latent(const torch::Tensor& context, const torch::Tensor& encoder_v) {
  auto by_head = ln(context).transpose(0, 1);                  // [H, N, E]
  return torch::relu(torch::bmm(by_head, encoder_v)).transpose(0, 1);  // [N, H, L]
}

}  // namespace

std::map<std::string, std::string> Config::to_metadata() const {
  return {{"bdh.layers", std::to_string(layers)}, {"bdh.heads", std::to_string(heads)},
          {"bdh.latent", std::to_string(latent)}, {"bdh.embd", std::to_string(embd)},
          {"bdh.vocab", std::to_string(vocab)}};
}

Config Config::from_metadata(const std::map<std::string, std::string>& metadata,
                             const std::string& label) {
  Config c;
  c.layers = parse_positive(metadata, "bdh.layers", label);
  c.heads = parse_positive(metadata, "bdh.heads", label);
  c.latent = parse_positive(metadata, "bdh.latent", label);
  c.embd = parse_positive(metadata, "bdh.embd", label);
  c.vocab = parse_positive(metadata, "bdh.vocab", label);
  return c;
}

std::string Config::describe() const {
  std::ostringstream s;
  s << "layers=" << layers << " heads=" << heads << " latent=" << latent << " embd=" << embd
    << " vocab=" << vocab;
  return s.str();
}

ModelImpl::ModelImpl(const Config& c) : config(c) {
  if (c.layers <= 0 || c.heads <= 0 || c.latent <= 0 || c.embd <= 0 || c.vocab <= 0)
    throw std::invalid_argument("bdh model: every size must be positive, got " + c.describe());
  const int64_t H = c.heads, L = c.latent, E = c.embd;
  embed = register_parameter("embed", torch::randn({c.vocab, E}) * 0.02);
  encoder = register_parameter("encoder", torch::randn({H, E, L}) * 0.02);
  encoder_v = register_parameter("encoder_v", torch::randn({H, E, L}) * 0.02);
  decoder = register_parameter("decoder", torch::randn({H * L, E}) * 0.02);
  lm_head = register_parameter("lm_head", torch::randn({E, c.vocab}) * 0.02);
  // Memory time constants spread log-uniformly over 1 ... 1024 tokens in every head:
  // a = exp(-1/tau), stored as its logit so that sigmoid keeps it inside (0, 1).
  auto tau = torch::logspace(0, std::log10(1024.0), L).repeat({c.layers, H, 1});
  auto a = torch::exp(-1.0 / tau);
  decay_logit = register_parameter("decay_logit", torch::log(a / (1 - a)));
}

torch::Tensor ModelImpl::encoder_flat() const {
  return encoder.permute({1, 0, 2}).reshape({config.embd, config.heads * config.latent});
}

std::vector<torch::Tensor> ModelImpl::decayed_parameters() {
  return {embed, encoder, encoder_v, decoder, lm_head};
}

std::vector<RhoState> ModelImpl::zero_states(int64_t batch) const {
  auto opts = embed.options().dtype(torch::kFloat32).requires_grad(false);
  std::vector<RhoState> states;
  for (int64_t i = 0; i < config.layers; ++i)
    states.push_back({torch::zeros({batch, config.heads, config.latent, config.embd}, opts),
                      torch::zeros({batch, config.heads, config.latent}, opts)});
  return states;
}

std::pair<torch::Tensor, std::vector<RhoState>> ModelImpl::forward(
    const torch::Tensor& idx, const std::vector<RhoState>& states, AttentionImpl impl,
    ForwardStats* stats) {
  TORCH_CHECK(idx.dim() == 2, "bdh forward: idx must be [B, T], got ", idx.sizes());
  TORCH_CHECK(states.empty() || states.size() == static_cast<size_t>(config.layers),
              "bdh forward: expected ", config.layers, " layer states, got ", states.size());
  const int64_t B = idx.size(0), T = idx.size(1), H = config.heads, L = config.latent;
  const int64_t E = config.embd;
  auto enc = encoder_flat();
  auto x = ln(torch::embedding(embed, idx));  // [B, T, E]
  std::vector<RhoState> finals;
  double zero_fraction = 0;
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    auto x_ln = ln(x);
    auto q = torch::relu(torch::matmul(x_ln, enc)).view({B, T, H, L});
    if (stats) zero_fraction += (q == 0).to(torch::kFloat64).mean().item<double>();
    auto decay = torch::sigmoid(decay_logit[layer]);
    RhoState initial = states.empty() ? RhoState{} : states[layer];
    auto [context, final_state] = rho_attention(impl, q, x_ln.unsqueeze(2), decay, initial);
    finals.push_back(final_state);
    auto y = readout_latent(context.reshape({B * T, H, E}), encoder_v).reshape({B, T, H, L});
    auto out = torch::matmul((q * y).reshape({B, T, H * L}), decoder);  // [B, T, E]
    x = ln(x + ln(out));
  }
  if (stats) stats->q_zero_fraction = zero_fraction / static_cast<double>(config.layers);
  return {torch::matmul(x, lm_head), finals};
}

std::pair<torch::Tensor, std::vector<RhoState>> ModelImpl::step(
    const torch::Tensor& token, const std::vector<RhoState>& states, AttentionImpl impl) {
  TORCH_CHECK(token.dim() == 1, "bdh step: token must be [B], got ", token.sizes());
  TORCH_CHECK(states.size() == static_cast<size_t>(config.layers), "bdh step: expected ",
              config.layers, " layer states, got ", states.size());
  const int64_t B = token.size(0), H = config.heads, L = config.latent;
  auto enc = encoder_flat();
  auto x = ln(torch::embedding(embed, token));  // [B, E]
  std::vector<RhoState> next;
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    auto x_ln = ln(x);
    auto q = torch::relu(torch::matmul(x_ln, enc)).view({B, H, L});
    auto decay = torch::sigmoid(decay_logit[layer]);
    auto [context, state] = rho_attention_step(impl, q, x_ln.unsqueeze(1), decay, states[layer]);
    next.push_back(state);
    auto y = readout_latent(context, encoder_v);  // [B, H, L]
    auto out = torch::matmul((q * y).reshape({B, H * L}), decoder);
    x = ln(x + ln(out));
  }
  return {torch::matmul(x, lm_head), next};
}

std::vector<RhoState> detach_states(const std::vector<RhoState>& states) {
  std::vector<RhoState> out;
  for (const auto& s : states) out.push_back({s.rho.detach(), s.rho_norm.detach()});
  return out;
}

}  // namespace bdh
