// Vulkan tensors (Device::vulkan, memory of a rhoscan::VulkanBuffer): the buffer API, strided
// views at offsets, and the errors: mixed devices, views past their buffer, destroyed buffers,
// dtypes, value checks that read the device. The numerical cases on Vulkan tensors are in the
// cross-backend harness (test_backends.cpp, "_vulkan_tensors"). Runs on Mesa's lavapipe in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rhoscan/vulkan.h"
#include "support/device_memory.h"
#include "support/problem.h"

namespace rhoscan::testing {
namespace {

bool vulkan_available() { return backend_unavailable_reason(Backend::vulkan).empty(); }

#define REQUIRE_VULKAN() \
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan)

std::vector<float> download_floats(const VulkanBuffer& b) {
  std::vector<float> out(b.size() / 4);
  b.download(out.data(), out.size() * 4);
  return out;
}

// Runs `call`, which must throw Error(kind) with every piece of `says` in its message.
template <class F>
void expect_error(F call, ErrorKind kind, std::initializer_list<const char*> says) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const char* s : says) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

TEST(VulkanBuffer, RoundTripAtOffsetsAndBounds) {
  REQUIRE_VULKAN();
  VulkanBuffer b(1000);
  EXPECT_EQ(b.size(), 1000u);
  ASSERT_NE(b.data(), nullptr);
  std::vector<unsigned char> in(1000), out(200, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  b.upload(in.data(), in.size());
  b.download(out.data(), 200, 100);
  EXPECT_EQ(std::memcmp(out.data(), in.data() + 100, 200), 0);
  const unsigned char patch[3] = {1, 2, 3};
  b.upload(patch, 3, 997);  // the last three bytes
  b.download(out.data(), 4, 996);
  EXPECT_EQ(out[0], in[996]);
  EXPECT_EQ(out[3], 3);
  expect_error([&] { b.upload(in.data(), 200, 900); }, ErrorKind::invalid_argument, {"upload", "1100", "1000 bytes"});
  expect_error([&] { b.download(out.data(), 1, 1000); }, ErrorKind::invalid_argument, {"download"});
  expect_error([&] { b.view(DType::float32, {2, 126}); }, ErrorKind::invalid_argument, {"view", "1008"});
  expect_error([&] { b.view(DType::float32, {10, 10}, {30, 1}, 8); }, ErrorKind::invalid_argument, {"view"});
  TensorView v = b.view(DType::float32, {4, 5}, {60, 3}, 4);  // ends at byte 4 + 4 * (3*60 + 4*3 + 1) = 776
  EXPECT_EQ(v.device, Device::vulkan);
  EXPECT_EQ(static_cast<char*>(v.data), static_cast<char*>(b.data()) + 4);
  VulkanBuffer moved(std::move(b));
  EXPECT_EQ(moved.size(), 1000u);
  EXPECT_EQ(b.size(), 0u);  // NOLINT: moved from on purpose
  moved.download(out.data(), 3, 997);
  EXPECT_EQ(out[2], 3);
  VulkanBuffer empty(0);
  EXPECT_EQ(empty.size(), 0u);
}

// Two buffers never share addresses (views of one can be told from views of the other).
TEST(VulkanBuffer, AddressRangesAreDisjoint) {
  REQUIRE_VULKAN();
  VulkanBuffer a(4096), b(4096);
  const char *pa = static_cast<char*>(a.data()), *pb = static_cast<char*>(b.data());
  EXPECT_TRUE(pa + 4096 <= pb || pb + 4096 <= pa);
}

ProblemSpec small_f32() {
  ProblemSpec s{.B = 2, .H = 3, .Hv = 1, .T = 20, .L = 10, .E = 6, .seed = 41};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = true;
  return s;
}

// q sequence-first ([B, T, H, L] storage) 4 bytes into its buffer, context with padded rows at an
// odd offset, rho_out transposed ([B, H, E, L] storage): the results equal the host-tensor path's
// bit for bit (the same kernels on the same float32 values), and the padding is untouched.
TEST(VulkanTensors, StridedViewsAtOffsetsMatchTheHostPath) {
  REQUIRE_VULKAN();
  ProblemSpec s = small_f32();
  Problem host(s);
  Options o;
  o.backend = Backend::vulkan;
  forward(host.forward_args(), o);
  backward(host.backward_args(), o);

  Problem dev(s);  // the same inputs (same seed)
  const int64_t B = s.B, H = s.H, T = s.T, L = s.L, E = s.E;
  std::vector<double> qv = dev.q.values();
  std::vector<float> q_bthl(B * T * H * L);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t l = 0; l < L; ++l) q_bthl[((b * T + t) * H + h) * L + l] = static_cast<float>(qv[((b * H + h) * T + t) * L + l]);
  VulkanBuffer qbuf(4 + q_bthl.size() * 4);
  qbuf.upload(q_bthl.data(), q_bthl.size() * 4, 4);
  const int64_t pad = E + 3;
  VulkanBuffer cbuf(12 + B * H * T * pad * 4), rbuf(B * H * L * E * 4), gqbuf(B * H * T * (L + 1) * 4);
  for (VulkanBuffer* b : {&cbuf, &gqbuf}) {
    std::vector<float> sentinel(b->size() / 4, 99.0f);
    b->upload(sentinel.data(), sentinel.size() * 4);
  }

  MirroredProblem m(dev, Device::vulkan);
  ForwardArgs f = m.forward_args();
  f.q = qbuf.view(DType::float32, {B, T, H, L}, 4).permuted({0, 2, 1, 3});
  f.context = cbuf.view(DType::float32, {B, H, T, E}, {H * T * pad, T * pad, pad, 1}, 12);
  f.rho_out = rbuf.view(DType::float32, {B, H, L, E}, {H * L * E, L * E, 1, L});
  forward(f, o);
  BackwardArgs g = m.backward_args();
  g.q = f.q;
  g.grad_q = gqbuf.view(DType::float32, {B, H, T, L}, {H * T * (L + 1), T * (L + 1), L + 1, 1});
  backward(g, o);
  m.copy_outputs_to_host();

  std::vector<float> c = download_floats(cbuf), r = download_floats(rbuf), gq = download_floats(gqbuf);
  std::vector<double> hc = host.context.values(), hr = host.rho_out.values(), hgq = host.grad_q.values();
  for (int64_t i = 0; i < B * H * T; ++i)
    for (int64_t e = 0; e < pad; ++e) {
      const float got = c[3 + i * pad + e];
      if (e < E) ASSERT_EQ(got, static_cast<float>(hc[i * E + e])) << "context row " << i;
      else ASSERT_EQ(got, 99.0f) << "padding of context row " << i << " was written";
    }
  EXPECT_EQ(c[0], 99.0f);  // before the view
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t e = 0; e < E; ++e) ASSERT_EQ(r[(bh * E + e) * L + l], static_cast<float>(hr[(bh * L + l) * E + e]));
  for (int64_t i = 0; i < B * H * T; ++i) {
    for (int64_t l = 0; l < L; ++l) ASSERT_EQ(gq[i * (L + 1) + l], static_cast<float>(hgq[i * L + l])) << "grad_q row " << i;
    ASSERT_EQ(gq[i * (L + 1) + L], 99.0f) << "padding of grad_q row " << i << " was written";
  }
  EXPECT_EQ(dev.rho_norm_out.values(), host.rho_norm_out.values());
  EXPECT_EQ(dev.grad_v.values(), host.grad_v.values());
  EXPECT_EQ(dev.grad_decay.values(), host.grad_decay.values());
  EXPECT_EQ(dev.grad_rho.values(), host.grad_rho.values());
}

// A workspace cap far below the problem splits the rows into groups: dv (summed over heads,
// Hv = 1) and the decay gradient (summed over the batch) cross groups, on the device.
TEST(VulkanTensors, SmallWorkspaceGroupsMatchTheReference) {
  REQUIRE_VULKAN();
  ProblemSpec s{.B = 3, .H = 3, .Hv = 1, .T = 45, .L = 70, .E = 66, .seed = 7};
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  Problem p(s);
  Problem ref = p.reference_solution();
  Options o;
  o.chunk_size = 16;
  o.max_workspace_bytes = 400 * 1024;  // about two rows per group
  MirroredProblem m(p, Device::vulkan);
  forward(m.forward_args(), o);  // automatic: Vulkan tensors go to the Vulkan backend
  backward(m.backward_args(), o);
  m.copy_outputs_to_host();
  EXPECT_LE(rms_rel(p.context.values(), ref.context.values()), 1e-5);
  EXPECT_LE(rms_rel(p.rho_out.values(), ref.rho_out.values()), 1e-5);
  EXPECT_LE(rms_rel(p.grad_q.values(), ref.grad_q.values()), 1e-4);
  EXPECT_LE(rms_rel(p.grad_v.values(), ref.grad_v.values()), 1e-4);
  EXPECT_LE(rms_rel(p.grad_decay.values(), ref.grad_decay.values()), 1e-4);
  EXPECT_LE(rms_rel(p.grad_rho.values(), ref.grad_rho.values()), 1e-4);
  EXPECT_LE(rms_rel(p.grad_rho_norm.values(), ref.grad_rho_norm.values()), 1e-4);
}

// The forward's outputs on the device, filled with 7, and a check that they still hold 7.
struct Sentinel {
  explicit Sentinel(Problem& p) : p(p), m(p, Device::vulkan) {
    p.context.fill(7.0);
    p.rho_out.fill(7.0);
    p.rho_norm_out.fill(7.0);
    args = m.forward_args();
  }
  void expect_untouched() {
    m.copy_outputs_to_host();
    for (const HostTensor* t : {&p.context, &p.rho_out, &p.rho_norm_out})
      for (double x : t->values()) ASSERT_EQ(x, 7.0) << "an output was written";
  }
  Problem& p;
  MirroredProblem m;
  ForwardArgs args;
};

TEST(VulkanTensors, MixedHostAndVulkanTensorsAreAnErrorAndNothingIsWritten) {
  REQUIRE_VULKAN();
  Problem p(small_f32());
  Sentinel s(p);
  HostTensor host_context = p.context;
  ForwardArgs f = s.args;
  f.context = host_context.view();  // on the host, the rest on the device
  expect_error([&] { forward(f, {}); }, ErrorKind::invalid_argument, {"context is on cpu", "q is on vulkan"});
  for (double x : host_context.values()) ASSERT_EQ(x, 7.0);
  s.expect_untouched();
  BackwardArgs b = s.m.backward_args();
  b.grad_v = p.grad_v.view();
  expect_error([&] { backward(b, {}); }, ErrorKind::invalid_argument, {"grad_v is on cpu"});
}

TEST(VulkanTensors, ViewsPastTheirBufferAreAnErrorAndNothingIsWritten) {
  REQUIRE_VULKAN();
  Problem p(small_f32());
  Sentinel s(p);
  VulkanBuffer small(p.q.bytes() - 4);  // one float short
  ForwardArgs f = s.args;
  f.q = TensorView::contiguous(small.data(), DType::float32, p.q.shape(), Device::vulkan);
  expect_error([&] { forward(f, {}); }, ErrorKind::invalid_argument,
               {"q [2, 3, 20, 10]", "spans bytes [0, 4800)", "4796 bytes"});
  f = s.args;
  f.rho_out.data = static_cast<char*>(f.rho_out.data) + 4;  // shifted by one float: past the end
  expect_error([&] { forward(f, {}); }, ErrorKind::invalid_argument, {"rho_out"});
  f = s.args;
  VulkanBuffer roomy(p.v.bytes() + 4);
  f.v.data = static_cast<char*>(roomy.data()) + 2;  // inside the buffer, but not a whole float into it
  expect_error([&] { forward(f, {}); }, ErrorKind::invalid_argument, {"v ", "multiple of 4 bytes"});
  s.expect_untouched();
}

// A view of a destroyed buffer is an error while its addresses stay unused (see rhoscan/vulkan.h:
// the operating system may hand them to a newer buffer).
TEST(VulkanTensors, ViewsOfADestroyedBufferAreAnError) {
  REQUIRE_VULKAN();
  Problem p(small_f32());
  Sentinel s(p);
  ForwardArgs f = s.args;
  {
    VulkanBuffer gone(p.q.bytes());
    f.q = gone.view(DType::float32, {2, 3, 20, 10});
  }
  expect_error([&] { forward(f, {}); }, ErrorKind::invalid_argument, {"q ", "no live rhoscan::VulkanBuffer"});
  s.expect_untouched();
}

TEST(VulkanTensors, OnlyFloat32AndOnlyTheVulkanBackend) {
  REQUIRE_VULKAN();
  ProblemSpec spec = small_f32();
  spec.dtype = DType::bfloat16;
  Problem p16(spec);
  MirroredProblem m16(p16, Device::vulkan);
  expect_error([&] { forward(m16.forward_args(), {}); }, ErrorKind::unsupported, {"Vulkan tensors must be float32", "bfloat16"});
  Problem p(small_f32());
  Sentinel s(p);
  Options cpu;
  cpu.backend = Backend::cpu;
  expect_error([&] { forward(s.args, cpu); }, ErrorKind::invalid_argument, {"on vulkan", "takes cpu tensors"});
  s.expect_untouched();
}

// The decay's range check and check_finite read Vulkan tensors back from the device.
TEST(VulkanTensors, ValueChecksReadTheDevice) {
  REQUIRE_VULKAN();
  Problem p(small_f32());
  std::vector<double> a = p.decay.values();
  a[5] = 1.5;
  p.decay.set_values(a);
  {
    Sentinel s(p);
    expect_error([&] { forward(s.args, {}); }, ErrorKind::invalid_argument, {"decay", "[0, 1]"});
    s.expect_untouched();
  }
  a[5] = 0.5;
  p.decay.set_values(a);
  std::vector<double> q = p.q.values();
  q[123] = NAN;
  p.q.set_values(q);
  Sentinel s(p);
  Options finite;
  finite.check_finite = true;
  expect_error([&] { forward(s.args, finite); }, ErrorKind::invalid_argument, {"q ", "NaN or Inf"});
  s.expect_untouched();
}

// A buffer alive when the process exits (a static holder made before the first Vulkan call) is
// destroyed after the GPU driver's exit handlers: it must not crash the exit (NVIDIA's driver did
// when Vulkan memory was freed then). Run in a child process that exits normally.
std::unique_ptr<VulkanBuffer> g_alive_at_exit;

TEST(VulkanBuffer, AliveAtExitIsSafe) {
  REQUIRE_VULKAN();
  EXPECT_EXIT(
      {
        g_alive_at_exit = std::make_unique<VulkanBuffer>(1 << 20);
        static VulkanBuffer made_after_the_driver(4096);
        std::fprintf(stderr, "exiting with buffers alive\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "exiting with buffers alive");
}

}  // namespace
}  // namespace rhoscan::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
