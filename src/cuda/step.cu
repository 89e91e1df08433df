// One token against a stored state (inference): memory bound, so every state element is read
// once and written once. step_rows_kernel handles 128 latents of one (b, h) per block: it reads
// rho[l, :], accumulates the partial read sum_l q[l]/(N[l]+eps) rho[l, :] and writes
// a ⊙ rho + q ⊗ v back in place; step_reduce_kernel sums the partials in a fixed order and
// divides by s = eps + sum_l q.
#include "cuda/chunk_kernels.cuh"
#include "cuda/ops.h"
#include "cuda/value_gate.h"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {
namespace {

constexpr int kStepRows = 128;
constexpr int kStepThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kStepThreads) step_rows_kernel(int64_t BH, int64_t H, int64_t L, int64_t E,
                                                                 Str3 q, Str3 v, const float* a32, Str4 rho,
                                                                 Str3 norm, float* partial) {
  grid_dependency_wait();
  __shared__ float qv[kStepRows], qp[kStepRows], av[kStepRows];
  const int64_t nrb = (L + kStepRows - 1) / kStepRows;
  float* R = const_cast<float*>(static_cast<const float*>(rho.p));
  float* Nn = const_cast<float*>(static_cast<const float*>(norm.p));
  for (int64_t item = blockIdx.x; item < BH * nrb; item += gridDim.x) {
    const int64_t bh = item / nrb, rb = item % nrb, b = bh / H, h = bh % H, l0 = rb * kStepRows;
    const int rows = static_cast<int>(L - l0 < kStepRows ? L - l0 : kStepRows);
    __syncthreads();
    if (threadIdx.x < rows) {
      const int64_t l = l0 + threadIdx.x;
      const float a = a32[h * L + l];
      const float x = load<T>(q.p, q.at(b, h, l));
      const int64_t no = norm.at(b, h, l);
      const float N = Nn[no];
      qv[threadIdx.x] = x;
      qp[threadIdx.x] = div_sparse(x, N + kEpsF);
      av[threadIdx.x] = a;
      Nn[no] = a * N + x;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
      const float ve = load<T>(v.p, v.at(b, h, e));
      float acc = 0.0f;
      int r = 0;
      for (; r + 8 <= rows; r += 8) {
        float x[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) x[k] = R[rho.at(b, h, l0 + r + k, e)];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          acc += qp[r + k] * x[k];
          R[rho.at(b, h, l0 + r + k, e)] = av[r + k] * x[k] + qv[r + k] * ve;
        }
      }
      for (; r < rows; ++r) {
        const int64_t o = rho.at(b, h, l0 + r, e);
        const float x = R[o];
        acc += qp[r] * x;
        R[o] = av[r] * x + qv[r] * ve;
      }
      partial[(bh * nrb + rb) * E + e] = acc;
    }
  }
}

template <typename T>
__global__ void step_reduce_kernel(int64_t BH, int64_t H, int64_t L, int64_t E, Str3 q, const float* partial,
                                   Str4 ctx3) {
  grid_dependency_wait();
  __shared__ float warp_sums[32];
  __shared__ float s_shared;
  const int64_t nrb = (L + kStepRows - 1) / kStepRows;
  for (int64_t bh = blockIdx.x; bh < BH; bh += gridDim.x) {
    const int64_t b = bh / H, h = bh % H;
    float acc = 0.0f;
    for (int64_t l = threadIdx.x; l < L; l += blockDim.x) acc += load<T>(q.p, q.at(b, h, l));
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = kEpsF;
      for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) s += warp_sums[w];
      s_shared = s;
    }
    __syncthreads();
    const float s = s_shared;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
      float c = 0.0f;
      for (int64_t rb = 0; rb < nrb; ++rb) c += partial[(bh * nrb + rb) * E + e];
      store<T>(const_cast<void*>(ctx3.p), b * ctx3.s[0] + h * ctx3.s[1] + e * ctx3.s[2], c / s);
    }
  }
}


template <typename T>
void step_typed(const detail::StepParams& sp, cudaStream_t stream) {
  const detail::Problem& p = sp.p;
  const int64_t BH = p.B * p.H, nrb = (p.L + kStepRows - 1) / kStepRows;
  ValueGate gate(sp.deferred, stream);
  Workspace ws(Workspace::floats(p.H * p.L) + Workspace::floats(BH * nrb * p.E), stream);
  float* a32 = ws.take_floats(p.H * p.L);
  float* partial = ws.take_floats(BH * nrb * p.E);
  launch_kernel("decay_to_f32_kernel", decay_to_f32_kernel, grid_for(p.H * p.L, 256), 256, 0, stream, a32, sp.decay,
                sp.decay_stride[0], sp.decay_stride[1], p.H, p.L, p.decay_dtype == DType::float64);
  gate.settle();  // before the state is updated in place (value_gate.h)
  Str4 rho;
  rho.p = sp.rho;
  for (int i = 0; i < 4; ++i) rho.s[i] = sp.rho_stride[i];
  const Str3 q = str3(sp.q, sp.q_stride), v = str3(sp.v, sp.v_stride), norm = str3(sp.rho_norm, sp.rho_norm_stride);
  launch_kernel("step_rows_kernel", step_rows_kernel<T>, grid_for(BH * nrb, 1, 1 << 20), kStepThreads, 0, stream, BH,
                p.H, p.L, p.E, q, v, a32, rho, norm, partial);
  Str4 ctx;
  ctx.p = sp.context;
  for (int i = 0; i < 3; ++i) ctx.s[i] = sp.context_stride[i];
  launch_kernel("step_reduce_kernel", step_reduce_kernel<T>, grid_for(BH), 256, 0, stream, BH, p.H, p.L, p.E, q,
                partial, ctx);
}

}  // namespace

void run_step(const detail::StepParams& sp) {
  DeviceGuard guard(sp.p.device_index);
  cudaStream_t stream = static_cast<cudaStream_t>(sp.options.stream);
  switch (sp.p.dtype) {
    case DType::float32: step_typed<float>(sp, stream); break;
    case DType::bfloat16: step_typed<__nv_bfloat16>(sp, stream); break;
    case DType::float16: step_typed<__half>(sp, stream); break;
    default: throw Error(ErrorKind::unsupported, "rhoscan.step (cuda): float64 inputs are not supported");
  }
}

}  // namespace rhoscan::cuda_detail
