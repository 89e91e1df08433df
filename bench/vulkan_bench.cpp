// Times the Vulkan backend on the cases and, when this build has a usable CUDA backend,
// the CUDA backend on the same cases in the same run; prints one JSON line per (case, direction).
//
// The Vulkan backend takes host tensors, so its wall time (median_ms) includes packing the
// strided host tensors, the PCIe transfers and unpacking; device_ms is its GPU time from Vulkan
// timestamps (transfers between staging and device buffers included, host packing excluded), and
// kernel_ms the compute kernels alone (what device-resident tensors would cost).
// vs_cuda is CUDA's median time / Vulkan's (1.0 = as fast as CUDA; the target is >= 0.3)
// on the end-to-end wall time; vs_cuda_kernels the same against kernel_ms. CUDA's tensors live on
// the GPU, so vs_cuda charges Vulkan alone for the host interface.
//
//   rhoscan_vulkan_bench [--cases BDH-8k,BDH-base] [--repeats N] [--peak-tflops X] [--commit SHA]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "rhoscan/rhoscan.h"
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
};

// Views of one case's tensors: pointers are host (Vulkan) or CUDA memory.
struct Views {
  ForwardArgs f;
  BackwardArgs b;
  Views(const Case& c, float* q, float* v, float* a, float* G, float* ctx, float* R, float* N, float* dq,
        float* dv, float* da, Device d) {
    auto T4 = [&](float* p, std::initializer_list<int64_t> s) { return TensorView::contiguous(p, DType::float32, s, d); };
    f.q = T4(q, {c.B, c.H, c.T, c.L});
    f.v = T4(v, {c.B, c.Hv, c.T, c.E});
    f.decay = T4(a, {c.H, c.L});
    f.context = T4(ctx, {c.B, c.H, c.T, c.E});
    f.rho_out = T4(R, {c.B, c.H, c.L, c.E});
    f.rho_norm_out = T4(N, {c.B, c.H, c.L});
    b.q = f.q;
    b.v = f.v;
    b.decay = f.decay;
    b.grad_context = T4(G, {c.B, c.H, c.T, c.E});
    b.grad_q = T4(dq, {c.B, c.H, c.T, c.L});
    b.grad_v = T4(dv, {c.B, c.Hv, c.T, c.E});
    b.grad_decay = T4(da, {c.H, c.L});
  }
};

double wall_ms(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Timing {
  double median_ms = 0, device_ms = 0, kernel_ms = 0;
  unsigned long long bytes = 0;
  std::string error;
};

Timing time_vulkan(const Case& c, Host& h, bool backward, int repeats) {
  Views w(c, h.q.data(), h.v.data(), h.a.data(), h.G.data(), h.ctx.data(), h.R.data(), h.N.data(), h.dq.data(),
          h.dv.data(), h.da.data(), Device::cpu);
  Options o;
  o.backend = Backend::vulkan;
  Timing t;
  std::vector<double> wall, dev, ker;
  try {
    for (int i = 0; i <= repeats; ++i) {  // the first call builds pipelines: not counted
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

Timing time_cuda(const Case& c, Host& h, bool backward, int repeats) {
  Timing t;
#ifdef RHOSCAN_BENCH_CUDA
  t.error = backend_unavailable_reason(Backend::cuda);
  if (!t.error.empty()) return t;
  std::vector<void*> ptrs;
  auto up = [&](std::vector<float>& x) {
    void* p = nullptr;
    if (cudaMalloc(&p, x.size() * 4) != cudaSuccess) throw Error(ErrorKind::out_of_memory, "cudaMalloc failed");
    cudaMemcpy(p, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    ptrs.push_back(p);
    return static_cast<float*>(p);
  };
  try {
    Views w(c, up(h.q), up(h.v), up(h.a), up(h.G), up(h.ctx), up(h.R), up(h.N), up(h.dq), up(h.dv), up(h.da),
            Device::cuda);
    Options o;
    o.backend = Backend::cuda;
    std::vector<double> wall;
    for (int i = 0; i <= repeats; ++i) {
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
  for (void* p : ptrs) cudaFree(p);
#else
  (void)c, (void)h, (void)backward, (void)repeats;
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

// Before timing: the Vulkan backend against the float64 reference on a problem with several
// chunks, a tail chunk and Hv = 1, on this machine's device. One JSON line; returns whether every
// output is within SPEC.md's float32 bars (1e-5 forward, 1e-4 gradients).
bool check_against_reference() {
  const Case c{"check", 2, 4, 1, 200, 512, 128};
  Host v(c), r(c);
  Views wv(c, v.q.data(), v.v.data(), v.a.data(), v.G.data(), v.ctx.data(), v.R.data(), v.N.data(), v.dq.data(),
           v.dv.data(), v.da.data(), Device::cpu);
  Views wr(c, r.q.data(), r.v.data(), r.a.data(), r.G.data(), r.ctx.data(), r.R.data(), r.N.data(), r.dq.data(),
           r.dv.data(), r.da.data(), Device::cpu);
  Options ov, orf;
  ov.backend = Backend::vulkan;
  orf.backend = Backend::reference;
  forward(wv.f, ov);
  backward(wv.b, ov);
  forward(wr.f, orf);
  backward(wr.b, orf);
  const double e[6] = {rms_rel(v.ctx, r.ctx), rms_rel(v.R, r.R), rms_rel(v.N, r.N),
                       rms_rel(v.dq, r.dq), rms_rel(v.dv, r.dv), rms_rel(v.da, r.da)};
  const bool ok = e[0] <= 1e-5 && e[1] <= 1e-5 && e[2] <= 1e-5 && e[3] <= 1e-4 && e[4] <= 1e-4 && e[5] <= 1e-4;
  std::printf("{\"check\":\"vulkan vs float64 reference, B2 H4 Hv1 T200 L512 E128\",\"context\":%.3g,\"rho\":%.3g,"
              "\"rho_norm\":%.3g,\"grad_q\":%.3g,\"grad_v\":%.3g,\"grad_decay\":%.3g,\"pass\":%s}\n",
              e[0], e[1], e[2], e[3], e[4], e[5], ok ? "true" : "false");
  std::fflush(stdout);
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names = {"BDH-8k", "BDH-base"};
  int repeats = 5;
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
    } else if (a == "--peak-tflops") {
      peak_tflops = std::atof(next().c_str());
    } else if (a == "--commit") {
      commit = next();
    } else {
      std::fprintf(stderr, "usage: %s [--cases BDH-8k,BDH-base,small] [--repeats N] [--peak-tflops X] [--commit SHA]\n", argv[0]);
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
  for (const std::string& n : names) {
    const Case* c = nullptr;
    for (const Case& k : kCases)
      if (n == k.name) c = &k;
    if (!c) {
      std::fprintf(stderr, "unknown case %s\n", n.c_str());
      return 2;
    }
    Host h(*c);
    for (bool backward : {false, true}) {
      Timing v = time_vulkan(*c, h, backward, repeats);
      Timing cu = time_cuda(*c, h, backward, repeats);
      const double f = flops(*c, backward);
      const double tflops = v.median_ms > 0 ? f / (v.median_ms * 1e-3) / 1e12 : 0;
      const double kernel_tflops = v.kernel_ms > 0 ? f / (v.kernel_ms * 1e-3) / 1e12 : 0;
      std::printf("{\"case\":\"%s\",\"B\":%lld,\"H\":%lld,\"Hv\":%lld,\"T\":%lld,\"L\":%lld,\"E\":%lld,"
                  "\"dtype\":\"float32\",\"device\":\"vulkan\",\"vulkan_device\":\"%s\",\"direction\":\"%s\","
                  "\"median_ms\":%.4f,\"device_ms\":%.4f,\"kernel_ms\":%.4f,\"tflops\":%.4f,\"kernel_tflops\":%.4f,",
                  c->name, (long long)c->B, (long long)c->H, (long long)c->Hv, (long long)c->T, (long long)c->L,
                  (long long)c->E, json_escape(vulkan::device_description()).c_str(),
                  backward ? "forward+backward" : "forward", v.median_ms, v.device_ms, v.kernel_ms, tflops, kernel_tflops);
      if (peak_tflops > 0)
        std::printf("\"limit_fraction\":%.4f,\"limit\":\"%.1f TFLOP/s float32 (given)\",", tflops / peak_tflops, peak_tflops);
      else
        std::printf("\"limit_fraction\":null,");
      std::printf("\"peak_bytes\":%llu,\"commit\":\"%s\",", v.bytes, json_escape(commit).c_str());
      if (cu.error.empty() && cu.median_ms > 0 && v.median_ms > 0)
        std::printf("\"cuda_median_ms\":%.4f,\"vs_cuda\":%.4f,\"vs_cuda_kernels\":%.4f", cu.median_ms,
                    cu.median_ms / v.median_ms, v.kernel_ms > 0 ? cu.median_ms / v.kernel_ms : 0.0);
      else
        std::printf("\"cuda_median_ms\":null,\"vs_cuda\":null,\"cuda_note\":\"%s\"", json_escape(cu.error).c_str());
      if (!v.error.empty()) std::printf(",\"error\":\"%s\"", json_escape(v.error).c_str());
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  return checked ? 0 : 3;
}
