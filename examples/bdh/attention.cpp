#include "attention.h"

#include <stdexcept>

#ifdef BDH_HAVE_RHOSCAN_TORCH
#include "rhoscan/torch.h"
#endif

namespace bdh {
namespace {

constexpr double kEps = 1e-6;  // SPEC.md's eps

RhoState zero_state(const torch::Tensor& q, int64_t E) {
  // q is [B, H, L] or [B, T, H, L]: batch first, heads and latents last.
  const int64_t B = q.size(0), H = q.size(-2), L = q.size(-1);
  auto opts = q.options().dtype(torch::kFloat32);
  return {torch::zeros({B, H, L, E}, opts), torch::zeros({B, H, L}, opts)};
}

// One step of SPEC.md's recurrence; reads the state before writing it (strictly causal).
std::tuple<torch::Tensor, RhoState> naive_step(const torch::Tensor& q_t, const torch::Tensor& v_t,
                                               const torch::Tensor& decay, const RhoState& s) {
  auto w = q_t / (q_t.sum(-1, /*keepdim=*/true) + kEps);                     // [B,H,L]
  auto read = (w / (s.rho_norm + kEps)).unsqueeze(-2);                        // [B,H,1,L]
  auto context = torch::matmul(read, s.rho).squeeze(-2);                      // [B,H,E]
  auto rho = decay.unsqueeze(-1) * s.rho + q_t.unsqueeze(-1) * v_t.unsqueeze(-2);  // [B,H,L,E]
  auto rho_norm = decay * s.rho_norm + q_t;
  return {context, RhoState{rho, rho_norm}};
}

}  // namespace

AttentionImpl parse_attention(const std::string& name) {
  if (name == "naive") return AttentionImpl::naive;
  if (name == "rhoscan") {
    if (!rhoscan_attention_available())
      throw std::invalid_argument(
          "--attention rhoscan: this build has no rhoscan_torch library (use --attention naive)");
    return AttentionImpl::rhoscan;
  }
  throw std::invalid_argument("--attention: expected 'rhoscan' or 'naive', got '" + name + "'");
}

const char* attention_name(AttentionImpl impl) {
  return impl == AttentionImpl::rhoscan ? "rhoscan" : "naive";
}

bool rhoscan_attention_available() {
#ifdef BDH_HAVE_RHOSCAN_TORCH
  return true;
#else
  return false;
#endif
}

AttentionImpl default_attention() {
  return rhoscan_attention_available() ? AttentionImpl::rhoscan : AttentionImpl::naive;
}

std::tuple<torch::Tensor, RhoState> rho_attention(AttentionImpl impl, const torch::Tensor& q,
                                                  const torch::Tensor& v,
                                                  const torch::Tensor& decay,
                                                  const RhoState& state) {
  TORCH_CHECK(q.dim() == 4 && v.dim() == 4 && v.size(2) == 1,
              "bdh::rho_attention: expected q [B,T,H,L] and v [B,T,1,E], got q ", q.sizes(),
              " v ", v.sizes());
#ifdef BDH_HAVE_RHOSCAN_TORCH
  if (impl == AttentionImpl::rhoscan) {
    std::optional<torch::Tensor> rho, rho_norm;
    if (state.defined()) {
      rho = state.rho;
      rho_norm = state.rho_norm;
    }
    auto [context, rho_out, rho_norm_out] =
        rhoscan::pt::rho_attention(q, v, decay, rho, rho_norm, "bthl");
    return {context, RhoState{rho_out, rho_norm_out}};
  }
#endif
  if (impl != AttentionImpl::naive) throw std::invalid_argument("rhoscan attention not built");
  RhoState s = state.defined() ? state : zero_state(q, v.size(-1));
  std::vector<torch::Tensor> contexts;
  contexts.reserve(q.size(1));
  for (int64_t t = 0; t < q.size(1); ++t) {
    auto [c, next] = naive_step(q.select(1, t), v.select(1, t), decay, s);
    contexts.push_back(c);
    s = std::move(next);
  }
  if (contexts.empty())
    return {torch::zeros({q.size(0), 0, q.size(2), v.size(-1)}, q.options()), s};
  return {torch::stack(contexts, 1), s};
}

std::tuple<torch::Tensor, RhoState> rho_attention_step(AttentionImpl impl, const torch::Tensor& q,
                                                       const torch::Tensor& v,
                                                       const torch::Tensor& decay,
                                                       const RhoState& state) {
  TORCH_CHECK(q.dim() == 3 && v.dim() == 3 && v.size(1) == 1 && state.defined(),
              "bdh::rho_attention_step: expected q [B,H,L], v [B,1,E] and a state, got q ",
              q.sizes(), " v ", v.sizes());
#ifdef BDH_HAVE_RHOSCAN_TORCH
  if (impl == AttentionImpl::rhoscan) {
    auto [context, rho, rho_norm] =
        rhoscan::pt::rho_attention_step(q, v, decay, state.rho, state.rho_norm);
    return {context, RhoState{rho, rho_norm}};
  }
#endif
  if (impl != AttentionImpl::naive) throw std::invalid_argument("rhoscan attention not built");
  return naive_step(q, v, decay, state);
}

}  // namespace bdh
