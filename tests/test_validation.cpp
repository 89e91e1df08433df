// Every input that SPEC.md calls an error: a clear message naming the argument and the shapes,
// and nothing written. One test per case; each runs on every available backend's validation
// path for host tensors (validation happens before the backend is called).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "support/problem.h"

namespace rhoscan::testing {
namespace {

constexpr double kSentinel = 12345.0;

ProblemSpec base_spec() {
  ProblemSpec s{.B = 2, .H = 3, .Hv = 1, .T = 4, .L = 5, .E = 6};
  s.dtype = DType::float32;
  s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = true;
  s.grad_rho_out = s.grad_rho_norm_out = true;
  return s;
}

void fill_outputs(Problem& p) {
  for (HostTensor* t : {&p.context, &p.rho_out, &p.rho_norm_out, &p.grad_q, &p.grad_v, &p.grad_decay,
                        &p.grad_rho, &p.grad_rho_norm})
    t->fill(kSentinel);
}

void expect_outputs_untouched(const Problem& p) {
  for (const HostTensor* t : {&p.context, &p.rho_out, &p.rho_norm_out, &p.grad_q, &p.grad_v,
                              &p.grad_decay, &p.grad_rho, &p.grad_rho_norm})
    for (double x : t->values()) ASSERT_EQ(x, kSentinel) << "an output was written before the error";
}

// Runs `call`, expecting an Error of `kind` whose message contains every string in `needles`.
void expect_error(const std::function<void()>& call, ErrorKind kind, std::initializer_list<const char*> needles) {
  try {
    call();
    FAIL() << "no error was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << n << "\"";
  }
}

// A forward and a backward with a mutation applied to both argument sets must both fail.
void expect_both_rejected(const std::function<void(ForwardArgs&)>& mutate_forward,
                          const std::function<void(BackwardArgs&)>& mutate_backward,
                          std::initializer_list<const char*> needles, Options options = {},
                          ErrorKind kind = ErrorKind::invalid_argument) {
  Problem p(base_spec());
  fill_outputs(p);
  ForwardArgs f = p.forward_args();
  mutate_forward(f);
  expect_error([&] { forward(f, options); }, kind, needles);
  BackwardArgs b = p.backward_args();
  mutate_backward(b);
  expect_error([&] { backward(b, options); }, kind, needles);
  expect_outputs_untouched(p);
}

// Shape mutations apply to fields that both argument structs share.
template <typename F>
void expect_rejected(F mutate, std::initializer_list<const char*> needles, Options options = {},
                     ErrorKind kind = ErrorKind::invalid_argument) {
  expect_both_rejected([&](ForwardArgs& a) { mutate(a); }, [&](BackwardArgs& a) { mutate(a); }, needles,
                       options, kind);
}

TEST(Validation, QueryOfWrongRank) {
  expect_rejected([](auto& a) { a.q.rank = 3; }, {"q", "rank 4", "rank 3", "[2, 3, 4]"});
}

TEST(Validation, ValueBatchMismatch) {
  expect_rejected([](auto& a) { a.v.shape[0] = 3; }, {"v", "[3, 1, 4, 6]", "q [2, 3, 4, 5]", "B = 2"});
}

TEST(Validation, ValueTimeMismatch) {
  expect_rejected([](auto& a) { a.v.shape[2] = 3; }, {"v", "[2, 1, 3, 6]", "T = 4"});
}

TEST(Validation, ValueHeadsNeitherOneNorH) {
  HostTensor v(DType::float32, {2, 2, 4, 6});
  expect_rejected([&](auto& a) { a.v = v.view(); }, {"v", "[2, 2, 4, 6]", "Hv = 1 or H = 3"});
}

TEST(Validation, DecayOfWrongShape) {
  HostTensor d(DType::float32, {3, 4});
  d.fill(0.5);
  expect_rejected([&](auto& a) { a.decay = d.view(); }, {"decay", "[3, 4]", "[H, L] = [3, 5]"});
  HostTensor lead(DType::float32, {2, 3, 5});
  lead.fill(0.5);
  expect_rejected([&](auto& a) { a.decay = lead.view(); }, {"decay", "[2, 3, 5]"});
}

TEST(Validation, DecayWithLeadingOneIsAccepted) {
  Problem p(base_spec());
  HostTensor lead(DType::float32, {1, 3, 5});
  lead.set_values(p.decay.values());
  ForwardArgs a = p.forward_args();
  a.decay = lead.view();
  EXPECT_NO_THROW(forward(a));
}

TEST(Validation, InitialStateOfWrongShapeIsAnErrorNotZeros) {
  HostTensor rho(DType::float32, {1, 3, 5, 6});  // batch size changed mid-stream
  expect_rejected([&](auto& a) { a.rho = rho.view(); }, {"rho", "[B, H, L, E] = [2, 3, 5, 6]", "[1, 3, 5, 6]"});
  HostTensor norm(DType::float32, {2, 3, 4});
  expect_rejected([&](auto& a) { a.rho_norm = norm.view(); }, {"rho_norm", "[2, 3, 5]", "[2, 3, 4]"});
}

TEST(Validation, OutputsOfWrongShape) {
  HostTensor c(DType::float32, {2, 3, 4, 7});
  expect_both_rejected([&](ForwardArgs& a) { a.context = c.view(); },
                       [&](BackwardArgs& a) { a.grad_context = c.view(); }, {"context", "[2, 3, 4, 7]"});
  HostTensor r(DType::float32, {2, 3, 6, 5});
  expect_both_rejected([&](ForwardArgs& a) { a.rho_out = r.view(); },
                       [&](BackwardArgs& a) { a.grad_rho = r.view(); }, {"rho", "[2, 3, 6, 5]"});
  HostTensor gq(DType::float32, {2, 3, 4, 4});
  expect_both_rejected([&](ForwardArgs& a) { a.context = gq.view(); },
                       [&](BackwardArgs& a) { a.grad_q = gq.view(); }, {"[2, 3, 4, 4]"});
  HostTensor gv(DType::float32, {2, 3, 4, 6});  // Hv = 1 problem, but H heads of gradient
  expect_both_rejected([&](ForwardArgs& a) { a.rho_norm_out = gv.view(); },
                       [&](BackwardArgs& a) { a.grad_v = gv.view(); }, {"[2, 3, 4, 6]"});
}

TEST(Validation, DecayOutsideTheUnitInterval) {
  for (double bad : {-0.01, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    Problem p(base_spec());
    fill_outputs(p);
    std::vector<double> d = p.decay.values();
    d[7] = bad;
    p.decay.set_values(d);
    expect_error([&] { forward(p.forward_args()); }, ErrorKind::invalid_argument, {"decay", "[0, 1]"});
    expect_error([&] { backward(p.backward_args()); }, ErrorKind::invalid_argument, {"decay", "[0, 1]"});
    expect_outputs_untouched(p);
  }
}

TEST(Validation, UnsupportedDtypes) {
  HostTensor d16(DType::bfloat16, {3, 5});
  d16.fill(0.5);
  expect_rejected([&](auto& a) { a.decay = d16.view(); }, {"decay", "bfloat16", "float32 or float64"});
  HostTensor r16(DType::float16, {2, 3, 5, 6});
  expect_rejected([&](auto& a) { a.rho = r16.view(); }, {"rho", "float16"});
  HostTensor v64(DType::float64, {2, 1, 4, 6});
  expect_rejected([&](auto& a) { a.v = v64.view(); }, {"v", "float64", "q's dtype float32"});
  expect_rejected([](auto& a) { a.q.dtype = static_cast<DType>(9); }, {"q", "dtype"});
  HostTensor r64(DType::float64, {2, 3, 5, 6});  // states of two dtypes
  expect_rejected([&](auto& a) { a.rho = r64.view(); }, {"float64", "float32"});
}

TEST(Validation, TensorsOnDifferentDevices) {
  expect_rejected([](auto& a) { a.v.device = Device::cuda; }, {"v is on cuda:0", "q is on cpu"});
  expect_rejected([](auto& a) { a.decay.device = Device::vulkan; }, {"decay is on vulkan", "q is on cpu"});
  expect_rejected([](auto& a) { a.q.device = static_cast<Device>(3); }, {"q: unknown device code 3"});
}

// Host tensors pretending to be Vulkan tensors: without a Vulkan backend (not compiled, no device)
// the call says so; with one, their addresses are in no VulkanBuffer. Nothing is written.
TEST(Validation, VulkanTensorsOutsideAnyVulkanBuffer) {
  Problem p(base_spec());
  fill_outputs(p);
  ForwardArgs f = p.forward_args();
  for (TensorView* t : {&f.q, &f.v, &f.decay, &*f.rho, &*f.rho_norm, &f.context, &f.rho_out, &f.rho_norm_out})
    t->device = Device::vulkan;
  try {
    forward(f);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    if (backend_unavailable_reason(Backend::vulkan).empty()) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(m.find("q [2, 3, 4, 5]: address"), std::string::npos) << m;
      EXPECT_NE(m.find("no live rhoscan::VulkanBuffer"), std::string::npos) << m;
    } else {
      EXPECT_EQ(e.kind(), ErrorKind::backend_unavailable) << m;
      EXPECT_NE(m.find("vulkan"), std::string::npos) << m;
    }
  }
  expect_outputs_untouched(p);
}

TEST(Validation, SizesThatOverflowTheIndexType) {
  expect_rejected(
      [](auto& a) {
        a.q.shape[3] = int64_t(1) << 62;
        a.q.strides[2] = int64_t(1) << 62;
      },
      {"q", "64-bit"});
  expect_rejected([](auto& a) { a.v.strides[2] = std::numeric_limits<int64_t>::max() / 2; }, {"v", "64-bit"});
}

TEST(Validation, NegativeStridesAndNullData) {
  expect_rejected([](auto& a) { a.q.strides[1] = -5; }, {"q", "negative stride"});
  expect_rejected([](auto& a) { a.v.data = nullptr; }, {"v", "null"});
}

TEST(Validation, OutputsThatOverlapInputs) {
  expect_both_rejected(
      [](ForwardArgs& a) {
        a.context = a.q;
        a.context.shape[3] = 6;  // right shape, pointing at q's memory
        a.context.strides[2] = 6;
        a.context.strides[1] = 24;
        a.context.strides[0] = 72;
      },
      [](BackwardArgs& a) { a.grad_q = a.q; }, {"overlaps", "q"});
}

TEST(Validation, OutputsThatOverlapThemselves) {
  expect_both_rejected([](ForwardArgs& a) { a.context.strides[2] = 0; },
                       [](BackwardArgs& a) { a.grad_q.strides[2] = 0; }, {"overlap"});
}

TEST(Validation, FiniteCheckingRejectsNanAndInf) {
  Options o;
  o.check_finite = true;
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* name;
    std::function<HostTensor*(Problem&)> pick;
    double value;
  };
  for (const Case& c : {Case{"q", [](Problem& p) { return &p.q; }, nan},
                        Case{"v", [](Problem& p) { return &p.v; }, inf},
                        Case{"rho", [](Problem& p) { return &*p.rho; }, nan},
                        Case{"rho_norm", [](Problem& p) { return &*p.rho_norm; }, -inf}}) {
    Problem p(base_spec());
    fill_outputs(p);
    HostTensor* t = c.pick(p);
    std::vector<double> x = t->values();
    x[x.size() / 2] = c.value;
    t->set_values(x);
    expect_error([&] { forward(p.forward_args(), o); }, ErrorKind::invalid_argument, {c.name, "NaN or Inf"});
    expect_error([&] { backward(p.backward_args(), o); }, ErrorKind::invalid_argument, {c.name, "NaN or Inf"});
    expect_outputs_untouched(p);
    EXPECT_NO_THROW(forward(p.forward_args()));  // off by default: no pass over the inputs
  }
  for (const Case& c : {Case{"grad_context", [](Problem& p) { return &p.grad_context; }, nan},
                        Case{"grad_rho_out", [](Problem& p) { return &*p.grad_rho_out; }, inf},
                        Case{"grad_rho_norm_out", [](Problem& p) { return &*p.grad_rho_norm_out; }, nan}}) {
    Problem p(base_spec());
    fill_outputs(p);
    HostTensor* t = c.pick(p);
    std::vector<double> x = t->values();
    x[0] = c.value;
    t->set_values(x);
    expect_error([&] { backward(p.backward_args(), o); }, ErrorKind::invalid_argument, {c.name, "NaN or Inf"});
    expect_outputs_untouched(p);
  }
}

TEST(Validation, BackendThatCannotTakeTheseTensors) {
  Options o;
  o.backend = Backend::cuda;  // host tensors: either not compiled, no device, or wrong device
  Problem p(base_spec());
  fill_outputs(p);
  try {
    forward(p.forward_args(), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
    EXPECT_TRUE(e.kind() == ErrorKind::backend_unavailable || e.kind() == ErrorKind::invalid_argument);
  }
  expect_outputs_untouched(p);
  EXPECT_THROW(parse_backend("tpu"), Error);
}

TEST(Validation, NegativeChunkSize) {
  Options o;
  o.chunk_size = -4;
  expect_rejected([](auto&) {}, {"chunk_size"}, o);
}

TEST(Validation, StepShapes) {
  HostTensor q(DType::float32, {2, 3, 5}), v(DType::float32, {2, 1, 6}), d(DType::float32, {3, 5});
  HostTensor rho(DType::float32, {2, 3, 5, 6}), norm(DType::float32, {2, 3, 5}), c(DType::float32, {2, 3, 6});
  d.fill(0.5);
  HostTensor wrong_rho(DType::float32, {2, 3, 4, 6}), wrong_c(DType::float32, {2, 3, 5}), wrong_v(DType::float32, {2, 2, 6});
  c.fill(kSentinel);
  rho.fill(kSentinel);
  expect_error([&] { step({q.view(), v.view(), d.view(), wrong_rho.view(), norm.view(), c.view()}); },
               ErrorKind::invalid_argument, {"rho", "[2, 3, 4, 6]", "[2, 3, 5, 6]"});
  expect_error([&] { step({q.view(), v.view(), d.view(), rho.view(), norm.view(), wrong_c.view()}); },
               ErrorKind::invalid_argument, {"context", "[2, 3, 5]"});
  expect_error([&] { step({q.view(), wrong_v.view(), d.view(), rho.view(), norm.view(), c.view()}); },
               ErrorKind::invalid_argument, {"v", "[2, 2, 6]"});
  for (double x : c.values()) ASSERT_EQ(x, kSentinel);
  for (double x : rho.values()) ASSERT_EQ(x, kSentinel);
  EXPECT_NO_THROW(step({q.view(), v.view(), d.view(), rho.view(), norm.view(), c.view()}));
}

// The saved buffer's length is a function of the shapes (core/saved.h): header 64, then s, Nc,
// P for 16-bit inputs where L >= 4 C or the quadratic path applies, and Pcross (bf16: two per float)
// where the CUDA forward's quadratic path applies by default, each section rounded up to 64 floats.
TEST(Validation, SavedNumelFollowsTheShapes) {
  // T = 64, L = 512 = 8 T, bfloat16, no rho: 64 + s 64 + Nc 2·512 + P 64² + Pcross 64² / 2.
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::bfloat16, false), 64 + 64 + 1024 + 4096 + 2048);
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::float16, false, 64), 64 + 64 + 1024 + 4096 + 2048);
  // no Pcross, P (L >= 4 C): an initial rho, L < 8 T, a chunk other than 64 (P nC·32²), T > 1024
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::bfloat16, true), 64 + 64 + 1024 + 4096);
  EXPECT_EQ(saved_numel(1, 1, 64, 511, DType::bfloat16, false), 64 + 64 + 1024 + 4096);  // Nc 1022 -> 1024
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::bfloat16, false, 32), 64 + 64 + 3 * 512 + 2 * 1024);
  EXPECT_EQ(saved_numel(1, 1, 1025, 1 << 14, DType::bfloat16, false), 64 + 1088 + 18 * (1 << 14) + 17 * 4096);
  // no scores: float32, L < 4 C (Nc 2·200 -> 448)
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::float32, false), 64 + 64 + 1024);
  EXPECT_EQ(saved_numel(1, 1, 64, 200, DType::bfloat16, false), 64 + 64 + 448);
  // two pairs, a tail chunk: T = 100 (nC = 2), L = 800
  EXPECT_EQ(saved_numel(2, 1, 100, 800, DType::bfloat16, false), 64 + 256 + 4800 + 2 * 2 * 4096 + 2 * 4 * 4096 / 2);
  EXPECT_EQ(saved_numel(2, 3, 0, 800, DType::bfloat16, false), 0);
  EXPECT_EQ(saved_numel(0, 3, 10, 800, DType::bfloat16, false), 0);
  // with the keys: Xq and Kq, T·Lp bf16 each per pair (Lp: L rounded up to 64), each section
  // 256-byte aligned, only where P is reserved
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::bfloat16, false, 0, true), 64 + 64 + 1024 + 4096 + 2048 + 2 * 16384);
  EXPECT_EQ(saved_numel(1, 1, 64, 511, DType::bfloat16, false, 0, true), 64 + 64 + 1024 + 4096 + 2 * 16384);
  EXPECT_EQ(saved_numel(2, 1, 100, 800, DType::float16, false, 0, true),
            64 + 256 + 4800 + 2 * 2 * 4096 + 2 * 4 * 4096 / 2 + 2 * 83200);  // 2·100·832 / 2 = 83200 = 1300·64
  EXPECT_EQ(saved_numel(1, 1, 5, 300, DType::bfloat16, false, 0, true),
            saved_numel(1, 1, 5, 300, DType::bfloat16, false) + 2 * 832);  // 5·320 / 2 = 800 -> 832
  EXPECT_EQ(saved_numel(1, 1, 64, 512, DType::float32, false, 0, true), 64 + 64 + 1024);
  EXPECT_EQ(saved_numel(1, 1, 64, 200, DType::bfloat16, false, 0, true), 64 + 64 + 448);
  EXPECT_EQ(saved_numel(2, 3, 0, 800, DType::bfloat16, false, 0, true), 0);
  expect_error([] { saved_numel(1, 1, -1, 5, DType::float32, false); }, ErrorKind::invalid_argument,
               {"saved_numel", "T=-1"});
  expect_error([] { saved_numel(1, 1, 4, 5, DType::float32, false, -2); }, ErrorKind::invalid_argument,
               {"saved_numel", "chunk_size=-2"});
  expect_error([] { saved_numel(int64_t{1} << 40, 1 << 20, 1 << 10, 1 << 10, DType::float32, false); },
               ErrorKind::invalid_argument, {"saved_numel", "overflows"});
}

// base_spec (float32, B·H = 6, T = 4, L = 5, an initial rho): 64 + 64 (s: 24) + 64 (Nc: 60) floats.
TEST(Validation, SavedBufferOfWrongShapeDtypeOrStride) {
  ASSERT_EQ(saved_numel(2, 3, 4, 5, DType::float32, true), 192);
  HostTensor right(DType::float32, {192}), long_one(DType::float32, {193}), f64(DType::float64, {192}),
      strided(DType::float32, {384});
  TensorView strided_view = strided.view();
  strided_view.shape[0] = 192;
  strided_view.strides[0] = 2;
  expect_rejected([&](auto& a) { a.saved = long_one.view(); }, {"saved", "expected shape [192]", "[193]", "float32"});
  expect_rejected([&](auto& a) { a.saved = f64.view(); }, {"saved", "dtype float64", "float32"});
  expect_rejected([&](auto& a) { a.saved = strided_view; }, {"saved", "contiguous", "stride 2"});
  HostTensor matrix(DType::float32, {2, 96});
  expect_rejected([&](auto& a) { a.saved = matrix.view(); }, {"saved", "rank 1", "[2, 96]"});
  // an output over the saved buffer: context (144 floats) inside its 192
  Problem p(base_spec());
  ForwardArgs f = p.forward_args();
  HostTensor shared(DType::float32, {192});
  f.context.data = shared.data();
  f.saved = shared.view();
  expect_error([&] { forward(f); }, ErrorKind::invalid_argument, {"saved", "overlaps"});
}

// Forward and backward of `plain` without a saved buffer and of `with` with one of n floats filled
// with the sentinel, which a host backend must leave as it was.
void run_without_and_with_saved(Problem& plain, Problem& with, int64_t n, const Options& o) {
  forward(plain.forward_args(), o);
  backward(plain.backward_args(), o);
  HostTensor saved(DType::float32, {n});
  saved.fill(kSentinel);
  ForwardArgs f = with.forward_args();
  f.saved = saved.view();
  forward(f, o);
  BackwardArgs b = with.backward_args();
  b.saved = saved.view();
  backward(b, o);
  for (double x : saved.values()) ASSERT_EQ(x, kSentinel) << "a host backend wrote the saved buffer";
}

// A 16-bit problem where the keys can be reserved takes a buffer of either length (the length says
// which layout it has), and no other; the error names both.
TEST(Validation, SavedBufferWithOrWithoutTheKeys) {
  ProblemSpec s{.B = 1, .H = 2, .Hv = 1, .T = 8, .L = 256, .E = 8};
  s.dtype = DType::bfloat16;
  s.state_dtype = DType::float32;
  const int64_t n = saved_numel(1, 2, 8, 256, DType::bfloat16, false);
  const int64_t nk = saved_numel(1, 2, 8, 256, DType::bfloat16, false, 0, true);
  ASSERT_EQ(nk, n + 2 * 2 * 8 * 256 / 2);
  for (Backend backend : available_backends()) {
    if (backend == Backend::cuda) continue;  // (test_cuda: SavedKeysReplaceTheNormaliserPass)
    SCOPED_TRACE(backend_name(backend));
    Options o;
    o.backend = backend;
    Problem plain(s), with(s);
    ASSERT_NO_FATAL_FAILURE(run_without_and_with_saved(plain, with, nk, o));
    EXPECT_EQ(plain.context.values(), with.context.values());
    EXPECT_EQ(plain.grad_q.values(), with.grad_q.values());
    HostTensor wrong(DType::float32, {nk + 1});
    ForwardArgs f = with.forward_args();
    f.saved = wrong.view();
    const std::string keys = "or, with the keys, [" + std::to_string(nk) + "]";
    const std::string plain_length = "expected shape [" + std::to_string(n) + "]";
    expect_error([&] { forward(f, o); }, ErrorKind::invalid_argument,
                 {"saved", plain_length.c_str(), keys.c_str(), "bfloat16"});
  }
}

// Backends other than CUDA neither write nor read the saved buffer: their results are bitwise the
// same with or without it, and it stays as it was.
TEST(Validation, HostBackendsIgnoreTheSavedBuffer) {
  for (Backend backend : available_backends()) {
    if (backend == Backend::cuda) continue;
    SCOPED_TRACE(backend_name(backend));
    Options o;
    o.backend = backend;
    ProblemSpec s = base_spec();
    Problem plain(s), with(s);
    ASSERT_NO_FATAL_FAILURE(run_without_and_with_saved(plain, with, saved_numel(2, 3, 4, 5, DType::float32, true), o));
    for (auto [x, y] : {std::pair{&plain.context, &with.context}, {&plain.grad_q, &with.grad_q},
                        {&plain.grad_v, &with.grad_v}, {&plain.grad_decay, &with.grad_decay},
                        {&plain.grad_rho, &with.grad_rho}})
      EXPECT_EQ(x->values(), y->values());
  }
}

TEST(Validation, TensorViewHelpers) {
  float x[24];
  TensorView t = TensorView::contiguous(x, DType::float32, {2, 3, 4});
  EXPECT_EQ(t.strides[0], 12);
  TensorView p = t.permuted({0, 2, 1});
  EXPECT_EQ(p.shape_string(), "[2, 4, 3]");
  EXPECT_EQ(p.strides[1], 1);
  EXPECT_EQ(p.strides[2], 4);
  EXPECT_THROW(t.permuted({0, 0, 1}), Error);
  EXPECT_THROW(TensorView::strided(x, DType::float32, {2, 3}, {3}), Error);
}

}  // namespace
}  // namespace rhoscan::testing
