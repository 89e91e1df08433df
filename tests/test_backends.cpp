// One harness, every backend, every case: forward, backward and step of each available
// backend against the float64 reference, with SPEC.md's tolerances.
//
// A backend joins by being compiled in (available_backends() lists it) and by naming the
// dtypes it promises in required_dtypes() below, and the devices whose tensors it takes in
// tensor_devices(): the Vulkan backend runs every case on host tensors and its float32 cases
// again on Vulkan tensors (VulkanBuffer memory, the device-resident path). A backend that is not available on this
// machine (no GPU, no Vulkan driver) produces no test cases, and its absence is printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "support/device_memory.h"
#include "support/problem.h"

namespace rhoscan::testing {
namespace {

std::vector<DType> required_dtypes(Backend b) {
  switch (b) {
    case Backend::reference: return {DType::float64, DType::float32, DType::bfloat16, DType::float16};
    case Backend::cpu: return {DType::float64, DType::float32, DType::bfloat16, DType::float16};
    case Backend::cuda: return {DType::float32, DType::bfloat16, DType::float16};
    case Backend::vulkan: return {DType::float32, DType::bfloat16, DType::float16};
    default: return {};
  }
}

std::vector<Device> tensor_devices(Backend b, DType dtype) {
  if (b == Backend::cuda) return {Device::cuda};
  if (b == Backend::vulkan && dtype == DType::float32) return {Device::cpu, Device::vulkan};
  return {Device::cpu};
}

struct Case {
  Backend backend;
  Device device;  // where the tensors live
  ProblemSpec spec;
  int64_t chunk_size;  // 0: the backend's default
};

std::string case_name(const Case& c);
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::string case_name(const Case& c) {
  std::string s = std::string(backend_name(c.backend)) + "_" + c.spec.name();
  if (c.backend == Backend::vulkan && c.device == Device::vulkan) s += "_vulkan_tensors";
  if (c.chunk_size) s += "_chunk" + std::to_string(c.chunk_size);
  return s;
}

// The shapes every backend must get right (issue 2's list and SPEC.md's edge cases).
std::vector<std::pair<ProblemSpec, int64_t>> shapes() {
  std::vector<std::pair<ProblemSpec, int64_t>> out;
  auto add = [&](ProblemSpec s, int64_t chunk = 0) { out.push_back({s, chunk}); };
  ProblemSpec s;
  s = {.B = 1, .H = 1, .Hv = 1, .T = 0, .L = 8, .E = 4};  // T = 0
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  add(s);
  s = {.B = 2, .H = 2, .Hv = 2, .T = 1, .L = 7, .E = 5};  // T = 1, Hv = H, odd sizes
  s.initial_rho = true;
  add(s);
  s = {.B = 3, .H = 2, .Hv = 1, .T = 7, .L = 9, .E = 3};  // B > 1, Hv = 1
  add(s);
  s = {.B = 2, .H = 3, .Hv = 3, .T = 37, .L = 33, .E = 17};  // T not a multiple of the chunk
  s.initial_rho = s.initial_rho_norm = true;
  s.grad_rho_out = s.grad_rho_norm_out = true;
  add(s, 8);
  add(s);
  s = {.B = 1, .H = 2, .Hv = 1, .T = 70, .L = 64, .E = 32};  // decay exactly 0 and 1
  s.decay = DecayKind::with_zeros_and_ones;
  s.zero_q_rows = true;
  s.initial_rho_norm = true;
  s.grad_rho_out = true;
  add(s, 16);
  add(s);
  s = {.B = 2, .H = 2, .Hv = 2, .T = 24, .L = 16, .E = 8};  // sequence-first storage
  s.bthl_layout = true;
  s.initial_rho = s.grad_rho_norm_out = true;
  add(s, 5);
  s = {.B = 1, .H = 1, .Hv = 1, .T = 40, .L = 12, .E = 6};
  s.decay = DecayKind::all_zero;
  s.initial_rho = s.initial_rho_norm = true;
  add(s, 16);
  s.decay = DecayKind::all_one;
  s.grad_rho_out = s.grad_rho_norm_out = true;
  add(s, 16);
  s = {.B = 2, .H = 4, .Hv = 1, .T = 150, .L = 128, .E = 64};  // several default chunks
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  s.q_zero_fraction = 0.8;
  add(s);
  return out;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  std::set<std::pair<Backend, Device>> unallocatable;
  for (Backend b : available_backends()) {
    uint64_t seed = 100;
    for (auto [spec, chunk] : shapes())
      for (DType dtype : required_dtypes(b)) {
        ProblemSpec s = spec;
        s.dtype = dtype;
        s.state_dtype = dtype == DType::float64 ? DType::float64 : DType::float32;
        s.seed = seed++;
        // A 16-bit problem comes from a model: an initial rho without its rho_norm would make
        // the context rho / eps, far outside float16's range.
        if (dtype == DType::bfloat16 || dtype == DType::float16)
          if (s.initial_rho) s.initial_rho_norm = true;
        for (Device d : tensor_devices(b, dtype)) {
          if (device_memory_available(d)) cases.push_back({b, d, s, chunk});
          else if (unallocatable.insert({b, d}).second)
            std::printf("[harness] backend %s: available but tests cannot allocate %s memory\n", backend_name(b),
                        device_name(d));
        }
      }
  }
  for (Backend b : {Backend::cpu, Backend::cuda, Backend::vulkan}) {
    std::string why = backend_unavailable_reason(b);
    if (!why.empty()) std::printf("[harness] backend %s is not tested here: %s\n", backend_name(b), why.c_str());
  }
  return cases;
}

class Backends : public ::testing::TestWithParam<Case> {
 protected:
  Options options() const {
    Options o;
    o.backend = GetParam().backend;
    o.chunk_size = GetParam().chunk_size;
    return o;
  }
};

// float16 holds at most 65504: where the exact result rounds to Inf in float16 (gradients at an
// all-zero q row are about 1e6), the backend must write that Inf too; the rest is compared.
void expect_close(const HostTensor& got, const HostTensor& want, double tol, const char* what) {
  std::vector<double> g = got.values(), w = want.values();
  if (got.dtype() == DType::float16) {
    HostTensor rounded = want.converted(DType::float16);
    std::vector<double> r = rounded.values();
    std::vector<double> gf, wf;
    for (size_t i = 0; i < r.size(); ++i) {
      if (std::isinf(r[i])) {
        EXPECT_EQ(g[i], r[i]) << what << "[" << i << "]: float16 overflow expected";
      } else {
        gf.push_back(g[i]);
        wf.push_back(w[i]);
      }
    }
    g.swap(gf);
    w.swap(wf);
  }
  EXPECT_LE(rms_rel(g, w), tol) << what;
}

TEST_P(Backends, ForwardMatchesReference) {
  Problem p(GetParam().spec);
  Problem ref = p.as_float64();
  Options r;
  r.backend = Backend::reference;
  forward(ref.forward_args(), r);
  MirroredProblem m(p, GetParam().device);
  forward(m.forward_args(), options());
  m.copy_outputs_to_host();
  const double tol = forward_tolerance(p.spec.dtype);
  expect_close(p.context, ref.context, tol, "context");
  expect_close(p.rho_out, ref.rho_out, tol, "rho");
  expect_close(p.rho_norm_out, ref.rho_norm_out, tol, "rho_norm");
}

TEST_P(Backends, BackwardMatchesReference) {
  Problem p(GetParam().spec);
  Problem ref = p.as_float64();
  Options r;
  r.backend = Backend::reference;
  backward(ref.backward_args(), r);
  MirroredProblem m(p, GetParam().device);
  backward(m.backward_args(), options());
  m.copy_outputs_to_host();
  const double tol = gradient_tolerance(p.spec.dtype);
  expect_close(p.grad_q, ref.grad_q, tol, "grad_q");
  expect_close(p.grad_v, ref.grad_v, tol, "grad_v");
  expect_close(p.grad_decay, ref.grad_decay, tol, "grad_decay");
  expect_close(p.grad_rho, ref.grad_rho, tol, "grad_rho (initial state)");
  expect_close(p.grad_rho_norm, ref.grad_rho_norm, tol, "grad_rho_norm (initial state)");
}

// Streams the sequence through step() one token at a time and compares with the reference
// forward over the whole sequence.
TEST_P(Backends, StepStreamsTheForward) {
  const ProblemSpec& s = GetParam().spec;
  Problem p(s);
  Problem ref = p.as_float64();
  Options r;
  r.backend = Backend::reference;
  forward(ref.forward_args(), r);
  // the state starts at the initial state (or zeros), in the state dtype
  HostTensor rho = p.rho ? *p.rho : HostTensor(s.state_dtype, {s.B, s.H, s.L, s.E});
  HostTensor norm = p.rho_norm ? *p.rho_norm : HostTensor(s.state_dtype, {s.B, s.H, s.L});
  std::vector<double> q = p.q.values(), v = p.v.values(), streamed(ref.context.numel());
  for (int64_t t = 0; t < s.T; ++t) {
    // one token as a T = 1 problem, so that MirroredProblem can move it to the device
    ProblemSpec one = s;
    one.T = 1;
    one.initial_rho = one.initial_rho_norm = true;
    Problem tok(one);
    std::vector<double> qs, vs;
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t l = 0; l < s.L; ++l) qs.push_back(q[(bh * s.T + t) * s.L + l]);
    for (int64_t bh = 0; bh < s.B * s.Hv; ++bh)
      for (int64_t e = 0; e < s.E; ++e) vs.push_back(v[(bh * s.T + t) * s.E + e]);
    tok.q.set_values(qs);
    tok.v.set_values(vs);
    tok.decay = p.decay;
    *tok.rho = rho;
    *tok.rho_norm = norm;
    MirroredProblem m(tok, GetParam().device);
    ForwardArgs f = m.forward_args();  // views of q, v, decay, state and context
    StepArgs a{squeeze_time(f.q), squeeze_time(f.v), f.decay, *f.rho, *f.rho_norm, squeeze_time(f.context)};
    step(a, options());
    m.copy_back(tok.context);
    m.copy_back(*tok.rho);  // updated in place
    m.copy_back(*tok.rho_norm);
    std::vector<double> c = tok.context.values();
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t e = 0; e < s.E; ++e) streamed[(bh * s.T + t) * s.E + e] = c[bh * s.E + e];
    rho = *tok.rho;
    norm = *tok.rho_norm;
  }
  const double tol = forward_tolerance(s.dtype) * 10;  // T separate roundings of the state
  EXPECT_LE(rms_rel(streamed, ref.context.values()), tol) << "context";
  EXPECT_LE(rms_rel(rho.values(), ref.rho_out.values()), tol) << "rho";
  EXPECT_LE(rms_rel(norm.values(), ref.rho_norm_out.values()), tol) << "rho_norm";
}

INSTANTIATE_TEST_SUITE_P(All, Backends, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Backends);

}  // namespace
}  // namespace rhoscan::testing
