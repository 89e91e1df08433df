// AdamW (decoupled weight decay) with its state in plain named tensors, so that a checkpoint
// can store and restore it exactly whatever libtorch version built the program.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace bdh {

struct AdamW {
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool weight_decay = true;
  };
  std::vector<Slot> slots;
  int64_t steps = 0;  // updates applied so far
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;

  void add(const std::string& name, const torch::Tensor& param, bool decayed) {
    slots.push_back({name, param, torch::zeros_like(param), torch::zeros_like(param), decayed});
  }

  void step(double lr) {
    torch::NoGradGuard no_grad;
    ++steps;
    const double bias1 = 1 - std::pow(beta1, static_cast<double>(steps));
    const double bias2 = 1 - std::pow(beta2, static_cast<double>(steps));
    for (auto& s : slots) {
      auto grad = s.param.grad();
      if (!grad.defined()) continue;
      s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
      s.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      if (s.weight_decay) s.param.mul_(1 - lr * weight_decay);
      auto denom = (s.exp_avg_sq / bias2).sqrt_().add_(eps);
      s.param.addcdiv_(s.exp_avg, denom, -lr / bias1);
    }
  }

  void zero_grad() {
    for (auto& s : slots)
      if (s.param.grad().defined()) s.param.mutable_grad().zero_();
  }
};

}  // namespace bdh
