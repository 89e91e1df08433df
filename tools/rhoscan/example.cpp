// `rhoscan example`: a random, BDH-like input file for `rhoscan run` / `rhoscan verify`.
#include <cmath>
#include <cstdio>
#include <random>

#include "args.h"
#include "operator_file.h"
#include "rhoscan/commands.h"

namespace rhoscan::cli {
namespace {

const char* example_help() {
  return R"(usage: rhoscan example OUT.safetensors [options]

Writes a random input file for `rhoscan run` and `rhoscan verify`, shaped like BDH's use of the
operator: q is non-negative and sparse (a ReLU output), v is standard normal and shared by all
heads (Hv = 1) unless --Hv says otherwise, decay is uniform in [0.5, 1].

options:
  --B N --H N --Hv N --T N --L N --E N
                        sizes (default B=1 H=2 Hv=1 T=64 L=128 E=32; Hv is 1 or H; T may be 0)
  --dtype f32|bf16|f16|f64
                        dtype of q, v, grad_context (default f32). decay and the states are
                        float64 for f64, else float32
  --density X           fraction of q entries that are non-zero (default 0.25)
  --seed N              random seed (default 1); the same seed gives the same file
  --with-state          also write an initial state: rho ~ N(0,1), rho_norm ~ U[0, 2]
  --with-grads          also write upstream gradients grad_context, grad_rho, grad_rho_norm ~ N(0,1),
                        so that `rhoscan run` computes the backward too
  --layout bhtl|bthl    storage order of q, v, grad_context (default bhtl); recorded in the file's
                        "layout" metadata, which `run` and `verify` follow

tensors written: q [B,H,T,L], v [B,Hv,T,E], decay [H,L]; with --with-state rho [B,H,L,E],
rho_norm [B,H,L]; with --with-grads grad_context [B,H,T,E], grad_rho [B,H,L,E], grad_rho_norm
[B,H,L]. With --layout bthl, q, v and grad_context are stored [B,T,H,L], [B,T,Hv,E], [B,T,H,E].

exit status: 0 written, 2 bad usage (nothing written)
)";
}

DType parse_dtype_option(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::float32;
  if (s == "f64" || s == "float64") return DType::float64;
  if (s == "bf16" || s == "bfloat16") return DType::bfloat16;
  if (s == "f16" || s == "float16") return DType::float16;
  throw Error(ErrorKind::invalid_argument, "--dtype must be f32, bf16, f16 or f64, got '" + s + "'");
}

// Box-Muller on mt19937_64: the same seed gives the same file with any standard library.
class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}
  double uniform() { return (engine_() >> 11) * 0x1.0p-53; }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::mt19937_64 engine_;
};

int example_main(const std::vector<std::string>& argv) {
  Args args("example", argv,
            {"--B", "--H", "--Hv", "--T", "--L", "--E", "--dtype", "--density", "--seed", "--layout"},
            {"--with-state", "--with-grads"});
  args.expect_positional(1, "one output file (rhoscan example OUT.safetensors)");
  const int64_t kMax = int64_t{1} << 24;
  const int64_t B = args.integer("--B", 1, 1, kMax), H = args.integer("--H", 2, 1, kMax);
  const int64_t Hv = args.integer("--Hv", 1, 1, kMax), T = args.integer("--T", 64, 0, kMax);
  const int64_t L = args.integer("--L", 128, 1, kMax), E = args.integer("--E", 32, 1, kMax);
  if (Hv != 1 && Hv != H)
    throw Error(ErrorKind::invalid_argument, "--Hv must be 1 or H (" + std::to_string(H) + "), got " + std::to_string(Hv));
  const DType dtype = parse_dtype_option(args.value_or("--dtype", "f32"));
  const DType state = dtype == DType::float64 ? DType::float64 : DType::float32;
  double density = 0.25;
  if (auto d = args.value("--density")) {
    char* end = nullptr;
    density = std::strtod(d->c_str(), &end);
    if (d->empty() || *end != '\0' || !(density >= 0.0 && density <= 1.0))
      throw Error(ErrorKind::invalid_argument, "--density must be a number in [0, 1], got '" + *d + "'");
  }
  const uint64_t seed = static_cast<uint64_t>(args.integer("--seed", 1, 0, INT64_MAX));
  const Layout layout = parse_layout(args.value_or("--layout", "bhtl"));
  const bool bthl = layout == Layout::bthl;
  auto seq = [&](int64_t heads, int64_t last) {
    return bthl ? std::vector<int64_t>{B, T, heads, last} : std::vector<int64_t>{B, heads, T, last};
  };

  Random rng(seed);
  std::vector<io::StoredTensor> tensors;
  auto add = [&](const char* name, DType dt, std::vector<int64_t> shape, auto&& draw) {
    io::StoredTensor t = zero_tensor(name, dt, shape);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) set_value(t, i, draw());
    tensors.push_back(std::move(t));
  };
  add("q", dtype, seq(H, L), [&] {
    double keep = rng.uniform(), x = std::fabs(rng.normal());
    return keep < density ? x : 0.0;
  });
  add("v", dtype, seq(Hv, E), [&] { return rng.normal(); });
  add("decay", state, {H, L}, [&] { return 0.5 + 0.5 * rng.uniform(); });
  if (args.flag("--with-state")) {
    add("rho", state, {B, H, L, E}, [&] { return rng.normal(); });
    add("rho_norm", state, {B, H, L}, [&] { return 2.0 * rng.uniform(); });
  }
  if (args.flag("--with-grads")) {
    add("grad_context", dtype, seq(H, E), [&] { return rng.normal(); });
    add("grad_rho", state, {B, H, L, E}, [&] { return rng.normal(); });
    add("grad_rho_norm", state, {B, H, L}, [&] { return rng.normal(); });
  }
  std::vector<io::NamedView> views;
  for (const auto& t : tensors) views.push_back({t.name, t.view()});
  const std::string& out = args.positional()[0];
  io::write_safetensors(out, views,
                        {{"producer", std::string("rhoscan ") + version() + " example"},
                         {"layout", layout_name(layout)},
                         {"seed", std::to_string(seed)}});
  std::printf("rhoscan example: wrote %s (B=%lld H=%lld Hv=%lld T=%lld L=%lld E=%lld, %s, %s%s%s)\n", out.c_str(),
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(Hv),
              static_cast<long long>(T), static_cast<long long>(L), static_cast<long long>(E), dtype_name(dtype),
              layout_name(layout), args.flag("--with-state") ? ", initial state" : "",
              args.flag("--with-grads") ? ", upstream gradients" : "");
  return kExitOk;
}

const Registration kExample{"example", "write a random BDH-like input file for run / verify", example_help,
                            example_main};

}  // namespace
}  // namespace rhoscan::cli
