// Times the Vulkan backend on the cases and, when this build has a usable CUDA backend,
// the CUDA backend on the same float32 problems in the same run; prints one JSON line per
// (case, direction).
//
// median_ms: the Vulkan backend on Vulkan tensors (rhoscan::VulkanBuffer memory, as CUDA tensors
// live in CUDA memory): wall time of the call, which returns after waiting on the device's fence,
// median of --repeats after --warmup-ms of untimed calls, in the process's second phase, once its
// CUDA context exists (as when timing CUDA). vulkan_alone_median_ms: the same in the first phase,
// before the process has touched CUDA (a Vulkan-only program): NVIDIA's driver may run the GPU
// in a slower performance state then, which this pair shows. kernel_ms / device_ms: its GPU timestamps (compute
// kernels alone; the whole command buffer, the on-device gathers and scatters included).
// host_tensors_median_ms: the same call on host tensors, end to end (packing, PCIe transfers,
// unpacking): what a caller with host memory pays. cuda_median_ms: the CUDA backend, float32
// (no TF32), same problem, wall time after cudaDeviceSynchronize. ratio_vs_cuda = cuda_median_ms /
// median_ms (1.0 = as fast as CUDA; the target is >= 0.3).
//
//   rhoscan_vulkan_bench [--cases BDH-8k,BDH-base,small] [--repeats N] [--host-repeats N]
//                        [--warmup-ms MS] [--peak-tflops X] [--commit SHA]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rhoscan/rhoscan.h"
#include "rhoscan/vulkan.h"
#include "vulkan/vulkan_backend.h"

#ifdef RHOSCAN_BENCH_CUDA
#include <cuda_runtime.h>
#endif

using namespace rhoscan;

namespace {

struct Case {
  const char* name;
  int64_t B, H, Hv, T, L, E;
};
const Case kCases[] = {
    {"BDH-8k", 8, 4, 1, 512, 8192, 256},
    {"BDH-base", 24, 4, 1, 512, 256, 256},
    {"small", 2, 4, 1, 256, 512, 128},  // a quick check that the program works (lavapipe)
};
constexpr double kTargetRatio = 0.3;  // the target: >= 0.3x CUDA's float32 speed

// FLOPs of the chunked form at C = 64 (as the CLI's bench counts them), 3x for forward+backward.
double flops(const Case& c, bool backward) {
  const double C = 64;
  double f = double(c.B) * c.H * (4.0 * c.T * c.L * c.E + c.T * C * c.L + c.T * C * c.E);
  return backward ? 3 * f : f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Host tensors of one case, float32, BDH-like values: q >= 0 and sparse, decay in [0.5, 1).
struct Host {
  std::vector<float> q, v, a, G, ctx, R, N, dq, dv, da;
  explicit Host(const Case& c) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(0, 1);
    q.resize(c.B * c.H * c.T * c.L);
    for (float& x : q) x = u(rng) < 0.7f ? 0.0f : u(rng);
    v.resize(c.B * c.Hv * c.T * c.E);
    for (float& x : v) x = u(rng) - 0.5f;
    a.resize(c.H * c.L);
    for (float& x : a) x = 0.5f + 0.5f * u(rng);
    G.resize(c.B * c.H * c.T * c.E);
    for (float& x : G) x = u(rng) - 0.5f;
    ctx.resize(G.size());
    R.resize(c.B * c.H * c.L * c.E);
    N.resize(c.B * c.H * c.L);
    dq.resize(q.size());
    dv.resize(v.size());
    da.resize(a.size());
  }
  std::vector<std::vector<float>*> all() { return {&q, &v, &a, &G, &ctx, &R, &N, &dq, &dv, &da}; }
  unsigned long long bytes() {
    unsigned long long n = 0;
    for (auto* x : all()) n += x->size() * 4;
    return n;
  }
};

// Views of one case's tensors: pointers are host, Vulkan-buffer or CUDA memory.
struct Views {
  ForwardArgs f;
  BackwardArgs b;
  // p: the addresses of Host::all()'s tensors in that order
  Views(const Case& c, const std::vector<float*>& p, Device d) {
    auto T4 = [&](float* x, std::initializer_list<int64_t> s) { return TensorView::contiguous(x, DType::float32, s, d); };
    f.q = T4(p[0], {c.B, c.H, c.T, c.L});
    f.v = T4(p[1], {c.B, c.Hv, c.T, c.E});
    f.decay = T4(p[2], {c.H, c.L});
    b.grad_context = T4(p[3], {c.B, c.H, c.T, c.E});
    f.context = T4(p[4], {c.B, c.H, c.T, c.E});
    f.rho_out = T4(p[5], {c.B, c.H, c.L, c.E});
    f.rho_norm_out = T4(p[6], {c.B, c.H, c.L});
    b.q = f.q;
    b.v = f.v;
    b.decay = f.decay;
    b.grad_q = T4(p[7], {c.B, c.H, c.T, c.L});
    b.grad_v = T4(p[8], {c.B, c.Hv, c.T, c.E});
    b.grad_decay = T4(p[9], {c.H, c.L});
  }
};

std::vector<float*> host_pointers(Host& h) {
  std::vector<float*> p;
  for (auto* x : h.all()) p.push_back(x->data());
  return p;
}

// The case's tensors in Vulkan buffers (device-resident), uploaded from the host ones.
struct VulkanTensors {
  std::vector<VulkanBuffer> buffers;
  explicit VulkanTensors(Host& h) {
    for (auto* x : h.all()) {
      buffers.emplace_back(x->size() * 4);
      buffers.back().upload(x->data(), x->size() * 4);
    }
  }
  std::vector<float*> pointers() const {
    std::vector<float*> p;
    for (const VulkanBuffer& b : buffers) p.push_back(static_cast<float*>(b.data()));
    return p;
  }
  void download(Host& h) const {
    auto all = h.all();
    for (size_t i = 0; i < all.size(); ++i) buffers[i].download(all[i]->data(), all[i]->size() * 4);
  }
};

double wall_ms(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Timing {
  double median_ms = 0, device_ms = 0, kernel_ms = 0;
  unsigned long long bytes = 0;  // the backend's work buffers (Vulkan)
  std::string error;
};

// The Vulkan backend on the views (host or Vulkan tensors): each call returns after the device's
// fence, so the wall time is the call's whole cost.
// Untimed calls first, for at least warmup_ms: pipelines and buffers are built by the first, and
// the GPU's clocks rise only after some busy time.
Timing time_vulkan(const Views& w, bool backward, int repeats, double warmup_ms) {
  Options o;
  o.backend = Backend::vulkan;
  Timing t;
  std::vector<double> wall, dev, ker;
  try {
    const auto start = std::chrono::steady_clock::now();
    do {
      forward(w.f, o);
      if (backward) rhoscan::backward(w.b, o);
    } while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < warmup_ms);
    for (int i = 1; i <= repeats; ++i) {
      double d = 0, k = 0;
      double ms = wall_ms([&] {
        forward(w.f, o);
        d = vulkan::last_device_ms();
        k = vulkan::last_kernel_ms();
        if (backward) {
          rhoscan::backward(w.b, o);
          d += vulkan::last_device_ms();
          k += vulkan::last_kernel_ms();
        }
      });
      t.bytes = std::max(t.bytes, vulkan::last_device_bytes());
      if (i) wall.push_back(ms), dev.push_back(d), ker.push_back(k);
    }
  } catch (const Error& e) {
    t.error = e.what();
  }
  t.median_ms = median(wall);
  t.device_ms = median(dev);
  t.kernel_ms = median(ker);
  return t;
}

// Creates this process's CUDA context (when the build and machine have CUDA): true when it exists.
bool create_cuda_context() {
#ifdef RHOSCAN_BENCH_CUDA
  return backend_unavailable_reason(Backend::cuda).empty() && cudaFree(nullptr) == cudaSuccess;
#else
  return false;
#endif
}

Timing time_cuda(const Case& c, Host& h, bool backward, int repeats, double warmup_ms) {
  Timing t;
#ifdef RHOSCAN_BENCH_CUDA
  t.error = backend_unavailable_reason(Backend::cuda);
  if (!t.error.empty()) return t;
  std::vector<float*> ptrs;
  try {
    for (auto* x : h.all()) {
      void* p = nullptr;
      if (cudaMalloc(&p, x->size() * 4) != cudaSuccess) throw Error(ErrorKind::out_of_memory, "cudaMalloc failed");
      cudaMemcpy(p, x->data(), x->size() * 4, cudaMemcpyHostToDevice);
      ptrs.push_back(static_cast<float*>(p));
    }
    Views w(c, ptrs, Device::cuda);
    Options o;
    o.backend = Backend::cuda;  // float32 without TF32: plain FFMA, as the Vulkan shaders
    std::vector<double> wall;
    const auto start = std::chrono::steady_clock::now();
    do {
      forward(w.f, o);
      if (backward) rhoscan::backward(w.b, o);
      cudaDeviceSynchronize();
    } while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < warmup_ms);
    for (int i = 1; i <= repeats; ++i) {
      cudaDeviceSynchronize();
      double ms = wall_ms([&] {
        forward(w.f, o);
        if (backward) rhoscan::backward(w.b, o);
        cudaDeviceSynchronize();
      });
      if (i) wall.push_back(ms);
    }
    t.median_ms = median(wall);
  } catch (const Error& e) {
    t.error = e.what();
  }
  for (float* p : ptrs) cudaFree(p);
#else
  (void)c, (void)h, (void)backward, (void)repeats, (void)warmup_ms;
  t.error = "this bench was built without CUDA";
#endif
  return t;
}

// ||x - ref|| / ||ref||
double rms_rel(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Before timing: the Vulkan backend, on host tensors and on Vulkan tensors, against the float64
// reference on a problem with several chunks, a tail chunk and Hv = 1, on this machine's device.
// One JSON line per path; returns whether every output is within SPEC.md's float32 bars (1e-5
// forward, 1e-4 gradients) on both.
bool check_against_reference() {
  const Case c{"check", 2, 4, 1, 200, 512, 128};
  Host r(c);
  Options orf;
  orf.backend = Backend::reference;
  Views wr(c, host_pointers(r), Device::cpu);
  forward(wr.f, orf);
  backward(wr.b, orf);
  bool ok = true;
  for (Device d : {Device::cpu, Device::vulkan}) {
    Host v(c);
    Options ov;
    ov.backend = Backend::vulkan;
    if (d == Device::cpu) {
      Views wv(c, host_pointers(v), d);
      forward(wv.f, ov);
      backward(wv.b, ov);
    } else {
      VulkanTensors t(v);
      Views wv(c, t.pointers(), d);
      forward(wv.f, ov);
      backward(wv.b, ov);
      t.download(v);
    }
    const double e[6] = {rms_rel(v.ctx, r.ctx), rms_rel(v.R, r.R), rms_rel(v.N, r.N),
                         rms_rel(v.dq, r.dq), rms_rel(v.dv, r.dv), rms_rel(v.da, r.da)};
    const bool pass = e[0] <= 1e-5 && e[1] <= 1e-5 && e[2] <= 1e-5 && e[3] <= 1e-4 && e[4] <= 1e-4 && e[5] <= 1e-4;
    std::printf("{\"check\":\"vulkan (%s tensors) vs float64 reference, B2 H4 Hv1 T200 L512 E128\",\"context\":%.3g,"
                "\"rho\":%.3g,\"rho_norm\":%.3g,\"grad_q\":%.3g,\"grad_v\":%.3g,\"grad_decay\":%.3g,\"pass\":%s}\n",
                device_name(d), e[0], e[1], e[2], e[3], e[4], e[5], pass ? "true" : "false");
    std::fflush(stdout);
    ok = ok && pass;
  }
  return ok;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) o += ch;
  }
  return o;
}

// "null" or the number.
std::string num(double x) {
  if (!(x > 0)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names = {"BDH-8k", "BDH-base"};
  int repeats = 7, host_repeats = 3;
  double warmup_ms = 1000;
  double peak_tflops = 0;
  std::string commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--cases") {
      names.clear();
      std::string list = next();
      for (size_t p = 0; p <= list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        names.push_back(list.substr(p, q - p));
        p = q + 1;
      }
    } else if (a == "--repeats") {
      repeats = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--host-repeats") {
      host_repeats = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--warmup-ms") {
      warmup_ms = std::max(0.0, std::atof(next().c_str()));
    } else if (a == "--peak-tflops") {
      peak_tflops = std::atof(next().c_str());
    } else if (a == "--commit") {
      commit = next();
    } else {
      std::fprintf(stderr,
                   "usage: %s [--cases BDH-8k,BDH-base,small] [--repeats N] [--host-repeats N] [--warmup-ms MS] "
                   "[--peak-tflops X] [--commit SHA]\n",
                   argv[0]);
      return 2;
    }
  }
  std::string why = backend_unavailable_reason(Backend::vulkan);
  if (!why.empty()) {
    std::fprintf(stderr, "vulkan backend unavailable: %s\n", why.c_str());
    return 1;
  }
  std::fprintf(stderr, "vulkan device: %s\n", vulkan::device_description().c_str());
  const bool checked = check_against_reference();
  struct Work {
    const Case* c;
    std::unique_ptr<Host> host;
    std::unique_ptr<VulkanTensors> device;
    std::string setup_error;
    Timing alone[2];  // phase 1, forward and forward+backward
  };
  std::vector<Work> work;
  for (const std::string& n : names) {
    const Case* c = nullptr;
    for (const Case& k : kCases)
      if (n == k.name) c = &k;
    if (!c) {
      std::fprintf(stderr, "unknown case %s\n", n.c_str());
      return 2;
    }
    Work w{c, std::make_unique<Host>(*c), nullptr, "", {}};
    try {
      w.device = std::make_unique<VulkanTensors>(*w.host);
    } catch (const Error& e) {
      w.setup_error = e.what();
    }
    work.push_back(std::move(w));
  }
  auto time_on_device = [&](Work& w, bool backward) {
    Timing t;
    if (w.device) t = time_vulkan(Views(*w.c, w.device->pointers(), Device::vulkan), backward, repeats, warmup_ms);
    else t.error = w.setup_error;
    return t;
  };
  // Phase 1: the Vulkan backend alone in the process (no CUDA context yet).
  for (Work& w : work)
    for (bool backward : {false, true}) w.alone[backward] = time_on_device(w, backward);
  // Phase 2: with the CUDA context, Vulkan (Vulkan and host tensors) and CUDA, one after the other.
  const bool cuda_context = create_cuda_context();
  for (Work& w : work) {
    const Case* c = w.c;
    for (bool backward : {false, true}) {
      const Timing v = time_on_device(w, backward);
      const Timing host = time_vulkan(Views(*c, host_pointers(*w.host), Device::cpu), backward, host_repeats, 0);
      const Timing cu = time_cuda(*c, *w.host, backward, repeats, warmup_ms);
      const Timing& alone = w.alone[backward];
      const double f = flops(*c, backward);
      const double tflops = v.median_ms > 0 ? f / (v.median_ms * 1e-3) / 1e12 : 0;
      auto ratio = [&](double vulkan_ms) { return cu.error.empty() && cu.median_ms > 0 && vulkan_ms > 0 ? cu.median_ms / vulkan_ms : 0; };
      const double r = ratio(v.median_ms);
      std::printf("{\"case\":\"%s\",\"B\":%lld,\"H\":%lld,\"Hv\":%lld,\"T\":%lld,\"L\":%lld,\"E\":%lld,"
                  "\"dtype\":\"float32\",\"device\":\"vulkan\",\"tensors\":\"vulkan\",\"vulkan_device\":\"%s\","
                  "\"direction\":\"%s\",\"median_ms\":%s,\"kernel_ms\":%s,\"device_ms\":%s,\"tflops\":%.4f,",
                  c->name, (long long)c->B, (long long)c->H, (long long)c->Hv, (long long)c->T, (long long)c->L,
                  (long long)c->E, json_escape(vulkan::device_description()).c_str(),
                  backward ? "forward+backward" : "forward", num(v.median_ms).c_str(), num(v.kernel_ms).c_str(),
                  num(v.device_ms).c_str(), tflops);
      if (peak_tflops > 0)
        std::printf("\"limit_fraction\":%.4f,\"limit\":\"%.1f TFLOP/s float32 (given)\",", tflops / peak_tflops, peak_tflops);
      else
        std::printf("\"limit_fraction\":null,");
      std::printf("\"peak_bytes\":%llu,\"cuda_median_ms\":%s,\"ratio_vs_cuda\":%s,\"target_ratio\":%.1f,\"meets_target\":%s,"
                  "\"cuda_context\":%s,\"vulkan_alone_median_ms\":%s,\"vulkan_alone_kernel_ms\":%s,"
                  "\"vulkan_alone_ratio_vs_cuda\":%s,\"host_tensors_median_ms\":%s,\"repeats\":%d,\"host_repeats\":%d,"
                  "\"warmup_ms\":%.0f,\"commit\":\"%s\"",
                  v.bytes + w.host->bytes(), num(cu.median_ms).c_str(), num(r).c_str(), kTargetRatio,
                  r >= kTargetRatio ? "true" : (r > 0 ? "false" : "null"), cuda_context ? "true" : "false",
                  num(alone.median_ms).c_str(), num(alone.kernel_ms).c_str(), num(ratio(alone.median_ms)).c_str(),
                  num(host.median_ms).c_str(), repeats, host_repeats, warmup_ms, json_escape(commit).c_str());
      if (!cu.error.empty()) std::printf(",\"cuda_note\":\"%s\"", json_escape(cu.error).c_str());
      if (!v.error.empty()) std::printf(",\"error\":\"%s\"", json_escape(v.error).c_str());
      if (!host.error.empty()) std::printf(",\"host_tensors_error\":\"%s\"", json_escape(host.error).c_str());
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  return checked ? 0 : 3;
}
