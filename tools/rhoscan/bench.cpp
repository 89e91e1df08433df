// rhoscan bench: time forward, forward+backward and step on the cases of the issues, print
// ratios (against the device's limit and, on the CPU, a per-token loop), write JSON lines.
//
// The CPU device (this file) measures its limit as this machine's own OpenBLAS sgemm rate on a
// product of the case's size (T×L times L×E, all threads), found at run time in the process
// (librhoscan links OpenBLAS) or loaded from libopenblas.so.0; and it times a straightforward
// float32 per-token loop of SPEC.md's formulas on a prefix of the sequence, scaled to T (the
// loop's cost per token does not depend on t).
#include "rhoscan/bench.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "core/dtype.h"
#include "rhoscan/commands.h"

namespace rhoscan::cli::bench {

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::forward: return "forward";
    case Direction::forward_backward: return "forward+backward";
    case Direction::step: return "step";
  }
  return "?";
}

const std::vector<BenchCase>& case_table() {
  using D = Direction;
  static const std::vector<BenchCase> cases = {
      // issue 3: the CPU backend
      {"cpu-T2048-L1024", Device::cpu, 1, 4, 1, 2048, 1024, 256, DType::float32, {D::forward, D::forward_backward}},
      {"cpu-T512-L4096", Device::cpu, 2, 4, 1, 512, 4096, 256, DType::float32, {D::forward, D::forward_backward}},
      // issue 4: CUDA on the H200
      {"BDH-8k", Device::cuda, 8, 4, 1, 512, 8192, 256, DType::bfloat16, {D::forward, D::forward_backward}},
      {"BDH-base", Device::cuda, 24, 4, 1, 512, 256, 256, DType::bfloat16, {D::forward, D::forward_backward}},
      {"long-T8192", Device::cuda, 1, 4, 1, 8192, 2048, 256, DType::bfloat16, {D::forward, D::forward_backward}},
      {"step-8k", Device::cuda, 64, 4, 1, 1, 8192, 256, DType::bfloat16, {D::step}},
  };
  return cases;
}

double case_flops(const BenchCase& c, Direction d) {
  const double C = 64, B = c.B, H = c.H, T = c.T, L = c.L, E = c.E;
  if (d == Direction::step) return B * H * 4 * L * E;
  const double fwd = B * H * (4 * T * L * E + T * C * L + T * C * E);
  return d == Direction::forward ? fwd : 3 * fwd;
}

namespace {

std::map<Device, BenchDeviceFactory>& device_registry() {
  static std::map<Device, BenchDeviceFactory> r;
  return r;
}

}  // namespace

BenchDeviceRegistration::BenchDeviceRegistration(Device device, BenchDeviceFactory factory) {
  device_registry()[device] = factory;
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n == 0 ? 0 : (n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]));
}

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

// ---- this machine's float32 GEMM rate, through OpenBLAS found at run time ---------------------

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);
using SetThreadsFn = void (*)(int);

struct OpenBlas {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
  int (*get_threads)() = nullptr;
  OpenBlas() {
    void* self = RTLD_DEFAULT;
    sgemm = reinterpret_cast<SgemmFn>(dlsym(self, "cblas_sgemm"));
    set_threads = reinterpret_cast<SetThreadsFn>(dlsym(self, "openblas_set_num_threads"));
    get_threads = reinterpret_cast<int (*)()>(dlsym(self, "openblas_get_num_threads"));
    if (!sgemm || !set_threads) {
      void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
        set_threads = reinterpret_cast<SetThreadsFn>(dlsym(lib, "openblas_set_num_threads"));
        get_threads = reinterpret_cast<int (*)()>(dlsym(lib, "openblas_get_num_threads"));
      }
    }
  }
};

const OpenBlas& openblas() {
  static const OpenBlas o;
  return o;
}

// Median wall and CPU milliseconds of C[M×N] = A[M×K]·B[K×N] on `threads` threads (5 runs
// after one warm-up).
struct GemmTime {
  double wall_ms = 0, cpu_ms = 0;
};
GemmTime sgemm_time(int64_t M, int64_t K, int64_t N, int threads) {
  const OpenBlas& ob = openblas();
  if (!ob.sgemm || !ob.set_threads) return {};
  std::vector<float> A(M * K), B(K * N), C(M * N);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : A) x = u(rng);
  for (float& x : B) x = u(rng);
  const int before = ob.get_threads ? ob.get_threads() : threads;
  ob.set_threads(threads);
  std::vector<double> t, cpu;
  for (int r = 0; r < 6; ++r) {
    auto t0 = Clock::now();
    const double c0 = process_cpu_ms();
    ob.sgemm(101 /*RowMajor*/, 111 /*NoTrans*/, 111, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
             1.0f, A.data(), static_cast<int>(K), B.data(), static_cast<int>(N), 0.0f, C.data(), static_cast<int>(N));
    if (r > 0) t.push_back(ms_since(t0)), cpu.push_back(process_cpu_ms() - c0);
  }
  ob.set_threads(before);
  return {median(t), median(cpu)};
}

// ---- a straightforward float32 per-token loop of SPEC.md (the comparison the issue asks for) --

struct NaiveHead {
  int64_t L, E;
  std::vector<float> a, R, N, A, Bn, w, gw, c;
};

// One token: context from the state before the update, then the update (SPEC.md, Forward).
// Written once and compiled twice (below): at the project's default flags (the baseline ISA,
// what a straightforward loop gets) and cloned for AVX-512 / AVX2 like the backend's kernels.
__attribute__((always_inline)) inline void naive_token(NaiveHead& h, const float* q, const float* v, float* c) {
  const int64_t L = h.L, E = h.E;
  float s = 1e-6f;
  for (int64_t l = 0; l < L; ++l) s += q[l];
  std::fill(c, c + E, 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    const float coef = q[l] / s / (h.N[l] + 1e-6f);
    float* r = &h.R[l * E];
    for (int64_t e = 0; e < E; ++e) c[e] += coef * r[e];
    for (int64_t e = 0; e < E; ++e) r[e] = h.a[l] * r[e] + q[l] * v[e];
    h.N[l] = h.a[l] * h.N[l] + q[l];
  }
}

// SPEC.md's Backward, token by token in reverse, with R_t recomputed from checkpoints every
// ceil(sqrt(T)) tokens (the float64 reference's scheme, in float32).
__attribute__((always_inline)) inline void naive_backward(NaiveHead& h, int64_t T, const float* Q, const float* V,
                                                          const float* G, float* dq, float* dv, float* da) {
  const int64_t L = h.L, E = h.E;
  const int64_t S = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(double(T)))));
  std::fill(h.R.begin(), h.R.end(), 0.0f);
  std::fill(h.N.begin(), h.N.end(), 0.0f);
  std::vector<std::vector<float>> checkpoints;
  std::vector<float> Nt(T * L), seg, c(E);
  for (int64_t t = 0; t < T; ++t) {
    if (t % S == 0) checkpoints.push_back(h.R);
    std::copy(h.N.begin(), h.N.end(), Nt.begin() + t * L);
    naive_token(h, Q + t * L, V + t * E, c.data());
  }
  std::fill(h.A.begin(), h.A.end(), 0.0f);
  std::fill(h.Bn.begin(), h.Bn.end(), 0.0f);
  for (int64_t k = static_cast<int64_t>(checkpoints.size()) - 1; k >= 0; --k) {
    const int64_t t0 = k * S, t1 = std::min(T, t0 + S);
    seg.resize((t1 - t0) * L * E);
    h.R = checkpoints[k];
    std::copy(Nt.begin() + t0 * L, Nt.begin() + (t0 + 1) * L, h.N.begin());
    for (int64_t t = t0; t < t1; ++t) {
      std::copy(h.R.begin(), h.R.end(), seg.begin() + (t - t0) * L * E);
      naive_token(h, Q + t * L, V + t * E, c.data());
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const float* Rt = &seg[(t - t0) * L * E];
      const float* Nn = &Nt[t * L];
      const float* q = Q + t * L;
      const float* v = V + t * E;
      const float* g = G + t * E;
      float s = 1e-6f;
      for (int64_t l = 0; l < L; ++l) s += q[l];
      float gw_dot_w = 0;
      for (int64_t l = 0; l < L; ++l) {
        h.w[l] = q[l] / s;
        float acc = 0;
        for (int64_t e = 0; e < E; ++e) acc += g[e] * Rt[l * E + e];
        h.gw[l] = acc / (Nn[l] + 1e-6f);
        gw_dot_w += h.gw[l] * h.w[l];
      }
      float* dvt = dv + t * E;
      std::fill(dvt, dvt + E, 0.0f);
      for (int64_t l = 0; l < L; ++l) {
        const float* A = &h.A[l * E];
        float av = 0, ar = 0;
        for (int64_t e = 0; e < E; ++e) av += A[e] * v[e], ar += A[e] * Rt[l * E + e];
        dq[t * L + l] = (h.gw[l] - gw_dot_w) / s + av + h.Bn[l];
        da[l] += ar + h.Bn[l] * Nn[l];
        for (int64_t e = 0; e < E; ++e) dvt[e] += A[e] * q[l];
      }
      for (int64_t l = 0; l < L; ++l) {
        const float inv = 1.0f / (Nn[l] + 1e-6f);
        float* A = &h.A[l * E];
        for (int64_t e = 0; e < E; ++e) A[e] = g[e] * h.w[l] * inv + h.a[l] * A[e];
        h.Bn[l] = -h.w[l] * h.gw[l] * inv + h.a[l] * h.Bn[l];
      }
    }
  }
}

// The whole per-token run of one head (forward, then backward when asked), in two builds.
void naive_head(NaiveHead& h, int64_t T, const float* Q, const float* V, const float* G, bool backward_too) {
  std::vector<float> ctx(T * h.E);
  for (int64_t t = 0; t < T; ++t) naive_token(h, Q + t * h.L, V + t * h.E, &ctx[t * h.E]);
  if (backward_too) {
    std::vector<float> dq(T * h.L), dv(T * h.E), da(h.L);
    naive_backward(h, T, Q, V, G, dq.data(), dv.data(), da.data());
  }
}
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void naive_head_simd(NaiveHead& h, int64_t T, const float* Q, const float* V, const float* G, bool backward_too) {
  std::vector<float> ctx(T * h.E);
  for (int64_t t = 0; t < T; ++t) naive_token(h, Q + t * h.L, V + t * h.E, &ctx[t * h.E]);
  if (backward_too) {
    std::vector<float> dq(T * h.L), dv(T * h.E), da(h.L);
    naive_backward(h, T, Q, V, G, dq.data(), dv.data(), da.data());
  }
}

// ---- the CPU device ---------------------------------------------------------------------------

int64_t proc_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::atoll(line.c_str() + n + 1);
  return -1;
}

class CpuDevice final : public BenchDevice {
 public:
  explicit CpuDevice(const BenchSettings& s) : threads_(s.num_threads > 0 ? s.num_threads : hardware_threads()) {}
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    std::string model = "cpu";
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) {
        model = line.substr(line.find(':') + 2);
        break;
      }
    return model + ", " + std::to_string(threads_) + " of " + std::to_string(hardware_threads()) + " threads";
  }
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw Error(ErrorKind::out_of_memory, "bench: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  double time_ms(const std::function<void()>& fn) override {
    auto t0 = Clock::now();
    fn();
    return ms_since(t0);
  }
  // Linux: writing 5 to clear_refs resets the peak resident set size (VmHWM).
  void reset_peak() override {
    std::ofstream("/proc/self/clear_refs") << "5";
    baseline_kib_ = proc_status_kib("VmRSS:");
  }
  int64_t peak_bytes() override {
    const int64_t hwm = proc_status_kib("VmHWM:");
    return hwm < 0 || baseline_kib_ < 0 ? -1 : (hwm - baseline_kib_) * 1024;
  }
  double cpu_time_ms() override { return process_cpu_ms(); }
  // Measured afresh for every case, right after it, so that both see the same machine load.
  Limit limit(const BenchCase& c, Direction d, DType) override {
    const int64_t M = d == Direction::step ? c.B * c.H : std::min<int64_t>(c.T, 4096);
    const GemmTime g = sgemm_time(M, c.L, c.E, threads_);
    if (g.wall_ms <= 0) return {0, -1, "no OpenBLAS found: no GEMM reference rate"};
    const double gemm_flops = 2.0 * M * c.L * c.E;
    const double rate = gemm_flops / (g.wall_ms * 1e6);
    char text[200];
    std::snprintf(text, sizeof text, "OpenBLAS sgemm %lldx%lldx%lld on %d threads: %.1f GFLOP/s (%.1f per CPU-second)",
                  (long long)M, (long long)c.L, (long long)c.E, threads_, rate, gemm_flops / (g.cpu_ms * 1e6));
    const double scale = case_flops(c, d) / gemm_flops;
    return {g.wall_ms * scale, g.cpu_ms * scale, text};
  }
  void naive_loop(const BenchCase& c, Direction d, const BenchSettings&, Limit& plain, Limit& simd) override {
    plain = simd = {};
    if (d == Direction::step) return;
    plain = naive_run(c, d, false);
    simd = naive_run(c, d, true);
    char text[320];
    std::snprintf(text, sizeof text,
                  "float32 per-token loop, %lld of %lld tokens timed and scaled, %d threads; default flags "
                  "%.1f ms (CPU %.1f ms), AVX2/AVX-512 clones %.1f ms (CPU %.1f ms)",
                  static_cast<long long>(std::min<int64_t>(c.T, kNaiveTokens)), static_cast<long long>(c.T), threads_,
                  plain.time_ms, plain.cpu_ms, simd.time_ms, simd.cpu_ms);
    plain.description = simd.description = text;
  }

 private:
  static constexpr int64_t kNaiveTokens = 64;
  Limit naive_run(const BenchCase& c, Direction d, bool simd) {
    const int64_t Tn = std::min<int64_t>(c.T, kNaiveTokens);
    const int64_t L = c.L, E = c.E, heads = c.B * c.H;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0, 1);
    std::normal_distribution<float> nrm(0, 1);
    std::vector<float> Q(Tn * L), V(Tn * E), G(Tn * E), a(L);
    for (float& x : Q) x = u(rng) < 0.5f ? 0.0f : u(rng);
    for (float& x : V) x = nrm(rng);
    for (float& x : G) x = nrm(rng);
    for (float& x : a) x = 0.9f + 0.1f * u(rng);
    const bool backward_too = d == Direction::forward_backward;
    auto t0 = Clock::now();
    const double c0 = process_cpu_ms();
    std::vector<std::thread> pool;
    for (int w = 0; w < threads_; ++w)
      pool.emplace_back([&, w] {
        for (int64_t hd = w; hd < heads; hd += threads_) {
          NaiveHead h{L, E, a, std::vector<float>(L * E), std::vector<float>(L), std::vector<float>(L * E),
                      std::vector<float>(L), std::vector<float>(L), std::vector<float>(L), {}};
          if (simd) naive_head_simd(h, Tn, Q.data(), V.data(), G.data(), backward_too);
          else naive_head(h, Tn, Q.data(), V.data(), G.data(), backward_too);
        }
      });
    for (auto& t : pool) t.join();
    const double scale = static_cast<double>(c.T) / static_cast<double>(Tn);
    return {ms_since(t0) * scale, (process_cpu_ms() - c0) * scale, ""};
  }
  int threads_;
  int64_t baseline_kib_ = -1;
};

const BenchDeviceRegistration kCpuDevice(Device::cpu, [](const BenchSettings& s) -> std::unique_ptr<BenchDevice> {
  return std::make_unique<CpuDevice>(s);
});

// ---- the command ------------------------------------------------------------------------------

struct DeviceTensor {
  BenchDevice* dev = nullptr;
  void* data = nullptr;
  size_t bytes = 0;
  DeviceTensor(BenchDevice& d, size_t n) : dev(&d), data(d.allocate(n)), bytes(n) {}
  ~DeviceTensor() { dev->release(data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
};

// A tensor of `count` elements of `dtype` with values from gen(), uploaded to the device.
template <class Gen>
std::unique_ptr<DeviceTensor> random_tensor(BenchDevice& dev, DType dtype, int64_t count, Gen gen) {
  std::vector<unsigned char> host(static_cast<size_t>(count) * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) detail::store_from_double(host.data(), dtype, i, gen());
  auto t = std::make_unique<DeviceTensor>(dev, host.size());
  dev.upload(t->data, host.data(), host.size());
  return t;
}

std::string current_commit() {
  if (const char* env = std::getenv("RHOSCAN_COMMIT")) return env;
#ifdef RHOSCAN_GIT_COMMIT
  return RHOSCAN_GIT_COMMIT;
#else
  std::string out;
  if (FILE* p = popen("git rev-parse --short=12 HEAD 2>/dev/null", "r")) {
    char buf[64];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (out.empty()) return "unknown";
  if (FILE* p = popen("git status --porcelain -uno 2>/dev/null", "r")) {
    char buf[8];
    if (std::fgets(buf, sizeof buf, p)) out += "-dirty";
    pclose(p);
  }
  return out;
#endif
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

const char* bench_help() {
  return "usage: rhoscan bench [--device cpu|cuda] [--backward] [--cases NAME,...] [--repeats N]\n"
         "                     [--json FILE] [--dtype f32|bf16|f16] [--threads N] [--chunk N]\n"
         "                     [--workspace-mib N] [--commit HASH] [--no-naive] [--no-saved]\n"
         "                     [--save-keys] [--with-state] [--list] [--shape B,H,Hv,T,L,E ...]\n\n"
         "Times the operator on the cases of the project's issues and prints, per case: the median\n"
         "time, GFLOP/s (FLOPs = B*H*(4*T*L*E + T*C*L + T*C*E) at C = 64; 3x for forward+backward),\n"
         "and ratios measured in the same run: limit_fraction = (the time at the device's limit) /\n"
         "(measured time) -- on the CPU the limit is this machine's own OpenBLAS sgemm rate on a\n"
         "(T x L)(L x E) product -- and, on the CPU, the speed-up over a straightforward float32\n"
         "per-token loop of the same formulas (timed on the first 64 tokens and scaled to T).\n\n"
         "  --device D     cpu (default) or cuda; selects the cases marked for that device\n"
         "  --backward     also time forward+backward (forward alone otherwise)\n"
         "  --cases LIST   comma-separated case names (see --list), any device's\n"
         "  --shape S      a case of your own, S = B,H,Hv,T,L,E (repeatable; on --device, in the\n"
         "                 dtype of --dtype or bfloat16 on cuda, float32 on cpu), named shape-B..-E..\n"
         "  --repeats N    timed repetitions after one warm-up (default 5); the median is reported\n"
         "  --json FILE    append one JSON object per case and direction to FILE\n"
         "  --dtype D      input dtype of q, v, context (default: the case's)\n"
         "  --threads N    CPU threads (default: all)\n"
         "  --chunk N      chunk size option passed to the backend (default: its own)\n"
         "  --workspace-mib N  options.max_workspace_bytes in MiB (default: the backend's cap)\n"
         "  --commit HASH  recorded in the JSON (default: $RHOSCAN_COMMIT, else git rev-parse)\n"
         "  --no-naive     skip the per-token loop comparison\n"
         "  --no-saved     forward+backward without the forward's saved buffer (the backward recomputes)\n"
         "  --save-keys    forward+backward with the saved buffer's keys (saved_numel's with_keys: twice\n"
         "                 q's bytes more; the CUDA backward then skips its normaliser pass)\n"
         "  --with-state   a carried state (training on a stream cut into segments): the forward starts\n"
         "                 from an initial rho and rho_norm; forward+backward also takes dLoss/d(final\n"
         "                 state) and returns the initial state's gradients (steps ignore it)\n"
         "  --list         print the case table and exit\n"
         "A progress line per case goes to stderr.\n";
}

// --shape B,H,Hv,T,L,E: six positive sizes, Hv 1 or H.
std::array<int64_t, 6> parse_shape(const std::string& text) {
  std::array<int64_t, 6> v{};
  std::stringstream ss(text);
  std::string item;
  size_t n = 0;
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::invalid_argument, "bench: --shape wants B,H,Hv,T,L,E (six positive integers, Hv 1 or H), got '" +
                                                  text + "': " + why);
  };
  while (std::getline(ss, item, ',')) {
    if (n == 6) throw bad("more than six sizes");
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < 1) throw bad("'" + item + "' is not a positive integer");
    v[n++] = x;
  }
  if (n != 6) throw bad(std::to_string(n) + " sizes");
  if (v[2] != 1 && v[2] != v[1]) throw bad("Hv = " + std::to_string(v[2]) + " is neither 1 nor H = " + std::to_string(v[1]));
  return v;
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::float32;
  if (s == "bf16" || s == "bfloat16") return DType::bfloat16;
  if (s == "f16" || s == "float16") return DType::float16;
  if (s == "f64" || s == "float64") return DType::float64;
  throw Error(ErrorKind::invalid_argument, "bench: --dtype must be f32, bf16, f16 or f64, got '" + s + "'");
}

int64_t parse_int(const std::string& flag, const std::string& s, int64_t min) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < min)
    throw Error(ErrorKind::invalid_argument, "bench: " + flag + " needs an integer >= " + std::to_string(min) + ", got '" + s + "'");
  return v;
}

struct Result {
  double median_ms = 0, gflops = 0, limit_fraction = 0, naive_ms = 0;
  double median_cpu_ms = -1, limit_fraction_cpu = -1;  // in process CPU time (CPU device)
  std::string all_times;  // every repetition's wall ms, for judging the spread on a busy machine
  int64_t peak_bytes = 0, tensor_bytes = 0;
  Limit limit, naive, naive_simd;
};

Result run_case(BenchDevice& dev, const BenchCase& c, Direction d, DType dtype, const BenchSettings& s,
                bool with_naive) {
  const DType sd = DType::float32;  // states and decay
  const int64_t T = d == Direction::step ? 1 : c.T;
  // A cheap generator: the inputs only need to be plausible (q >= 0 and half zeros, v and
  // gradients of both signs), and setup time is not measured but adds up on a busy machine.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto unit = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
  };
  auto sparse_q = [&] { return unit() < 0.5 ? 0.0 : unit(); };
  auto gauss = [&] { return (unit() + unit() + unit() - 1.5) * 2.0; };
  auto decay_gen = [&] { return 0.9 + 0.1 * unit(); };
  const int64_t nq = c.B * c.H * T * c.L, nv = c.B * c.Hv * T * c.E, nc = c.B * c.H * T * c.E;
  const int64_t ns = c.B * c.H * c.L * c.E, nn = c.B * c.H * c.L;
  auto q = random_tensor(dev, dtype, nq, sparse_q);
  auto v = random_tensor(dev, dtype, nv, gauss);
  auto a = random_tensor(dev, sd, c.H * c.L, decay_gen);
  auto rho = std::make_unique<DeviceTensor>(dev, ns * dtype_size(sd));
  auto norm = std::make_unique<DeviceTensor>(dev, nn * dtype_size(sd));
  auto ctx = std::make_unique<DeviceTensor>(dev, nc * dtype_size(dtype));
  const Device dv = dev.device();
  auto view = [&](DeviceTensor& t, DType dt, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(t.data, dt, shape, dv, 0);
  };
  Options opt;
  opt.backend = Backend::automatic;
  opt.num_threads = s.num_threads;
  opt.chunk_size = s.chunk_size;
  opt.max_workspace_bytes = s.max_workspace_bytes;
  std::function<void()> call;
  std::unique_ptr<DeviceTensor> g, gq, gv, ga, saved;
  int64_t tensor_bytes = static_cast<int64_t>(q->bytes + v->bytes + a->bytes + rho->bytes + norm->bytes + ctx->bytes);
  ForwardArgs fa{view(*q, dtype, {c.B, c.H, T, c.L}), view(*v, dtype, {c.B, c.Hv, T, c.E}),
                 view(*a, sd, {c.H, c.L}), std::nullopt, std::nullopt, view(*ctx, dtype, {c.B, c.H, T, c.E}),
                 view(*rho, sd, {c.B, c.H, c.L, c.E}), view(*norm, sd, {c.B, c.H, c.L}), std::nullopt};
  // --with-state: the state a previous segment left (rho of both signs, a normaliser of order 1)
  const bool with_state = s.with_state && d != Direction::step;
  std::unique_ptr<DeviceTensor> rho0, norm0, g_rho, g_norm, gr_rho, gr_norm;
  if (with_state) {
    rho0 = random_tensor(dev, sd, ns, gauss);
    norm0 = random_tensor(dev, sd, nn, [&] { return 2.0 * unit(); });
    fa.rho = view(*rho0, sd, {c.B, c.H, c.L, c.E});
    fa.rho_norm = view(*norm0, sd, {c.B, c.H, c.L});
    tensor_bytes += static_cast<int64_t>(rho0->bytes + norm0->bytes);
  }
  BackwardArgs ba;
  if (d == Direction::step) {
    // a state that has seen a sequence: N of order 1
    StepArgs sa{view(*q, dtype, {c.B, c.H, c.L}), view(*v, dtype, {c.B, c.Hv, c.E}), fa.decay, fa.rho_out,
                fa.rho_norm_out, view(*ctx, dtype, {c.B, c.H, c.E})};
    call = [sa, opt] { step(sa, opt); };
  } else if (d == Direction::forward) {
    call = [fa, opt] { forward(fa, opt); };
  } else {
    g = random_tensor(dev, dtype, nc, gauss);
    gq = std::make_unique<DeviceTensor>(dev, nq * dtype_size(dtype));
    gv = std::make_unique<DeviceTensor>(dev, nv * dtype_size(dtype));
    ga = std::make_unique<DeviceTensor>(dev, c.H * c.L * dtype_size(sd));
    tensor_bytes += static_cast<int64_t>(g->bytes + gq->bytes + gv->bytes + ga->bytes);
    ba.q = fa.q, ba.v = fa.v, ba.decay = fa.decay;
    ba.grad_context = view(*g, dtype, {c.B, c.H, T, c.E});
    ba.grad_q = view(*gq, dtype, {c.B, c.H, T, c.L});
    ba.grad_v = view(*gv, dtype, {c.B, c.Hv, T, c.E});
    ba.grad_decay = view(*ga, sd, {c.H, c.L});
    if (with_state) {
      ba.rho = fa.rho, ba.rho_norm = fa.rho_norm;
      g_rho = random_tensor(dev, sd, ns, gauss);
      g_norm = random_tensor(dev, sd, nn, gauss);
      gr_rho = std::make_unique<DeviceTensor>(dev, ns * dtype_size(sd));
      gr_norm = std::make_unique<DeviceTensor>(dev, nn * dtype_size(sd));
      ba.grad_rho_out = view(*g_rho, sd, {c.B, c.H, c.L, c.E});
      ba.grad_rho_norm_out = view(*g_norm, sd, {c.B, c.H, c.L});
      ba.grad_rho = view(*gr_rho, sd, {c.B, c.H, c.L, c.E});
      ba.grad_rho_norm = view(*gr_norm, sd, {c.B, c.H, c.L});
      tensor_bytes += static_cast<int64_t>(g_rho->bytes + g_norm->bytes + gr_rho->bytes + gr_norm->bytes);
    }
    // What a training step does: the forward keeps what the backward would recompute (docs/API.md).
    const int64_t n_saved = s.saved ? saved_numel(c.B, c.H, T, c.L, dtype, with_state, s.chunk_size, s.saved_keys) : 0;
    if (n_saved > 0) {
      saved = std::make_unique<DeviceTensor>(dev, n_saved * 4);
      tensor_bytes += static_cast<int64_t>(saved->bytes);
      fa.saved = ba.saved = view(*saved, DType::float32, {n_saved});
    }
    call = [fa, ba, opt] {
      forward(fa, opt);
      backward(ba, opt);
    };
  }
  // The peak covers the warm-up too: workspace that the allocator keeps between calls counts.
  dev.reset_peak();
  call();  // warm-up (thread pool, page faults, lazy initialisation)
  std::vector<double> times, cpu;
  for (int r = 0; r < s.repeats; ++r) {
    const double c0 = dev.cpu_time_ms();
    times.push_back(dev.time_ms(call));
    cpu.push_back(dev.cpu_time_ms() - c0);
  }
  Result res;
  const int64_t workspace = dev.peak_bytes();
  res.tensor_bytes = tensor_bytes;
  res.peak_bytes = workspace < 0 ? -1 : tensor_bytes + workspace;
  res.median_ms = median(times);
  for (double t : times) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", res.all_times.empty() ? "" : " ", t);
    res.all_times += buf;
  }
  res.gflops = case_flops(c, d) / (res.median_ms * 1e6);
  res.limit = dev.limit(c, d, dtype);
  res.limit_fraction = res.limit.time_ms > 0 ? res.limit.time_ms / res.median_ms : 0;
  if (dev.cpu_time_ms() >= 0) {
    res.median_cpu_ms = median(cpu);
    if (res.limit.cpu_ms > 0) res.limit_fraction_cpu = res.limit.cpu_ms / res.median_cpu_ms;
  }
  if (with_naive) {
    dev.naive_loop(c, d, s, res.naive, res.naive_simd);
    res.naive_ms = res.naive.time_ms;
  }
  return res;
}

int bench_main(const std::vector<std::string>& args) {
  Device device = Device::cpu;
  bool backward_too = false, with_naive = true, list = false;
  std::vector<std::string> names;
  std::vector<std::array<int64_t, 6>> shapes;
  std::string json_path, commit;
  std::optional<DType> dtype;
  BenchSettings s;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error(ErrorKind::invalid_argument, "bench: " + a + " needs a value");
      return args[++i];
    };
    if (a == "--device") {
      std::string d = value();
      if (d == "cpu") device = Device::cpu;
      else if (d == "cuda") device = Device::cuda;
      else throw Error(ErrorKind::invalid_argument, "bench: --device must be cpu or cuda, got '" + d + "'");
    } else if (a == "--backward") {
      backward_too = true;
    } else if (a == "--cases") {
      std::stringstream ss(value());
      for (std::string n; std::getline(ss, n, ',');)
        if (!n.empty()) names.push_back(n);
    } else if (a == "--shape") {
      shapes.push_back(parse_shape(value()));
    } else if (a == "--repeats") {
      s.repeats = static_cast<int>(parse_int(a, value(), 1));
    } else if (a == "--json") {
      json_path = value();
    } else if (a == "--dtype") {
      dtype = parse_dtype(value());
    } else if (a == "--threads") {
      s.num_threads = static_cast<int>(parse_int(a, value(), 1));
    } else if (a == "--chunk") {
      s.chunk_size = parse_int(a, value(), 1);
    } else if (a == "--workspace-mib") {
      s.max_workspace_bytes = parse_int(a, value(), 1) << 20;
    } else if (a == "--commit") {
      commit = value();
    } else if (a == "--no-naive") {
      with_naive = false;
    } else if (a == "--no-saved") {
      s.saved = false;
    } else if (a == "--save-keys") {
      s.saved_keys = true;
    } else if (a == "--with-state") {
      s.with_state = true;
    } else if (a == "--list") {
      list = true;
    } else {
      throw Error(ErrorKind::invalid_argument, "bench: unknown argument '" + a + "' (see rhoscan bench --help)");
    }
  }
  if (list) {
    std::printf("%-16s %-5s %4s %3s %3s %6s %7s %5s %-9s %s\n", "case", "dev", "B", "H", "Hv", "T", "L", "E", "dtype",
                "directions");
    for (const BenchCase& c : case_table()) {
      std::string dirs;
      for (Direction d : c.directions) dirs += std::string(dirs.empty() ? "" : ",") + direction_name(d);
      std::printf("%-16s %-5s %4lld %3lld %3lld %6lld %7lld %5lld %-9s %s\n", c.name, device_name(c.device),
                  (long long)c.B, (long long)c.H, (long long)c.Hv, (long long)c.T, (long long)c.L, (long long)c.E,
                  dtype_name(c.dtype), dirs.c_str());
    }
    return kExitOk;
  }
  std::vector<BenchCase> cases;
  // Custom shapes: named from their sizes; the names live as long as the process (BenchCase holds
  // a const char*).
  static std::deque<std::string> shape_names;
  for (const auto& sh : shapes) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "shape-B%lld-H%lld-Hv%lld-T%lld-L%lld-E%lld", (long long)sh[0], (long long)sh[1],
                  (long long)sh[2], (long long)sh[3], (long long)sh[4], (long long)sh[5]);
    shape_names.emplace_back(buf);
    cases.push_back({shape_names.back().c_str(), device, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], DType::bfloat16,
                     {Direction::forward, Direction::forward_backward}});
  }
  if (names.empty() && shapes.empty()) {
    for (const BenchCase& c : case_table())
      if (c.device == device) cases.push_back(c);
  } else {
    for (const std::string& n : names) {
      auto it = std::find_if(case_table().begin(), case_table().end(), [&](const BenchCase& c) { return n == c.name; });
      if (it == case_table().end()) throw Error(ErrorKind::invalid_argument, "bench: unknown case '" + n + "' (see --list)");
      cases.push_back(*it);
    }
  }
  auto factory = device_registry().find(device);
  if (factory == device_registry().end())
    throw Error(ErrorKind::backend_unavailable,
                std::string("bench: no benchmark device '") + device_name(device) + "' in this build");
  std::unique_ptr<BenchDevice> dev = factory->second(s);
  if (commit.empty()) commit = current_commit();
  double load[3] = {-1, -1, -1};
  getloadavg(load, 3);
  std::printf("rhoscan bench: %s; backend %s; commit %s; load average %.2f %.2f %.2f\n", dev->description().c_str(),
              backend_name(resolve_backend(Backend::automatic, device)), commit.c_str(), load[0], load[1], load[2]);
  std::printf("%-16s %-17s %-8s %10s %9s %10s %10s %10s\n", "case", "direction", "dtype", "median_ms", "GFLOP/s",
              "limit_frac", "(cpu-time)", "vs_naive");
  std::FILE* json = nullptr;
  if (!json_path.empty()) {
    json = std::fopen(json_path.c_str(), "a");
    if (!json) throw Error(ErrorKind::io, "bench: cannot open " + json_path + " for appending");
  }
  for (const BenchCase& c : cases) {
    for (Direction d : c.directions) {
      if (d == Direction::forward_backward && !backward_too) continue;
      const DType dt = dtype.value_or(c.dtype == DType::bfloat16 && device == Device::cpu ? DType::float32 : c.dtype);
      // (a carried state: the case's name with "+state" in the table; the JSON's with_state says it)
      const bool from_state = s.with_state && d != Direction::step;  // (steps ignore it)
      const std::string shown = std::string(c.name) + (from_state ? "+state" : "");
      std::fprintf(stderr, "[bench] %s %s B%lld H%lld T%lld L%lld E%lld %s ...\n", shown.c_str(), direction_name(d),
                   (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.L, (long long)c.E, dtype_name(dt));
      Result r = run_case(*dev, c, d, dt, s, with_naive && d != Direction::step);
      const double speedup = r.naive_ms > 0 ? r.naive_ms / r.median_ms : 0;
      const double speedup_cpu = r.naive.cpu_ms > 0 && r.median_cpu_ms > 0 ? r.naive.cpu_ms / r.median_cpu_ms : -1;
      const double speedup_simd = r.naive_simd.time_ms > 0 ? r.naive_simd.time_ms / r.median_ms : 0;
      const double speedup_simd_cpu =
          r.naive_simd.cpu_ms > 0 && r.median_cpu_ms > 0 ? r.naive_simd.cpu_ms / r.median_cpu_ms : -1;
      std::printf("%-16s %-17s %-8s %10.2f %9.1f %10.3f %10.3f %9.1fx\n", shown.c_str(), direction_name(d), dtype_name(dt),
                  r.median_ms, r.gflops, r.limit_fraction, r.limit_fraction_cpu, speedup);
      std::printf("    limit: %s\n", r.limit.description.c_str());
      if (r.naive_ms > 0)
        std::printf("    naive: %s\n    speed-up: %.1fx (CPU time %.1fx); over the vectorised loop %.1fx (CPU time %.1fx)\n",
                    r.naive.description.c_str(), speedup, speedup_cpu, speedup_simd, speedup_simd_cpu);
      std::printf("    peak memory: %.1f MiB (tensors %.1f MiB)\n", r.peak_bytes / 1048576.0, r.tensor_bytes / 1048576.0);
      std::fflush(stdout);
      if (json) {
        std::fprintf(json,
                     "{\"case\":\"%s\",\"B\":%lld,\"H\":%lld,\"Hv\":%lld,\"T\":%lld,\"L\":%lld,\"E\":%lld,"
                     "\"dtype\":\"%s\",\"device\":\"%s\",\"direction\":\"%s\",\"median_ms\":%.4f,\"tflops\":%.6f,"
                     "\"limit_fraction\":%.4f,\"peak_bytes\":%lld,\"commit\":\"%s\",\"backend\":\"%s\","
                     "\"repeats\":%d,\"threads\":%d,\"chunk\":%lld,\"limit\":\"%s\",\"naive_ms\":%.2f,"
                     "\"speedup_vs_naive\":%.2f,\"naive\":\"%s\",\"machine\":\"%s\",\"load_average\":%.2f,"
                     "\"median_cpu_ms\":%.3f,\"limit_fraction_cpu_time\":%.4f,\"speedup_vs_naive_cpu_time\":%.2f,"
                     "\"naive_vectorised_ms\":%.2f,\"speedup_vs_naive_vectorised\":%.2f,"
                     "\"speedup_vs_naive_vectorised_cpu_time\":%.2f,\"median_wall_ms_all\":\"%s\","
                     "\"max_workspace_bytes\":%lld,\"saved\":%s,\"saved_keys\":%s,\"with_state\":%s}\n",
                     c.name, (long long)c.B, (long long)c.H, (long long)c.Hv, (long long)(d == Direction::step ? 1 : c.T),
                     (long long)c.L, (long long)c.E, dtype_name(dt), device_name(device), direction_name(d), r.median_ms,
                     r.gflops / 1000.0, r.limit_fraction, (long long)r.peak_bytes, json_escape(commit).c_str(),
                     backend_name(resolve_backend(Backend::automatic, device)), s.repeats,
                     s.num_threads > 0 ? s.num_threads : hardware_threads(),
                     (long long)s.chunk_size, json_escape(r.limit.description).c_str(), r.naive_ms, speedup,
                     json_escape(r.naive.description).c_str(), json_escape(dev->description()).c_str(), load[0],
                     r.median_cpu_ms, r.limit_fraction_cpu, speedup_cpu, r.naive_simd.time_ms, speedup_simd,
                     speedup_simd_cpu, r.all_times.c_str(), (long long)s.max_workspace_bytes,
                     d == Direction::forward_backward && s.saved ? "true" : "false",
                     d == Direction::forward_backward && s.saved && s.saved_keys ? "true" : "false",
                     from_state ? "true" : "false");
        std::fflush(json);
      }
    }
  }
  if (json) std::fclose(json);
  return kExitOk;
}

const Registration kBench{"bench", "time the operator on the issues' cases; ratios and JSON lines", bench_help,
                          bench_main};

}  // namespace
}  // namespace rhoscan::cli::bench
