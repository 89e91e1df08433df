// The fuzz target's check of one input, shared with the regression test that replays the files
// in tests/data/ (tests/test_fuzz_regressions.cpp) in the normal build.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rhoscan::fuzz {

enum class Outcome {
  rejected_by_reader,      // not a valid safetensors file
  parsed,                  // valid file without q, v and decay
  rejected_inputs,         // a valid file that is not an operator input (name, rank, shapes)
  too_large,               // a valid operator input above the fuzzer's size cap (not run)
  rejected_by_validation,  // the library refused it (SPEC.md's error cases)
  ran,                     // forward (and backward) ran
};

// Traps (crashes) when a property fails; returns what happened otherwise.
Outcome check_input(const uint8_t* data, size_t size);

}  // namespace rhoscan::fuzz
