// bdh generate: streams text from a checkpoint one byte at a time. The prompt and every sampled
// byte go through Model::step (the operator's single-token step): each token costs the same
// whatever the length of the text so far, because the past lives in the fixed-size state.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "checkpoint.h"
#include "commands.h"
#include "model.h"
#include "runtime.h"

namespace bdh {
namespace {

int64_t sample(const torch::Tensor& logits, double temperature, int64_t top_k,
               std::mt19937_64& rng) {
  auto l = logits.to(torch::kCPU, torch::kFloat64).contiguous();
  if (temperature <= 0) return l.argmax().item<int64_t>();
  l = l / temperature;
  if (top_k > 0 && top_k < l.size(0)) {
    auto threshold = std::get<0>(l.topk(top_k)).min();
    l = l.masked_fill(l < threshold, -std::numeric_limits<double>::infinity());
  }
  auto p = torch::softmax(l, 0);
  const double* probs = p.data_ptr<double>();
  std::discrete_distribution<int64_t> pick(probs, probs + p.size(0));
  return pick(rng);
}

}  // namespace

int run_generate(const Args& args) {
  const std::string path = args.str("checkpoint", "");
  const std::string prompt = args.str("prompt", "The ");
  const int64_t tokens = args.integer("tokens", 400, 0);
  const double temperature = args.real("temperature", 0.8, 0);
  const int64_t top_k = args.integer("top-k", 0, 0);
  const int64_t seed = args.integer("seed", 1, 0);
  const AttentionImpl impl =
      args.has("attention") ? parse_attention(args.str("attention", "")) : default_attention();
  const torch::Device device = pick_device(args.str("device", "auto"));
  set_threads(args.integer("threads", 0, 0));
  args.reject_unknown();
  if (path.empty()) throw std::invalid_argument("--checkpoint FILE is required");
  if (prompt.empty()) throw std::invalid_argument("--prompt must not be empty");

  torch::NoGradGuard no_grad;
  auto checkpoint = read_checkpoint(path);
  Model model(checkpoint.config);
  load_model(checkpoint, model, path);
  model->to(device);
  model->eval();

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  auto states = model->zero_states(1);
  torch::Tensor logits;
  auto feed = [&](uint8_t byte) {
    auto token = torch::full({1}, static_cast<int64_t>(byte), torch::kInt64).to(device);
    std::tie(logits, states) = model->step(token, states, impl);
  };
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  for (unsigned char c : prompt) feed(c);
  auto begin = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < tokens; ++i) {
    auto byte = static_cast<uint8_t>(sample(logits[0], temperature, top_k, rng));
    std::fputc(byte, stdout);
    std::fflush(stdout);
    feed(byte);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::fprintf(stderr, "\n[%lld tokens in %.2f s: %.0f tokens/s, attention %s, state %lld floats "
               "per layer]\n", (long long)tokens, seconds, tokens / std::max(seconds, 1e-9),
               attention_name(impl),
               (long long)(checkpoint.config.heads * checkpoint.config.latent *
                           (checkpoint.config.embd + 1)));
  std::printf("\n");
  return 0;
}

}  // namespace bdh
