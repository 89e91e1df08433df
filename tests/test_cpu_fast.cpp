// The fast CPU backend beyond the cross-backend harness: large L, long T with decay exactly 0
// and 1 (finite and accurate), chunk sizes at the extremes, and bitwise determinism across
// thread counts. The big cases are in the `long` suite (ctest label long); a scaled-down copy
// of each runs in the default set.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/validate.h"
#include "support/problem.h"

// Counts every operator new in this process (the library's too), for the step allocation test.
static std::atomic<long> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace rhoscan::testing {
namespace {

bool backend_present() {
  return backend_unavailable_reason(Backend::cpu).empty();
}

#define REQUIRE_CPU_FAST()                                                                    \
  if (!backend_present()) GTEST_SKIP() << "cpu backend not compiled in: "                     \
                                       << backend_unavailable_reason(Backend::cpu)

Options fast(int threads = 0, int64_t chunk = 0) {
  Options o;
  o.backend = Backend::cpu;
  o.num_threads = threads;
  o.chunk_size = chunk;
  return o;
}

Options reference() {
  Options o;
  o.backend = Backend::reference;
  return o;
}

void expect_finite(const HostTensor& t, const char* what) {
  std::vector<double> x = t.values();
  size_t bad = 0;
  for (double v : x) bad += !std::isfinite(v);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << x.size() << " values are Inf or NaN";
}

void check_forward(const ProblemSpec& s, int64_t chunk = 0) {
  Problem p(s);
  Problem ref = p.as_float64();
  forward(ref.forward_args(), reference());
  forward(p.forward_args(), fast(0, chunk));
  for (auto [got, want, what] : {std::tuple{&p.context, &ref.context, "context"},
                                 std::tuple{&p.rho_out, &ref.rho_out, "rho"},
                                 std::tuple{&p.rho_norm_out, &ref.rho_norm_out, "rho_norm"}}) {
    expect_finite(*got, what);
    EXPECT_LE(rms_rel(got->values(), want->values()), forward_tolerance(s.dtype)) << what;
  }
}

void check_backward(const ProblemSpec& s, int64_t chunk = 0) {
  Problem p(s);
  Problem ref = p.as_float64();
  backward(ref.backward_args(), reference());
  backward(p.backward_args(), fast(0, chunk));
  for (auto [got, want, what] : {std::tuple{&p.grad_q, &ref.grad_q, "grad_q"},
                                 std::tuple{&p.grad_v, &ref.grad_v, "grad_v"},
                                 std::tuple{&p.grad_decay, &ref.grad_decay, "grad_decay"},
                                 std::tuple{&p.grad_rho, &ref.grad_rho, "grad_rho"},
                                 std::tuple{&p.grad_rho_norm, &ref.grad_rho_norm, "grad_rho_norm"}}) {
    expect_finite(*got, what);
    EXPECT_LE(rms_rel(got->values(), want->values()), gradient_tolerance(s.dtype)) << what;
  }
}

ProblemSpec wide_latent(int64_t L) {  // large L, a few chunks, Hv = H, all optional tensors
  ProblemSpec s{.B = 1, .H = 2, .Hv = 2, .T = 150, .L = L, .E = 32};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  s.decay = DecayKind::with_zeros_and_ones;
  s.q_zero_fraction = 0.9;  // BDH's q is sparse
  s.seed = 7;
  return s;
}

ProblemSpec long_sequence(int64_t T) {  // decay exactly 0 and exactly 1 over a long sequence
  ProblemSpec s{.B = 1, .H = 2, .Hv = 1, .T = T, .L = 32, .E = 16};
  s.dtype = s.state_dtype = DType::float32;
  s.grad_rho_out = s.grad_rho_norm_out = true;
  s.decay = DecayKind::with_zeros_and_ones;
  s.zero_q_rows = true;
  s.seed = 11;
  return s;
}

// One source, two executables (tests/CMakeLists.txt): test_cpu_fast (default set) and
// test_cpu_fast_long (RHOSCAN_LONG_TESTS, ctest label long).
#ifndef RHOSCAN_LONG_TESTS

// ---- default set: scaled-down versions -------------------------------------------------------

TEST(CpuFast, WideLatentForward) { REQUIRE_CPU_FAST(); check_forward(wide_latent(2048)); }
TEST(CpuFast, WideLatentBackward) { REQUIRE_CPU_FAST(); check_backward(wide_latent(2048)); }
TEST(CpuFast, LongSequenceForward) { REQUIRE_CPU_FAST(); check_forward(long_sequence(4096)); }
TEST(CpuFast, LongSequenceBackward) { REQUIRE_CPU_FAST(); check_backward(long_sequence(4096)); }

TEST(CpuFast, ChunkSizesAtTheExtremes) {
  REQUIRE_CPU_FAST();
  ProblemSpec s{.B = 2, .H = 2, .Hv = 1, .T = 45, .L = 24, .E = 12};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  for (int64_t chunk : {1, 2, 44, 45, 46, 1000}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    check_forward(s, chunk);
    check_backward(s, chunk);
  }
}

// One (b,h) and a wide E: the forward splits E into tiles across threads (when the machine has
// more than one); the tiles must compose to the reference, with strided (sequence-first) storage.
TEST(CpuFast, WideEmbeddingSingleHeadForward) {
  REQUIRE_CPU_FAST();
  ProblemSpec s{.B = 1, .H = 1, .Hv = 1, .T = 100, .L = 48, .E = 200};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = true;
  s.bthl_layout = true;
  check_forward(s);
  check_backward(s);
}

// The same with the final state written over the initial one (in place): every E tile must
// still see the initial rho_norm.
TEST(CpuFast, WideEmbeddingSingleHeadInPlace) {
  REQUIRE_CPU_FAST();
  ProblemSpec s{.B = 1, .H = 1, .Hv = 1, .T = 70, .L = 40, .E = 256};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = true;
  Problem separate(s), in_place(s);
  forward(separate.forward_args(), fast());
  ForwardArgs a = in_place.forward_args();
  a.rho_out = *a.rho;
  a.rho_norm_out = *a.rho_norm;
  forward(a, fast());
  EXPECT_EQ(in_place.context.values(), separate.context.values());
  EXPECT_EQ(in_place.rho->values(), separate.rho_out.values());
  EXPECT_EQ(in_place.rho_norm->values(), separate.rho_norm_out.values());
}

// Empty batch (B = 0): nothing to compute, but the decay gradient is still written (zeros).
TEST(CpuFast, EmptyBatch) {
  REQUIRE_CPU_FAST();
  ProblemSpec s{.B = 0, .H = 2, .Hv = 1, .T = 5, .L = 8, .E = 4};
  s.dtype = s.state_dtype = DType::float32;
  check_forward(s);
  Problem p(s);
  p.grad_decay.fill(7.0);
  backward(p.backward_args(), fast());
  for (double x : p.grad_decay.values()) EXPECT_EQ(x, 0.0);
}

// Two calls with the state carried equal one call (SPEC.md's streaming identity).
TEST(CpuFast, StreamingSplitEqualsOneCall) {
  REQUIRE_CPU_FAST();
  ProblemSpec s{.B = 2, .H = 2, .Hv = 2, .T = 100, .L = 40, .E = 24};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = true;
  Problem whole(s);
  forward(whole.forward_args(), fast());
  const int64_t T1 = 37;
  ProblemSpec s1 = s, s2 = s;
  s1.T = T1;
  s2.T = s.T - T1;
  Problem a(s1), b(s2);
  std::vector<double> q = whole.q.values(), v = whole.v.values(), qa, qb, va, vb;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (int64_t t = 0; t < s.T; ++t) {
      auto qrow = q.begin() + (bh * s.T + t) * s.L;
      auto vrow = v.begin() + (bh * s.T + t) * s.E;
      (t < T1 ? qa : qb).insert((t < T1 ? qa : qb).end(), qrow, qrow + s.L);
      (t < T1 ? va : vb).insert((t < T1 ? va : vb).end(), vrow, vrow + s.E);
    }
  a.q.set_values(qa), a.v.set_values(va), b.q.set_values(qb), b.v.set_values(vb);
  a.decay = b.decay = whole.decay;
  a.rho = whole.rho, a.rho_norm = whole.rho_norm;
  forward(a.forward_args(), fast());
  b.rho = a.rho_out, b.rho_norm = a.rho_norm_out;
  forward(b.forward_args(), fast());
  std::vector<double> c = whole.context.values(), ca = a.context.values(), cb = b.context.values(), joined;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    joined.insert(joined.end(), ca.begin() + bh * T1 * s.E, ca.begin() + (bh + 1) * T1 * s.E);
    joined.insert(joined.end(), cb.begin() + bh * s2.T * s.E, cb.begin() + (bh + 1) * s2.T * s.E);
  }
  EXPECT_LE(rms_rel(joined, c), 1e-5);
  EXPECT_LE(rms_rel(b.rho_out.values(), whole.rho_out.values()), 1e-5);
  EXPECT_LE(rms_rel(b.rho_norm_out.values(), whole.rho_norm_out.values()), 1e-6);
}

// The work split depends on the problem only, never on num_threads: bitwise-equal results.
void expect_identical(const HostTensor& x, const HostTensor& y, const char* what) {
  ASSERT_EQ(x.bytes(), y.bytes()) << what;
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.bytes()), 0) << what << " differs between thread counts";
}

TEST(CpuFast, ThreadCountDoesNotChangeResults) {
  REQUIRE_CPU_FAST();
  for (int64_t B : {1, 3}) {
    ProblemSpec s{.B = B, .H = 2, .Hv = 1, .T = 130, .L = 96, .E = 160};
    s.dtype = s.state_dtype = DType::float32;
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
    SCOPED_TRACE("B " + std::to_string(B));
    Problem one(s), many(s), again(s);
    forward(one.forward_args(), fast(1));
    backward(one.backward_args(), fast(1));
    forward(many.forward_args(), fast(4));
    backward(many.backward_args(), fast(4));
    forward(again.forward_args(), fast(0));
    backward(again.backward_args(), fast(0));
    for (const Problem* other : {&many, &again}) {
      expect_identical(one.context, other->context, "context");
      expect_identical(one.rho_out, other->rho_out, "rho");
      expect_identical(one.rho_norm_out, other->rho_norm_out, "rho_norm");
      expect_identical(one.grad_q, other->grad_q, "grad_q");
      expect_identical(one.grad_v, other->grad_v, "grad_v");
      expect_identical(one.grad_decay, other->grad_decay, "grad_decay");
      expect_identical(one.grad_rho, other->grad_rho, "grad_rho");
      expect_identical(one.grad_rho_norm, other->grad_rho_norm, "grad_rho_norm");
    }
  }
}

TEST(CpuFast, StepThreadCountDoesNotChangeResults) {
  REQUIRE_CPU_FAST();
  ProblemSpec s{.B = 4, .H = 4, .Hv = 4, .T = 1, .L = 512, .E = 64};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = true;
  auto run = [&](int threads) {
    Problem p(s);
    ForwardArgs f = p.forward_args();
    for (int k = 0; k < 3; ++k) step({squeeze_time(f.q), squeeze_time(f.v), f.decay, *f.rho, *f.rho_norm, squeeze_time(f.context)}, fast(threads));
    return p;
  };
  Problem a = run(1), b = run(4);
  expect_identical(a.context, b.context, "context");
  expect_identical(*a.rho, *b.rho, "rho");
  expect_identical(*a.rho_norm, *b.rho_norm, "rho_norm");
}

// step on a warm state allocates nothing: the backend's buffers are thread-local and only
// grow, and validation formats its messages only when it fails. Measured for the backend alone
// and for the public entry point (validation + dispatch + backend).
TEST(CpuFast, StepAllocatesNothingPerCall) {
  REQUIRE_CPU_FAST();
  for (int threads : {1, 0}) {
    ProblemSpec s{.B = 4, .H = 4, .Hv = 1, .T = 1, .L = 1024, .E = 64};
    s.dtype = s.state_dtype = DType::float32;
    s.initial_rho = s.initial_rho_norm = true;
    Problem p(s);
    ForwardArgs f = p.forward_args();
    const StepArgs a{squeeze_time(f.q), squeeze_time(f.v), f.decay, *f.rho, *f.rho_norm, squeeze_time(f.context)};
    const detail::ValidatedStep v = detail::validate_step(a, fast(threads));
    ASSERT_EQ(v.backend->id(), Backend::cpu);
    for (int k = 0; k < 3; ++k) v.backend->step(v.params);  // warm: thread pool, thread-local buffers
    const long before = g_allocations.load();
    for (int k = 0; k < 10; ++k) v.backend->step(v.params);
    EXPECT_EQ(g_allocations.load() - before, 0) << "threads " << threads;
    const long before_public = g_allocations.load();
    for (int k = 0; k < 10; ++k) step(a, fast(threads));
    EXPECT_EQ(g_allocations.load() - before_public, 0) << "public step(), threads " << threads;
  }
}

#else

// ---- long suite (ctest label long): the sizes of the issue -----------------------------------

TEST(CpuFastLong, LatentOf16384Forward) { REQUIRE_CPU_FAST(); check_forward(wide_latent(16384)); }
TEST(CpuFastLong, LatentOf16384Backward) { REQUIRE_CPU_FAST(); check_backward(wide_latent(16384)); }
TEST(CpuFastLong, SequenceOf65536Forward) { REQUIRE_CPU_FAST(); check_forward(long_sequence(65536)); }
TEST(CpuFastLong, SequenceOf65536Backward) { REQUIRE_CPU_FAST(); check_backward(long_sequence(65536)); }

#endif  // RHOSCAN_LONG_TESTS

}  // namespace
}  // namespace rhoscan::testing
