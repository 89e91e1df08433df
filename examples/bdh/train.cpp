// bdh train: byte-level language modelling with AdamW, validation against the unigram baseline,
// checkpoints (safetensors) with resume, optional truncated BPTT through the operator's state,
// and a loss plot at the end.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "adamw.h"
#include "checkpoint.h"
#include "commands.h"
#include "corpus.h"
#include "model.h"
#include "runtime.h"

#ifndef BDH_PLOT_SCRIPT
#define BDH_PLOT_SCRIPT "plot_loss.py"
#endif
#ifndef BDH_COMMIT
#define BDH_COMMIT "unknown"
#endif

namespace bdh {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Settings {
  std::string preset;
  Config model;
  int64_t block = 0, batch = 0, steps = 0, warmup = 0, tbptt = 0;
  int64_t eval_every = 0, eval_batches = 0, save_every = 0, seed = 0;
  double lr = 0, min_lr = 0, weight_decay = 0, clip = 0, validation_fraction = 0;
};

// Presets: "cpu" trains to well below the unigram baseline in under ten minutes on 2 cores
// (about 9k tokens/s with the rhoscan op, 2048 tokens a step);
// "gpu" is BDH-GPU at the operator's headline shape (H=4, L=8192, E=256, T=512).
Settings read_settings(const Args& args) {
  Settings s;
  s.preset = args.str("preset", "cpu");
  if (s.preset == "cpu") {
    s.model = Config{/*layers=*/4, /*heads=*/4, /*latent=*/64, /*embd=*/64, /*vocab=*/256};
    s.block = 64;
    s.batch = 32;
    s.steps = 2000;
    s.lr = 4e-3;
  } else if (s.preset == "gpu") {
    s.model = Config{/*layers=*/6, /*heads=*/4, /*latent=*/8192, /*embd=*/256, /*vocab=*/256};
    s.block = 512;
    s.batch = 8;
    s.steps = 3000;
    s.lr = 1e-3;
  } else {
    throw std::invalid_argument("--preset: expected cpu or gpu, got '" + s.preset + "'");
  }
  s.model.layers = args.integer("layers", s.model.layers, 1);
  s.model.heads = args.integer("heads", s.model.heads, 1);
  s.model.latent = args.integer("latent", s.model.latent, 1);
  s.model.embd = args.integer("embd", s.model.embd, 2);
  s.block = args.integer("block", s.block, 1);
  s.batch = args.integer("batch", s.batch, 1);
  s.steps = args.integer("steps", s.steps, 1);
  s.lr = args.real("lr", s.lr, 0);
  s.min_lr = args.real("min-lr", s.lr / 10, 0);
  s.warmup = args.integer("warmup", std::min<int64_t>(100, s.steps / 10), 0);
  s.weight_decay = args.real("weight-decay", 0.1, 0);
  s.clip = args.real("clip", 1.0, 0);
  s.tbptt = args.integer("tbptt", 0, 0);
  s.eval_every = args.integer("eval-every", std::max<int64_t>(1, s.steps / 15), 1);
  s.eval_batches = args.integer("eval-batches", 4, 1);
  s.save_every = args.integer("save-every", std::max<int64_t>(1, s.steps / 3), 1);
  s.seed = args.integer("seed", 1, 0);
  s.validation_fraction = args.real("validation-fraction", 0.1, 0);
  return s;
}

// Linear warm-up, then cosine decay to min_lr at the last step.
double learning_rate(const Settings& s, int64_t step) {
  if (step <= s.warmup) return s.lr * static_cast<double>(step) / static_cast<double>(s.warmup + 1);
  double progress = static_cast<double>(step - s.warmup) / static_cast<double>(std::max<int64_t>(1, s.steps - s.warmup));
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

// Inputs and next-byte targets, [B, T] each, from blocks starting at `starts`.
std::pair<torch::Tensor, torch::Tensor> make_batch(const std::vector<uint8_t>& text,
                                                   const std::vector<int64_t>& starts, int64_t T,
                                                   torch::Device device) {
  const auto B = static_cast<int64_t>(starts.size());
  auto buffer = torch::empty({B, T + 1}, torch::kInt64);
  auto* p = buffer.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t <= T; ++t) p[b * (T + 1) + t] = text[starts[b] + t];
  buffer = buffer.to(device);
  return {buffer.narrow(1, 0, T), buffer.narrow(1, 1, T)};
}

torch::Tensor next_byte_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

// The B parallel streams of truncated BPTT: stream b reads its own contiguous segment of the
// training text block after block, carrying its state; at the segment's end all restart.
class Streams {
 public:
  Streams(int64_t text_size, int64_t batch, int64_t block) : block_(block) {
    segment_ = (text_size - 1) / batch;
    if (segment_ < block)
      throw std::runtime_error("--tbptt: the training text is too short for " +
                               std::to_string(batch) + " streams of blocks of " +
                               std::to_string(block));
    starts_.resize(batch);
    for (int64_t b = 0; b < batch; ++b) starts_[b] = b * segment_;
  }
  // True when the next `blocks` blocks do not fit: the streams restart and states must reset.
  bool restart_if_needed(int64_t blocks) {
    if (offset_ + blocks * block_ <= segment_) return false;
    offset_ = 0;
    return true;
  }
  std::vector<int64_t> next() {
    std::vector<int64_t> starts(starts_);
    for (auto& s : starts) s += offset_;
    offset_ += block_;
    return starts;
  }

 private:
  int64_t block_, segment_ = 0, offset_ = 0;
  std::vector<int64_t> starts_;
};

struct Evaluation {
  double loss = 0, q_zero_fraction = 0;
};

// Mean loss over fixed, evenly spaced validation blocks (fresh state each).
Evaluation evaluate(Model& model, AttentionImpl impl, const std::vector<uint8_t>& text,
                    const Settings& s, torch::Device device) {
  torch::NoGradGuard no_grad;
  const int64_t count = s.eval_batches * s.batch;
  const int64_t span = static_cast<int64_t>(text.size()) - s.block - 1;
  Evaluation e;
  for (int64_t i = 0; i < s.eval_batches; ++i) {
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < s.batch; ++b) starts.push_back(span * (i * s.batch + b) / count);
    auto [inputs, targets] = make_batch(text, starts, s.block, device);
    ForwardStats stats;
    auto [logits, states] = model->forward(inputs, {}, impl, &stats);
    e.loss += next_byte_loss(logits, targets).item<double>();
    e.q_zero_fraction += stats.q_zero_fraction;
  }
  e.loss /= static_cast<double>(s.eval_batches);
  e.q_zero_fraction /= static_cast<double>(s.eval_batches);
  return e;
}

struct HistoryPoint {
  int64_t step;
  double train, validation;
};

std::string encode_history(const std::vector<HistoryPoint>& history) {
  std::ostringstream s;
  s.precision(6);
  for (const auto& h : history) s << h.step << ':' << h.train << ':' << h.validation << ';';
  return s.str();
}

std::vector<HistoryPoint> decode_history(const std::string& text) {
  std::vector<HistoryPoint> history;
  std::istringstream s(text);
  std::string item;
  while (std::getline(s, item, ';')) {
    HistoryPoint h{};
    char c1 = 0, c2 = 0;
    std::istringstream one(item);
    if (one >> h.step >> c1 >> h.train >> c2 >> h.validation) history.push_back(h);
  }
  return history;
}

std::string format_duration(double seconds) {
  auto total = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%lldm%02llds", static_cast<long long>(total / 60),
                static_cast<long long>(total % 60));
  return buffer;
}

// Forward FLOPs per token: the three shared matrices (2·E·H·L each), the operator (about
// 4·H·L·E: the state read and its update) per layer, and the head.
double forward_flops_per_token(const Config& c) {
  return static_cast<double>(c.layers) * 10.0 * c.heads * c.latent * c.embd +
         2.0 * c.embd * c.vocab;
}

void append_bench_json(const std::string& path, const Settings& s, AttentionImpl impl,
                       torch::Device device, double median_ms, double tokens_per_s,
                       double peak_tflops) {
  const double tokens = static_cast<double>(s.batch * s.block * std::max<int64_t>(1, s.tbptt));
  const double tflops = 3 * forward_flops_per_token(s.model) * tokens / (median_ms * 1e-3) / 1e12;
  std::string peak_bytes = "null";
  if (!device.is_cuda()) {  // host peak resident set; a CUDA run reports null (not measured)
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    peak_bytes = std::to_string(static_cast<int64_t>(usage.ru_maxrss) * 1024);
  }
  const char* commit = std::getenv("RHOSCAN_COMMIT");
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("cannot append to --bench-json '" + path + "'");
  char line[1024];
  std::snprintf(line, sizeof line,
                "{\"case\": \"bdh_train_%s\", \"B\": %lld, \"H\": %lld, \"Hv\": 1, \"T\": %lld, "
                "\"L\": %lld, \"E\": %lld, \"layers\": %lld, \"dtype\": \"%s\", "
                "\"device\": \"%s\", \"attention\": \"%s\", \"direction\": \"forward+backward\", "
                "\"median_ms\": %.3f, \"tokens_per_s\": %.1f, \"tflops\": %.4f, "
                "\"limit_tflops\": %.3f, \"limit_fraction\": %.5f, \"peak_bytes\": %s, "
                "\"commit\": \"%s\"}\n",
                s.preset.c_str(), (long long)s.batch, (long long)s.model.heads,
                (long long)s.block, (long long)s.model.latent, (long long)s.model.embd,
                (long long)s.model.layers,
                impl == AttentionImpl::rhoscan_bf16 ? "bfloat16" : "float32",  // the op's q, v
                device.is_cuda() ? "cuda" : "cpu",
                attention_name(impl), median_ms, tokens_per_s, tflops, peak_tflops,
                tflops / peak_tflops, peak_bytes.c_str(), commit ? commit : BDH_COMMIT);
  out << line;
}

void write_loss_csv(const std::string& path, const std::vector<HistoryPoint>& history) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
  out << "step,train_loss,validation_loss\n";
  for (const auto& h : history) out << h.step << ',' << h.train << ',' << h.validation << '\n';
}

}  // namespace

int run_train(const Args& args) {
  Settings s = read_settings(args);
  const std::string data_path = args.str("data", kDefaultCorpus);
  const fs::path out_dir = args.str("out", "runs/bdh");
  const bool resume = args.flag("resume");
  const AttentionImpl impl =
      args.has("attention") ? parse_attention(args.str("attention", "")) : default_attention();
  const torch::Device device = pick_device(args.str("device", "auto"));
  set_threads(args.integer("threads", 0, 0));
  const std::string bench_json = args.str("bench-json", "");
  const std::string python = args.str("python", "/usr/bin/python3");
  const double time_limit = args.real("time-limit", 0, 0);
  const double peak_tflops =
      args.real("peak-tflops", device.is_cuda() ? 66.9 : 0.234, 1e-9);  // H200 FP32; 2-core sgemm
  args.reject_unknown();

  fs::create_directories(out_dir);
  const std::string checkpoint_path = (out_dir / "model.safetensors").string();

  Corpus corpus = load_corpus(data_path, s.validation_fraction, s.block);
  const double unigram = unigram_baseline(corpus.train, corpus.validation);

  // A resumed run takes the model's shape from the checkpoint.
  std::optional<LoadedCheckpoint> loaded;
  if (resume && fs::exists(checkpoint_path)) {
    loaded = read_checkpoint(checkpoint_path);
    s.model = loaded->config;
  }
  torch::manual_seed(static_cast<uint64_t>(s.seed));
  Model model(s.model);
  model->to(device);
  AdamW optimizer;
  optimizer.weight_decay = s.weight_decay;
  for (const auto& item : model->named_parameters())
    optimizer.add(item.key(), item.value(), item.key() != "decay_logit");

  int64_t start_step = 0;
  std::vector<HistoryPoint> history;
  if (loaded) {
    load_model(*loaded, model, checkpoint_path);
    if (!load_optimizer(*loaded, optimizer, checkpoint_path))
      std::printf("note: %s has no optimizer state; AdamW starts afresh\n", checkpoint_path.c_str());
    start_step = optimizer.steps;
    if (auto it = loaded->metadata.find("train.history"); it != loaded->metadata.end())
      history = decode_history(it->second);
    std::printf("resumed %s at step %lld\n", checkpoint_path.c_str(), (long long)start_step);
    loaded.reset();
  }

  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  std::printf("corpus: %s (%zu training bytes, %zu validation bytes)\n", corpus.path.c_str(),
              corpus.train.size(), corpus.validation.size());
  std::printf("model: BDH %s, %lld parameters; attention %s on %s (%d threads)\n",
              s.model.describe().c_str(), (long long)parameters, attention_name(impl),
              device.str().c_str(), at::get_num_threads());
  std::printf("training: %lld steps of %lld x %lld tokens%s, AdamW lr %.2g, clip %.2g\n",
              (long long)s.steps, (long long)s.batch, (long long)s.block,
              s.tbptt ? (" x " + std::to_string(s.tbptt) + " blocks (truncated BPTT)").c_str() : "",
              s.lr, s.clip);
  std::printf("unigram baseline (validation cross-entropy of the training bytes' frequencies): "
              "%.4f nats/byte\n", unigram);
  std::fflush(stdout);

  std::mt19937_64 rng(static_cast<uint64_t>(s.seed) * 0x9E3779B97F4A7C15ull + start_step);
  std::uniform_int_distribution<int64_t> start_dist(
      0, static_cast<int64_t>(corpus.train.size()) - s.block - 1);
  std::optional<Streams> streams;
  std::vector<RhoState> carried;
  if (s.tbptt > 0) streams.emplace(static_cast<int64_t>(corpus.train.size()), s.batch, s.block);

  auto save = [&](int64_t step) {
    save_checkpoint(checkpoint_path, model, &optimizer,
                    {{"train.step", std::to_string(step)},
                     {"train.history", encode_history(history)},
                     {"train.corpus", corpus.path}});
  };

  const int64_t tokens_per_step = s.batch * s.block * std::max<int64_t>(1, s.tbptt);
  std::vector<double> step_ms;
  double train_loss_sum = 0, window_seconds = 0, train_seconds = 0;
  int64_t window_steps = 0;
  Evaluation last_eval{};
  const auto training_began = Clock::now();
  int64_t last_step = s.steps;
  for (int64_t step = start_step + 1; step <= last_step; ++step) {
    auto begin = Clock::now();
    // A time limit ends the run early, at this step (evaluated and saved like the last one).
    if (time_limit > 0 && step > start_step + 1 &&
        std::chrono::duration<double>(begin - training_began).count() +
                train_seconds / static_cast<double>(step - 1 - start_step) > time_limit) {
      last_step = step;
      std::printf("--time-limit %.0f s: stopping at step %lld of %lld\n", time_limit,
                  (long long)step, (long long)s.steps);
    }
    const double lr = learning_rate(s, step);
    torch::Tensor loss;
    if (s.tbptt == 0) {
      std::vector<int64_t> starts;
      for (int64_t b = 0; b < s.batch; ++b) starts.push_back(start_dist(rng));
      auto [inputs, targets] = make_batch(corpus.train, starts, s.block, device);
      auto [logits, states] = model->forward(inputs, {}, impl);
      loss = next_byte_loss(logits, targets);
    } else {
      if (streams->restart_if_needed(s.tbptt) || carried.empty())
        carried = model->zero_states(s.batch);
      std::vector<RhoState> state = carried;  // detached: the truncation point
      loss = torch::zeros({}, torch::TensorOptions().device(device));
      for (int64_t k = 0; k < s.tbptt; ++k) {
        auto [inputs, targets] = make_batch(corpus.train, streams->next(), s.block, device);
        auto [logits, next] = model->forward(inputs, state, impl);
        loss = loss + next_byte_loss(logits, targets) / static_cast<double>(s.tbptt);
        state = std::move(next);  // not detached: block k+1's loss reaches block k's weights
      }
      carried = detach_states(state);
    }
    optimizer.zero_grad();
    loss.backward();
    if (s.clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), s.clip);
    optimizer.step(lr);
    const double loss_value = loss.item<double>();  // also waits for the device
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    if (!std::isfinite(loss_value))
      throw std::runtime_error("training diverged at step " + std::to_string(step) +
                               " (loss " + std::to_string(loss_value) + "); try a lower --lr");
    step_ms.push_back(seconds * 1e3);
    train_loss_sum += loss_value;
    window_seconds += seconds;
    train_seconds += seconds;
    ++window_steps;

    if (step % s.eval_every == 0 || step == last_step) {
      last_eval = evaluate(model, impl, corpus.validation, s, device);
      const double train_loss = train_loss_sum / static_cast<double>(window_steps);
      history.push_back({step, train_loss, last_eval.loss});
      const double tokens_per_s =
          static_cast<double>(window_steps * tokens_per_step) / window_seconds;
      const double eta = train_seconds / static_cast<double>(step - start_step) *
                         static_cast<double>(s.steps - step);
      std::printf("step %5lld/%lld | train %.4f | val %.4f (unigram %.4f) | q zeros %.1f%% | "
                  "%.0f tok/s | lr %.2e | ETA %s\n",
                  (long long)step, (long long)s.steps, train_loss, last_eval.loss, unigram,
                  100 * last_eval.q_zero_fraction, tokens_per_s, lr,
                  format_duration(eta).c_str());
      std::fflush(stdout);
      train_loss_sum = 0;
      window_seconds = 0;
      window_steps = 0;
    }
    if (step % s.save_every == 0 || step == last_step) save(step);
  }
  if (start_step >= s.steps) {
    std::printf("nothing to train: the checkpoint is at step %lld of %lld\n",
                (long long)start_step, (long long)s.steps);
    last_eval = evaluate(model, impl, corpus.validation, s, device);
  }

  const double median_ms = step_ms.empty() ? 0.0 : [&] {
    std::vector<double> sorted(step_ms.begin() + std::min<size_t>(step_ms.size() / 10, 5), step_ms.end());
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }();
  const double tokens_per_s = median_ms > 0 ? tokens_per_step / (median_ms * 1e-3) : 0.0;
  std::printf("\nfinal: validation loss %.4f nats/byte vs unigram baseline %.4f (%.1f%% of it, "
              "%.3f bits/byte); q zeros %.1f%%\n",
              last_eval.loss, unigram, 100 * last_eval.loss / unigram, last_eval.loss / std::log(2.0),
              100 * last_eval.q_zero_fraction);
  if (median_ms > 0)
    std::printf("training speed: %.0f tokens/s (median step %.1f ms, %s, attention %s); "
                "%s of training\n", tokens_per_s, median_ms, device.str().c_str(),
                attention_name(impl), format_duration(train_seconds).c_str());
  std::printf("checkpoint: %s\n", checkpoint_path.c_str());
  if (!bench_json.empty() && median_ms > 0) {
    append_bench_json(bench_json, s, impl, device, median_ms, tokens_per_s, peak_tflops);
    std::printf("bench: appended to %s\n", bench_json.c_str());
  }

  const std::string csv = (out_dir / "loss.csv").string();
  const std::string png = (out_dir / "loss.png").string();
  write_loss_csv(csv, history);
  const std::string plot = "'" + python + "' '" + BDH_PLOT_SCRIPT + "' '" + csv + "' '" + png +
                           "' " + std::to_string(unigram);
  if (std::system(plot.c_str()) != 0) {
    std::fprintf(stderr, "bdh train: the loss plot failed (%s); the losses are in %s\n",
                 plot.c_str(), csv.c_str());
    return 1;
  }
  std::printf("plot: %s\n", png.c_str());
  return 0;
}

}  // namespace bdh
