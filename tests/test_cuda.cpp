// CUDA-specific checks beyond the cross-backend harness: determinism of the backward, very large
// L, tails, the [B,T,H,L] layout, step against forward, and the workspace cap. Without a usable
// GPU every test skips with the backend's reason (the one allowed skip).
#include <gtest/gtest.h>

#include <iostream>

#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "support/device_memory.h"
#include "support/problem.h"

namespace rhoscan::testing {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = backend_unavailable_reason(Backend::cuda);
    if (!why.empty()) GTEST_SKIP() << "CUDA backend not available: " << why;
    if (!device_memory_available(Device::cuda)) GTEST_SKIP() << "CUDA backend: tests cannot allocate device memory";
  }
  static Options cuda(int64_t chunk = 0, int64_t cap = 0) {
    Options o;
    o.backend = Backend::cuda;
    o.chunk_size = chunk;
    o.max_workspace_bytes = cap;
    return o;
  }
};

ProblemSpec spec(int64_t B, int64_t H, int64_t Hv, int64_t T, int64_t L, int64_t E, DType dtype) {
  ProblemSpec s;
  s.B = B, s.H = H, s.Hv = Hv, s.T = T, s.L = L, s.E = E;
  s.dtype = dtype;
  s.state_dtype = DType::float32;
  return s;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Every gradient of two runs of the same problem bitwise equal.
void expect_same_gradients(const Problem& a, const Problem& b) {
  EXPECT_TRUE(same_bytes(a.grad_q, b.grad_q));
  EXPECT_TRUE(same_bytes(a.grad_v, b.grad_v));
  EXPECT_TRUE(same_bytes(a.grad_decay, b.grad_decay));
  EXPECT_TRUE(same_bytes(a.grad_rho, b.grad_rho));
  EXPECT_TRUE(same_bytes(a.grad_rho_norm, b.grad_rho_norm));
}

// Every gradient of p against the reference within the dtype's tolerance (what: the run's name).
// A forward that fills `saved` (mirrored on the device), then the backward that reads it, with the
// same options; the outputs and the buffer copied back to the host.
void forward_backward_saved(MirroredProblem& m, HostTensor& saved, const Options& o) {
  ForwardArgs f = m.forward_args();
  f.saved = m.mirror(saved);
  forward(f, o);
  BackwardArgs b = m.backward_args();
  b.saved = f.saved;
  backward(b, o);
  m.copy_outputs_to_host();
  m.copy_back(saved);
}
void expect_gradients_near(const Problem& p, const Problem& ref, DType dtype, const char* what) {
  const double gt = gradient_tolerance(dtype);
  EXPECT_LE(rms_rel(p.grad_q.values(), ref.grad_q.values()), gt) << what << " grad_q";
  EXPECT_LE(rms_rel(p.grad_v.values(), ref.grad_v.values()), gt) << what << " grad_v";
  EXPECT_LE(rms_rel(p.grad_decay.values(), ref.grad_decay.values()), gt) << what << " grad_decay";
  EXPECT_LE(rms_rel(p.grad_rho.values(), ref.grad_rho.values()), gt) << what << " grad_rho";
  EXPECT_LE(rms_rel(p.grad_rho_norm.values(), ref.grad_rho_norm.values()), gt) << what << " grad_rho_norm";
}

// Forward and backward on the device against the float64 reference.
void check_against_reference(const ProblemSpec& s, const Options& o) {
  Problem p(s);
  Problem ref = p.reference_solution();
  {
    MirroredProblem m(p, Device::cuda);
    forward(m.forward_args(), o);
    backward(m.backward_args(), o);
    m.copy_outputs_to_host();
  }
  const double ft = forward_tolerance(s.dtype), gt = gradient_tolerance(s.dtype);
  EXPECT_LE(rms_rel(p.context.values(), ref.context.values()), ft) << "context";
  EXPECT_LE(rms_rel(p.rho_out.values(), ref.rho_out.values()), ft) << "rho";
  EXPECT_LE(rms_rel(p.rho_norm_out.values(), ref.rho_norm_out.values()), ft) << "rho_norm";
  EXPECT_LE(rms_rel(p.grad_q.values(), ref.grad_q.values()), gt) << "grad_q";
  EXPECT_LE(rms_rel(p.grad_v.values(), ref.grad_v.values()), gt) << "grad_v";
  EXPECT_LE(rms_rel(p.grad_decay.values(), ref.grad_decay.values()), gt) << "grad_decay";
  EXPECT_LE(rms_rel(p.grad_rho.values(), ref.grad_rho.values()), gt) << "grad_rho";
  EXPECT_LE(rms_rel(p.grad_rho_norm.values(), ref.grad_rho_norm.values()), gt) << "grad_rho_norm";
}

TEST_F(Cuda, BackwardIsBitwiseDeterministic) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    ProblemSpec s = spec(3, 4, 1, 150, 200, 48, dtype);
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
    Problem p1(s), p2(s);
    for (Problem* p : {&p1, &p2}) {
      MirroredProblem m(*p, Device::cuda);
      backward(m.backward_args(), cuda());
      m.copy_outputs_to_host();
    }
    EXPECT_TRUE(same_bytes(p1.grad_q, p2.grad_q)) << dtype_name(dtype);
    EXPECT_TRUE(same_bytes(p1.grad_v, p2.grad_v)) << dtype_name(dtype);
    EXPECT_TRUE(same_bytes(p1.grad_decay, p2.grad_decay)) << dtype_name(dtype);
    EXPECT_TRUE(same_bytes(p1.grad_rho, p2.grad_rho)) << dtype_name(dtype);
    EXPECT_TRUE(same_bytes(p1.grad_rho_norm, p2.grad_rho_norm)) << dtype_name(dtype);
  }
}

TEST_F(Cuda, LargeLatentSmallT) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {  // FFMA and tensor-core paths
    ProblemSpec s = spec(1, 2, 1, 3, 65536, 32, dtype);
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = true;
    check_against_reference(s, cuda());
  }
}

// The tensor-core path (bf16 operands; the forward's chunk states stored in bf16) at a BDH-like
// input: sparse non-negative q, several chunks with a tail, L and E not multiples of the 64 × 128
// tiles. (bfloat16, the dtype BDH trains in; the harness covers float16.)
TEST_F(Cuda, TensorCorePathAtBdhLikeShape) {
  ProblemSpec s = spec(2, 2, 1, 300, 700, 200, DType::bfloat16);
  s.q_zero_fraction = 0.9;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  check_against_reference(s, cuda());
}

// dq_final's token segments (round 30): L / V under kDqThreads puts several rows of threads on
// segments of a chunk's tokens. L = 256 (V = 4: 4 segments), 130 (V = 2: 2), 7 (V = 1: 8, most
// lanes past L), 1030 (V = 2: 3 latent blocks, one segment); T = 100, a full chunk and a 36-token
// tail (segments of 5 tokens at 8 rows, the last of one token); the final-state gradients
// enter dq through Bend.
TEST_F(Cuda, DqFinalTokenSegmentsAtSmallL) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    for (int64_t L : {256, 130, 7, 1030}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " L=" + std::to_string(L));
      ProblemSpec s = spec(2, 2, 1, 100, L, 32, dtype);
      s.grad_rho_out = s.grad_rho_norm_out = true;
      check_against_reference(s, cuda());
    }
  }
}

TEST_F(Cuda, TailChunkAndHvEqualsH) {
  for (DType dtype : {DType::float32, DType::float16}) {
    ProblemSpec s = spec(2, 2, 2, 100, 96, 40, dtype);  // 100 = 64 + 36
    s.initial_rho_norm = s.grad_rho_norm_out = true;
    s.initial_rho = dtype == DType::float32;
    check_against_reference(s, cuda());
  }
}

TEST_F(Cuda, SequenceFirstLayout) {
  ProblemSpec s = spec(2, 3, 1, 130, 80, 72, DType::bfloat16);
  s.bthl_layout = true;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = true;
  check_against_reference(s, cuda(32));
}

TEST_F(Cuda, LargeEmbedding) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    ProblemSpec s = spec(1, 1, 1, 70, 64, 1024, dtype);
    s.grad_rho_out = true;
    check_against_reference(s, cuda());
  }
}

// T tokens through step() equal one forward over the T tokens, on the device.
TEST_F(Cuda, StepMatchesForward) {
  const int64_t T = 5;
  ProblemSpec s = spec(2, 3, 1, T, 300, 70, DType::float32);
  s.initial_rho = s.initial_rho_norm = true;
  Problem p(s);
  {
    MirroredProblem m(p, Device::cuda);
    forward(m.forward_args(), cuda());
    m.copy_outputs_to_host();
  }
  HostTensor rho = *p.rho, norm = *p.rho_norm;
  std::vector<double> q = p.q.values(), v = p.v.values(), streamed;
  std::vector<double> ctx_all(p.context.numel());
  for (int64_t t = 0; t < T; ++t) {
    ProblemSpec one = s;
    one.T = 1;
    Problem tok(one);
    std::vector<double> qs, vs;
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t l = 0; l < s.L; ++l) qs.push_back(q[(bh * T + t) * s.L + l]);
    for (int64_t bh = 0; bh < s.B * s.Hv; ++bh)
      for (int64_t e = 0; e < s.E; ++e) vs.push_back(v[(bh * T + t) * s.E + e]);
    tok.q.set_values(qs);
    tok.v.set_values(vs);
    tok.decay = p.decay;
    *tok.rho = rho;
    *tok.rho_norm = norm;
    MirroredProblem m(tok, Device::cuda);
    ForwardArgs f = m.forward_args();
    step({squeeze_time(f.q), squeeze_time(f.v), f.decay, *f.rho, *f.rho_norm, squeeze_time(f.context)}, cuda());
    m.copy_back(tok.context);
    m.copy_back(*tok.rho);
    m.copy_back(*tok.rho_norm);
    std::vector<double> c = tok.context.values();
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t e = 0; e < s.E; ++e) ctx_all[(bh * T + t) * s.E + e] = c[bh * s.E + e];
    rho = *tok.rho;
    norm = *tok.rho_norm;
  }
  EXPECT_LE(rms_rel(ctx_all, p.context.values()), 1e-5) << "context";
  EXPECT_LE(rms_rel(rho.values(), p.rho_out.values()), 1e-5) << "rho";
  EXPECT_LE(rms_rel(norm.values(), p.rho_norm_out.values()), 1e-5) << "rho_norm";
}

// A cap that fits one batch row at a time gives bitwise the same results as no cap; a cap that
// fits nothing is an out_of_memory error that names the option.
TEST_F(Cuda, WorkspaceCapBatchesWithoutChangingResults) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    ProblemSpec s = spec(4, 2, 1, 130, 128, 64, dtype);
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
    Problem a(s), b(s);
    const int64_t small_cap = 3 << 20;  // one or a few (b, h) pairs per batch
    for (auto [p, cap] : {std::pair{&a, int64_t{0}}, std::pair{&b, small_cap}}) {
      MirroredProblem m(*p, Device::cuda);
      forward(m.forward_args(), cuda(0, cap));
      backward(m.backward_args(), cuda(0, cap));
      m.copy_outputs_to_host();
    }
    EXPECT_TRUE(same_bytes(a.context, b.context));
    EXPECT_TRUE(same_bytes(a.rho_out, b.rho_out));
    expect_same_gradients(a, b);
    MirroredProblem m(a, Device::cuda);
    try {
      forward(m.forward_args(), cuda(0, 1024));
      ADD_FAILURE() << "a 1 KiB workspace cap should be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
      EXPECT_NE(std::string(e.what()).find("max_workspace_bytes"), std::string::npos) << e.what();
    }
  }
}

// Sets an environment variable for its lifetime, then restores the caller's value: the CUDA
// backend's RHOSCAN_CUDA_FORWARD_PATH / RHOSCAN_CUDA_BACKWARD_PATH (chunked or quadratic) force
// the path that the tests compare where both apply (src/cuda/forward.cu, backward.cu).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (saved_) setenv(name_.c_str(), saved_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// The 16-bit backward's two paths, the quadratic one (no chunk-state sets: products of blocks
// between chunks; by default for T <= 1024 and L >= T without initial rho or grad_rho_out) and the chunked one,
// each against the float64 reference and against each other, and the quadratic one bitwise
// deterministic: tail chunks, T below one chunk and T = 1, chunks 64, 32 and 17, decay exactly 0
// and 1 (and a mix), zero q rows, Hv = 1 and Hv = H, the [B,T,H,x] layout, rho_norm0 and
// grad_rho_norm_out given (the quadratic path's conditions allow both), grad_rho0 wanted (the
// harness always asks for it); bfloat16, and float16 (split values and keys) on three of them.
struct QuadraticCase {
  ProblemSpec s;
  int64_t chunk;
};
std::vector<QuadraticCase> quadratic_backward_cases() {
  using Case = QuadraticCase;
  std::vector<Case> cases;
  auto add = [&](ProblemSpec s, int64_t chunk, auto&& tweak) {
    tweak(s);
    cases.push_back({s, chunk});
  };
  add(spec(2, 2, 1, 300, 700, 200, DType::bfloat16), 0, [](ProblemSpec& s) {  // 300 = 4 · 64 + 44
    s.q_zero_fraction = 0.9;
    s.initial_rho_norm = s.grad_rho_norm_out = true;
  });
  add(spec(2, 3, 3, 100, 96, 40, DType::bfloat16), 32, [](ProblemSpec& s) {
    s.decay = DecayKind::with_zeros_and_ones;
    s.zero_q_rows = true;
    s.grad_rho_norm_out = true;
  });
  add(spec(1, 2, 1, 130, 80, 72, DType::bfloat16), 0, [](ProblemSpec& s) {
    s.decay = DecayKind::all_zero;
    s.bthl_layout = true;
  });
  add(spec(1, 2, 2, 150, 64, 130, DType::bfloat16), 17, [](ProblemSpec& s) { s.decay = DecayKind::all_one; });
  add(spec(2, 2, 1, 20, 130, 9, DType::bfloat16), 0, [](ProblemSpec& s) { s.initial_rho_norm = true; });
  add(spec(1, 3, 1, 1, 70, 20, DType::bfloat16), 0, [](ProblemSpec&) {});
  add(spec(1, 1, 1, 1024, 256, 64, DType::bfloat16), 0, [](ProblemSpec& s) {  // the longest default T
    s.decay = DecayKind::with_zeros_and_ones;
  });
  // float16: the split passes. Its gradients must fit float16 (max 65504): a zero q row or a latent
  // whose normaliser is still 0 (no rho_norm0, or decay 0 after a zero) gives dq of order 1/eps,
  // 1e6-1e7 on these shapes in the float64 reference, which float16 stores as inf on either path.
  // So dense q and an initial normaliser; decay 0/1, Hv = H, a tail chunk and chunk 17 stay.
  for (size_t k : {0, 1, 3}) {
    Case c = cases[k];
    c.s.dtype = DType::float16;
    c.s.q_zero_fraction = 0.0;
    c.s.zero_q_rows = false;
    c.s.initial_rho_norm = true;
    cases.push_back(c);
  }
  return cases;
}
TEST_F(Cuda, QuadraticAndChunkedBackwardAgree) {
  for (const QuadraticCase& c : quadratic_backward_cases()) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk));
    Problem ref = Problem(c.s).reference_solution();
    Problem chunked(c.s), quad(c.s), quad2(c.s);
    for (auto [p, path] : {std::pair{&chunked, "chunked"}, std::pair{&quad, "quadratic"}, std::pair{&quad2, "quadratic"}}) {
      ScopedEnv env("RHOSCAN_CUDA_BACKWARD_PATH", path);
      MirroredProblem m(*p, Device::cuda);
      backward(m.backward_args(), cuda(c.chunk));
      m.copy_outputs_to_host();
    }
    const double gt = gradient_tolerance(c.s.dtype);
    expect_gradients_near(chunked, ref, c.s.dtype, "chunked");
    expect_gradients_near(quad, ref, c.s.dtype, "quadratic");
    EXPECT_LE(rms_rel(quad.grad_q.values(), chunked.grad_q.values()), gt) << "grad_q, quadratic vs chunked";
    EXPECT_LE(rms_rel(quad.grad_v.values(), chunked.grad_v.values()), gt) << "grad_v, quadratic vs chunked";
    EXPECT_LE(rms_rel(quad.grad_decay.values(), chunked.grad_decay.values()), gt) << "grad_decay, quadratic vs chunked";
    EXPECT_LE(rms_rel(quad.grad_rho.values(), chunked.grad_rho.values()), gt) << "grad_rho, quadratic vs chunked";
    EXPECT_TRUE(same_bytes(quad.grad_q, quad2.grad_q) && same_bytes(quad.grad_v, quad2.grad_v) &&
                same_bytes(quad.grad_decay, quad2.grad_decay) && same_bytes(quad.grad_rho, quad2.grad_rho) &&
                same_bytes(quad.grad_rho_norm, quad2.grad_rho_norm))
        << "quadratic path not bitwise deterministic";
  }
}

// The quadratic backward from a carried state (RHOSCAN_CUDA_BACKWARD_PATH=quadratic with an initial
// rho and/or grad_rho_out, bfloat16: state_readback_mma adds the state's shares of W, U and <H,
// A_end>, quad_dv_mma's kState dv's share of GR, and dR_0 starts from a^T GR): against the float64
// reference and the chunked path, bitwise deterministic, unchanged with side streams off and under
// a workspace cap that batches the pairs (the states' rows from the batch's pairs; small shapes),
// and after a forward (either path) whose saved buffer it reads. Shapes: both states, rho0 alone, GR
// alone; a tail chunk, chunk 32, decay 0 and 1, zero q rows, Hv = H, [B,T,H,x], T = 1, E = 300
// (state_readback_mma's two column slabs).
// float16 is not taken (the chunked path runs, so the forced run is the chunked one's bits).
TEST_F(Cuda, QuadraticBackwardFromACarriedState) {
  std::vector<QuadraticCase> cases;
  auto add = [&](ProblemSpec s, int64_t chunk, bool rho0, bool gr, auto&& tweak) {
    s.initial_rho = rho0, s.grad_rho_out = gr;
    s.initial_rho_norm = s.grad_rho_norm_out = true;
    tweak(s);
    cases.push_back({s, chunk});
  };
  add(spec(2, 2, 1, 300, 200, 136, DType::bfloat16), 0, true, true, [](ProblemSpec&) {});  // 300 = 4 · 64 + 44
  add(spec(2, 3, 3, 100, 96, 40, DType::bfloat16), 32, true, true, [](ProblemSpec& s) {
    s.decay = DecayKind::with_zeros_and_ones;
    s.zero_q_rows = true;
  });
  add(spec(1, 2, 1, 130, 80, 72, DType::bfloat16), 0, true, false, [](ProblemSpec& s) { s.bthl_layout = true; });
  add(spec(1, 2, 2, 150, 70, 130, DType::bfloat16), 0, false, true, [](ProblemSpec&) {});
  add(spec(2, 2, 1, 1, 70, 20, DType::bfloat16), 0, true, true, [](ProblemSpec&) {});
  add(spec(1, 2, 1, 130, 80, 300, DType::bfloat16), 0, true, true, [](ProblemSpec&) {});  // E past 256: two slabs
  add(spec(1, 2, 1, 130, 80, 40, DType::float16), 0, true, true, [](ProblemSpec& s) { s.q_zero_fraction = 0.0; });
  for (const QuadraticCase& c : cases) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk) +
                 (c.s.initial_rho ? " rho0" : "") + (c.s.grad_rho_out ? " grad_rho_out" : ""));
    const Problem ref = Problem(c.s).reference_solution();
    auto run = [&](const char* path, const char* side, int64_t cap) {
      ScopedEnv forced("RHOSCAN_CUDA_BACKWARD_PATH", path), streams("RHOSCAN_CUDA_SIDE_STREAMS", side);
      Problem p(c.s);
      MirroredProblem m(p, Device::cuda);
      backward(m.backward_args(), cuda(c.chunk, cap));
      m.copy_outputs_to_host();
      return p;
    };
    const Problem quad = run("quadratic", "1", 0), again = run("quadratic", "1", 0), one = run("quadratic", "0", 0);
    // (the cap: a pair or two per batch on the small shapes; the others run in one batch either way)
    const int64_t cap = c.s.T * c.s.L <= 100 * 128 ? int64_t{3} << 20 : 0;
    const Problem capped = run("quadratic", "1", cap), chunked = run("chunked", "1", 0);
    expect_gradients_near(quad, ref, c.s.dtype, "quadratic from the state");
    expect_gradients_near(chunked, ref, c.s.dtype, "chunked");
    const double gt = gradient_tolerance(c.s.dtype);
    EXPECT_LE(rms_rel(quad.grad_q.values(), chunked.grad_q.values()), gt) << "grad_q, quadratic vs chunked";
    EXPECT_LE(rms_rel(quad.grad_v.values(), chunked.grad_v.values()), gt) << "grad_v, quadratic vs chunked";
    EXPECT_LE(rms_rel(quad.grad_decay.values(), chunked.grad_decay.values()), gt) << "grad_decay, quadratic vs chunked";
    expect_same_gradients(quad, again);
    expect_same_gradients(quad, one);
    expect_same_gradients(quad, capped);
    if (c.s.dtype == DType::float16) expect_same_gradients(quad, chunked);  // (not taken: the chunked path's bits)
    // after a forward on either path that fills the saved buffer (s, N, P; Pcross and the keys where
    // the quadratic forward saved them), read by the backward
    for (const char* forward_path : {"chunked", "quadratic"}) {
      SCOPED_TRACE(std::string("saved by the ") + forward_path + " forward");
      ScopedEnv fp("RHOSCAN_CUDA_FORWARD_PATH", forward_path), bp("RHOSCAN_CUDA_BACKWARD_PATH", "quadratic");
      const ProblemSpec& s = c.s;
      Problem p(s);
      HostTensor saved(DType::float32, {saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho, c.chunk, true)});
      MirroredProblem m(p, Device::cuda);
      forward_backward_saved(m, saved, cuda(c.chunk));
      expect_gradients_near(p, ref, s.dtype, "quadratic from the state, saved buffer");
    }
  }
}

// Why the wgmma kernels cannot run here ("" where they can): this build has no sm_90a code, or the
// device is not compute capability 9.0 (the library's wgmma_runs). The tests that compare them
// with their mma.sync versions skip with it.
std::string wgmma_unavailable() {
#if !RHOSCAN_CUDA_WGMMA
  return "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a): no wgmma kernel to compare";
#endif
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return "the device's compute capability could not be read";
  if (major != 9 || minor != 0)
    return "wgmma runs on compute capability 9.0 only; this device is " + std::to_string(major) + "." +
           std::to_string(minor);
  return "";
}

// A forward problem of the quadratic path's kernel comparisons, and its chunk.
struct ForwardCase {
  ProblemSpec s;
  int64_t chunk;
};
// Each shape {B, H, Hv, T, L, E} with its chunk in bfloat16 and float16, a third of q zero, an
// initial rho_norm.
std::vector<ForwardCase> kernel_forward_cases(const std::vector<std::pair<std::array<int64_t, 6>, int64_t>>& shapes) {
  std::vector<ForwardCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16})
    for (const auto& [d, chunk] : shapes) {
      ForwardCase c{spec(d[0], d[1], d[2], d[3], d[4], d[5], dtype), chunk};
      c.s.q_zero_fraction = 0.3;
      c.s.initial_rho_norm = true;
      cases.push_back(c);
    }
  return cases;
}
// c's forward on the GPU (options o) with the environment variable `env` (a kernel's choice) set
// to `kernel`.
Problem forward_forcing(const ForwardCase& c, const Options& o, const char* env, const char* kernel) {
  ScopedEnv k(env, kernel);
  Problem p(c.s);
  MirroredProblem m(p, Device::cuda);
  forward(m.forward_args(), o);
  m.copy_outputs_to_host();
  return p;
}

// The quadratic backward's two readback kernels (quadratic_backward.cuh): quad_readback_wgmma
// (warpgroup MMA, sm_90a, the default where it runs) and quad_readback_mma (mma.sync), forced by
// RHOSCAN_CUDA_READBACK on the same problems: each against the float64 reference, against each
// other (the tensor cores' accumulation order may differ in the last bits of W and U, so not
// bitwise), and the wgmma one bitwise deterministic; quad_readback_wgmma with its operand from
// shared memory (RHOSCAN_CUDA_READBACK_REGA=0) against the reference and the default (A from
// registers); quad_readback_wgmma with the chunks inner in its item order
// (RHOSCAN_CUDA_READBACK_CHUNKS_INNER=1: every item computed alike, in another block and order)
// bitwise the default order's gradients.
TEST_F(Cuda, ReadbackKernelsMmaAndWgmmaAgree) {
  if (const std::string why = wgmma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ScopedEnv path("RHOSCAN_CUDA_BACKWARD_PATH", "quadratic");
  for (const QuadraticCase& c : quadratic_backward_cases()) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk));
    Problem ref = Problem(c.s).reference_solution();
    Problem mma(c.s), wg(c.s), wg2(c.s), wg_smem(c.s), wg_chunks(c.s);
    // wg_smem: quad_readback_wgmma with its operand read by the tensor cores from shared memory
    // (RHOSCAN_CUDA_READBACK_REGA=0) instead of A from registers (the default); wg_chunks: its
    // items with the chunks inner
    for (auto [p, kernel, rega, chunks_inner] :
         {std::tuple{&mma, "mma", "1", "0"}, std::tuple{&wg, "wgmma", "1", "0"}, std::tuple{&wg2, "wgmma", "1", "0"},
          std::tuple{&wg_smem, "wgmma", "0", "0"}, std::tuple{&wg_chunks, "wgmma", "1", "1"}}) {
      ScopedEnv env("RHOSCAN_CUDA_READBACK", kernel);
      ScopedEnv operand("RHOSCAN_CUDA_READBACK_REGA", rega);
      ScopedEnv order("RHOSCAN_CUDA_READBACK_CHUNKS_INNER", chunks_inner);
      MirroredProblem m(*p, Device::cuda);
      backward(m.backward_args(), cuda(c.chunk));
      m.copy_outputs_to_host();
    }
    expect_gradients_near(mma, ref, c.s.dtype, "mma");
    expect_gradients_near(wg, ref, c.s.dtype, "wgmma");
    expect_gradients_near(wg_smem, ref, c.s.dtype, "wgmma, operand from shared memory");
    EXPECT_LE(rms_rel(wg_smem.grad_q.values(), wg.grad_q.values()), 1e-4) << "grad_q, A from registers vs shared memory";
    // W and U to float32 accuracy either way: the gradients agree far inside the tolerance
    EXPECT_LE(rms_rel(wg.grad_q.values(), mma.grad_q.values()), 1e-4) << "grad_q, wgmma vs mma";
    EXPECT_LE(rms_rel(wg.grad_v.values(), mma.grad_v.values()), 1e-4) << "grad_v, wgmma vs mma";
    EXPECT_LE(rms_rel(wg.grad_decay.values(), mma.grad_decay.values()), 1e-4) << "grad_decay, wgmma vs mma";
    expect_same_gradients(wg, wg2);
    expect_same_gradients(wg, wg_chunks);
  }
}

// quad_dv_mma summing the heads into grad_v itself (kHeadSum, RHOSCAN_CUDA_DV_HEAD_SUM=1: bfloat16,
// Hv = 1, the whole backward in one batch) against the per-pair kernel and dv_accumulate (=0): every
// gradient bitwise (the same products, and the pairs' dv added in the same order from 0.0f and
// rounded once), and within the reference's tolerance. (Where the head sum does not apply, float16
// or Hv = H, both runs take the per-pair kernel: the comparison holds trivially.)
TEST_F(Cuda, DvHeadSumMatchesThePerPairKernel) {
  ScopedEnv path("RHOSCAN_CUDA_BACKWARD_PATH", "quadratic");
  for (const QuadraticCase& c : quadratic_backward_cases()) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk));
    Problem ref = Problem(c.s).reference_solution();
    Problem per_pair(c.s), head_sum(c.s);
    for (auto [p, on] : {std::pair{&per_pair, "0"}, std::pair{&head_sum, "1"}}) {
      ScopedEnv env("RHOSCAN_CUDA_DV_HEAD_SUM", on);
      MirroredProblem m(*p, Device::cuda);
      backward(m.backward_args(), cuda(c.chunk));
      m.copy_outputs_to_host();
    }
    expect_gradients_near(head_sum, ref, c.s.dtype, "quad_dv_mma with the head sum");
    expect_same_gradients(per_pair, head_sum);
  }
}

// The quadratic paths' two cross-score kernels (quadratic.cuh): cross_scores_wgmma (warpgroup MMA
// with the factor a^(d C) on Xq in registers, sm_90a, the default where it runs) and
// cross_scores_mma (the factor on the keys), forced by RHOSCAN_CUDA_CROSS_SCORES. They round
// different operands (not bitwise): the context and the final state against the float64
// reference and against each other, each kernel bitwise deterministic; the quadratic backward
// (which computes the cross scores again) against the reference with either kernel. Five chunks
// with a tail, eight, seven at chunk 32; L off the 64-latent tiles (150, 70, 330: L splits of
// several tiles at the pair counts here).
TEST_F(Cuda, CrossScoresKernelsMmaAndWgmmaAgree) {
  if (const std::string why = wgmma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  {
    ScopedEnv path("RHOSCAN_CUDA_FORWARD_PATH", "quadratic");
    for (const ForwardCase& c : kernel_forward_cases({{{2, 3, 1, 300, 150, 136}, 0},
                                                      {{1, 2, 2, 450, 70, 20}, 0},
                                                      {{2, 2, 1, 200, 330, 40}, 32}})) {
      SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk));
      Problem ref = Problem(c.s).reference_solution();
      auto run = [&](const char* kernel) { return forward_forcing(c, cuda(c.chunk), "RHOSCAN_CUDA_CROSS_SCORES", kernel); };
      const Problem mma = run("mma"), wg = run("wgmma"), wg2 = run("wgmma");
      const double ft = forward_tolerance(c.s.dtype);
      EXPECT_LE(rms_rel(mma.context.values(), ref.context.values()), ft) << "context, cross_scores_mma";
      EXPECT_LE(rms_rel(wg.context.values(), ref.context.values()), ft) << "context, cross_scores_wgmma";
      EXPECT_LE(rms_rel(wg.context.values(), mma.context.values()), ft) << "context, wgmma vs mma";
      EXPECT_LE(rms_rel(wg.rho_out.values(), ref.rho_out.values()), ft) << "rho, cross_scores_wgmma";
      EXPECT_TRUE(same_bytes(wg.context, wg2.context)) << "cross_scores_wgmma not bitwise deterministic";
    }
  }
  ScopedEnv path("RHOSCAN_CUDA_BACKWARD_PATH", "quadratic");
  for (const QuadraticCase& c : quadratic_backward_cases()) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk) + ", backward");
    Problem ref = Problem(c.s).reference_solution();
    for (const char* kernel : {"mma", "wgmma"}) {
      ScopedEnv k("RHOSCAN_CUDA_CROSS_SCORES", kernel);
      Problem p(c.s);
      MirroredProblem m(p, Device::cuda);
      backward(m.backward_args(), cuda(c.chunk));
      m.copy_outputs_to_host();
      expect_gradients_near(p, ref, c.s.dtype, kernel);
    }
  }
}

// The quadratic forward's two final-state kernels (quadratic.cuh): final_state_wgmma (warpgroup
// MMA, sm_90a, the default where it runs) and final_state_mma (mma.sync), forced by
// RHOSCAN_CUDA_FINAL_STATE: rho against the float64 reference and against final_state_mma's (the
// tensor cores' order of accumulation may differ in the last bits: not bitwise), the context
// (which the final state does not touch) bitwise the same, and each kernel bitwise deterministic.
// E off and on the 128-column tiles (136, 300, 384, 256); a latent tile half past Lp (L 150, 200,
// 70); T = 1; chunks of 64 and 32 (one 64-token step per chunk).
TEST_F(Cuda, FinalStateKernelsMmaAndWgmmaAgree) {
  if (const std::string why = wgmma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ScopedEnv path("RHOSCAN_CUDA_FORWARD_PATH", "quadratic");
  for (const ForwardCase& c : kernel_forward_cases({{{2, 3, 1, 300, 150, 136}, 0},
                                                    {{1, 2, 2, 130, 200, 300}, 32},
                                                    {{2, 2, 1, 70, 64, 384}, 0},
                                                    {{1, 2, 2, 1, 70, 256}, 0}})) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk));
    Problem ref = Problem(c.s).reference_solution();
    auto run = [&](const char* kernel) { return forward_forcing(c, cuda(c.chunk), "RHOSCAN_CUDA_FINAL_STATE", kernel); };
    const Problem mma = run("mma"), mma2 = run("mma");
    const double ft = forward_tolerance(c.s.dtype);
    EXPECT_LE(rms_rel(mma.rho_out.values(), ref.rho_out.values()), ft) << "rho, final_state_mma";
    EXPECT_TRUE(same_bytes(mma.rho_out, mma2.rho_out)) << "final_state_mma not bitwise deterministic";
    const Problem wg = run("wgmma"), wg2 = run("wgmma");
    EXPECT_LE(rms_rel(wg.rho_out.values(), ref.rho_out.values()), ft) << "rho, final_state_wgmma";
    EXPECT_LE(rms_rel(wg.rho_out.values(), mma.rho_out.values()), 1e-5) << "rho, wgmma vs mma";
    EXPECT_TRUE(same_bytes(wg.context, mma.context)) << "context, wgmma vs mma";
    EXPECT_TRUE(same_bytes(wg.rho_out, wg2.rho_out)) << "final_state_wgmma not bitwise deterministic";
  }
}

// A forward of s on the GPU with options o, its outputs copied back to the host.
Problem forward_on_gpu(const ProblemSpec& s, const Options& o) {
  Problem p(s);
  MirroredProblem m(p, Device::cuda);
  forward(m.forward_args(), o);
  m.copy_outputs_to_host();
  return p;
}
// The scan tests' problems and chunk sizes (0: the default).
std::pair<std::vector<ProblemSpec>, std::vector<int64_t>> scan_cases() {
  std::vector<ProblemSpec> specs = {spec(2, 2, 1, 300, 256, 130, DType::bfloat16),
                                    spec(1, 3, 3, 100, 150, 200, DType::bfloat16),
                                    spec(3, 2, 1, 77, 64, 64, DType::bfloat16),
                                    spec(1, 2, 1, 1, 256, 256, DType::bfloat16)};
  specs[0].initial_rho = specs[0].initial_rho_norm = true;
  specs[1].bthl_layout = true;
  specs[2].initial_rho = true;
  specs[2].zero_q_rows = true;
  return {specs, {0, 32, 48, 0}};
}
// chunk_scan_mma (chunk_scan.cuh) on the chunked forward where it runs (bfloat16, L <= 256, chunks
// of a multiple of 4) against the two kernels it replaces, chunk_states_mma + chunk_output_mma
// (RHOSCAN_CUDA_FORWARD_SCAN=0): it keeps the state transposed and multiplies with A and B
// exchanged, the same products per element in the same k order, so the context and both states are
// bitwise theirs (the host emulation finds them so; this holds the tensor cores to it), within the
// reference's tolerance, and bitwise deterministic; the default (version 3 on warpgroup MMA where
// wgmma runs) and version 2 (RHOSCAN_CUDA_SCAN=mma) alike. Shapes: L 256 (the
// largest state), 150 (Lp 192), 64; E 130 (a 128-column item past the packed rows), 200, 64; tail
// chunks, chunk 32 and 48; an initial rho and rho_norm, and none; Hv = H; [B,T,H,x]; T = 1.
TEST_F(Cuda, ChunkScanMatchesTheTwoKernels) {
  ScopedEnv path("RHOSCAN_CUDA_FORWARD_PATH", "chunked");
  const auto [specs, chunks] = scan_cases();
  for (size_t k = 0; k < specs.size(); ++k) {
    const ProblemSpec& s = specs[k];
    SCOPED_TRACE(s.name() + " chunk " + std::to_string(chunks[k]));
    const Problem ref = Problem(s).reference_solution();
    auto run = [&](const char* scan, const char* version = "") {
      ScopedEnv v("RHOSCAN_CUDA_FORWARD_SCAN", scan);
      ScopedEnv which("RHOSCAN_CUDA_SCAN", version);  // "" (unset): the build's default
      return forward_on_gpu(s, cuda(chunks[k]));
    };
    const Problem two = run("0"), scan = run("1"), again = run("1"), v2 = run("1", "mma");
    const double ft = forward_tolerance(s.dtype);
    EXPECT_LE(rms_rel(scan.context.values(), ref.context.values()), ft) << "context, chunk_scan_mma";
    EXPECT_LE(rms_rel(scan.rho_out.values(), ref.rho_out.values()), ft) << "rho, chunk_scan_mma";
    EXPECT_LE(rms_rel(two.context.values(), ref.context.values()), ft) << "context, the two kernels";
    // the default (version 3 where wgmma runs: its fetch's addresses stepped) and version 2 (indexed)
    for (const Problem* x : {&scan, &v2}) {
      const char* what = x == &scan ? "chunk_scan_mma (default)" : "chunk_scan_mma version 2";
      EXPECT_TRUE(same_bytes(x->context, two.context)) << "context, " << what << " vs the two kernels";
      EXPECT_TRUE(same_bytes(x->rho_out, two.rho_out)) << "rho, " << what << " vs the two kernels";
      EXPECT_TRUE(same_bytes(x->rho_norm_out, two.rho_norm_out)) << "rho_norm, " << what << " vs the two kernels";
    }
    EXPECT_TRUE(same_bytes(scan.context, again.context)) << "chunk_scan_mma not bitwise deterministic";
  }
}

// chunk_scan_mma version 3 (chunk_scan_wgmma_kernel, chunk_scan.cuh: version 2's products on
// warpgroup MMA, RHOSCAN_CUDA_SCAN=wgmma) against version 2 (=mma) on ChunkScanMatchesTheTwoKernels'
// shapes: within the reference's tolerance, bitwise deterministic, and near version 2 (the host
// emulation finds them bit for bit equal; the tensor cores may order a wgmma k step's sums otherwise
// than an mma.sync one's, so here the state within 1e-5 and the bf16 context within 1e-3 RMS, with
// whether they are bitwise the same printed).
TEST_F(Cuda, ChunkScanWgmmaMatchesVersion2) {
  if (const std::string why = wgmma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ScopedEnv path("RHOSCAN_CUDA_FORWARD_PATH", "chunked");
  auto [specs, chunks] = scan_cases();
  specs.push_back(spec(2, 4, 1, 512, 256, 256, DType::bfloat16));  // BDH-base's L and E, eight chunks
  chunks.push_back(0);
  for (size_t k = 0; k < specs.size(); ++k) {
    const ProblemSpec& s = specs[k];
    SCOPED_TRACE(s.name() + " chunk " + std::to_string(chunks[k]));
    const Problem ref = Problem(s).reference_solution();
    auto run = [&](const char* version) {
      ScopedEnv v("RHOSCAN_CUDA_SCAN", version);
      return forward_on_gpu(s, cuda(chunks[k]));
    };
    const Problem v2 = run("mma"), v3 = run("wgmma"), again = run("wgmma");
    const double ft = forward_tolerance(s.dtype);
    EXPECT_LE(rms_rel(v3.context.values(), ref.context.values()), ft) << "context, version 3";
    EXPECT_LE(rms_rel(v3.rho_out.values(), ref.rho_out.values()), ft) << "rho, version 3";
    EXPECT_LE(rms_rel(v3.context.values(), v2.context.values()), 1e-3) << "context, version 3 vs 2";
    EXPECT_LE(rms_rel(v3.rho_out.values(), v2.rho_out.values()), 1e-5) << "rho, version 3 vs 2";
    EXPECT_TRUE(same_bytes(v3.rho_norm_out, v2.rho_norm_out)) << "rho_norm (not the scan's)";
    EXPECT_TRUE(same_bytes(v3.context, again.context)) << "version 3 not bitwise deterministic";
    EXPECT_TRUE(same_bytes(v3.rho_out, again.rho_out)) << "version 3 not bitwise deterministic";
    std::cout << "  " << s.name() << ": version 3 vs 2 context " << (same_bytes(v3.context, v2.context) ? "bitwise" : "differs")
              << ", rho " << (same_bytes(v3.rho_out, v2.rho_out) ? "bitwise" : "differs") << "\n";
  }
}

// norm_scores_mma (chunk_products.cuh: Qp, Xq, Kq and the intra-chunk scores in one pass, the
// tensor-core forward's default) against norm_apply + chunk_scores_mma (RHOSCAN_CUDA_NORM_SCORES=0),
// on the quadratic and the chunked path (chunk_scan_mma where Lp <= 256): the same keys and scores
// bit for bit (the host emulation holds the kernels to that), so the forward's outputs and its
// saved buffer with the keys (s, N, P, Pcross, Xq, Kq) are bitwise the same; and both within the
// tolerance of the float64 reference. Shapes: tail chunks, chunks 64 and 32, L odd (single latents),
// [B,T,H,x], Hv = H, T = 1 and 0.
TEST_F(Cuda, NormScoresMatchesNormApplyAndScores) {
  std::vector<ForwardCase> cases = kernel_forward_cases({{{2, 3, 1, 300, 150, 136}, 0},
                                                         {{1, 2, 2, 130, 200, 300}, 32},
                                                         {{2, 2, 1, 70, 455, 36}, 0},
                                                         {{1, 2, 1, 1, 70, 20}, 0},
                                                         {{1, 2, 1, 0, 70, 20}, 0}});
  cases[1].s.bthl_layout = true;
  cases[2].s.zero_q_rows = true;
  for (const ForwardCase& c : cases)
    for (const char* path : {"quadratic", "chunked"}) {
      SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk) + ", " + path);
      ScopedEnv forced("RHOSCAN_CUDA_FORWARD_PATH", path);
      const ProblemSpec& s = c.s;
      const int64_t n = saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho, c.chunk, true);
      Problem fused(s), apart(s);
      HostTensor saved_fused(DType::float32, {n}), saved_apart(DType::float32, {n});
      for (auto [p, saved, env] : {std::tuple{&fused, &saved_fused, "1"}, {&apart, &saved_apart, "0"}}) {
        ScopedEnv k("RHOSCAN_CUDA_NORM_SCORES", env);
        MirroredProblem m(*p, Device::cuda);
        ForwardArgs f = m.forward_args();
        f.saved = m.mirror(*saved);
        forward(f, cuda(c.chunk));
        m.copy_outputs_to_host();
        m.copy_back(*saved);
      }
      EXPECT_TRUE(same_bytes(fused.context, apart.context)) << "context";
      EXPECT_TRUE(same_bytes(fused.rho_out, apart.rho_out)) << "rho";
      EXPECT_TRUE(same_bytes(fused.rho_norm_out, apart.rho_norm_out)) << "rho_norm";
      EXPECT_TRUE(same_bytes(saved_fused, saved_apart)) << "the saved buffer (P and the keys)";
      if (s.T == 0) continue;
      Problem ref = Problem(s).reference_solution();
      const double ft = forward_tolerance(s.dtype);
      EXPECT_LE(rms_rel(fused.context.values(), ref.context.values()), ft) << "context";
      EXPECT_LE(rms_rel(fused.rho_out.values(), ref.rho_out.values()), ft) << "rho";
    }
}

// The quadratic backward (forced: L < T here) under a workspace cap that fits a few pairs per
// batch: bitwise the same gradients (cross_scores' L splits come from the call's pair count, not
// the batch's).
TEST_F(Cuda, QuadraticBackwardUnderACapIsBitwiseUnchanged) {
  ProblemSpec s = spec(4, 2, 1, 130, 128, 64, DType::bfloat16);
  s.initial_rho_norm = s.grad_rho_norm_out = true;
  ScopedEnv forced("RHOSCAN_CUDA_BACKWARD_PATH", "quadratic");
  Problem a(s), b(s);
  for (auto [p, cap] : {std::pair{&a, int64_t{0}}, std::pair{&b, int64_t{3} << 20}}) {
    MirroredProblem m(*p, Device::cuda);
    backward(m.backward_args(), cuda(0, cap));
    m.copy_outputs_to_host();
  }
  expect_same_gradients(a, b);
}

// bfloat16 values (and upstream gradients) whose rows are already the packed operand's (E a multiple
// of 64, [T][E] contiguous per packed row, 16-byte aligned) are read in place instead of copied by
// pack_bf16 (chunk_products.cuh, values_in_place): forward and backward against the copy
// (RHOSCAN_CUDA_VALUES_IN_PLACE=0) bitwise, on every path that reads them (the scan, quadratic and
// chunked forwards; the quadratic and chunked backwards), with Hv = 1 (a row per batch row) and
// Hv = H (a row per pair), pairs batched under a workspace cap (rows from a batch's offset), and
// where they are not packed rows ([B,T,H,E] with Hv = H: the copy either way); a tail chunk each.
TEST_F(Cuda, ValuesReadInPlaceGiveTheCopysResults) {
  struct Case {
    ProblemSpec s;
    const char* backward_path;  // forced (nullptr: the default)
    int64_t cap;
  };
  std::vector<Case> cases;
  auto add = [&](ProblemSpec s, const char* path, int64_t cap, auto&& tweak) {
    s.initial_rho_norm = s.grad_rho_norm_out = true;
    tweak(s);
    cases.push_back({s, path, cap});
  };
  add(spec(2, 2, 1, 130, 128, 64, DType::bfloat16), nullptr, 0, [](ProblemSpec&) {});      // scan, quadratic
  add(spec(2, 2, 1, 130, 128, 64, DType::bfloat16), "chunked", 0, [](ProblemSpec&) {});    // scan, chunked
  add(spec(3, 2, 1, 130, 128, 64, DType::bfloat16), nullptr, 3 << 20, [](ProblemSpec&) {});  // batched pairs
  add(spec(2, 2, 2, 100, 256, 128, DType::bfloat16), nullptr, 0, [](ProblemSpec& s) {      // quadratic both ways
    s.decay = DecayKind::with_zeros_and_ones;
    s.zero_q_rows = true;
  });
  add(spec(1, 2, 1, 700, 320, 64, DType::bfloat16), nullptr, 0, [](ProblemSpec&) {});      // chunked both ways
  add(spec(1, 2, 2, 130, 128, 64, DType::bfloat16), nullptr, 0, [](ProblemSpec& s) { s.bthl_layout = true; });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.s.name() + " backward " + (c.backward_path ? c.backward_path : "default") + " cap " +
                 std::to_string(c.cap));
    std::optional<ScopedEnv> path;
    if (c.backward_path) path.emplace("RHOSCAN_CUDA_BACKWARD_PATH", c.backward_path);
    Problem in_place(c.s), copied(c.s);
    for (auto [p, env] : {std::pair{&in_place, "1"}, std::pair{&copied, "0"}}) {
      ScopedEnv k("RHOSCAN_CUDA_VALUES_IN_PLACE", env);
      MirroredProblem m(*p, Device::cuda);
      forward(m.forward_args(), cuda(0, c.cap));
      backward(m.backward_args(), cuda(0, c.cap));
      m.copy_outputs_to_host();
    }
    EXPECT_TRUE(same_bytes(in_place.context, copied.context)) << "context";
    EXPECT_TRUE(same_bytes(in_place.rho_out, copied.rho_out)) << "rho";
    EXPECT_TRUE(same_bytes(in_place.rho_norm_out, copied.rho_norm_out)) << "rho_norm";
    expect_same_gradients(in_place, copied);
    const Problem ref = Problem(c.s).reference_solution();
    EXPECT_LE(rms_rel(in_place.context.values(), ref.context.values()), forward_tolerance(c.s.dtype)) << "context";
    expect_gradients_near(in_place, ref, c.s.dtype, "in place");
  }
}

// Both forward paths of the tensor-core dtypes on the same input (no initial rho, so the
// quadratic path applies; rho_norm0 does not prevent it): each against the float64 reference, and
// the quadratic path bitwise the same when a workspace cap batches the pairs (its L splits come
// from the call's pair count, not the batch's). Five chunks with a tail at the default chunk, ten
// at chunk 32; L and E off the 64 × 128 tiles. The harness (test_backends) runs every shape through
// whichever path the default threshold (kQuadraticMaxT) picks: this test keeps both covered.
TEST_F(Cuda, ForwardPathsQuadraticAndChunked) {
  for (DType dtype : {DType::bfloat16, DType::float16})
    for (int64_t chunk : {int64_t{0}, int64_t{32}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk));
      ProblemSpec s = spec(2, 3, 1, 300, 150, 136, dtype);
      s.q_zero_fraction = 0.5;
      s.initial_rho_norm = s.grad_rho_out = true;
      Problem ref = Problem(s).reference_solution();
      std::vector<std::vector<double>> contexts;
      for (const char* path : {"chunked", "quadratic"}) {
        SCOPED_TRACE(path);
        ScopedEnv forced("RHOSCAN_CUDA_FORWARD_PATH", path);
        Problem p(s);
        {
          MirroredProblem m(p, Device::cuda);
          forward(m.forward_args(), cuda(chunk));
          m.copy_outputs_to_host();
        }
        const double ft = forward_tolerance(dtype);
        EXPECT_LE(rms_rel(p.context.values(), ref.context.values()), ft) << "context";
        EXPECT_LE(rms_rel(p.rho_out.values(), ref.rho_out.values()), ft) << "rho";
        EXPECT_LE(rms_rel(p.rho_norm_out.values(), ref.rho_norm_out.values()), ft) << "rho_norm";
        contexts.push_back(p.context.values());
        if (std::string(path) == "quadratic") {
          Problem capped(s);
          {
            MirroredProblem m(capped, Device::cuda);
            forward(m.forward_args(), cuda(chunk, 6 << 20));  // one or two pairs per batch
            m.copy_outputs_to_host();
          }
          EXPECT_TRUE(same_bytes(p.context, capped.context)) << "context under a workspace cap";
          EXPECT_TRUE(same_bytes(p.rho_out, capped.rho_out)) << "rho under a workspace cap";
        }
      }
      // the two paths round differently (bf16 states against bf16 scores), but agree to the bar
      EXPECT_LE(rms_rel(contexts[1], contexts[0]), forward_tolerance(dtype)) << "quadratic against chunked";
    }
}

// The side streams (side_streams.h): the quadratic forward's cross_scores and final_state beside
// chunk_scores, the quadratic backward's quad_dv (and, after a forward that saved its buffer, the
// keys and the cross scores) beside quad_readback and bwd_local, and the
// chunked paths' chunk states: bitwise the one-stream outputs and gradients, and joined back into
// the caller's stream. The caller's stream is a non-blocking one held back by a host function
// when the forward is called, and the outputs are copied on that stream alone afterwards: a side
// stream that the caller's stream did not wait for would still be writing rho (or would have read
// the operands before they were made).
TEST_F(Cuda, QuadraticSideStreamsJoinTheCallersStream) {
  ProblemSpec s = spec(2, 2, 1, 150, 1600, 136, DType::bfloat16);
  s.q_zero_fraction = 0.5;
  s.initial_rho_norm = true;
  Problem one(s), two(s);
  {
    ScopedEnv off("RHOSCAN_CUDA_SIDE_STREAMS", "0");
    MirroredProblem m(one, Device::cuda);
    forward(m.forward_args(), cuda());
    m.copy_outputs_to_host();
  }
  ScopedEnv on("RHOSCAN_CUDA_SIDE_STREAMS", "1");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  MirroredProblem m(two, Device::cuda);
  const ForwardArgs f = m.forward_args();
  Options o = cuda();
  o.stream = stream;
  ASSERT_EQ(cudaLaunchHostFunc(
                stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr),
            cudaSuccess);
  forward(f, o);
  const size_t cb = one.context.bytes(), rb = one.rho_out.bytes(), nb = one.rho_norm_out.bytes();
  void* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, cb + rb + nb), cudaSuccess);
  char* h = static_cast<char*>(host);
  ASSERT_EQ(cudaMemcpyAsync(h, f.context.data, cb, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h + cb, f.rho_out.data, rb, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h + cb + rb, f.rho_norm_out.data, nb, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(std::memcmp(h, one.context.data(), cb), 0) << "context";
  EXPECT_EQ(std::memcmp(h + cb, one.rho_out.data(), rb), 0) << "rho";
  EXPECT_EQ(std::memcmp(h + cb + rb, one.rho_norm_out.data(), nb), 0) << "rho_norm";
  const Problem ref = Problem(s).reference_solution();
  EXPECT_LE(rms_rel(one.context.values(), ref.context.values()), forward_tolerance(s.dtype)) << "context";
  EXPECT_LE(rms_rel(one.rho_out.values(), ref.rho_out.values()), forward_tolerance(s.dtype)) << "rho";
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  // the backward (quadratic: L >= T, no initial rho, no final-state gradient): the same gradients
  Problem g_one(s), g_two(s);
  for (auto [p, side] : {std::pair{&g_one, "0"}, std::pair{&g_two, "1"}}) {
    ScopedEnv e("RHOSCAN_CUDA_SIDE_STREAMS", side);
    MirroredProblem mb(*p, Device::cuda);
    backward(mb.backward_args(), cuda());
    mb.copy_outputs_to_host();
  }
  expect_same_gradients(g_one, g_two);
  // the quadratic backward after a forward that saved its buffer (round 37): norm_apply's keys on the
  // side stream beside cross_values, and, where the forward was the scan (L = 256: no cross scores
  // saved), the cross scores beside them; float16 with the keys' remainders there too
  for (ProblemSpec c : {spec(2, 2, 1, 150, 1600, 136, DType::bfloat16), spec(2, 2, 1, 200, 256, 72, DType::bfloat16),
                        spec(1, 2, 2, 130, 1100, 40, DType::float16)}) {
    SCOPED_TRACE(std::string("saved buffer ") + c.name() + " " + dtype_name(c.dtype));
    c.initial_rho_norm = c.grad_rho_norm_out = true;
    if (c.dtype == DType::float16) c.q_zero_fraction = 0.0;  // (dq of order 1/eps would not fit float16)
    Problem c_one(c), c_two(c);
    for (auto [p, side] : {std::pair{&c_one, "0"}, std::pair{&c_two, "1"}}) {
      ScopedEnv e("RHOSCAN_CUDA_SIDE_STREAMS", side);
      MirroredProblem mc(*p, Device::cuda);
      HostTensor saved(DType::float32, {saved_numel(c.B, c.H, c.T, c.L, c.dtype, false)});
      forward_backward_saved(mc, saved, cuda());
    }
    expect_same_gradients(c_one, c_two);
    expect_gradients_near(c_two, Problem(c).reference_solution(), c.dtype, "side streams, saved buffer");
  }
  // the chunked paths (not chunk_scan: Lp > 256, or float32): the chunk states beside the scores
  // (forward) and the forward states beside the reverse ones (backward), bitwise too
  for (ProblemSpec c : {spec(2, 2, 1, 400, 320, 72, DType::bfloat16), spec(1, 2, 1, 200, 100, 40, DType::float32)}) {
    SCOPED_TRACE(std::string("chunked ") + dtype_name(c.dtype));
    c.initial_rho = c.initial_rho_norm = c.grad_rho_out = true;
    Problem c_one(c), c_two(c);
    for (auto [p, side] : {std::pair{&c_one, "0"}, std::pair{&c_two, "1"}}) {
      ScopedEnv e("RHOSCAN_CUDA_SIDE_STREAMS", side);
      MirroredProblem mc(*p, Device::cuda);
      forward(mc.forward_args(), cuda());
      backward(mc.backward_args(), cuda());
      mc.copy_outputs_to_host();
    }
    EXPECT_TRUE(same_bytes(c_one.context, c_two.context)) << "context";
    EXPECT_TRUE(same_bytes(c_one.rho_out, c_two.rho_out)) << "rho";
    expect_same_gradients(c_one, c_two);
  }
}

// The quadratic forward from an initial state (round 40: quadratic_output's kState adds Xq a^(I C)
// rho0 to the context, the final state's kernels a^T rho0 to rho_T; not the default with rho0:
// measured slower than the chunked path so far), forced, against the float64 reference
// (which includes R_0's read and decay) and against the chunked path; bitwise the same with the
// side streams off and on (add_initial_state follows final_state on its stream) and from run to
// run. Tail chunks, E past one column block, chunk 32, T = 1, decay 0 and 1, zero q rows, Hv = H,
// the [B,T,H,x] layout; float16 (rho0's tile split into hi + lo) on two of them.
TEST_F(Cuda, QuadraticForwardFromAnInitialState) {
  struct Case {
    ProblemSpec s;
    int64_t chunk;
  };
  std::vector<Case> cases;
  for (DType dtype : {DType::bfloat16, DType::float16}) {
    cases.push_back({spec(2, 2, 1, 130, 100, 40, dtype), 0});
    cases.push_back({spec(1, 2, 2, 300, 150, 136, dtype), 0});
  }
  cases.push_back({spec(2, 3, 1, 200, 330, 40, DType::bfloat16), 32});
  cases.push_back({spec(2, 2, 1, 1, 70, 20, DType::bfloat16), 0});
  cases[1].s.bthl_layout = true;
  cases[2].s.decay = DecayKind::with_zeros_and_ones;
  cases[4].s.zero_q_rows = true;
  for (Case& c : cases) {
    c.s.initial_rho = c.s.initial_rho_norm = true;
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + " chunk " + std::to_string(c.chunk));
    const Problem ref = Problem(c.s).reference_solution();
    auto run = [&](const char* path, const char* side) {
      ScopedEnv forced("RHOSCAN_CUDA_FORWARD_PATH", path), streams("RHOSCAN_CUDA_SIDE_STREAMS", side);
      Problem p(c.s);
      MirroredProblem m(p, Device::cuda);
      forward(m.forward_args(), cuda(c.chunk));
      m.copy_outputs_to_host();
      return p;
    };
    const Problem quad = run("quadratic", "1"), quad_one = run("quadratic", "0"), quad2 = run("quadratic", "1");
    const Problem chunked = run("chunked", "1");
    const double ft = forward_tolerance(c.s.dtype);
    EXPECT_LE(rms_rel(quad.context.values(), ref.context.values()), ft) << "context, quadratic";
    EXPECT_LE(rms_rel(quad.rho_out.values(), ref.rho_out.values()), ft) << "rho, quadratic";
    EXPECT_LE(rms_rel(quad.rho_norm_out.values(), ref.rho_norm_out.values()), ft) << "rho_norm, quadratic";
    EXPECT_LE(rms_rel(chunked.context.values(), ref.context.values()), ft) << "context, chunked";
    EXPECT_LE(rms_rel(quad.context.values(), chunked.context.values()), ft) << "context, quadratic vs chunked";
    EXPECT_TRUE(same_bytes(quad.context, quad_one.context)) << "context, side streams off";
    EXPECT_TRUE(same_bytes(quad.rho_out, quad_one.rho_out)) << "rho, side streams off";
    EXPECT_TRUE(same_bytes(quad.context, quad2.context)) << "context, not bitwise deterministic";
    EXPECT_TRUE(same_bytes(quad.rho_out, quad2.rho_out)) << "rho, not bitwise deterministic";
  }
}

// The quadratic forward's rows variant (RHOSCAN_CUDA_FORWARD_PATH=rows: quadratic_rows_mma, a row
// block's cross scores and context in one kernel, for bfloat16 and Lp <= 256; taken only where
// forced until the H200 has measured it): against the float64 reference and against the quadratic
// path with cross_scores and quadratic_output (which sums Pcross in another order: not bitwise),
// bitwise deterministic and unchanged under a workspace cap that batches the pairs; a backward that
// reads its saved buffer (s, Nc and P, no cross scores: the header's sections 3) within the
// tolerance of the reference. Where it does not apply, the forced path falls back bit for bit:
// float16 and Lp > 256 to the quadratic path, an initial rho to the chunked one. Shapes: a tail
// chunk, chunks of 32 and 17, Lp = 256 exactly, decay 0 and 1, zero q rows, Hv = H, [B,T,H,x], T = 1, 0.
TEST_F(Cuda, ForwardPathRowsAgreesWithQuadratic) {
  std::vector<ForwardCase> cases;
  auto add = [&](ProblemSpec s, int64_t chunk, auto&& tweak) {
    tweak(s);
    cases.push_back({s, chunk});
  };
  add(spec(2, 3, 1, 300, 150, 136, DType::bfloat16), 0, [](ProblemSpec& s) {  // 300 = 4 · 64 + 44
    s.q_zero_fraction = 0.5;
    s.initial_rho_norm = true;
  });
  add(spec(2, 2, 1, 200, 256, 40, DType::bfloat16), 0, [](ProblemSpec& s) {
    s.decay = DecayKind::with_zeros_and_ones;
    s.zero_q_rows = true;
  });
  add(spec(1, 2, 2, 130, 200, 300, DType::bfloat16), 32, [](ProblemSpec& s) { s.bthl_layout = true; });
  add(spec(1, 2, 1, 100, 70, 20, DType::bfloat16), 17, [](ProblemSpec& s) { s.decay = DecayKind::all_one; });
  add(spec(1, 2, 1, 1, 70, 20, DType::bfloat16), 0, [](ProblemSpec&) {});
  add(spec(1, 2, 1, 0, 70, 20, DType::bfloat16), 0, [](ProblemSpec&) {});
  const char* env = "RHOSCAN_CUDA_FORWARD_PATH";
  for (const ForwardCase& c : cases) {
    const ProblemSpec& s = c.s;
    SCOPED_TRACE(s.name() + " chunk " + std::to_string(c.chunk));
    const Problem rows = forward_forcing(c, cuda(c.chunk), env, "rows"), again = forward_forcing(c, cuda(c.chunk), env, "rows");
    const Problem capped = forward_forcing(c, cuda(c.chunk, 4 << 20), env, "rows");  // a pair or two per batch
    EXPECT_TRUE(same_bytes(rows.context, again.context)) << "context not bitwise deterministic";
    EXPECT_TRUE(same_bytes(rows.context, capped.context)) << "context under a workspace cap";
    EXPECT_TRUE(same_bytes(rows.rho_out, capped.rho_out)) << "rho under a workspace cap";
    if (s.T == 0) {
      EXPECT_EQ(rows.rho_out.values(), Problem(s).reference_solution().rho_out.values()) << "T = 0: the state unchanged";
      continue;
    }
    const Problem ref = Problem(s).reference_solution(), quadratic = forward_forcing(c, cuda(c.chunk), env, "quadratic");
    const double ft = forward_tolerance(s.dtype);
    EXPECT_LE(rms_rel(rows.context.values(), ref.context.values()), ft) << "context";
    EXPECT_LE(rms_rel(rows.rho_out.values(), ref.rho_out.values()), ft) << "rho";
    EXPECT_LE(rms_rel(rows.rho_norm_out.values(), ref.rho_norm_out.values()), ft) << "rho_norm";
    EXPECT_LE(rms_rel(rows.context.values(), quadratic.context.values()), ft) << "context against the quadratic path";
    EXPECT_TRUE(same_bytes(rows.rho_out, quadratic.rho_out)) << "rho: the same final_state kernel";
    // the backward on the rows forward's saved buffer
    ScopedEnv forced(env, "rows");
    Problem with(s);
    HostTensor saved(DType::float32, {saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho, c.chunk)});
    {
      MirroredProblem m(with, Device::cuda);
      forward_backward_saved(m, saved, cuda(c.chunk));
    }
    uint32_t filled = 0;
    std::memcpy(&filled, static_cast<const char*>(saved.data()) + 56, 4);  // SavedHeader::filled
    EXPECT_EQ(filled & 4u, 0u) << "no cross scores saved by the rows path";
    EXPECT_TRUE(same_bytes(with.context, rows.context)) << "the context with a saved buffer";
    expect_gradients_near(with, ref, s.dtype, "backward on the rows forward's saved buffer");
  }
  // where rows does not apply: float16 (no lo pass), Lp > 256, an initial rho
  std::vector<std::pair<ForwardCase, const char*>> fallbacks = {
      {{spec(2, 3, 1, 300, 150, 136, DType::float16), 0}, "quadratic"},
      {{spec(1, 2, 1, 200, 330, 40, DType::bfloat16), 0}, "quadratic"},
      {{spec(1, 2, 1, 130, 100, 40, DType::bfloat16), 0}, "chunked"}};  // (rho0: the quadratic path only where forced)
  fallbacks[0].first.s.initial_rho_norm = true;
  fallbacks[2].first.s.initial_rho = true;
  for (const auto& [c, path] : fallbacks) {
    SCOPED_TRACE(c.s.name() + " " + dtype_name(c.s.dtype) + ": rows falls back to " + path);
    const Problem rows = forward_forcing(c, cuda(), env, "rows"), other = forward_forcing(c, cuda(), env, path);
    EXPECT_TRUE(same_bytes(rows.context, other.context)) << "context";
    EXPECT_TRUE(same_bytes(rows.rho_out, other.rho_out)) << "rho";
    const Problem ref = Problem(c.s).reference_solution();
    EXPECT_LE(rms_rel(rows.context.values(), ref.context.values()), forward_tolerance(c.s.dtype)) << "context";
  }
}

// The forward's saved buffer (core/saved.h): a backward that reads it gives gradients within the
// tolerance of the float64 reference and of the backward that recomputes, bitwise the same on a
// second run; the header says which sections the forward filled (the intra-chunk scores P for
// 16-bit inputs where L >= 4 C or the cross-chunk scores are reserved, the cross-chunk scores
// only where the forward takes the quadratic path), and the token sums are the forward's.
TEST_F(Cuda, SavedBufferReplacesTheRecomputation) {
  struct Case {
    ProblemSpec s;
    uint32_t filled;  // the header's sections: 1 s and Nc, 2 P, 4 Pcross
    bool bitwise;     // whether the backward reads only s and Nc, bitwise its own: the same gradients
  };
  std::vector<Case> cases;
  auto add = [&](ProblemSpec s, uint32_t filled, bool bitwise, auto&& tweak) {
    tweak(s);
    cases.push_back({s, filled, bitwise});
  };
  add(spec(2, 2, 1, 200, 1600, 64, DType::bfloat16), 7, false, [](ProblemSpec& s) {  // 200 = 3 · 64 + 8
    s.q_zero_fraction = 0.9;
    s.initial_rho_norm = true;
  });
  add(spec(1, 2, 2, 130, 1100, 40, DType::float16), 7, false, [](ProblemSpec& s) {
    s.q_zero_fraction = 0.0;
    s.initial_rho_norm = true;
    s.decay = DecayKind::with_zeros_and_ones;
  });
  add(spec(2, 3, 1, 1, 70, 20, DType::bfloat16), 7, false, [](ProblemSpec& s) { s.zero_q_rows = true; });
  // initial rho: chunked both ways; P saved (L >= 4 C) and read by the chunked backward
  add(spec(1, 2, 1, 70, 600, 36, DType::bfloat16), 3, false, [](ProblemSpec& s) {
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = true;
  });
  // L < 4 C: only s and Nc, bitwise
  add(spec(1, 2, 1, 70, 200, 36, DType::bfloat16), 1, true, [](ProblemSpec& s) {
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = true;
  });
  // chunk_scan_mma's forward (L = 256 < 2 T) saves P; the chunked backward reads it
  add(spec(2, 2, 1, 200, 256, 40, DType::bfloat16), 3, false, [](ProblemSpec& s) { s.initial_rho_norm = true; });
  // 16 pairs × 33 chunks: P has one L split, so the forward writes it into the buffer directly
  add(spec(4, 4, 1, 2112, 256, 16, DType::bfloat16), 3, false, [](ProblemSpec&) {});
  add(spec(2, 2, 1, 100, 96, 40, DType::float32), 1, true, [](ProblemSpec& s) {  // FFMA, chunked
    s.initial_rho_norm = s.grad_rho_norm_out = true;
    s.decay = DecayKind::all_one;
  });
  // grad_rho_out: the forward is quadratic (fills the scores), the backward chunked (reads s, Nc, P)
  add(spec(1, 2, 1, 130, 1100, 24, DType::bfloat16), 7, false, [](ProblemSpec& s) { s.grad_rho_out = true; });
  for (const Case& c : cases) {
    const ProblemSpec& s = c.s;
    SCOPED_TRACE(s.name() + " " + dtype_name(s.dtype));
    Problem ref = Problem(s).reference_solution();
    Problem plain(s), with(s), again(s);
    {
      MirroredProblem m(plain, Device::cuda);
      forward(m.forward_args(), cuda());
      backward(m.backward_args(), cuda());
      m.copy_outputs_to_host();
    }
    const int64_t n = saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho);
    ASSERT_GT(n, 64);
    HostTensor saved(DType::float32, {n});
    for (Problem* p : {&with, &again}) {
      MirroredProblem m(*p, Device::cuda);
      forward_backward_saved(m, saved, cuda());
    }
    const std::vector<double> words = saved.values();
    uint32_t magic, filled;
    std::memcpy(&magic, saved.data(), 4);
    std::memcpy(&filled, static_cast<const char*>(saved.data()) + 56, 4);  // SavedHeader::filled
    EXPECT_EQ(magic, 0x53564852u);
    EXPECT_EQ(filled, c.filled) << "the sections the forward filled";
    // s (at float 64): the token sums of q, as float32 sums of the stored values
    const std::vector<double> q = plain.q.values();
    for (int64_t bt : {int64_t{0}, s.B * s.H * s.T - 1}) {
      double sum = 0;
      for (int64_t l = 0; l < s.L; ++l) sum += q[bt * s.L + l];
      EXPECT_NEAR(words[64 + bt], sum, 1e-5 * std::abs(sum) + 1e-6) << "token sum " << bt;
    }
    EXPECT_EQ(with.context.values(), plain.context.values()) << "the forward's outputs do not change";
    const double gt = gradient_tolerance(s.dtype);
    for (auto [name, a, b, r] :
         {std::tuple{"grad_q", &with.grad_q, &plain.grad_q, &ref.grad_q}, {"grad_v", &with.grad_v, &plain.grad_v, &ref.grad_v},
          {"grad_decay", &with.grad_decay, &plain.grad_decay, &ref.grad_decay},
          {"grad_rho", &with.grad_rho, &plain.grad_rho, &ref.grad_rho},
          {"grad_rho_norm", &with.grad_rho_norm, &plain.grad_rho_norm, &ref.grad_rho_norm}}) {
      EXPECT_LE(rms_rel(a->values(), r->values()), gt) << name << " with saved, against the reference";
      EXPECT_LE(rms_rel(b->values(), r->values()), gt) << name << " recomputed, against the reference";
      EXPECT_LE(rms_rel(a->values(), b->values()), gt) << name << " with saved, against recomputed";
    }
    if (c.bitwise) expect_same_gradients(with, plain);
    expect_same_gradients(with, again);
  }
}

// The saved buffer with the keys (saved_numel's with_keys): the forward also keeps Xq and Kq, and the
// backward reads them instead of running its normaliser pass. Bitwise the gradients of the buffer
// without them (the same q, s and Nc make the same keys); the header says they were filled; a
// backward whose keys were zeroed after the forward gives other gradients (so they are read).
// Where no keys are reserved (float32, L < 4 C) both lengths are the same and nothing changes.
TEST_F(Cuda, SavedKeysReplaceTheNormaliserPass) {
  struct Case {
    ProblemSpec s;
    uint32_t filled;  // the header's sections with the keys: 1 s and Nc, 2 P, 4 Pcross, 8 Xq and Kq
    int64_t cap;      // options.max_workspace_bytes (0: the default)
  };
  std::vector<Case> cases;
  auto add = [&](ProblemSpec s, uint32_t filled, int64_t cap, auto&& tweak) {
    tweak(s);
    cases.push_back({s, filled, cap});
  };
  // quadratic forward and backward (200 = 3 · 64 + 8: a tail chunk)
  add(spec(2, 2, 1, 200, 1600, 64, DType::bfloat16), 15, 0, [](ProblemSpec& s) {
    s.q_zero_fraction = 0.9;
    s.initial_rho_norm = true;
  });
  add(spec(1, 2, 2, 130, 1100, 40, DType::float16), 15, 0, [](ProblemSpec& s) {
    s.q_zero_fraction = 0.0;
    s.initial_rho_norm = true;
    s.decay = DecayKind::with_zeros_and_ones;
  });
  // chunk_scan_mma's forward (L = 256), the chunked backward
  add(spec(2, 2, 1, 200, 256, 40, DType::bfloat16), 11, 0, [](ProblemSpec& s) { s.initial_rho_norm = true; });
  // initial rho: chunked both ways; L = 455 pads to 512 (the keys' rows hold zeros past L)
  add(spec(1, 2, 1, 70, 455, 36, DType::bfloat16), 11, 0, [](ProblemSpec& s) {
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = true;
  });
  // batches of pairs in both directions: the keys at each batch's pairs
  add(spec(4, 2, 1, 130, 256, 64, DType::bfloat16), 11, 8 << 20, [](ProblemSpec& s) { s.zero_q_rows = true; });
  // no keys reserved: L < 4 C, float32
  add(spec(1, 2, 1, 70, 200, 36, DType::bfloat16), 1, 0, [](ProblemSpec&) {});
  add(spec(2, 2, 1, 100, 96, 40, DType::float32), 1, 0, [](ProblemSpec& s) { s.initial_rho_norm = true; });
  for (const Case& c : cases) {
    const ProblemSpec& s = c.s;
    SCOPED_TRACE(s.name() + " " + dtype_name(s.dtype));
    const int64_t n_plain = saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho);
    const int64_t n_keys = saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho, 0, true);
    const bool keys = (c.filled & 8) != 0;
    if (keys) {  // Xq and Kq: T rows of L rounded up to 64 bf16 per pair, each section 256-byte aligned
      const int64_t plane = (s.B * s.H * s.T * ((s.L + 63) / 64 * 64) / 2 + 63) / 64 * 64;
      EXPECT_EQ(n_keys, n_plain + 2 * plane);
    } else {
      EXPECT_EQ(n_keys, n_plain);
    }
    Problem plain(s), with(s), zeroed(s);
    uint32_t filled = 0;
    for (auto [p, n, zero_keys] : {std::tuple{&plain, n_plain, false}, {&with, n_keys, false}, {&zeroed, n_keys, true}}) {
      if (zero_keys && !keys) continue;
      MirroredProblem m(*p, Device::cuda);
      HostTensor saved(DType::float32, {n});
      ForwardArgs f = m.forward_args();
      f.saved = m.mirror(saved);
      forward(f, cuda(0, c.cap));
      if (zero_keys)
        ASSERT_EQ(cudaMemset(static_cast<float*>(f.saved->data) + n_plain, 0, (n_keys - n_plain) * sizeof(float)),
                  cudaSuccess);
      BackwardArgs b = m.backward_args();
      b.saved = f.saved;
      backward(b, cuda(0, c.cap));
      m.copy_outputs_to_host();
      m.copy_back(saved);
      if (p == &with) std::memcpy(&filled, static_cast<const char*>(saved.data()) + 56, 4);  // SavedHeader::filled
    }
    EXPECT_EQ(filled, c.filled) << "the sections the forward filled";
    EXPECT_TRUE(same_bytes(with.context, plain.context)) << "context";
    EXPECT_TRUE(same_bytes(with.rho_out, plain.rho_out)) << "rho";
    EXPECT_TRUE(same_bytes(with.rho_norm_out, plain.rho_norm_out)) << "rho_norm (no longer staged in the workspace)";
    expect_same_gradients(with, plain);
    if (keys) EXPECT_FALSE(same_bytes(zeroed.grad_q, plain.grad_q)) << "the backward did not read the keys";
  }
}

// The backward checks the header the forward wrote: a buffer no forward filled, or one from a
// forward with another initial normaliser, is an error naming `saved`, before anything is written.
TEST_F(Cuda, SavedBufferHeaderIsChecked) {
  ProblemSpec s = spec(1, 2, 1, 70, 600, 16, DType::bfloat16);
  s.initial_rho_norm = true;
  Problem p(s);
  const int64_t n = saved_numel(s.B, s.H, s.T, s.L, s.dtype, false);
  HostTensor zeros(DType::float32, {n});
  MirroredProblem m(p, Device::cuda);
  BackwardArgs b = m.backward_args();
  b.saved = m.mirror(zeros);
  try {
    backward(b, cuda());
    FAIL() << "a zero saved buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved: its header was not written"), std::string::npos) << e.what();
  }
  ForwardArgs f = m.forward_args();
  f.saved = m.mirror(zeros);
  forward(f, cuda());
  b = m.backward_args();
  b.saved = f.saved;
  b.rho_norm.reset();  // the forward had one
  try {
    backward(b, cuda());
    FAIL() << "a saved buffer of another initial normaliser was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("with an initial rho_norm, but this backward has"), std::string::npos)
        << e.what();
  }
  Options other = cuda(32);  // another chunk: another length
  b.rho_norm = m.mirror(*p.rho_norm);
  EXPECT_THROW(backward(b, other), Error);
}

// The decay range check runs on options.stream: what the check reads is what that stream wrote
// before the call, even when the write is still queued (behind a host function that sleeps) when
// forward is called. A value past 1 written that way is an error naming decay; a valid decay
// written that way over an invalid one is accepted. (Until the tenth round the check ran on the
// legacy default stream, which does not wait for a non-blocking stream: it read the old values.)
TEST_F(Cuda, ValueChecksReadWhatTheCallersStreamWrote) {
  Problem p(spec(1, 2, 1, 8, 16, 4, DType::float32));
  MirroredProblem m(p, Device::cuda);
  ForwardArgs f = m.forward_args();
  ASSERT_EQ(f.decay.dtype, DType::float32);
  const size_t n = static_cast<size_t>(f.decay.numel()), bytes = n * sizeof(float);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  float* staged = nullptr;  // pinned: the queued copy reads it when its turn comes
  ASSERT_EQ(cudaMallocHost(&staged, bytes), cudaSuccess);
  auto sleep_then_copy = [&](float value) {
    for (size_t i = 0; i < n; ++i) staged[i] = i == 3 ? value : 0.5f;
    ASSERT_EQ(cudaLaunchHostFunc(
                  stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(const_cast<void*>(f.decay.data), staged, bytes, cudaMemcpyHostToDevice, stream),
              cudaSuccess);
  };
  Options o = cuda();
  o.stream = stream;
  sleep_then_copy(2.0f);  // the device's decay is valid until the queued copy runs
  try {
    forward(f, o);
    ADD_FAILURE() << "a decay of 2 written on options.stream was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("decay"), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the device's decay now holds the 2
  sleep_then_copy(0.25f);
  EXPECT_NO_THROW(forward(f, o));
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaFreeHost(staged);
  cudaStreamDestroy(stream);
}

// One element of a device tensor, written in its dtype (float32 or float64 decay; 16-bit or float32 q).
void set_device_element(const TensorView& t, int64_t index, double value) {
  HostTensor one(t.dtype, {1});
  one.fill(value);
  ASSERT_EQ(cudaMemcpy(static_cast<char*>(t.data) + index * static_cast<int64_t>(dtype_size(t.dtype)), one.data(),
                       dtype_size(t.dtype), cudaMemcpyHostToDevice),
            cudaSuccess);
}

void expect_value_error(const std::function<void()>& call, const char* name) {
  try {
    call();
    ADD_FAILURE() << "an invalid " << name << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

// The value checks are settled on the device after work that writes only the workspace has been
// queued (src/cuda/value_gate.h): a decay past 1, or a NaN in q with check_finite, is still an
// error naming the argument with nothing written — context, the final states, the saved buffer,
// every gradient — on each path (quadratic, chunked float32 with initial states, chunk_scan, and
// the chunked path under a workspace cap: batches after the first; with the saved keys, for which
// the forward settles the checks before its first batch). Then, with valid values, the forward's
// saved buffer (with and without the keys) and rho_norm under the cap are bitwise the uncapped
// ones (the first batch's s, Nc and rho_norm go through the workspace, the later batches' do not).
TEST_F(Cuda, ValueErrorsWriteNothing) {
  constexpr double kSentinel = 12345.0;
  auto rounded = [&](const HostTensor& t) {  // the sentinel in t's dtype (bfloat16: 12352)
    HostTensor one(t.dtype(), {1});
    one.fill(kSentinel);
    return one.values()[0];
  };
  struct Case {
    ProblemSpec s;
    int64_t cap;
    bool keys = false;  // the saved buffer with the keys (saved_numel's with_keys)
  };
  std::vector<Case> cases;
  cases.push_back({spec(1, 2, 1, 130, 1100, 24, DType::bfloat16), 0});  // quadratic forward and backward
  cases.push_back({spec(1, 2, 1, 130, 1100, 24, DType::bfloat16), 0, true});
  {
    ProblemSpec s = spec(2, 2, 1, 100, 96, 40, DType::float32);  // FFMA, chunked, every state
    s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
    cases.push_back({s, 0});
  }
  {
    ProblemSpec s = spec(2, 2, 1, 200, 256, 40, DType::bfloat16);  // chunk_scan_mma forward
    s.initial_rho_norm = true;
    cases.push_back({s, 0});
    s.B = 4;  // 8 pairs under 5 MiB: batches of 3 in the forward (~1.4 MB a pair), 1 in the backward (4.2 MB)
    cases.push_back({s, 5 << 20, true});
    cases.push_back({s, 5 << 20});
  }
  for (const Case& c : cases) {
    const ProblemSpec& s = c.s;
    SCOPED_TRACE(s.name() + " " + dtype_name(s.dtype) + " cap " + std::to_string(c.cap) + (c.keys ? " keys" : ""));
    Problem p(s);
    for (HostTensor* t : {&p.context, &p.rho_out, &p.rho_norm_out, &p.grad_q, &p.grad_v, &p.grad_decay, &p.grad_rho,
                          &p.grad_rho_norm})
      t->fill(kSentinel);
    const int64_t n = saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho, 0, c.keys);
    HostTensor saved(DType::float32, {n});
    saved.fill(kSentinel);
    MirroredProblem m(p, Device::cuda);
    ForwardArgs f = m.forward_args();
    f.saved = m.mirror(saved);
    BackwardArgs b = m.backward_args();
    b.saved = f.saved;
    const double decay3 = p.decay.values()[3], q0 = p.q.values()[0];
    Options o = cuda(0, c.cap), finite = o;
    finite.check_finite = true;

    set_device_element(f.decay, 3, 2.0);
    expect_value_error([&] { forward(f, o); }, "decay");
    set_device_element(f.decay, 3, decay3);
    set_device_element(f.q, 0, std::nan(""));
    expect_value_error([&] { forward(f, finite); }, "q");
    m.copy_outputs_to_host();
    m.copy_back(saved);
    for (const HostTensor* t : {&p.context, &p.rho_out, &p.rho_norm_out, &saved})
      for (double x : t->values()) ASSERT_EQ(x, rounded(*t)) << "the forward wrote an output before its error";

    set_device_element(f.q, 0, q0);
    forward(f, o);  // fills saved
    set_device_element(b.decay, 3, 2.0);  // (the backward's arguments are copies of their own)
    expect_value_error([&] { backward(b, o); }, "decay");
    set_device_element(b.decay, 3, decay3);
    set_device_element(b.grad_context, 0, std::nan(""));
    expect_value_error([&] { backward(b, finite); }, "grad_context");
    m.copy_outputs_to_host();
    for (const HostTensor* t : {&p.grad_q, &p.grad_v, &p.grad_decay, &p.grad_rho, &p.grad_rho_norm})
      for (double x : t->values()) ASSERT_EQ(x, rounded(*t)) << "the backward wrote a gradient before its error";
  }
  // the saved buffer and rho_norm under a cap, bitwise
  const ProblemSpec s = cases.back().s;
  for (bool keys : {false, true}) {
    SCOPED_TRACE(keys ? "with the keys" : "without the keys");
    Problem a(s), capped(s);
    const int64_t n = saved_numel(s.B, s.H, s.T, s.L, s.dtype, s.initial_rho, 0, keys);
    HostTensor saved_a(DType::float32, {n}), saved_capped(DType::float32, {n});
    for (auto [p, saved, cap] : {std::tuple{&a, &saved_a, int64_t{0}}, {&capped, &saved_capped, cases.back().cap}}) {
      MirroredProblem m(*p, Device::cuda);
      ForwardArgs f = m.forward_args();
      f.saved = m.mirror(*saved);
      forward(f, cuda(0, cap));
      m.copy_outputs_to_host();
      m.copy_back(*saved);
    }
    EXPECT_TRUE(same_bytes(saved_a, saved_capped)) << "the saved buffer under a workspace cap";
    EXPECT_TRUE(same_bytes(a.rho_norm_out, capped.rho_norm_out)) << "rho_norm under a workspace cap";
    EXPECT_TRUE(same_bytes(a.context, capped.context)) << "context under a workspace cap";
  }
}

// The backward takes the header of a saved buffer from the backend's cache of what its forwards
// wrote, and compares it with the device's in stream order. Where the buffer changed since (here
// overwritten with another forward's buffer: the chunked forward's, without the cross scores, or
// one without an initial normaliser), the backward must still run on what the buffer holds now:
// the same gradients as a backward on the other buffer itself. A header zeroed since its forward
// is the error of a buffer no forward wrote.
TEST_F(Cuda, SavedHeaderChangedSinceItsForward) {
  ProblemSpec s = spec(1, 2, 1, 130, 1100, 24, DType::bfloat16);  // quadratic: the forward fills the cross scores
  s.initial_rho_norm = true;
  const int64_t n = saved_numel(s.B, s.H, s.T, s.L, s.dtype, false);
  for (const char* change : {"chunked forward", "no initial rho_norm"}) {
    SCOPED_TRACE(change);
    const bool chunked = std::string(change) == "chunked forward";
    Problem p(s), expected(s);
    HostTensor zeros(DType::float32, {n});
    MirroredProblem m(p, Device::cuda), e(expected, Device::cuda);
    ForwardArgs f = m.forward_args(), other_f = e.forward_args();
    f.saved = m.mirror(zeros);
    other_f.saved = e.mirror(zeros);
    forward(f, cuda());  // the header the cache remembers: cross scores, an initial rho_norm
    {
      std::optional<ScopedEnv> forced;
      if (chunked) forced.emplace("RHOSCAN_CUDA_FORWARD_PATH", "chunked");
      if (!chunked) other_f.rho_norm.reset();
      forward(other_f, cuda());
    }
    BackwardArgs b = m.backward_args(), other_b = e.backward_args();
    if (!chunked) {
      b.rho_norm.reset();
      other_b.rho_norm.reset();
    }
    other_b.saved = other_f.saved;
    backward(other_b, cuda());
    ASSERT_EQ(cudaMemcpy(f.saved->data, other_f.saved->data, n * sizeof(float), cudaMemcpyDeviceToDevice), cudaSuccess);
    b.saved = f.saved;
    backward(b, cuda());
    m.copy_outputs_to_host();
    e.copy_outputs_to_host();
    expect_same_gradients(p, expected);
  }
  Problem p(s);
  HostTensor zeros(DType::float32, {n});
  MirroredProblem m(p, Device::cuda);
  ForwardArgs f = m.forward_args();
  f.saved = m.mirror(zeros);
  forward(f, cuda());
  ASSERT_EQ(cudaMemset(f.saved->data, 0, 256), cudaSuccess);
  BackwardArgs b = m.backward_args();
  b.saved = f.saved;
  try {
    backward(b, cuda());
    FAIL() << "a saved buffer whose header was zeroed was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved: its header was not written"), std::string::npos) << e.what();
  }
}

TEST_F(Cuda, Float64InputsAreUnsupported) {
  Problem p(spec(1, 1, 1, 4, 8, 4, DType::float64));
  MirroredProblem m(p, Device::cuda);
  try {
    forward(m.forward_args(), cuda());
    ADD_FAILURE() << "float64 should be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
  }
}

}  // namespace
}  // namespace rhoscan::testing
