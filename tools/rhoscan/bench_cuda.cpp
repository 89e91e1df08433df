// `rhoscan bench-cuda`: times the CUDA backend on the benchmark shapes of issues 4 and 5 with
// CUDA events (median of repeated runs), and prints achieved TFLOP/s, peak device memory and
// limit_fraction = (physical limit time) / (measured time), where the limit time is
// max(FLOPs / 790 TFLOP/s (bf16, f16) or 495 TFLOP/s (f32, TF32 rate), minimal bytes / 4.3 TB/s)
// and FLOPs = B·H·(4·T·L·E + T·C·L + T·C·E) at C = 64 (3× for forward+backward).
// Results are appended as JSON lines (--json FILE). Kept apart from the CPU bench (bench.cpp)
// so that `rhoscan bench --device cuda` can call run_cuda_bench() once both are merged.
#ifdef RHOSCAN_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "rhoscan/commands.h"
#include "rhoscan/rhoscan.h"

namespace rhoscan::cli {
namespace {

struct BenchCase {
  const char* name;
  int64_t B, H, Hv, T, L, E;
  bool step;
};

const BenchCase kCases[] = {
    {"bdh-8k", 8, 4, 1, 512, 8192, 256, false},
    {"bdh-base", 24, 4, 1, 512, 256, 256, false},
    {"long", 1, 4, 1, 8192, 2048, 256, false},
    {"step", 64, 4, 1, 1, 8192, 256, true},
};

void check(cudaError_t st, const char* what) {
  if (st != cudaSuccess) throw Error(ErrorKind::internal, std::string(what) + ": " + cudaGetErrorString(st));
}

struct DeviceTensor {
  void* p = nullptr;
  size_t bytes = 0;
  TensorView view;
  DeviceTensor(DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes = static_cast<size_t>(n) * dtype_size(dtype);
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    view = TensorView::contiguous(p, dtype, shape, Device::cuda);
  }
  ~DeviceTensor() { cudaFree(p); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  // Random values from a cheap generator: kind 0 = non-negative sparse (q), 1 = signed (v, G),
  // 2 = decay in [0.9, 1).
  void fill(int kind, uint64_t seed) {
    const int64_t n = view.numel();
    std::vector<unsigned char> host(bytes);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      double u = static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
      double val = kind == 0 ? (u < 0.5 ? 0.0 : 2.0 * (u - 0.5)) : kind == 1 ? 2.0 * u - 1.0 : 0.9 + 0.1 * u;
      detail::store_from_double(host.data(), view.dtype, i, val);
    }
    check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Result {
  double median_ms = 0, tflops = 0, limit_ms = 0, limit_fraction = 0;
  int64_t peak_bytes = 0;
};

// Runs one case in one direction ("forward", "forward+backward", "step"); returns the numbers
// and prints one line; appends a JSON line to json_path when it is not empty.
Result run_cuda_bench(const BenchCase& c, DType dtype, const std::string& direction, int reps,
                      const std::string& json_path, const std::string& commit) {
  const int64_t B = c.B, H = c.H, Hv = c.Hv, T = c.T, L = c.L, E = c.E, C = 64;
  const size_t sz = dtype_size(dtype);
  cudaMemPool_t pool;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  Options o;
  o.backend = Backend::cuda;
  std::vector<double> times;
  int64_t tensor_bytes = 0;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  double flops = 0, bytes = 0;
  {
    const bool step_case = direction == "step";
    DeviceTensor q(dtype, step_case ? std::vector<int64_t>{B, H, L} : std::vector<int64_t>{B, H, T, L});
    DeviceTensor v(dtype, step_case ? std::vector<int64_t>{B, Hv, E} : std::vector<int64_t>{B, Hv, T, E});
    DeviceTensor decay(DType::float32, {H, L});
    DeviceTensor ctx(dtype, step_case ? std::vector<int64_t>{B, H, E} : std::vector<int64_t>{B, H, T, E});
    DeviceTensor rho(DType::float32, {B, H, L, E}), norm(DType::float32, {B, H, L});
    q.fill(0, 1);
    v.fill(1, 2);
    decay.fill(2, 3);
    tensor_bytes = q.bytes + v.bytes + decay.bytes + ctx.bytes + rho.bytes + norm.bytes;
    std::unique_ptr<DeviceTensor> g, dq, dv, da;
    if (direction == "forward+backward") {
      g = std::make_unique<DeviceTensor>(dtype, std::vector<int64_t>{B, H, T, E});
      dq = std::make_unique<DeviceTensor>(dtype, std::vector<int64_t>{B, H, T, L});
      dv = std::make_unique<DeviceTensor>(dtype, std::vector<int64_t>{B, Hv, T, E});
      da = std::make_unique<DeviceTensor>(DType::float32, std::vector<int64_t>{H, L});
      g->fill(1, 4);
      tensor_bytes += g->bytes + dq->bytes + dv->bytes + da->bytes;
    }
    if (step_case) {
      rho.fill(1, 5);
      check(cudaMemset(norm.p, 0, norm.bytes), "memset");
    }
    auto run_once = [&] {
      if (step_case) {
        step({q.view, v.view, decay.view, rho.view, norm.view, ctx.view}, o);
        return;
      }
      ForwardArgs f{q.view, v.view, decay.view, std::nullopt, std::nullopt, ctx.view, rho.view, norm.view};
      forward(f, o);
      if (g) {
        BackwardArgs b;
        b.q = q.view, b.v = v.view, b.decay = decay.view, b.grad_context = g->view;
        b.grad_q = dq->view, b.grad_v = dv->view, b.grad_decay = da->view;
        backward(b, o);
      }
    };
    run_once();  // warm-up: module load, pool growth
    check(cudaDeviceSynchronize(), "warm-up");
    uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "pool reset");
    for (int r = 0; r < reps; ++r) {
      check(cudaEventRecord(start), "record");
      run_once();
      check(cudaEventRecord(stop), "record");
      check(cudaEventSynchronize(stop), "sync");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
      times.push_back(ms);
    }
    uint64_t high = 0;
    check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high), "pool high");
    Result res;
    res.peak_bytes = tensor_bytes + static_cast<int64_t>(high);
    const double state = double(B) * H * L * E * 4 + double(B) * H * L * 4;
    if (step_case) {
      flops = 4.0 * B * H * L * E;
      bytes = 2 * state + double(B) * H * L * sz + double(B) * Hv * E * sz + double(B) * H * E * sz;
    } else {
      flops = double(B) * H * (4.0 * T * L * E + double(T) * C * L + double(T) * C * E);
      bytes = double(B) * H * T * L * sz + double(B) * Hv * T * E * sz + double(B) * H * T * E * sz + state;
      if (g) {
        flops *= 3;
        bytes += double(B) * H * T * L * sz * 2 + double(B) * Hv * T * E * sz * 2 + double(B) * H * T * E * sz;
      }
    }
    const double rate = dtype == DType::float32 ? 495e12 : 790e12;
    res.median_ms = median(times);
    res.limit_ms = std::max(flops / rate, bytes / 4.3e12) * 1e3;
    res.limit_fraction = res.limit_ms / res.median_ms;
    res.tflops = flops / (res.median_ms * 1e-3) / 1e12;
    std::printf("%-9s %-16s %-8s B%-3lld H%lld Hv%lld T%-5lld L%-6lld E%-5lld  %9.3f ms  %7.2f TFLOP/s  %6.1f GB/s  "
                "limit %.3f ms  limit_fraction %.3f  peak %.2f GiB\n",
                c.name, direction.c_str(), dtype_name(dtype), (long long)B, (long long)H, (long long)Hv, (long long)T,
                (long long)L, (long long)E, res.median_ms, res.tflops, bytes / (res.median_ms * 1e-3) / 1e9, res.limit_ms,
                res.limit_fraction, res.peak_bytes / double(1 << 30));
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "a");
      if (!f) throw Error(ErrorKind::io, "cannot open " + json_path);
      std::fprintf(f,
                   "{\"case\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hv\": %lld, \"T\": %lld, \"L\": %lld, \"E\": %lld, "
                   "\"dtype\": \"%s\", \"device\": \"cuda\", \"gpu\": \"%s\", \"direction\": \"%s\", \"reps\": %d, "
                   "\"median_ms\": %.5f, \"tflops\": %.3f, \"bytes_min\": %.0f, \"limit_ms\": %.5f, "
                   "\"limit_fraction\": %.4f, \"peak_bytes\": %lld, \"commit\": \"%s\"}\n",
                   c.name, (long long)B, (long long)H, (long long)Hv, (long long)T, (long long)L, (long long)E,
                   dtype_name(dtype), prop.name, direction.c_str(), reps, res.median_ms, res.tflops, bytes, res.limit_ms,
                   res.limit_fraction, (long long)res.peak_bytes, commit.c_str());
      std::fclose(f);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return res;
  }
}

const char* bench_cuda_help() {
  return "usage: rhoscan bench-cuda [--case NAME|all] [--backward] [--dtype bfloat16|float16|float32]\n"
         "                          [--reps N] [--json FILE] [--commit SHA]\n"
         "Times the CUDA backend with CUDA events (median of N runs after one warm-up).\n"
         "Cases: bdh-8k (B8 H4 T512 L8192 E256 Hv1), bdh-base (B24 H4 T512 L256 E256 Hv1),\n"
         "long (B1 H4 T8192 L2048 E256 Hv1), step (B64 H4 L8192 E256, one token).\n"
         "--backward times forward+backward (3x the forward FLOPs). Prints TFLOP/s, GB/s, peak device\n"
         "memory (tensors + the workspace pool's high-water mark) and limit_fraction.\n";
}

int bench_cuda_main(const std::vector<std::string>& args) {
  std::string which = "all", json, commit = "unknown";
  bool backward_too = false;
  DType dtype = DType::bfloat16;
  int reps = 10;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error(ErrorKind::invalid_argument, args[i] + " needs a value");
      return args[++i];
    };
    if (args[i] == "--case") which = value();
    else if (args[i] == "--backward") backward_too = true;
    else if (args[i] == "--reps") reps = std::max(1, std::stoi(value()));
    else if (args[i] == "--json") json = value();
    else if (args[i] == "--commit") commit = value();
    else if (args[i] == "--dtype") {
      std::string d = value();
      dtype = d == "float32" ? DType::float32 : d == "float16" ? DType::float16 : DType::bfloat16;
    } else {
      std::fprintf(stderr, "%s", bench_cuda_help());
      return kExitBadInput;
    }
  }
  std::string why = backend_unavailable_reason(Backend::cuda);
  if (!why.empty()) {
    std::fprintf(stderr, "bench-cuda: the CUDA backend is not available: %s\n", why.c_str());
    return kExitFailed;
  }
  for (const BenchCase& c : kCases) {
    if (which != "all" && which != c.name) continue;
    if (c.step) {
      run_cuda_bench(c, dtype, "step", reps, json, commit);
      continue;
    }
    run_cuda_bench(c, dtype, "forward", reps, json, commit);
    if (backward_too) run_cuda_bench(c, dtype, "forward+backward", reps, json, commit);
  }
  return kExitOk;
}

const Registration kBenchCuda{"bench-cuda", "time the CUDA backend on the benchmark shapes (CUDA events)",
                              bench_cuda_help, bench_cuda_main};

}  // namespace
}  // namespace rhoscan::cli
#endif  // RHOSCAN_HAVE_CUDA
