// Replays the files of tests/data through the fuzz target's checks (fuzz/fuzz_safetensors.cpp)
// in the normal build: the seed inputs must run, and every input the fuzzer ever crashed on
// (saved here as crash-*) must now be handled (rejected with an error or run).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../fuzz/fuzz_safetensors.h"

namespace {

namespace fs = std::filesystem;
using rhoscan::fuzz::Outcome;

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

Outcome replay(const fs::path& p) {
  std::vector<unsigned char> bytes = read_bytes(p);
  return rhoscan::fuzz::check_input(bytes.data(), bytes.size());
}

TEST(FuzzRegressions, SeedInputsRun) {
  for (const char* name : {"spec_example.safetensors", "small_grads_bf16.safetensors", "small_bthl_f64.safetensors"}) {
    EXPECT_EQ(replay(fs::path(RHOSCAN_TEST_DATA) / name), Outcome::ran) << name;
  }
}

TEST(FuzzRegressions, EveryFileInTestDataIsHandled) {
  int count = 0;
  for (const auto& e : fs::directory_iterator(RHOSCAN_TEST_DATA)) {
    SCOPED_TRACE(e.path().string());
    replay(e.path());  // a regression traps (crashes) here or fails under the sanitizers
    ++count;
  }
  EXPECT_GE(count, 3);
}

}  // namespace
