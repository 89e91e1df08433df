// The Vulkan backend: host tensors in, float32 compute shaders (shaders/*.comp), host tensors out.
//
// Each call packs the strided host inputs into float32 device buffers, records every kernel of
// the chunked formulation into one command buffer, runs it, and writes the results back through
// the output strides. The (batch, head) pairs are processed in groups sized so that every buffer
// fits the device's storage-buffer limit and the workspace budget; the sums that cross groups
// (dv over heads when Hv = 1, the decay gradient over the batch) are added on the host in a fixed
// order, so results are deterministic. Kernels, in order:
//   forward:  row_reduce (s_t) -> norm_scan (q', N) -> state_scan (chunk-start R) ->
//             chunk_pairs (intra-chunk scores S) -> chunk_readout (context)
//   backward: the forward's first four, state_scan reverse (chunk-end adjoints A), chunk_pairs
//             (dcontext.v gram) -> chunk_readout_l (G.R_t and A_{t+1}.v_t per latent) ->
//             row_reduce (sum gw w) -> dq_scan (dq, dN_0) -> chunk_readout (dv) ->
//             decay_grad_chunk -> decay_grad_reduce
//   step:     the forward with T = 1.
#include "vulkan/vulkan_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "core/backend.h"
#include "core/dtype.h"
#include "vulkan/context.h"

namespace rhoscan::vulkan {
namespace {

using detail::BackwardParams;
using detail::ForwardParams;
using detail::Problem;
using detail::StepParams;

constexpr int64_t kMaxChunk = 64;  // the shaders' tiles hold at most 64 steps of a chunk
constexpr int64_t kDefaultChunk = 64;
std::atomic<double> g_last_device_ms{0.0};
std::atomic<double> g_last_kernel_ms{0.0};
std::atomic<unsigned long long> g_last_device_bytes{0};

// A host tensor seen as [B, H, X, Y] (3-D tensors get X = 1 with a zero stride).
struct HostView {
  const void* data = nullptr;
  DType dtype = DType::float32;
  int64_t s[4] = {};
};
HostView view4(const void* d, DType t, const int64_t* st) { return {d, t, {st[0], st[1], st[2], st[3]}}; }
HostView view3(const void* d, DType t, const int64_t* st) { return {d, t, {st[0], st[1], 0, st[2]}}; }

// Runs f(i) for i in [0, n) on a few threads when the work is large.
template <class F>
void parallel_rows(int64_t n, int64_t work, F f) {
  int threads = static_cast<int>(std::min<int64_t>({n, 16, std::max<unsigned>(1, std::thread::hardware_concurrency())}));
  if (work < (1 << 20) || threads <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += threads) f(i);
    });
  for (auto& t : pool) t.join();
}

// Copies rows bh0 .. bh0+g of a [B, H, X, Y] host tensor into dst [g, X, Y] as float32.
void pack(const HostView& src, int64_t H, int64_t bh0, int64_t g, int64_t X, int64_t Y, float* dst) {
  parallel_rows(g, g * X * Y, [&](int64_t i) {
    const int64_t b = (bh0 + i) / H, h = (bh0 + i) % H;
    const int64_t base = b * src.s[0] + h * src.s[1];
    for (int64_t x = 0; x < X; ++x) {
      float* out = dst + (i * X + x) * Y;
      const int64_t row = base + x * src.s[2];
      if (src.dtype == DType::float32 && src.s[3] == 1) {
        std::memcpy(out, static_cast<const float*>(src.data) + row, Y * sizeof(float));
      } else {
        for (int64_t y = 0; y < Y; ++y)
          out[y] = static_cast<float>(detail::load_as_double(src.data, src.dtype, row + y * src.s[3]));
      }
    }
  });
}

// The reverse of pack: src [g, X, Y] float32 into rows bh0 .. bh0+g of a [B, H, X, Y] tensor.
void unpack(const float* src, int64_t H, int64_t bh0, int64_t g, int64_t X, int64_t Y, void* data,
            DType dtype, const int64_t* s) {
  parallel_rows(g, g * X * Y, [&](int64_t i) {
    const int64_t b = (bh0 + i) / H, h = (bh0 + i) % H;
    const int64_t base = b * s[0] + h * s[1];
    for (int64_t x = 0; x < X; ++x) {
      const float* in = src + (i * X + x) * Y;
      const int64_t row = base + x * s[2];
      if (dtype == DType::float32 && s[3] == 1) {
        std::memcpy(static_cast<float*>(data) + row, in, Y * sizeof(float));
      } else {
        for (int64_t y = 0; y < Y; ++y) detail::store_from_double(data, dtype, row + y * s[3], in[y]);
      }
    }
  });
}

// One problem in the shape every kernel sees: [B, H, T, *] inputs, with optional tensors null.
struct Shape {
  int64_t B, H, T, L, E, C, NC;
  int64_t nL() const { return (L + 63) / 64; }
  int64_t nE() const { return (E + 63) / 64; }
};

Shape make_shape(const Problem& p, int64_t chunk_size) {
  Shape s{p.B, p.H, p.T, p.L, p.E, 0, 0};
  s.C = chunk_size > 0 ? std::min(chunk_size, kMaxChunk) : kDefaultChunk;
  s.C = std::min<int64_t>(s.C, std::max<int64_t>(1, p.T));
  s.NC = (p.T + s.C - 1) / s.C;
  return s;
}

// Per-(batch, head) float counts of every device buffer; `backward` adds the gradient buffers.
struct Sizes {
  std::vector<std::pair<const char*, int64_t>> per_row;  // name, floats per (b, h)
  int64_t staging_per_row = 0;                             // floats moved each way per (b, h)
};

Sizes buffer_sizes(const Shape& s, bool backward) {
  const int64_t TL = s.T * s.L, TE = s.T * s.E, LE = s.L * s.E, CC = s.NC * s.C * s.C;
  Sizes z;
  z.per_row = {{"q", TL}, {"qp", TL}, {"v", TE}, {"s", s.T}, {"N0", s.L}, {"Nfinal", s.L},
               {"R0", LE}, {"Rc", (s.NC + 1) * LE}, {"S", CC}};
  if (!backward) {
    z.per_row.push_back({"context", TE});
    z.staging_per_row = TL + TE + LE + s.L + std::max<int64_t>(TE + LE + s.L, 0);
  } else {
    for (auto x : std::vector<std::pair<const char*, int64_t>>{
             {"Nt", TL}, {"G", TE}, {"GR", LE}, {"GN", s.L}, {"Ac", (s.NC + 1) * LE}, {"VG", CC},
             {"GRt", TL}, {"AV", TL}, {"dot", s.T}, {"dq", TL}, {"dN0", s.L}, {"da2", s.L},
             {"dv", TE}, {"part", s.NC * s.nE() * s.L}})
      z.per_row.push_back(x);
    z.staging_per_row = TL + 2 * TE + 2 * LE + 2 * s.L + TL + TE + LE + s.L;
  }
  return z;
}

// How many (batch, head) rows one group holds: every buffer within the device's storage-buffer
// limit, all of them within the budget. Throws Error(unsupported) when one row does not fit.
int64_t plan_group(const Context& ctx, const Shape& s, bool backward, int64_t budget_bytes) {
  const Sizes z = buffer_sizes(s, backward);
  const uint64_t max_buffer = ctx.max_buffer_bytes();
  int64_t total = z.staging_per_row;
  int64_t g = std::min<int64_t>(s.B * s.H, 65535);
  for (auto [name, n] : z.per_row) {
    total += n;
    const int64_t bytes = std::max<int64_t>(n, 1) * 4;
    if (static_cast<uint64_t>(bytes) > max_buffer)
      throw Error(ErrorKind::unsupported,
                  std::string("rhoscan vulkan: buffer ") + name + " needs " + std::to_string(bytes) +
                      " bytes for one (batch, head) pair (T=" + std::to_string(s.T) + ", L=" +
                      std::to_string(s.L) + ", E=" + std::to_string(s.E) + ", chunk " + std::to_string(s.C) +
                      "), over this device's storage-buffer limit of " + std::to_string(max_buffer) + " bytes");
    g = std::min<int64_t>(g, static_cast<int64_t>(max_buffer / bytes));
  }
  // the staging buffer too stays within one buffer's limit (a proxy for the largest allocation)
  g = std::min<int64_t>(g, std::max<int64_t>(1, static_cast<int64_t>(max_buffer / (z.staging_per_row * 4 + 4))));
  if (budget_bytes > 0) g = std::min<int64_t>(g, std::max<int64_t>(1, budget_bytes / (total * 4)));
  return std::max<int64_t>(g, 1);
}

int64_t default_budget(const Context& ctx) {
  uint64_t largest = 0;
  const auto& mem = ctx.memory();
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) largest = std::max<uint64_t>(largest, mem.memoryHeaps[i].size);
  return static_cast<int64_t>(largest / 2);
}

// Device buffers of one call, by name, sized for a group of g rows.
class Buffers {
 public:
  Buffers(Context& ctx, const Sizes& z, int64_t g, int64_t staging_floats) {
    for (auto [name, n] : z.per_row) {
      map_.emplace_back(name, std::make_unique<Buffer>(ctx, g * n * 4, false));
      bytes_ += map_.back().second->bytes();
    }
    staging_ = std::make_unique<Buffer>(ctx, staging_floats * 4, true);
    bytes_ += staging_->bytes();
  }
  uint64_t bytes() const { return bytes_; }
  const Buffer* operator[](const char* name) const {
    for (auto& [n, b] : map_)
      if (std::strcmp(n, name) == 0) return b.get();
    throw Error(ErrorKind::internal, std::string("rhoscan vulkan: no buffer ") + name);
  }
  Buffer& staging() { return *staging_; }
  bool fits(const Sizes& z, int64_t g, int64_t staging_floats) const {
    if (map_.size() != z.per_row.size() || staging_->bytes() < static_cast<uint64_t>(staging_floats) * 4) return false;
    for (size_t i = 0; i < map_.size(); ++i)
      if (std::strcmp(map_[i].first, z.per_row[i].first) != 0 ||
          map_[i].second->bytes() < static_cast<uint64_t>(std::max<int64_t>(g * z.per_row[i].second * 4, 16)))
        return false;
    return true;
  }

 private:
  std::vector<std::pair<const char*, std::unique_ptr<Buffer>>> map_;
  std::unique_ptr<Buffer> staging_;
  uint64_t bytes_ = 0;
};

// The buffers of the last call, kept for the next one of the same shape: allocating (and, for the
// staging memory, pinning) gigabytes costs more than a BDH-8k forward. A call of another shape
// frees them before allocating its own. Guarded by the context's mutex.
// Heap-held and never destroyed at exit, like the Context: a static destructor would free Vulkan
// memory after the driver's own teardown (NVIDIA's driver then crashes the exiting process).
std::unique_ptr<Buffers>& g_cached = *new std::unique_ptr<Buffers>();

Buffers& buffers_for(Context& ctx, const Sizes& z, int64_t g, int64_t staging_floats) {
  if (g_cached && g_cached->fits(z, g, staging_floats)) return *g_cached;
  g_cached.reset();
  g_cached = std::make_unique<Buffers>(ctx, z, g, staging_floats);
  return *g_cached;
}

// Staging: a bump allocator over the mapped staging buffer, recording host<->device copies.
struct Staging {
  Buffer& buf;
  Recording& rec;
  uint64_t used = 0;  // floats
  float* upload(const Buffer& dst, int64_t floats, uint64_t dst_offset_floats = 0) {
    float* p = buf.mapped() + used;
    rec.copy(buf, used * 4, dst, dst_offset_floats * 4, floats * 4);
    used += floats;
    return p;
  }
  float* download(const Buffer& src, int64_t floats, uint64_t src_offset_floats = 0) {
    float* p = buf.mapped() + used;
    rec.copy(src, src_offset_floats * 4, buf, used * 4, floats * 4);
    used += floats;
    return p;
  }
};

struct Push {
  uint32_t w[kPushWords] = {};
  Push(const Shape& s, int64_t g, int64_t bh0) {
    w[0] = static_cast<uint32_t>(g);
    w[1] = static_cast<uint32_t>(s.T);
    w[2] = static_cast<uint32_t>(s.L);
    w[3] = static_cast<uint32_t>(s.E);
    w[4] = static_cast<uint32_t>(s.C);
    w[5] = static_cast<uint32_t>(s.NC);
    w[6] = static_cast<uint32_t>(s.H);
    w[7] = static_cast<uint32_t>(bh0);
  }
  Push& mode(uint32_t m) { w[8] = m; return *this; }
  Push& flags(uint32_t f) { w[9] = f; return *this; }
  Push& segment(int64_t begin, int64_t end) {
    w[12] = static_cast<uint32_t>(begin);
    w[13] = static_cast<uint32_t>(end);
    return *this;
  }
};

// Steps / chunks one dispatch of a sequential shader walks (see shaders/common.glsl: llvmpipe
// caps a shader invocation's loops at 65535 iterations in total).
constexpr int64_t kStepSegment = 16384;
constexpr int64_t kChunkSegment = 16;
// The largest L and E the contraction loops of chunk_pairs / chunk_readout(_l) run on llvmpipe
// within its loop limit (measured: 16384 and 32768 pass, 131072 does not).
constexpr int64_t kLoopLimitedMaxDim = 32768;

// Dispatches `push` once per segment of [0, n): f(push) records one dispatch.
template <class F>
void segments(int64_t n, int64_t per, Push& push, F f) {
  for (int64_t b = 0; b < n; b += per) {
    push.segment(b, std::min(n, b + per));
    f(push);
  }
}

uint32_t groups(int64_t n, int64_t per) { return static_cast<uint32_t>((n + per - 1) / per); }

// The decay [H, L] and its power table [H, C+1, L]: uploaded and built once per call.
struct Decay {
  std::unique_ptr<Buffer> a, P;
};

Decay make_decay(Context& ctx, const Shape& s, const void* decay, DType dtype, const int64_t* stride) {
  Decay d{std::make_unique<Buffer>(ctx, s.H * s.L * 4, false),
          std::make_unique<Buffer>(ctx, s.H * (s.C + 1) * s.L * 4, false)};
  Buffer staging(ctx, s.H * s.L * 4, true);
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t l = 0; l < s.L; ++l)
      staging.mapped()[h * s.L + l] = static_cast<float>(detail::load_as_double(decay, dtype, h * stride[0] + l * stride[1]));
  Recording rec(ctx);
  rec.copy(staging, 0, *d.a, 0, s.H * s.L * 4);
  Push push(s, 0, 0);
  rec.dispatch("decay_powers", {d.a.get(), d.P.get()}, push.w, groups(s.L, 64), static_cast<uint32_t>(s.H));
  rec.submit_and_wait();
  return d;
}

// The forward kernels shared by forward, backward and step, recorded for one group.
// Reads q, v, R0, N0 (by flags); writes s, qp, Nfinal, Rc, S (and Nt when keep_nt).
void record_forward_state(Recording& rec, const Buffers& b, const Decay& d, const Shape& s, int64_t g,
                          int64_t bh0, bool has_r0, bool has_n0, bool keep_nt) {
  Push p(s, g, bh0);
  rec.dispatch_linear("row_reduce", {b["q"], nullptr, b["s"]}, p.mode(0).w, g * s.T);
  Push n(s, g, bh0);
  n.flags((has_n0 ? 1u : 0u) | (keep_nt ? 2u : 0u));
  segments(s.T, kStepSegment, n, [&](Push& x) {
    rec.dispatch("norm_scan", {b["q"], b["s"], d.a.get(), b["N0"], b["qp"], keep_nt ? b["Nt"] : nullptr, b["Nfinal"]},
                 x.w, groups(s.L, 64), static_cast<uint32_t>(g));
  });
  Push r(s, g, bh0);
  r.mode(0).flags(has_r0 ? 1u : 0u);
  segments(s.NC, kChunkSegment, r, [&](Push& x) {
    rec.dispatch_linear("state_scan", {b["q"], b["v"], d.P.get(), b["R0"], b["Rc"]}, x.w, g * s.nL() * s.nE());
  });
  Push c(s, g, bh0);
  if (s.C > 1)  // with one step per chunk there are no intra-chunk pairs (the readouts skip S)
    rec.dispatch_linear("chunk_pairs", {b["qp"], b["q"], d.P.get(), b["S"]}, c.mode(0).w, g * s.NC);
}

// The forward on host tensors seen as [B, H, T, *]; used by forward() and step().
struct ForwardJob {
  HostView q, v, rho0, n0;  // rho0 / n0 data null: zeros
  void* context; DType context_dtype; int64_t context_s[4];
  void* rho; DType state_dtype; int64_t rho_s[4];
  void* rho_norm; int64_t rho_norm_s[4];
  const void* decay; DType decay_dtype; int64_t decay_s[2];
};

void run_forward(const ForwardJob& job, const Shape& s, const Options& opt) {
  Context& ctx = Context::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  const int64_t budget = opt.max_workspace_bytes > 0 ? opt.max_workspace_bytes : default_budget(ctx);
  const int64_t rows = s.B * s.H;
  const int64_t g_max = plan_group(ctx, s, false, budget);
  const Sizes z = buffer_sizes(s, false);
  Buffers& b = buffers_for(ctx, z, g_max, g_max * z.staging_per_row);
  Decay d = make_decay(ctx, s, job.decay, job.decay_dtype, job.decay_s);
  const int64_t TL = s.T * s.L, TE = s.T * s.E, LE = s.L * s.E;
  double device_ms = 0, kernel_ms = 0;
  for (int64_t bh0 = 0; bh0 < rows; bh0 += g_max) {
    const int64_t g = std::min(g_max, rows - bh0);
    Recording rec(ctx, true);
    Staging st{b.staging(), rec};
    pack(job.q, s.H, bh0, g, s.T, s.L, st.upload(*b["q"], g * TL));
    pack(job.v, s.H, bh0, g, s.T, s.E, st.upload(*b["v"], g * TE));
    if (job.rho0.data) pack(job.rho0, s.H, bh0, g, s.L, s.E, st.upload(*b["R0"], g * LE));
    if (job.n0.data) pack(job.n0, s.H, bh0, g, 1, s.L, st.upload(*b["N0"], g * s.L));
    const uint32_t compute_begin = rec.mark();
    record_forward_state(rec, b, d, s, g, bh0, job.rho0.data != nullptr, job.n0.data != nullptr, false);
    Push p(s, g, bh0);
    rec.dispatch_linear("chunk_readout", {b["qp"], b["Rc"], b["S"], b["v"], d.P.get(), b["context"]}, p.mode(0).w,
                        g * s.NC * s.nE());
    const uint32_t compute_end = rec.mark();
    float* ctx_out = st.download(*b["context"], g * TE);
    // the final state of each row is slot NC of its Rc; consecutive downloads form one [g, L, E] block
    float* finals = st.buf.mapped() + st.used;
    for (int64_t i = 0; i < g; ++i) st.download(*b["Rc"], LE, (i * (s.NC + 1) + s.NC) * LE);
    float* n_out = st.download(*b["Nfinal"], g * s.L);
    device_ms += rec.submit_and_wait();
    kernel_ms += rec.between_ms(compute_begin, compute_end);
    unpack(ctx_out, s.H, bh0, g, s.T, s.E, job.context, job.context_dtype, job.context_s);
    unpack(finals, s.H, bh0, g, s.L, s.E, job.rho, job.state_dtype, job.rho_s);
    unpack(n_out, s.H, bh0, g, 1, s.L, job.rho_norm, job.state_dtype, job.rho_norm_s);
  }
  g_last_device_ms = device_ms;
  g_last_kernel_ms = kernel_ms;
  g_last_device_bytes = b.bytes() + d.a->bytes() + d.P->bytes();
}

class VulkanBackend final : public detail::BackendImpl {
 public:
  Backend id() const override { return Backend::vulkan; }
  Device device() const override { return Device::cpu; }
  std::string unavailable_reason() const override { return Context::unavailable_reason(); }

  std::string unsupported_reason(const Problem& p) const override {
    if (p.dtype == DType::float64)
      return "float64 q / v: the Vulkan backend computes in float32 (use float32, bfloat16 or float16)";
    if (p.T > 0 && p.B * p.H > 0 && p.L > 0 && p.E > 0) {
      try {
        Context& ctx = Context::get();
        Shape s = make_shape(p, 0);
        plan_group(ctx, s, true, 0);
        if (ctx.loop_limited() && std::max(p.L, p.E) > kLoopLimitedMaxDim)
          return "L = " + std::to_string(p.L) + ", E = " + std::to_string(p.E) + ": on " + ctx.device_description() +
                 ", which ends a shader's loops after 65535 iterations, L and E are limited to " +
                 std::to_string(kLoopLimitedMaxDim);
        if (p.T * std::max(p.L, p.E) >= (int64_t{1} << 31))
          return "T * max(L, E) = " + std::to_string(p.T * std::max(p.L, p.E)) + " exceeds the shaders' 32-bit indices";
      } catch (const Error& e) {
        return e.what();
      }
    }
    return "";
  }

  void forward(const ForwardParams& f) const override {
    const Problem& p = f.p;
    if (degenerate(p)) return detail::reference_backend().forward(f);
    ForwardJob job{view4(f.q, p.dtype, f.q_stride), view4(f.v, p.dtype, f.v_stride),
                   view4(f.rho0, p.state_dtype, f.rho0_stride), view3(f.rho_norm0, p.state_dtype, f.rho_norm0_stride),
                   f.context, p.dtype, {f.context_stride[0], f.context_stride[1], f.context_stride[2], f.context_stride[3]},
                   f.rho, p.state_dtype, {f.rho_stride[0], f.rho_stride[1], f.rho_stride[2], f.rho_stride[3]},
                   f.rho_norm, {f.rho_norm_stride[0], f.rho_norm_stride[1], 0, f.rho_norm_stride[2]},
                   f.decay, p.decay_dtype, {f.decay_stride[0], f.decay_stride[1]}};
    run_forward(job, make_shape(p, f.options.chunk_size), f.options);
  }

  void step(const StepParams& x) const override {
    const Problem& p = x.p;
    if (degenerate(p)) return detail::reference_backend().step(x);
    ForwardJob job{view3(x.q, p.dtype, x.q_stride), view3(x.v, p.dtype, x.v_stride),
                   view4(x.rho, p.state_dtype, x.rho_stride), view3(x.rho_norm, p.state_dtype, x.rho_norm_stride),
                   x.context, p.dtype, {x.context_stride[0], x.context_stride[1], 0, x.context_stride[2]},
                   x.rho, p.state_dtype, {x.rho_stride[0], x.rho_stride[1], x.rho_stride[2], x.rho_stride[3]},
                   x.rho_norm, {x.rho_norm_stride[0], x.rho_norm_stride[1], 0, x.rho_norm_stride[2]},
                   x.decay, p.decay_dtype, {x.decay_stride[0], x.decay_stride[1]}};
    Problem one = p;
    one.T = 1;
    run_forward(job, make_shape(one, 1), x.options);
  }

  void backward(const BackwardParams& g) const override;

 private:
  // Sizes with nothing to compute on a device (T = 0, or an empty dimension): the reference's
  // answer is exact and costs a copy of the state at most.
  static bool degenerate(const Problem& p) { return p.T == 0 || p.B * p.H == 0 || p.L == 0 || p.E == 0; }
};

void VulkanBackend::backward(const BackwardParams& a) const {
  const Problem& p = a.p;
  if (degenerate(p)) return detail::reference_backend().backward(a);
  const Shape s = make_shape(p, a.options.chunk_size);
  Context& ctx = Context::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  const int64_t budget = a.options.max_workspace_bytes > 0 ? a.options.max_workspace_bytes : default_budget(ctx);
  const int64_t rows = s.B * s.H;
  const int64_t g_max = plan_group(ctx, s, true, budget);
  const Sizes z = buffer_sizes(s, true);
  Buffers& b = buffers_for(ctx, z, g_max, g_max * z.staging_per_row + s.H * s.L);
  Decay d = make_decay(ctx, s, a.decay, p.decay_dtype, a.decay_stride);
  const int64_t TL = s.T * s.L, TE = s.T * s.E, LE = s.L * s.E;
  const HostView q = view4(a.q, p.dtype, a.q_stride), v = view4(a.v, p.dtype, a.v_stride);
  const HostView G = view4(a.grad_context, p.dtype, a.grad_context_stride);
  const HostView R0 = view4(a.rho0, p.state_dtype, a.rho0_stride), N0 = view3(a.rho_norm0, p.state_dtype, a.rho_norm0_stride);
  const HostView GR = view4(a.grad_rho_out, p.state_dtype, a.grad_rho_out_stride);
  const HostView GN = view3(a.grad_rho_norm_out, p.state_dtype, a.grad_rho_norm_out_stride);
  // Sums across groups, added on the host in row order: dv over heads when Hv = 1, da over b.
  std::vector<double> dv_acc(p.Hv == 1 && p.H > 1 ? s.B * TE : 0, 0.0), da_acc(s.H * s.L, 0.0);
  Buffer da_group(ctx, s.H * s.L * 4, false);
  double device_ms = 0, kernel_ms = 0;
  for (int64_t bh0 = 0; bh0 < rows; bh0 += g_max) {
    const int64_t g = std::min(g_max, rows - bh0);
    Recording rec(ctx, true);
    Staging st{b.staging(), rec};
    pack(q, s.H, bh0, g, s.T, s.L, st.upload(*b["q"], g * TL));
    pack(v, s.H, bh0, g, s.T, s.E, st.upload(*b["v"], g * TE));
    pack(G, s.H, bh0, g, s.T, s.E, st.upload(*b["G"], g * TE));
    if (R0.data) pack(R0, s.H, bh0, g, s.L, s.E, st.upload(*b["R0"], g * LE));
    if (N0.data) pack(N0, s.H, bh0, g, 1, s.L, st.upload(*b["N0"], g * s.L));
    if (GR.data) pack(GR, s.H, bh0, g, s.L, s.E, st.upload(*b["GR"], g * LE));
    if (GN.data) pack(GN, s.H, bh0, g, 1, s.L, st.upload(*b["GN"], g * s.L));
    const uint32_t compute_begin = rec.mark();
    record_forward_state(rec, b, d, s, g, bh0, R0.data != nullptr, N0.data != nullptr, true);
    const Buffer* P = d.P.get();
    Push ps(s, g, bh0);
    ps.mode(1).flags(GR.data ? 1u : 0u);
    segments(s.NC, kChunkSegment, ps, [&](Push& x) {
      rec.dispatch_linear("state_scan", {b["qp"], b["G"], P, b["GR"], b["Ac"]}, x.w, g * s.nL() * s.nE());
    });
    Push pg(s, g, bh0);
    if (s.C > 1) rec.dispatch_linear("chunk_pairs", {b["G"], b["v"], P, b["VG"]}, pg.mode(1).w, g * s.NC);
    Push pr(s, g, bh0);
    rec.dispatch_linear("chunk_readout_l", {b["G"], b["Rc"], b["q"], b["VG"], P, b["GRt"]}, pr.mode(0).w, g * s.NC * s.nL());
    Push pa(s, g, bh0);
    rec.dispatch_linear("chunk_readout_l", {b["v"], b["Ac"], b["qp"], b["VG"], P, b["AV"]}, pa.mode(1).w, g * s.NC * s.nL());
    Push pd(s, g, bh0);
    rec.dispatch_linear("row_reduce", {b["GRt"], b["qp"], b["dot"]}, pd.mode(1).w, g * s.T);
    Push pq(s, g, bh0);
    pq.flags(GN.data ? 1u : 0u);
    segments(s.T, kStepSegment, pq, [&](Push& x) {
      rec.dispatch("dq_scan", {b["qp"], b["GRt"], b["Nt"], b["s"], b["dot"], b["AV"], d.a.get(), b["GN"], b["dq"], b["dN0"], b["da2"]},
                   x.w, groups(s.L, 64), static_cast<uint32_t>(g));
    });
    Push pv(s, g, bh0);
    rec.dispatch_linear("chunk_readout", {b["q"], b["Ac"], b["S"], b["G"], P, b["dv"]}, pv.mode(1).w, g * s.NC * s.nE());
    Push pc(s, g, bh0);
    rec.dispatch_linear("decay_grad_chunk", {b["q"], b["v"], b["qp"], b["G"], b["Rc"], b["Ac"], d.a.get(), b["part"]}, pc.w,
                        g * s.NC * s.nL() * s.nE());
    Push pk(s, g, bh0);
    segments(s.NC * s.nE(), kStepSegment, pk.mode(0), [&](Push& x) {
      rec.dispatch("decay_grad_reduce", {b["part"], b["da2"], &da_group}, x.w, groups(s.L, 64), static_cast<uint32_t>(g));
    });
    Push ph(s, g, bh0);
    segments(g, kStepSegment, ph.mode(1), [&](Push& x) {
      rec.dispatch("decay_grad_reduce", {b["part"], b["da2"], &da_group}, x.w, groups(s.L, 64), static_cast<uint32_t>(s.H));
    });

    const uint32_t compute_end = rec.mark();
    float* dq = st.download(*b["dq"], g * TL);
    float* dv = st.download(*b["dv"], g * TE);
    float* dR0 = a.grad_rho0 ? st.buf.mapped() + st.used : nullptr;
    if (a.grad_rho0)
      for (int64_t i = 0; i < g; ++i) st.download(*b["Ac"], LE, i * (s.NC + 1) * LE);
    float* dN0 = st.download(*b["dN0"], g * s.L);
    float* da = st.download(da_group, s.H * s.L);
    device_ms += rec.submit_and_wait();
    kernel_ms += rec.between_ms(compute_begin, compute_end);

    unpack(dq, s.H, bh0, g, s.T, s.L, a.grad_q, p.dtype, a.grad_q_stride);
    if (dR0) unpack(dR0, s.H, bh0, g, s.L, s.E, a.grad_rho0, p.state_dtype, a.grad_rho0_stride);
    if (a.grad_rho_norm0) {
      const int64_t* ns = a.grad_rho_norm0_stride;
      const int64_t s4[4] = {ns[0], ns[1], 0, ns[2]};
      unpack(dN0, s.H, bh0, g, 1, s.L, a.grad_rho_norm0, p.state_dtype, s4);
    }
    if (dv_acc.empty()) {
      const int64_t* vs = a.grad_v_stride;  // Hv == H (or H == 1): rows map one to one
      unpack(dv, s.H, bh0, g, s.T, s.E, a.grad_v, p.dtype, vs);
    } else {
      for (int64_t i = 0; i < g; ++i) {
        double* acc = &dv_acc[((bh0 + i) / s.H) * TE];
        for (int64_t k = 0; k < TE; ++k) acc[k] += dv[i * TE + k];
      }
    }
    for (int64_t k = 0; k < s.H * s.L; ++k) da_acc[k] += da[k];
  }
  if (!dv_acc.empty())
    for (int64_t bb = 0; bb < s.B; ++bb)
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t e = 0; e < s.E; ++e)
          detail::store_from_double(a.grad_v, p.dtype,
                                    bb * a.grad_v_stride[0] + t * a.grad_v_stride[2] + e * a.grad_v_stride[3],
                                    dv_acc[(bb * s.T + t) * s.E + e]);
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t l = 0; l < s.L; ++l)
      detail::store_from_double(a.grad_decay, p.decay_dtype, h * a.grad_decay_stride[0] + l * a.grad_decay_stride[1],
                                da_acc[h * s.L + l]);
  g_last_device_ms = device_ms;
  g_last_kernel_ms = kernel_ms;
  g_last_device_bytes = b.bytes() + d.a->bytes() + d.P->bytes();
}

}  // namespace

double last_device_ms() { return g_last_device_ms; }
unsigned long long last_device_bytes() { return g_last_device_bytes; }
double last_kernel_ms() { return g_last_kernel_ms; }
std::string device_description() { return Context::get().device_description(); }

}  // namespace rhoscan::vulkan

namespace rhoscan::detail {
const BackendImpl& vulkan_backend() {
  static const vulkan::VulkanBackend backend;
  return backend;
}
}  // namespace rhoscan::detail
