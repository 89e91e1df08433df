// The CUDA device of `rhoscan bench --device cuda` (bench.h's BenchDevice): device memory,
// timing with CUDA events around each call, peak device memory from the default memory pool's
// high-water mark (the backend's workspace comes from cudaMallocAsync), and the physical limit:
// max(FLOPs / 790 TFLOP/s for bf16/f16 or 495 TFLOP/s (TF32) for f32, minimal bytes / 4.3 TB/s),
// where the minimal bytes read every input once and write every output once.
#ifdef RHOSCAN_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "rhoscan/bench.h"

namespace rhoscan::cli::bench {
namespace {

void check(cudaError_t st, const char* what) {
  if (st != cudaSuccess) throw Error(ErrorKind::internal, std::string("bench (cuda): ") + what + ": " + cudaGetErrorString(st));
}

class CudaDevice final : public BenchDevice {
 public:
  CudaDevice() {
    std::string why = backend_unavailable_reason(Backend::cuda);
    if (!why.empty()) throw Error(ErrorKind::backend_unavailable, "bench: the CUDA backend is not available: " + why);
    check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaGetDeviceProperties(&prop_, device_), "cudaGetDeviceProperties");
    check(cudaDeviceGetDefaultMemPool(&pool_, device_), "cudaDeviceGetDefaultMemPool");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaDevice() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Device device() const override { return Device::cuda; }
  std::string description() const override {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.0f GiB), CUDA events", prop_.name, prop_.major,
                  prop_.minor, prop_.multiProcessorCount, prop_.totalGlobalMem / 1073741824.0);
    return buf;
  }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    check(cudaMemset(p, 0, bytes ? bytes : 1), "cudaMemset");
    return p;
  }
  void release(void* data) override { cudaFree(data); }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  double time_ms(const std::function<void()>& fn) override {
    check(cudaEventRecord(start_), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }
  void reset_peak() override {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "pool reset");
  }
  int64_t peak_bytes() override {
    uint64_t high = 0;
    check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &high), "pool high-water mark");
    return static_cast<int64_t>(high);
  }
  Limit limit(const BenchCase& c, Direction d, DType dtype) override {
    const double sz = static_cast<double>(dtype_size(dtype));
    const double B = c.B, H = c.H, Hv = c.Hv, L = c.L, E = c.E, T = d == Direction::step ? 1 : c.T;
    const double state = B * H * L * E * 4 + B * H * L * 4;  // float32 rho and rho_norm
    double bytes;
    if (d == Direction::step) {
      bytes = 2 * state + B * H * L * sz + B * Hv * E * sz + B * H * E * sz;  // state read and written once
    } else {
      bytes = B * H * T * L * sz + B * Hv * T * E * sz + B * H * T * E * sz + state;  // q, v in; context, state out
      if (d == Direction::forward_backward)  // + q, v, grad_context in; grad_q, grad_v out
        bytes += 2 * B * H * T * L * sz + 2 * B * Hv * T * E * sz + B * H * T * E * sz;
    }
    const double rate = dtype == DType::float32 ? 495e12 : 790e12;
    const double flop_ms = case_flops(c, d) / rate * 1e3, byte_ms = bytes / 4.3e12 * 1e3;
    char buf[200];
    std::snprintf(buf, sizeof buf, "max(%.0f GFLOP / %.0f TFLOP/s = %.3f ms, %.2f GB / 4.3 TB/s = %.3f ms)",
                  case_flops(c, d) / 1e9, rate / 1e12, flop_ms, bytes / 1e9, byte_ms);
    return {std::max(flop_ms, byte_ms), -1, buf};
  }

 private:
  int device_ = 0;
  cudaDeviceProp prop_{};
  cudaMemPool_t pool_{};
  cudaEvent_t start_{}, stop_{};
};

const BenchDeviceRegistration kCudaDevice(Device::cuda, [](const BenchSettings&) -> std::unique_ptr<BenchDevice> {
  return std::make_unique<CudaDevice>();
});

}  // namespace
}  // namespace rhoscan::cli::bench
#endif  // RHOSCAN_HAVE_CUDA
