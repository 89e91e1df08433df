// Tests of the BDH example: streaming (one token at a time through the operator's step) gives
// the full-sequence forward's logits; a split sequence with the state carried gives the same
// logits and the same gradients as the whole (truncated BPTT relies on it); checkpoints
// round-trip exactly; the per-token operator matches SPEC.md's hand-checked example.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "adamw.h"
#include "attention.h"
#include "checkpoint.h"
#include "corpus.h"
#include "model.h"

namespace bdh {
namespace {

// Every attention implementation this build has.
std::vector<AttentionImpl> implementations() {
  std::vector<AttentionImpl> out{AttentionImpl::naive, AttentionImpl::chunked};
  if (rhoscan_attention_available()) out.push_back(AttentionImpl::rhoscan);
  return out;
}

// A small model with weights large enough that q is neither all zero nor dense and every layer
// changes the output (the default init's std 0.02 would make the test weak).
Model small_model(uint64_t seed) {
  torch::manual_seed(seed);
  Model model(Config{/*layers=*/3, /*heads=*/2, /*latent=*/16, /*embd=*/12, /*vocab=*/256});
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters())
    if (p.dim() >= 2 && p.size(0) != 3) p.copy_(torch::randn_like(p) * 0.4);
  return model;
}

torch::Tensor random_tokens(int64_t B, int64_t T, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {B, T}, torch::kInt64);
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// Tolerance for float32 logits of magnitude ~10 after 3 layers: 1e-4 absolute is ~1e-5 relative,
// float32 rounding accumulated over the sequence, far below any real mismatch (which shows up
// at order 1).
constexpr double kLogitTolerance = 1e-4;

TEST(BdhAttention, NaiveMatchesSpecHandExample) {
  auto q = torch::tensor({2.0f, 0.0f, 1.0f, 3.0f}).view({1, 2, 1, 2});  // [B,T,H,L]
  auto v = torch::tensor({10.0f, 20.0f, 30.0f, 40.0f}).view({1, 2, 1, 2});
  auto decay = torch::full({1, 2}, 0.5f);
  auto [context, state] = rho_attention(AttentionImpl::naive, q, v, decay, {});
  auto expected = torch::tensor({0.0f, 0.0f, 2.4999981f, 4.9999963f}).view({1, 2, 1, 2});
  EXPECT_LT(max_abs(context - expected), 1e-5) << context;
  EXPECT_LT(max_abs(state.rho.flatten() - torch::tensor({40.0f, 60.0f, 90.0f, 120.0f})), 1e-5);
  EXPECT_LT(max_abs(state.rho_norm.flatten() - torch::tensor({2.0f, 3.0f})), 1e-6);
}

// The chunked and the library's forms against the per-token loop: T = 37 (two full chunks and a
// tail), an initial state, gradients of every input including the initial state, and upstream
// gradients on the final state (what truncated BPTT sends back).
TEST(BdhAttention, FormsAgreeWithThePerTokenLoop) {
  torch::manual_seed(3);
  const int64_t B = 2, T = 37, H = 3, L = 8, E = 5;
  auto q0 = torch::relu(torch::randn({B, T, H, L}));
  auto v0 = torch::randn({B, T, 1, E});
  // Decays inside (0, 1) with a small one (1e-3, where a^-8 = 1e24 in the chunked form's
  // factorisation) and the contract's edge values 0 and 1 (the chunked form falls back to the
  // per-token loop below 1e-4).
  auto a_inner = torch::rand({H, L}) * 0.9 + 0.05;
  a_inner.index_put_({0, 0}, 1e-3);
  a_inner.index_put_({1, 1}, 1.0);
  auto a_edges = a_inner.clone();
  a_edges.index_put_({0, 0}, 0.0);
  auto r0 = torch::rand({B, H, L, E});
  auto n0 = torch::rand({B, H, L}) + 0.5;
  auto g_rho = torch::randn({B, H, L, E});
  auto g_norm = torch::randn({B, H, L});
  auto run = [&](AttentionImpl impl, const torch::Tensor& a0, bool bf16_inputs = false) {
    std::vector<torch::Tensor> leaves;
    for (const auto& t : {q0, v0, a0, r0, n0}) leaves.push_back(t.clone().requires_grad_(true));
    if (bf16_inputs)  // q and v as rhoscan-bf16 hands them to the op, for the reference
      for (int k : {0, 1})
        leaves[k] = leaves[k].detach().to(torch::kBFloat16).to(torch::kFloat32).requires_grad_(true);
    auto [context, state] = rho_attention(impl, leaves[0], leaves[1], leaves[2],
                                          RhoState{leaves[3], leaves[4]});
    auto loss = (context * context).sum() + (state.rho * g_rho).sum() +
                (state.rho_norm * g_norm).sum();
    loss.backward();
    std::vector<torch::Tensor> out{context.detach(), state.rho.detach(), state.rho_norm.detach()};
    for (auto& leaf : leaves) out.push_back(leaf.grad());
    return out;
  };
  const char* names[] = {"context", "rho", "rho_norm", "dq", "dv", "ddecay", "drho", "drho_norm"};
  for (const auto& a0 : {a_inner, a_edges}) {
    auto expected = run(AttentionImpl::naive, a0);
    for (auto impl : implementations()) {
      if (impl == AttentionImpl::naive) continue;
      auto got = run(impl, a0);
      for (size_t k = 0; k < got.size(); ++k) {
        double rel = (got[k] - expected[k]).norm().item<double>() /
                     (expected[k].norm().item<double>() + 1e-30);
        EXPECT_LT(rel, 1e-4) << attention_name(impl) << " " << names[k] << " min decay "
                             << a0.min().item<double>();
      }
    }
    // rhoscan-bf16 against the loop on the same bf16-rounded q and v. The final states are
    // float32 sums of those rounded inputs and agree to float32 accuracy (against the unrounded
    // loop they differ by about 2e-3); the context and the gradients pass through bfloat16
    // (about 2e-3 here) and are held to SPEC.md's 16-bit bar of 5e-3.
    if (rhoscan_attention_available()) {
      auto rounded = run(AttentionImpl::naive, a0, /*bf16_inputs=*/true);
      auto got = run(AttentionImpl::rhoscan_bf16, a0);
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].scalar_type(), torch::kFloat32) << names[k];
        const bool state = k == 1 || k == 2;
        double rel = (got[k] - rounded[k]).norm().item<double>() / (rounded[k].norm().item<double>() + 1e-30);
        EXPECT_LT(rel, state ? 1e-5 : 5e-3) << "rhoscan-bf16 " << names[k] << " min decay " << a0.min().item<double>();
      }
    }
  }
}

TEST(BdhModel, StreamedLogitsEqualFullForward) {
  for (auto impl : implementations()) {
    SCOPED_TRACE(attention_name(impl));
    auto model = small_model(7);
    torch::NoGradGuard no_grad;
    auto idx = random_tokens(2, 40, 11);
    auto [full, finals] = model->forward(idx, {}, impl);
    ASSERT_EQ(full.sizes(), (std::vector<int64_t>{2, 40, 256}));
    auto states = model->zero_states(2);
    std::vector<torch::Tensor> streamed;
    for (int64_t t = 0; t < idx.size(1); ++t) {
      auto [logits, next] = model->step(idx.select(1, t), states, impl);
      streamed.push_back(logits);
      states = next;
    }
    auto stacked = torch::stack(streamed, 1);
    EXPECT_LT(max_abs(stacked - full), kLogitTolerance);
    EXPECT_GT(max_abs(full), 1.0);  // not a degenerate all-zero model
    // The context must matter: different earlier tokens change a later logit.
    auto other = idx.clone();
    other.index_put_({0, 0}, (idx[0][0].item<int64_t>() + 1) % 256);
    auto [changed, unused] = model->forward(other, {}, impl);
    EXPECT_GT(max_abs(changed[0][39] - full[0][39]), 1e-4);
    for (size_t l = 0; l < finals.size(); ++l) {
      EXPECT_LT(max_abs(states[l].rho - finals[l].rho), 1e-3 * (1 + max_abs(finals[l].rho)));
      EXPECT_LT(max_abs(states[l].rho_norm - finals[l].rho_norm),
                1e-4 * (1 + max_abs(finals[l].rho_norm)));
    }
  }
}

// Truncated BPTT: two consecutive blocks with the state (and its gradient) flowing between them
// equal one forward over both blocks, in logits and in every parameter's gradient.
TEST(BdhModel, SplitSequenceWithStateEqualsWhole) {
  for (auto impl : implementations()) {
    SCOPED_TRACE(attention_name(impl));
    auto idx = random_tokens(2, 30, 13);
    auto targets = random_tokens(2, 30, 17);
    auto whole_model = small_model(5);
    auto [whole, unused] = whole_model->forward(idx, {}, impl);
    torch::nn::functional::cross_entropy(whole.reshape({-1, 256}), targets.reshape({-1}))
        .backward();

    auto split_model = small_model(5);
    auto [first, state] = split_model->forward(idx.narrow(1, 0, 12), {}, impl);
    auto [second, final_state] = split_model->forward(idx.narrow(1, 12, 18), state, impl);
    auto split = torch::cat({first, second}, 1);
    EXPECT_LT(max_abs(split - whole), kLogitTolerance);
    torch::nn::functional::cross_entropy(split.reshape({-1, 256}), targets.reshape({-1}))
        .backward();
    auto whole_params = whole_model->named_parameters();
    for (const auto& item : split_model->named_parameters()) {
      SCOPED_TRACE(item.key());
      auto g_whole = whole_params[item.key()].grad();
      auto g_split = item.value().grad();
      ASSERT_TRUE(g_split.defined());
      EXPECT_LT(max_abs(g_split - g_whole), 1e-4 * (1 + max_abs(g_whole)));
    }
  }
}

TEST(BdhCheckpoint, RoundTripsModelOptimizerAndMetadata) {
  auto path = std::filesystem::temp_directory_path() /
              ("bdh_test_" + std::to_string(::getpid()) + ".safetensors");
  auto model = small_model(3);
  AdamW optimizer;
  for (const auto& item : model->named_parameters()) optimizer.add(item.key(), item.value(), true);
  auto [logits, states] = model->forward(random_tokens(1, 8, 1), {}, AttentionImpl::naive);
  logits.sum().backward();
  optimizer.step(1e-3);
  save_checkpoint(path.string(), model, &optimizer, {{"train.step", "1"}});

  auto loaded = read_checkpoint(path.string());
  EXPECT_EQ(loaded.config.describe(), model->config.describe());
  EXPECT_EQ(loaded.metadata.at("train.step"), "1");
  auto restored = small_model(99);  // different weights until loaded
  AdamW restored_optimizer;
  for (const auto& item : restored->named_parameters())
    restored_optimizer.add(item.key(), item.value(), true);
  load_model(loaded, restored, path.string());
  ASSERT_TRUE(load_optimizer(loaded, restored_optimizer, path.string()));
  EXPECT_EQ(restored_optimizer.steps, 1);
  auto original = model->named_parameters();
  for (const auto& item : restored->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), original[item.key()])) << item.key();
  for (size_t i = 0; i < optimizer.slots.size(); ++i) {
    EXPECT_TRUE(torch::equal(restored_optimizer.slots[i].exp_avg, optimizer.slots[i].exp_avg));
    EXPECT_TRUE(torch::equal(restored_optimizer.slots[i].exp_avg_sq, optimizer.slots[i].exp_avg_sq));
  }

  // A checkpoint of another shape is refused with the tensor's name.
  Model other(Config{3, 2, 8, 12, 256});
  try {
    load_model(loaded, other, "ckpt");
    FAIL() << "a shape mismatch was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model."), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(BdhCorpus, UnigramBaselineIsTheCrossEntropyOfByteFrequencies) {
  std::vector<uint8_t> train(1000, 'a');
  train.resize(2000, 'b');  // 'a' and 'b' equally frequent
  std::vector<uint8_t> validation(10, 'a');
  // Add-one smoothing: p(a) = 1001 / 2256.
  EXPECT_NEAR(unigram_baseline(train, validation), -std::log(1001.0 / 2256.0), 1e-12);
}

}  // namespace
}  // namespace bdh
