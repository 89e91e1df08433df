// The Vulkan backend beyond the cross-backend harness (test_backends.cpp): what happens when
// Vulkan is unusable, device selection, work split into groups, chunk sizes the harness does not
// use, 16-bit inputs, and a long sequence. Runs on Mesa's lavapipe in CI.
//
// The Vulkan context is created once per process, so every test that sets an environment variable
// runs in a child process of its own (gtest's "threadsafe" death-test style re-executes the binary).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "support/problem.h"
#include "vulkan/vulkan_backend.h"

namespace rhoscan::testing {
namespace {

bool vulkan_available() { return backend_unavailable_reason(Backend::vulkan).empty(); }

// In a fresh process with RHOSCAN_VULKAN_DEVICE (or another variable) set: the backend must be
// reported unavailable with a reason containing `expected`, and a call must throw
// Error(backend_unavailable) with that reason, writing nothing. Exits 0 when all of that holds.
[[noreturn]] void unavailable_child(const char* var, const char* value, const std::string& expected) {
        setenv(var, value, 1);
        std::string why = backend_unavailable_reason(Backend::vulkan);
        for (Backend b : available_backends())
          if (b == Backend::vulkan) {
            std::fprintf(stderr, "vulkan still listed as available\n");
            std::exit(1);
          }
        if (why.find(expected) == std::string::npos) {
          std::fprintf(stderr, "reason '%s' lacks '%s'\n", why.c_str(), expected.c_str());
          std::exit(2);
        }
        ProblemSpec s{.B = 1, .H = 1, .Hv = 1, .T = 3, .L = 4, .E = 2};
        s.dtype = s.state_dtype = DType::float32;
        Problem p(s);
        p.context.fill(7.0);
        Options o;
        o.backend = Backend::vulkan;
        try {
          forward(p.forward_args(), o);
          std::fprintf(stderr, "forward did not throw\n");
          std::exit(3);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::backend_unavailable || std::string(e.what()).find(expected) == std::string::npos) {
            std::fprintf(stderr, "wrong error: %s\n", e.what());
            std::exit(4);
          }
        }
        for (double x : p.context.values())
          if (x != 7.0) std::exit(5);  // nothing written
        std::fprintf(stderr, "ok: %s\n", why.c_str());
        std::exit(0);
}

void expect_unavailable_in_child(const char* var, const char* value, const std::string& expected) {
  EXPECT_EXIT(unavailable_child(var, value, expected), ::testing::ExitedWithCode(0), "ok: ");
}

TEST(VulkanUnavailable, DeviceIndexOutOfRangeIsAClearError) {
  expect_unavailable_in_child("RHOSCAN_VULKAN_DEVICE", "97", "RHOSCAN_VULKAN_DEVICE=97 is not a device index");
}

TEST(VulkanUnavailable, DeviceNameMatchingNothingIsAClearError) {
  expect_unavailable_in_child("RHOSCAN_VULKAN_DEVICE", "no-such-gpu-xyz", "matches no device name");
}

// A loader with no driver (what a machine without a GPU driver looks like): VK_ICD_FILENAMES
// (the loader's older name) and VK_DRIVER_FILES pointing to a driver manifest that does not exist.
TEST(VulkanUnavailable, NoDriverIsAClearError) {
  EXPECT_EXIT(
      {
        setenv("VK_DRIVER_FILES", "/nonexistent/rhoscan_no_driver.json", 1);
        setenv("VK_ICD_FILENAMES", "/nonexistent/rhoscan_no_driver.json", 1);
        std::string why = backend_unavailable_reason(Backend::vulkan);
        bool listed = false;
        for (Backend b : available_backends()) listed |= b == Backend::vulkan;
        std::fprintf(stderr, "reason: %s\n", why.c_str());
        std::exit(!listed && (why.find("no Vulkan driver") != std::string::npos ||
                              why.find("no Vulkan device") != std::string::npos) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "reason: ");
}

TEST(VulkanDevice, SelectedByIndexAndByName) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  EXPECT_EXIT(
      {
        setenv("RHOSCAN_VULKAN_DEVICE", "0", 1);
        std::exit(backend_unavailable_reason(Backend::vulkan).empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  // Mesa's software driver is named "llvmpipe (...)"; choosing it by a substring works wherever it
  // is installed (CI installs it), and fails cleanly where it is not.
  EXPECT_EXIT(
      {
        setenv("RHOSCAN_VULKAN_DEVICE", "LLVMPIPE", 1);
        std::string why = backend_unavailable_reason(Backend::vulkan);
        std::fprintf(stderr, "reason: '%s'\n", why.c_str());
        std::exit(why.empty() || why.find("matches no device name") != std::string::npos ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "reason: ");
}

TEST(VulkanDevice, Float64InputsAreUnsupportedNotSilentlyRounded) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  ProblemSpec s{.B = 1, .H = 1, .Hv = 1, .T = 3, .L = 4, .E = 2};
  Problem p(s);  // float64
  Options o;
  o.backend = Backend::vulkan;
  try {
    forward(p.forward_args(), o);
    FAIL() << "float64 forward ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
}

// On llvmpipe, whose shaders stop looping after 65535 iterations, sizes whose contraction loops
// would pass that are refused before anything is written (they would come back wrong).
TEST(VulkanDevice, LlvmpipeRefusesLatentsPastItsLoopLimit) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  if (vulkan::device_description().find("llvmpipe") == std::string::npos)
    GTEST_SKIP() << "the device is not llvmpipe: " << vulkan::device_description();
  ProblemSpec s{.B = 1, .H = 1, .Hv = 1, .T = 2, .L = 40000, .E = 2};
  s.dtype = s.state_dtype = DType::float32;
  Problem p(s);
  p.context.fill(7.0);
  Options o;
  o.backend = Backend::vulkan;
  try {
    forward(p.forward_args(), o);
    FAIL() << "L = 40000 ran on llvmpipe";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("65535"), std::string::npos) << e.what();
  }
  for (double x : p.context.values()) ASSERT_EQ(x, 7.0);
}

// Forward and backward of one problem against the reference, under the given options.
void check_against_reference(const ProblemSpec& spec, Options o, double fwd_tol, double grad_tol) {
  Problem p(spec);
  Problem ref = p.reference_solution();
  o.backend = Backend::vulkan;
  forward(p.forward_args(), o);
  backward(p.backward_args(), o);
  auto close = [](const HostTensor& got, const HostTensor& want, double tol, const char* what) {
    std::vector<double> g = got.values();
    for (double x : g) ASSERT_TRUE(std::isfinite(x)) << what << ": not finite";
    EXPECT_LE(rms_rel(g, want.values()), tol) << what;
  };
  close(p.context, ref.context, fwd_tol, "context");
  close(p.rho_out, ref.rho_out, fwd_tol, "rho");
  close(p.rho_norm_out, ref.rho_norm_out, fwd_tol, "rho_norm");
  close(p.grad_q, ref.grad_q, grad_tol, "grad_q");
  close(p.grad_v, ref.grad_v, grad_tol, "grad_v");
  close(p.grad_decay, ref.grad_decay, grad_tol, "grad_decay");
  close(p.grad_rho, ref.grad_rho, grad_tol, "grad_rho");
  close(p.grad_rho_norm, ref.grad_rho_norm, grad_tol, "grad_rho_norm");
}

ProblemSpec f32(ProblemSpec s) {
  s.dtype = s.state_dtype = DType::float32;
  s.initial_rho = s.initial_rho_norm = s.grad_rho_out = s.grad_rho_norm_out = true;
  return s;
}

// A workspace cap far below the problem splits the (batch, head) rows into groups of one or two:
// dv (summed over heads, Hv = 1) and the decay gradient (summed over the batch) cross groups.
TEST(VulkanGroups, SmallWorkspaceSplitsRowsWithTheSameResults) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  ProblemSpec s = f32({.B = 3, .H = 3, .Hv = 1, .T = 45, .L = 70, .E = 66, .seed = 7});
  Options o;
  o.chunk_size = 16;
  o.max_workspace_bytes = 400 * 1024;  // about two rows per group
  check_against_reference(s, o, 1e-5, 1e-4);
  s.Hv = 3;
  s.seed = 8;
  check_against_reference(s, o, 1e-5, 1e-4);
}

// Training alternates forward and backward of one shape: the backward's work buffers serve the
// forward too, so neither call reallocates the other's (gigabytes at BDH's sizes).
TEST(VulkanGroups, ForwardAndBackwardShareTheirWorkBuffers) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  Problem p(f32({.B = 2, .H = 2, .Hv = 1, .T = 40, .L = 24, .E = 16, .seed = 9}));
  Options o;
  o.backend = Backend::vulkan;
  backward(p.backward_args(), o);
  const unsigned long long after_backward = vulkan::last_device_bytes();
  forward(p.forward_args(), o);
  EXPECT_EQ(vulkan::last_device_bytes(), after_backward) << "the forward allocated a set of its own";
  backward(p.backward_args(), o);
  EXPECT_EQ(vulkan::last_device_bytes(), after_backward);
}

// Chunk sizes the harness does not use: 1 (no intra-chunk pairs), 64 with T an exact multiple,
// and one above the shaders' maximum (clamped to 64).
TEST(VulkanChunks, OneExactAndOversizedChunks) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  ProblemSpec s = f32({.B = 2, .H = 2, .Hv = 2, .T = 128, .L = 40, .E = 24, .seed = 11});
  for (int64_t chunk : {1, 64, 1000}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    Options o;
    o.chunk_size = chunk;
    check_against_reference(s, o, 1e-5, 1e-4);
  }
}

// Wide L with few (row, chunk) pairs: the intra-chunk scores are summed over 2 and 4 slices of
// the latents (uneven last slices), then added in order.
TEST(VulkanChunks, ScoresSplitOverLatentSlices) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  for (int64_t L : {600, 1100}) {
    SCOPED_TRACE("L " + std::to_string(L));
    ProblemSpec s = f32({.B = 1, .H = 2, .Hv = 1, .T = 70, .L = L, .E = 8, .seed = static_cast<uint64_t>(L)});
    Options o;
    o.chunk_size = 16;
    check_against_reference(s, o, 1e-5, 1e-4);
  }
}

// bfloat16 and float16 q / v / context: converted on the host, computed in float32.
TEST(VulkanDtypes, SixteenBitInputs) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  for (DType d : {DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(d));
    ProblemSpec s = f32({.B = 2, .H = 2, .Hv = 1, .T = 50, .L = 32, .E = 16, .seed = 21});
    s.dtype = d;
    check_against_reference(s, Options{}, forward_tolerance(d), gradient_tolerance(d));
  }
}

// SPEC.md: long sequences with decay exactly 0 and 1 stay finite (and accurate). Past 65535 steps
// on purpose: llvmpipe ends a shader's loops there, so the sequential shaders walk in segments.
TEST(VulkanLong, LongSequenceWithDecayZeroAndOneStaysFinite) {
  if (!vulkan_available()) GTEST_SKIP() << backend_unavailable_reason(Backend::vulkan);
  ProblemSpec s = f32({.B = 1, .H = 1, .Hv = 1, .T = 65573, .L = 8, .E = 4, .seed = 31});
  s.decay = DecayKind::with_zeros_and_ones;
  s.zero_q_rows = true;
  check_against_reference(s, Options{}, 1e-5, 1e-4);
}

}  // namespace
}  // namespace rhoscan::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
