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


// SPEC.md's chunked form with chunks of C tokens. Within a chunk (positions i, j < n), with the
// state R0, N0 at its start and P[k] = a^k:
//   N_i   = P[i] N0 + sum_{j<i} P[i-1-j] q_j                       (the normaliser before i)
//   c_i   = (q'_i P[i]) · R0 + sum_{j<i} (sum_l q'_i[l] P[i-1-j][l] q_j[l]) v_j,
//           q'_i = w_i / (N_i + eps)
//   R_end = P[n] R0 + sum_j P[n-1-j] q_j ⊗ v_j,   N_end = P[n] N0 + sum_j P[n-1-j] q_j
// The intra-chunk sums become matrix products through P[i-1-j] = a^i · a^-(j+1), exact while
// a^-C stays finite and a^C normal in float32: for C = 8, a >= 1e-4 (a^-8 <= 1e32). The model's
// decays (sigmoid of a logit starting above -1) live far above that; a call with any smaller
// decay runs the per-token loop instead (a floor would not do: the read divides R by N, so
// even tiny decayed terms matter where the undecayed ones are zero).
constexpr int64_t kChunk = 8;
constexpr double kMinFactoredDecay = 1e-4;

std::tuple<torch::Tensor, RhoState> chunked_forward(const torch::Tensor& q_bthl,
                                                    const torch::Tensor& v_bt1e,
                                                    const torch::Tensor& decay, RhoState s) {
  auto q = q_bthl.permute({0, 2, 1, 3});  // [B,H,T,L]
  auto v = v_bt1e.permute({0, 2, 1, 3});  // [B,1,T,E]
  const int64_t T = q.size(2), C = kChunk;
  auto ones = torch::ones_like(decay).unsqueeze(0);
  // powers[k] = a^k and inverse[k] = a^-k for k = 0..C, by running products.
  auto powers = torch::cat({ones, torch::cumprod(decay.unsqueeze(0).expand({C, -1, -1}), 0)});
  auto inverse = torch::cat({ones, torch::cumprod((1 / decay).unsqueeze(0).expand({C, -1, -1}), 0)});
  auto causal = torch::ones({C, C}, torch::kBool).tril(-1).to(q.device());  // j < i
  std::vector<torch::Tensor> contexts;
  for (int64_t start = 0; start < T; start += C) {
    const int64_t n = std::min(C, T - start);
    auto qc = q.narrow(2, start, n);                                    // [B,H,n,L]
    auto vc = v.narrow(2, start, n);                                    // [B,1,n,E]
    auto up = powers.narrow(0, 0, n).permute({1, 0, 2});                // [H,n,L]: a^i
    auto down = inverse.narrow(0, 1, n).permute({1, 0, 2});             // [H,n,L]: a^-(j+1)
    auto keys = qc * down;                                              // q_j a^-(j+1)
    auto before = torch::cat({torch::zeros_like(keys.narrow(2, 0, 1)),
                              torch::cumsum(keys, 2).narrow(2, 0, n - 1)}, 2);  // sum_{j<i}
    auto normaliser = up * (s.rho_norm.unsqueeze(2) + before);
    auto w = qc / (qc.sum(-1, /*keepdim=*/true) + kEps);
    auto qr = w / (normaliser + kEps);                                  // q'_i
    auto scores = torch::matmul(qr * up, keys.transpose(-1, -2));       // [B,H,n,n]
    scores = torch::where(causal.narrow(0, 0, n).narrow(1, 0, n), scores,
                          torch::zeros({}, scores.options()));
    contexts.push_back(torch::matmul(qr * up, s.rho) + torch::matmul(scores, vc));
    auto to_end = powers.narrow(0, 0, n).flip(0).permute({1, 0, 2});    // [H,n,L]: a^(n-1-j)
    auto weighted = qc * to_end;
    auto a_n = powers[n];                                               // [H,L]
    s = RhoState{a_n.unsqueeze(-1) * s.rho + torch::matmul(weighted.transpose(-1, -2), vc),
                 a_n * s.rho_norm + weighted.sum(2)};
  }
  auto context = contexts.empty()
                     ? torch::zeros({q.size(0), q.size(1), 0, v.size(-1)}, q.options())
                     : torch::cat(contexts, 2);
  return {context.permute({0, 2, 1, 3}), s};  // [B,T,H,E]
}

bool uses_rhoscan(AttentionImpl impl) {
  return impl == AttentionImpl::rhoscan || impl == AttentionImpl::rhoscan_bf16;
}

// What the library's op receives for q or v: bfloat16 for rhoscan-bf16 (a differentiable cast,
// so the gradients come back in the model's dtype), the tensor itself otherwise.
torch::Tensor op_input(AttentionImpl impl, const torch::Tensor& x) {
  return impl == AttentionImpl::rhoscan_bf16 ? x.to(torch::kBFloat16) : x;
}

}  // namespace

AttentionImpl parse_attention(const std::string& name) {
  if (name == "naive") return AttentionImpl::naive;
  if (name == "chunked") return AttentionImpl::chunked;
  if (name == "rhoscan" || name == "rhoscan-bf16") {
    if (!rhoscan_attention_available())
      throw std::invalid_argument(
          "--attention " + name + ": this build has no rhoscan_torch library (configure with "
          "-DRHOSCAN_TORCH=ON, or use --attention chunked)");
    return name == "rhoscan" ? AttentionImpl::rhoscan : AttentionImpl::rhoscan_bf16;
  }
  throw std::invalid_argument("--attention: expected rhoscan, rhoscan-bf16, chunked or naive, got '" + name +
                              "'");
}

const char* attention_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::rhoscan: return "rhoscan";
    case AttentionImpl::rhoscan_bf16: return "rhoscan-bf16";
    case AttentionImpl::chunked: return "chunked";
    case AttentionImpl::naive: return "naive";
  }
  return "?";
}

bool rhoscan_attention_available() {
#ifdef BDH_HAVE_RHOSCAN_TORCH
  return true;
#else
  return false;
#endif
}

AttentionImpl default_attention() {
  return rhoscan_attention_available() ? AttentionImpl::rhoscan : AttentionImpl::chunked;
}

std::tuple<torch::Tensor, RhoState> rho_attention(AttentionImpl impl, const torch::Tensor& q,
                                                  const torch::Tensor& v,
                                                  const torch::Tensor& decay,
                                                  const RhoState& state) {
  TORCH_CHECK(q.dim() == 4 && v.dim() == 4 && v.size(2) == 1,
              "bdh::rho_attention: expected q [B,T,H,L] and v [B,T,1,E], got q ", q.sizes(),
              " v ", v.sizes());
#ifdef BDH_HAVE_RHOSCAN_TORCH
  if (uses_rhoscan(impl)) {
    std::optional<torch::Tensor> rho, rho_norm;
    if (state.defined()) {
      rho = state.rho;
      rho_norm = state.rho_norm;
    }
    auto [context, rho_out, rho_norm_out] =
        rhoscan::pt::rho_attention(op_input(impl, q), op_input(impl, v), decay, rho, rho_norm, "bthl");
    return {context.to(q.scalar_type()), RhoState{rho_out, rho_norm_out}};
  }
#endif
  if (uses_rhoscan(impl)) throw std::invalid_argument("rhoscan attention not built");
  RhoState s = state.defined() ? state : zero_state(q, v.size(-1));
  if (impl == AttentionImpl::chunked && decay.min().item<double>() >= kMinFactoredDecay)
    return chunked_forward(q, v, decay, s);
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
  if (uses_rhoscan(impl)) {
    auto [context, rho, rho_norm] =
        rhoscan::pt::rho_attention_step(op_input(impl, q), op_input(impl, v), decay, state.rho, state.rho_norm);
    return {context.to(q.scalar_type()), RhoState{rho, rho_norm}};
  }
#endif
  if (uses_rhoscan(impl)) throw std::invalid_argument("rhoscan attention not built");
  return naive_step(q, v, decay, state);
}

}  // namespace bdh
