// The Vulkan backend: float32 compute shaders (shaders/*.comp) on host or Vulkan tensors.
//
// Each call moves its inputs into packed float32 work buffers (transfer.h: host tensors through a
// staging buffer, Vulkan tensors by a gather shader on the device), records every kernel of the
// chunked formulation into one command buffer, runs it, and moves the results out through the
// output strides. The (batch, head) pairs are processed in groups sized so that every buffer fits
// the device's storage-buffer limit and the workspace budget; the sums that cross groups (dv over
// heads when Hv = 1, the decay gradient over the batch) are accumulated on the device in group
// order, so results are deterministic. Kernels, in order:
//   forward:  decay_powers (first group) -> row_reduce (s_t) -> norm_scan (q', N) -> state_scan
//             (chunk-start R) -> chunk_pairs (intra-chunk scores S, split over L with sum_parts
//             when the group has few chunks) -> chunk_readout (context)
//   backward: the forward's first five, state_scan reverse (chunk-end adjoints A), chunk_pairs
//             (dcontext.v gram) -> chunk_readout_l (G.R_t and A_{t+1}.v_t per latent) ->
//             row_reduce (sum gw w) -> dq_scan (dq, dN_0) -> chunk_readout (dv) ->
//             decay_grad_chunk -> decay_grad_reduce
//   step:     the forward with T = 1.
#include "vulkan/vulkan_backend.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "core/backend.h"
#include "core/dtype.h"
#include "vulkan/context.h"
#include "vulkan/device_buffer.h"
#include "vulkan/transfer.h"

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

// Slices of the forward's intra-chunk scores (chunk_pairs over L) for a group of `rows` rows:
// enough workgroups to fill a large GPU (about 2048) when the group has few (row, chunk) pairs,
// each slice at least 256 latents, at most 8 slices (their partial sums are kept).
int64_t pair_slices(const Shape& s, int64_t rows) {
  const int64_t by_size = std::min<int64_t>(8, std::max<int64_t>(1, s.L / 256));
  return std::clamp<int64_t>(2048 / std::max<int64_t>(1, rows * s.NC), 1, by_size);
}

// Float counts of every work buffer: per (batch, head) row, and once per call.
struct Sizes {
  std::vector<std::pair<const char*, int64_t>> per_row, fixed;
  int64_t staging_per_row = 0;  // host tensors: floats moved each way per row
  int64_t staging_fixed = 0;    // and once per call (the decay in, the cross-group sums out)
};

// dv summed over heads (Hv = 1 < H) across groups: in a work buffer "dvsum", moved out at the end.
bool sums_heads(const Problem& p) { return p.Hv == 1 && p.H > 1; }

Sizes buffer_sizes(const Shape& s, bool backward, bool head_sum) {
  const int64_t TL = s.T * s.L, TE = s.T * s.E, LE = s.L * s.E, CC = s.NC * s.C * s.C;
  Sizes z;
  z.per_row = {{"q", TL}, {"qp", TL}, {"v", TE}, {"s", s.T}, {"N0", s.L}, {"Nfinal", s.L},
               {"R0", LE}, {"Rc", (s.NC + 1) * LE}, {"S", CC},
               {"Sparts", pair_slices(s, 1) > 1 ? pair_slices(s, 1) * CC : 0}};
  z.fixed = {{"a", s.H * s.L}, {"P", s.H * (s.C + 1) * s.L}};
  z.staging_fixed = s.H * s.L;
  if (!backward) {
    z.per_row.push_back({"context", TE});
    z.staging_per_row = TL + TE + LE + s.L + TE + LE + s.L;
  } else {
    // "context" is not the backward's: it is there so that a forward of the same shape, which
    // training alternates with the backward, finds every buffer it needs in this set.
    for (auto x : std::vector<std::pair<const char*, int64_t>>{
             {"context", TE}, {"Nt", TL}, {"G", TE}, {"GR", LE}, {"GN", s.L}, {"Ac", (s.NC + 1) * LE}, {"VG", CC},
             {"GRt", TL}, {"AV", TL}, {"dot", s.T}, {"dq", TL}, {"dN0", s.L}, {"da2", s.L},
             {"dv", TE}, {"part", s.NC * s.nE() * s.L}})
      z.per_row.push_back(x);
    z.fixed.push_back({"da", s.H * s.L});
    z.fixed.push_back({"dvsum", head_sum ? s.B * TE : 0});
    z.staging_per_row = TL + 2 * TE + 2 * LE + 2 * s.L + TL + TE + LE + s.L;
    z.staging_fixed += s.H * s.L + (head_sum ? s.B * TE : 0);
  }
  return z;
}

// How many (batch, head) rows one group holds: every buffer within the device's storage-buffer
// limit, all of them within the budget. Throws Error(unsupported) when one row does not fit.
int64_t plan_group(const Context& ctx, const Shape& s, const Sizes& z, bool host, int64_t budget_bytes) {
  const uint64_t max_buffer = ctx.max_buffer_bytes();
  int64_t total = host ? z.staging_per_row : 0;
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
  for (auto [name, n] : z.fixed)
    if (static_cast<uint64_t>(n) * 4 > max_buffer)
      throw Error(ErrorKind::unsupported, std::string("rhoscan vulkan: buffer ") + name + " needs " +
                                              std::to_string(n * 4) + " bytes, over this device's storage-buffer limit of " +
                                              std::to_string(max_buffer) + " bytes");
  // the staging buffer too stays within one buffer's limit (a proxy for the largest allocation)
  if (host)
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

// Work buffers of one call, by name, sized for a group of g rows.
class Buffers {
 public:
  Buffers(Context& ctx, const Sizes& z, int64_t g, int64_t staging_floats) {
    for (auto [name, n] : z.per_row) add(ctx, name, g * n);
    for (auto [name, n] : z.fixed) add(ctx, name, n);
    staging_ = std::make_unique<Buffer>(ctx, staging_floats * 4, true);
    bytes_ += staging_->bytes();
  }
  uint64_t bytes() const { return bytes_; }
  const Buffer* operator[](const char* name) const {
    if (const Buffer* b = find(name)) return b;
    throw Error(ErrorKind::internal, std::string("rhoscan vulkan: no buffer ") + name);
  }
  Buffer& staging() { return *staging_; }
  // How many rows this set holds for a call needing `z` (with the host staging when `host`): 0
  // when a buffer is missing or a per-call one is too small.
  int64_t rows_held(const Sizes& z, bool host) const {
    int64_t rows = INT64_MAX;
    for (auto* list : {&z.per_row, &z.fixed})
      for (auto [name, n] : *list) {
        const Buffer* b = find(name);
        if (!b) return 0;
        if (list == &z.fixed && b->bytes() < static_cast<uint64_t>(n) * 4) return 0;
        if (list == &z.per_row && n > 0) rows = std::min<int64_t>(rows, b->bytes() / (n * 4));
      }
    if (host) {
      const int64_t floats = static_cast<int64_t>(staging_->bytes() / 4) - z.staging_fixed;
      rows = floats < z.staging_per_row ? 0 : std::min<int64_t>(rows, floats / std::max<int64_t>(z.staging_per_row, 1));
    }
    return rows;
  }

 private:
  const Buffer* find(const char* name) const {
    for (auto& [n, b] : map_)
      if (std::strcmp(n, name) == 0) return b.get();
    return nullptr;
  }
  void add(Context& ctx, const char* name, int64_t floats) {
    map_.emplace_back(name, std::make_unique<Buffer>(ctx, floats * 4, false));
    bytes_ += map_.back().second->bytes();
  }
  std::vector<std::pair<const char*, std::unique_ptr<Buffer>>> map_;
  std::unique_ptr<Buffer> staging_;
  uint64_t bytes_ = 0;
};

// The buffers of the last call, kept for the next ones: allocating (and, for the staging memory,
// pinning) gigabytes costs more than a BDH-8k forward. The backward's set holds every buffer of
// the forward of the same shape, so that training, which alternates the two, allocates once. A set
// that holds at least half the rows a call plans is used as it is (twice the groups cost less
// than reallocating); otherwise it is freed before the call allocates its own. Guarded by the
// context's mutex. Heap-held and never destroyed at exit, like the Context: a static destructor
// would free Vulkan memory after the driver's own teardown.
std::unique_ptr<Buffers>& g_cached = *new std::unique_ptr<Buffers>();

// The work buffers and group size of one call.
struct Plan {
  Buffers* b;
  int64_t g_max;
};

Plan plan(Context& ctx, const Shape& s, const Sizes& z, bool host, const Options& opt) {
  const int64_t budget = opt.max_workspace_bytes > 0 ? opt.max_workspace_bytes : default_budget(ctx);
  const int64_t g_max = plan_group(ctx, s, z, host, budget);
  if (g_cached) {
    const int64_t held = g_cached->rows_held(z, host);
    if (held >= g_max || (held >= 1 && 2 * held >= g_max)) return {g_cached.get(), std::min(held, g_max)};
  }
  g_cached.reset();
  g_cached = std::make_unique<Buffers>(ctx, z, g_max, host ? g_max * z.staging_per_row + z.staging_fixed : 0);
  return {g_cached.get(), g_max};
}

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

// The decay into "a" and its power table [H, C+1, L] into "P": recorded by a call's first group.
void record_decay(Recording& rec, Transfer& io, const Buffers& b, const Shape& s, const View4& decay) {
  io.load(decay, s.H, 0, s.H, 1, s.L, *b["a"]);
  Push push(s, 0, 0);
  rec.dispatch("decay_powers", {b["a"], b["P"]}, push.w, groups(s.L, 64), static_cast<uint32_t>(s.H));
}

// The decay [H, L] (strides h, l) as a View4 of H rows of one latent vector each.
View4 decay_view(const void* data, DType dtype, const int64_t* stride) { return {data, dtype, {0, stride[0], 0, stride[1]}}; }

// The forward kernels shared by forward, backward and step, recorded for one group.
// Reads q, v, R0, N0 (by flags); writes s, qp, Nfinal, Rc, S (and Nt when keep_nt).
void record_forward_state(Recording& rec, const Buffers& b, const Shape& s, int64_t g, int64_t bh0, bool has_r0,
                          bool has_n0, bool keep_nt) {
  Push p(s, g, bh0);
  rec.dispatch_linear("row_reduce", {b["q"], nullptr, b["s"]}, p.mode(0).w, g * s.T);
  Push n(s, g, bh0);
  n.flags((has_n0 ? 1u : 0u) | (keep_nt ? 2u : 0u));
  segments(s.T, kStepSegment, n, [&](Push& x) {
    rec.dispatch("norm_scan", {b["q"], b["s"], b["a"], b["N0"], b["qp"], keep_nt ? b["Nt"] : nullptr, b["Nfinal"]},
                 x.w, groups(s.L, 64), static_cast<uint32_t>(g));
  });
  Push r(s, g, bh0);
  r.mode(0).flags(has_r0 ? 1u : 0u);
  segments(s.NC, kChunkSegment, r, [&](Push& x) {
    rec.dispatch_linear("state_scan", {b["q"], b["v"], b["P"], b["R0"], b["Rc"]}, x.w, g * s.nL() * s.nE());
  });
  Push c(s, g, bh0);
  if (s.C == 1) return;  // with one step per chunk there are no intra-chunk pairs (the readouts skip S)
  const int64_t slices = pair_slices(s, g);
  c.w[10] = static_cast<uint32_t>(slices);
  if (slices == 1) {
    rec.dispatch_linear("chunk_pairs", {b["qp"], b["q"], b["P"], b["S"]}, c.mode(0).w, g * s.NC);
    return;
  }
  rec.dispatch_linear("chunk_pairs", {b["qp"], b["q"], b["P"], b["Sparts"]}, c.mode(0).w, g * s.NC * slices);
  const uint64_t pairs = static_cast<uint64_t>(g) * s.NC * s.C * s.C;
  uint32_t sum[kPushWords] = {static_cast<uint32_t>(pairs), static_cast<uint32_t>(slices)};
  rec.dispatch_linear("sum_parts", {b["Sparts"], b["S"]}, sum, (pairs + 255) / 256);
}

// The forward on tensors seen as [B, H, T, *]; used by forward() and step().
struct ForwardJob {
  View4 q, v, rho0, n0;  // rho0 / n0 data null: zeros
  View4 context, rho, rho_norm, decay;
};

void finish_call(double device_ms, double kernel_ms, const Buffers& b) {
  g_last_device_ms = device_ms;
  g_last_kernel_ms = kernel_ms;
  g_last_device_bytes = b.bytes();
}

void run_forward(const ForwardJob& job, const Shape& s, const Options& opt, bool device) {
  Context& ctx = Context::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  const Sizes z = buffer_sizes(s, false, false);
  const Plan pl = plan(ctx, s, z, !device, opt);
  const Buffers& b = *pl.b;
  const int64_t rows = s.B * s.H, TE = s.T * s.E, LE = s.L * s.E;
  double device_ms = 0, kernel_ms = 0;
  for (int64_t bh0 = 0; bh0 < rows; bh0 += pl.g_max) {
    const int64_t g = std::min(pl.g_max, rows - bh0);
    Recording rec(ctx, true);
    Transfer io(ctx, rec, pl.b->staging(), device);
    if (bh0 == 0) record_decay(rec, io, b, s, job.decay);
    io.load(job.q, s.H, bh0, g, s.T, s.L, *b["q"]);
    io.load(job.v, s.H, bh0, g, s.T, s.E, *b["v"]);
    if (job.rho0.data) io.load(job.rho0, s.H, bh0, g, s.L, s.E, *b["R0"]);
    if (job.n0.data) io.load(job.n0, s.H, bh0, g, 1, s.L, *b["N0"]);
    const uint32_t compute_begin = rec.mark();
    record_forward_state(rec, b, s, g, bh0, job.rho0.data != nullptr, job.n0.data != nullptr, false);
    Push p(s, g, bh0);
    rec.dispatch_linear("chunk_readout", {b["qp"], b["Rc"], b["S"], b["v"], b["P"], b["context"]}, p.mode(0).w,
                        g * s.NC * s.nE());
    const uint32_t compute_end = rec.mark();
    io.store(*b["context"], 0, TE, s.H, bh0, g, s.T, s.E, job.context);
    io.store(*b["Rc"], s.NC * LE, (s.NC + 1) * LE, s.H, bh0, g, s.L, s.E, job.rho);  // slot NC: the final state
    io.store(*b["Nfinal"], 0, s.L, s.H, bh0, g, 1, s.L, job.rho_norm);
    device_ms += rec.submit_and_wait();
    io.finish();
    kernel_ms += rec.between_ms(compute_begin, compute_end);
  }
  finish_call(device_ms, kernel_ms, b);
}

// Sizes with nothing to compute (T = 0, or no (batch, head) pair): each output is a copy of an
// input or zero. `Move` lists them as (source or null for zeros, destination, rows, X, Y).
struct Move {
  View4 src, dst;
  int64_t H, rows, X, Y;
};

void run_moves(const std::vector<Move>& moves, bool device) {
  Context& ctx = Context::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  int64_t floats = 1;
  for (const Move& m : moves) floats = std::max(floats, m.rows * m.X * m.Y);
  Buffer work(ctx, floats * 4, false);
  Buffer staging(ctx, device ? 4 : floats * 4 * 2 * static_cast<int64_t>(moves.size()), true);
  Recording rec(ctx);
  Transfer io(ctx, rec, staging, device);
  for (const Move& m : moves) {
    if (m.rows * m.X * m.Y == 0) continue;
    if (m.src.data) io.load(m.src, m.H, 0, m.rows, m.X, m.Y, work);
    else rec.fill_zero(work, m.rows * m.X * m.Y * 4);
    io.store(work, 0, m.X * m.Y, m.H, 0, m.rows, m.X, m.Y, m.dst);
  }
  rec.submit_and_wait();
  io.finish();
}

class VulkanBackend final : public detail::BackendImpl {
 public:
  Backend id() const override { return Backend::vulkan; }
  Device device() const override { return Device::cpu; }
  bool accepts(Device d) const override { return d == Device::cpu || d == Device::vulkan; }
  std::string unavailable_reason() const override { return Context::unavailable_reason(); }

  std::string memory_reason(const TensorView& t) const override {
    if (t.device != Device::vulkan || t.numel() == 0) return "";
    const uint64_t extent = view_extent_bytes(t);
    DeviceSpan span;
    std::string why = find_device_span(t.data, extent, &span);
    if (!why.empty()) return why;
    if (span.offset % 4) return "a Vulkan tensor must start at a multiple of 4 bytes in its buffer, not byte " +
                                std::to_string(span.offset);
    const Context& ctx = Context::get();
    const uint64_t align = std::max<uint64_t>(ctx.properties().limits.minStorageBufferOffsetAlignment, 4);
    const uint64_t window = span.offset % align + extent;
    if (window > ctx.max_buffer_bytes())
      return "the view spans " + std::to_string(window) + " bytes of its buffer, over this device's storage-buffer "
             "binding limit of " + std::to_string(ctx.max_buffer_bytes()) + " bytes";
    return "";
  }

  // Vulkan tensors: read back (decay is small; check_finite costs a copy of each input).
  bool values_satisfy(const TensorView& t, ValueRule rule, const Options& options) const override {
    if (t.device != Device::vulkan) return BackendImpl::values_satisfy(t, rule, options);
    DeviceSpan span;
    const uint64_t extent = view_extent_bytes(t);
    std::string why = find_device_span(t.data, extent, &span);
    if (!why.empty()) throw Error(ErrorKind::invalid_argument, "rhoscan vulkan: " + why);
    std::vector<unsigned char> host(extent);
    copy_to_host(*span.buffer, span.offset, host.data(), extent);
    TensorView h = t;
    h.data = host.data();
    h.device = Device::cpu;
    return BackendImpl::values_satisfy(h, rule, options);
  }

  std::string unsupported_reason(const Problem& p) const override {
    if (p.dtype == DType::float64)
      return "float64 q / v: the Vulkan backend computes in float32 (use float32, bfloat16 or float16)";
    if (p.device == Device::vulkan &&
        (p.dtype != DType::float32 || p.state_dtype != DType::float32 || p.decay_dtype != DType::float32))
      return std::string("Vulkan tensors must be float32 (q / v / context are ") + dtype_name(p.dtype) +
             ", the states " + dtype_name(p.state_dtype) + ", decay " + dtype_name(p.decay_dtype) +
             "); host tensors may be bfloat16, float16 or float64 states";
    if (p.T > 0 && p.B * p.H > 0 && p.L > 0 && p.E > 0) {
      try {
        Context& ctx = Context::get();
        Shape s = make_shape(p, 0);
        plan_group(ctx, s, buffer_sizes(s, true, sums_heads(p)), p.device == Device::cpu, 0);
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
    const bool device = p.device == Device::vulkan;
    const View4 rho0 = view4(f.rho0, p.state_dtype, f.rho0_stride), n0 = view3(f.rho_norm0, p.state_dtype, f.rho_norm0_stride);
    const View4 rho = view4(f.rho, p.state_dtype, f.rho_stride), rho_norm = view3(f.rho_norm, p.state_dtype, f.rho_norm_stride);
    if (degenerate(p))  // T = 0: the state passes through
      return run_moves({{rho0, rho, p.H, p.B * p.H, p.L, p.E}, {n0, rho_norm, p.H, p.B * p.H, 1, p.L}}, device);
    ForwardJob job{view4(f.q, p.dtype, f.q_stride), view4(f.v, p.dtype, f.v_stride), rho0, n0,
                   view4(f.context, p.dtype, f.context_stride), rho, rho_norm,
                   decay_view(f.decay, p.decay_dtype, f.decay_stride)};
    run_forward(job, make_shape(p, f.options.chunk_size), f.options, device);
  }

  void step(const StepParams& x) const override {
    const Problem& p = x.p;
    if (degenerate(p)) return;  // no (batch, head) pair: nothing to read or write
    const View4 rho = view4(x.rho, p.state_dtype, x.rho_stride), rho_norm = view3(x.rho_norm, p.state_dtype, x.rho_norm_stride);
    ForwardJob job{view3(x.q, p.dtype, x.q_stride), view3(x.v, p.dtype, x.v_stride), rho, rho_norm,
                   view3(x.context, p.dtype, x.context_stride), rho, rho_norm,
                   decay_view(x.decay, p.decay_dtype, x.decay_stride)};
    Problem one = p;
    one.T = 1;
    run_forward(job, make_shape(one, 1), x.options, p.device == Device::vulkan);
  }

  void backward(const BackwardParams& g) const override;

 private:
  static bool degenerate(const Problem& p) { return p.T == 0 || p.B * p.H == 0; }
};

// With nothing to compute: dq and dv are empty or (no head to sum) zero, da is zero, and the
// initial states' gradients are the upstream ones passed through.
void backward_degenerate(const BackwardParams& a, bool device) {
  const Problem& p = a.p;
  std::vector<Move> moves = {{{}, decay_view(a.grad_decay, p.decay_dtype, a.grad_decay_stride), p.H, p.H, 1, p.L},
                             {{}, view4(a.grad_v, p.dtype, a.grad_v_stride), p.Hv, p.B * p.Hv, p.T, p.E}};
  if (a.grad_rho0)
    moves.push_back({view4(a.grad_rho_out, p.state_dtype, a.grad_rho_out_stride),
                     view4(a.grad_rho0, p.state_dtype, a.grad_rho0_stride), p.H, p.B * p.H, p.L, p.E});
  if (a.grad_rho_norm0)
    moves.push_back({view3(a.grad_rho_norm_out, p.state_dtype, a.grad_rho_norm_out_stride),
                     view3(a.grad_rho_norm0, p.state_dtype, a.grad_rho_norm0_stride), p.H, p.B * p.H, 1, p.L});
  run_moves(moves, device);
}

void VulkanBackend::backward(const BackwardParams& a) const {
  const Problem& p = a.p;
  const bool device = p.device == Device::vulkan;
  if (degenerate(p)) return backward_degenerate(a, device);
  const Shape s = make_shape(p, a.options.chunk_size);
  Context& ctx = Context::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  const bool head_sum = sums_heads(p);
  const Sizes z = buffer_sizes(s, true, head_sum);
  const Plan pl = plan(ctx, s, z, !device, a.options);
  const Buffers& b = *pl.b;
  const int64_t rows = s.B * s.H, TL = s.T * s.L, TE = s.T * s.E, LE = s.L * s.E;
  const View4 q = view4(a.q, p.dtype, a.q_stride), v = view4(a.v, p.dtype, a.v_stride);
  const View4 G = view4(a.grad_context, p.dtype, a.grad_context_stride);
  const View4 R0 = view4(a.rho0, p.state_dtype, a.rho0_stride), N0 = view3(a.rho_norm0, p.state_dtype, a.rho_norm0_stride);
  const View4 GR = view4(a.grad_rho_out, p.state_dtype, a.grad_rho_out_stride);
  const View4 GN = view3(a.grad_rho_norm_out, p.state_dtype, a.grad_rho_norm_out_stride);
  const Buffer* P = b["P"];
  double device_ms = 0, kernel_ms = 0;
  for (int64_t bh0 = 0; bh0 < rows; bh0 += pl.g_max) {
    const int64_t g = std::min(pl.g_max, rows - bh0);
    Recording rec(ctx, true);
    Transfer io(ctx, rec, pl.b->staging(), device);
    if (bh0 == 0) record_decay(rec, io, b, s, decay_view(a.decay, p.decay_dtype, a.decay_stride));
    io.load(q, s.H, bh0, g, s.T, s.L, *b["q"]);
    io.load(v, s.H, bh0, g, s.T, s.E, *b["v"]);
    io.load(G, s.H, bh0, g, s.T, s.E, *b["G"]);
    if (R0.data) io.load(R0, s.H, bh0, g, s.L, s.E, *b["R0"]);
    if (N0.data) io.load(N0, s.H, bh0, g, 1, s.L, *b["N0"]);
    if (GR.data) io.load(GR, s.H, bh0, g, s.L, s.E, *b["GR"]);
    if (GN.data) io.load(GN, s.H, bh0, g, 1, s.L, *b["GN"]);
    const uint32_t compute_begin = rec.mark();
    record_forward_state(rec, b, s, g, bh0, R0.data != nullptr, N0.data != nullptr, true);
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
      rec.dispatch("dq_scan", {b["qp"], b["GRt"], b["Nt"], b["s"], b["dot"], b["AV"], b["a"], b["GN"], b["dq"], b["dN0"], b["da2"]},
                   x.w, groups(s.L, 64), static_cast<uint32_t>(g));
    });
    Push pv(s, g, bh0);
    rec.dispatch_linear("chunk_readout", {b["q"], b["Ac"], b["S"], b["G"], P, b["dv"]}, pv.mode(1).w, g * s.NC * s.nE());
    Push pc(s, g, bh0);
    rec.dispatch_linear("decay_grad_chunk", {b["q"], b["v"], b["qp"], b["G"], b["Rc"], b["Ac"], b["a"], b["part"]}, pc.w,
                        g * s.NC * s.nL() * s.nE());
    Push pk(s, g, bh0);
    segments(s.NC * s.nE(), kStepSegment, pk.mode(0), [&](Push& x) {
      rec.dispatch("decay_grad_reduce", {b["part"], b["da2"], b["da"]}, x.w, groups(s.L, 64), static_cast<uint32_t>(g));
    });
    Push ph(s, g, bh0);
    ph.flags(bh0 > 0 ? 1u : 0u);  // later groups add to the earlier ones' sum
    segments(g, kStepSegment, ph.mode(1), [&](Push& x) {
      rec.dispatch("decay_grad_reduce", {b["part"], b["da2"], b["da"]}, x.w, groups(s.L, 64), static_cast<uint32_t>(s.H));
    });
    if (head_sum) {  // dv of this group's rows added per batch into dvsum [B, T, E]
      const int64_t packed[4] = {TE, 0, s.E, 1};
      record_pack(rec, kPackStoreSumHeads, b["dvsum"], 0, packed, s.H, bh0, g, s.T, s.E, *b["dv"], 0, TE);
    }
    const uint32_t compute_end = rec.mark();

    io.store(*b["dq"], 0, TL, s.H, bh0, g, s.T, s.L, view4(a.grad_q, p.dtype, a.grad_q_stride));
    if (a.grad_rho0)  // slot 0 of the chunk adjoints
      io.store(*b["Ac"], 0, (s.NC + 1) * LE, s.H, bh0, g, s.L, s.E, view4(a.grad_rho0, p.state_dtype, a.grad_rho0_stride));
    if (a.grad_rho_norm0)
      io.store(*b["dN0"], 0, s.L, s.H, bh0, g, 1, s.L, view3(a.grad_rho_norm0, p.state_dtype, a.grad_rho_norm0_stride));
    const View4 dv_out = view4(a.grad_v, p.dtype, a.grad_v_stride);
    if (!head_sum) io.store(*b["dv"], 0, TE, s.H, bh0, g, s.T, s.E, dv_out);  // Hv == H (or H == 1): one to one
    if (bh0 + g == rows) {  // the sums across groups are complete
      io.store(*b["da"], 0, s.L, s.H, 0, s.H, 1, s.L, decay_view(a.grad_decay, p.decay_dtype, a.grad_decay_stride));
      if (head_sum) io.store(*b["dvsum"], 0, TE, 1, 0, s.B, s.T, s.E, dv_out);
    }
    device_ms += rec.submit_and_wait();
    io.finish();
    kernel_ms += rec.between_ms(compute_begin, compute_end);
  }
  finish_call(device_ms, kernel_ms, b);
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
