// rhoscan::pt (rhoscan/torch.h) from a C++ libtorch program: values, autograd through the op
// (backward into q, v, decay and both initial states) against a libtorch per-token loop of
// SPEC.md, the step form, and errors.
#include <gtest/gtest.h>

#include <rhoscan/torch.h>

namespace {

using torch::Tensor;

// SPEC.md's recurrence, one token at a time, in libtorch ops (autograd gives its gradients).
std::tuple<Tensor, Tensor, Tensor> loop(const Tensor& q, const Tensor& v, const Tensor& decay,
                                        Tensor R, Tensor N) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), E = v.size(3);
  const Tensor a = decay.reshape({H, -1});
  const Tensor vv = v.expand({B, H, T, E});
  std::vector<Tensor> context;
  for (int64_t t = 0; t < T; ++t) {
    Tensor q_t = q.select(2, t);
    Tensor w_t = q_t / (q_t.sum(-1, true) + 1e-6);
    context.push_back(torch::einsum("bhl,bhle->bhe", {w_t / (N + 1e-6), R}));
    R = a.unsqueeze(-1) * R + q_t.unsqueeze(-1) * vv.select(2, t).unsqueeze(2);
    N = a * N + q_t;
  }
  return {torch::stack(context, 2), R, N};
}

struct Problem {
  Tensor q, v, decay, rho, rho_norm;
};

Problem make_problem(int64_t B, int64_t H, int64_t Hv, int64_t T, int64_t L, int64_t E) {
  torch::manual_seed(3);
  auto f64 = torch::dtype(torch::kFloat64);
  return {torch::rand({B, H, T, L}, f64) + 0.1, torch::randn({B, Hv, T, E}, f64),
          torch::rand({H, L}, f64) * 0.8 + 0.1, torch::randn({B, H, L, E}, f64),
          torch::rand({B, H, L}, f64) + 0.5};
}

TEST(TorchApi, ForwardAndAutogradMatchTheLoop) {
  Problem p = make_problem(2, 3, 1, 7, 5, 4);
  std::vector<Tensor> inputs = {p.q, p.v, p.decay, p.rho, p.rho_norm};
  for (Tensor& x : inputs) x.requires_grad_(true);
  auto [context, rho, rho_norm] = rhoscan::pt::rho_attention(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
  auto [rc, rr, rn] = loop(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
  EXPECT_TRUE(torch::allclose(context, rc, 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(rho, rr, 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(rho_norm, rn, 1e-10, 1e-12));

  // A loss on the context and on both final states: every input gets its gradient.
  auto g = torch::randn_like(context);
  auto loss = (context * g).sum() + rho.square().sum() + 3 * rho_norm.sum();
  auto ref_loss = (rc * g).sum() + rr.square().sum() + 3 * rn.sum();
  auto grads = torch::autograd::grad({loss}, inputs);
  auto ref_grads = torch::autograd::grad({ref_loss}, inputs);
  const char* names[] = {"q", "v", "decay", "rho", "rho_norm"};
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_TRUE(grads[i].defined()) << names[i];
    EXPECT_EQ(grads[i].sizes().vec(), inputs[i].sizes().vec()) << names[i];
    EXPECT_TRUE(torch::allclose(grads[i], ref_grads[i], 1e-9, 1e-11)) << names[i];
  }
}

TEST(TorchApi, BackwardCallReachesLeavesInSequenceFirstLayout) {
  Problem p = make_problem(1, 2, 2, 5, 3, 2);
  Tensor q = p.q.transpose(1, 2).contiguous().requires_grad_(true);  // [B, T, H, L]
  Tensor v = p.v.transpose(1, 2).contiguous().requires_grad_(true);
  Tensor decay = p.decay.clone().requires_grad_(true);
  auto [context, rho, rho_norm] = rhoscan::pt::rho_attention(q, v, decay, std::nullopt, std::nullopt, "bthl", 2);
  EXPECT_EQ(context.sizes().vec(), (std::vector<int64_t>{1, 5, 2, 2}));
  (context.sum() + rho.sum()).backward();
  Tensor q2 = p.q.clone().requires_grad_(true), v2 = p.v.clone().requires_grad_(true),
         d2 = p.decay.clone().requires_grad_(true);
  auto [rc, rr, rn] = loop(q2, v2, d2, torch::zeros_like(p.rho), torch::zeros_like(p.rho_norm));
  (rc.sum() + rr.sum()).backward();
  EXPECT_TRUE(torch::allclose(q.grad(), q2.grad().transpose(1, 2), 1e-9, 1e-11));
  EXPECT_TRUE(torch::allclose(v.grad(), v2.grad().transpose(1, 2), 1e-9, 1e-11));
  EXPECT_TRUE(torch::allclose(decay.grad(), d2.grad(), 1e-9, 1e-11));
}

TEST(TorchApi, StepEqualsOneTokenAndLeavesTheStateAlone) {
  Problem p = make_problem(2, 2, 1, 1, 4, 3);
  Tensor rho0 = p.rho.clone();
  auto [c, r, n] = rhoscan::pt::rho_attention_step(p.q.select(2, 0), p.v.select(2, 0), p.decay, p.rho, p.rho_norm);
  auto [rc, rr, rn] = loop(p.q, p.v, p.decay, p.rho, p.rho_norm);
  EXPECT_TRUE(torch::allclose(c, rc.select(2, 0), 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(r, rr, 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(n, rn, 1e-10, 1e-12));
  EXPECT_TRUE(torch::equal(p.rho, rho0));
}

TEST(TorchApi, InvalidInputThrowsTheLibraryMessage) {
  Problem p = make_problem(2, 3, 1, 4, 5, 2);
  try {
    rhoscan::pt::rho_attention(p.q, p.v, p.decay, p.rho.slice(0, 0, 1), p.rho_norm);
    FAIL() << "a state of the wrong batch size was accepted";
  } catch (const c10::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rho: expected shape [B, H, L, E] = [2, 3, 5, 2], got [1, 3, 5, 2]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(rhoscan::pt::rho_attention(p.q, p.v, p.decay * 2), c10::ValueError);
  EXPECT_THROW(rhoscan::pt::rho_attention(p.q, p.v, p.decay, std::nullopt, std::nullopt, "lthb"), c10::ValueError);
}

}  // namespace
