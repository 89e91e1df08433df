// libFuzzer target: arbitrary bytes through the safetensors reader, the CLI's input assembly
// (names, ranks, dtype promotion, layout metadata) and, when q, v and decay parse and the sizes
// are small, the validated forward and backward of every host backend (the float64 reference,
// and the fast CPU backend when it is built).
//
// Build: CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DRHOSCAN_FUZZ=ON && ninja -C build-fuzz fuzz_safetensors
// Run:   build-fuzz/fuzz/fuzz_safetensors -max_total_time=60 CORPUS_DIR tests/data
//
// Properties checked beyond "no crash, no sanitizer report": every rejection is an
// rhoscan::Error whose message is a single line (the CLI prints it as one).
#include "fuzz_safetensors.h"

#include <cstdio>
#include <cstring>

#include "operator_file.h"

namespace rhoscan::fuzz {
namespace {

void require_one_line(const Error& e) {
  if (std::strchr(e.what(), '\n') != nullptr || e.what()[0] == '\0') {
    std::fprintf(stderr, "error message is not one non-empty line: %s\n", e.what());
    __builtin_trap();
  }
}

// Sizes small enough that one input runs in well under a millisecond.
bool small(const cli::OperatorInputs& in) {
  for (int64_t d : {in.B, in.H, in.T, in.L, in.E})
    if (d > 16) return false;
  return in.B * in.H * (in.T * (in.L + in.E) + in.L * in.E) <= 8192;
}

}  // namespace

Outcome check_input(const uint8_t* data, size_t size) {
  io::SafetensorsFile file;
  try {
    file = io::parse_safetensors(data, size, "fuzz-input");
  } catch (const Error& e) {
    require_one_line(e);
    if (e.kind() != ErrorKind::io) __builtin_trap();  // the reader only throws io errors
    return Outcome::rejected_by_reader;
  }
  for (const io::StoredTensor& t : file.tensors) {
    try {
      TensorView v = t.view();
      if (v.numel() != t.numel()) __builtin_trap();
    } catch (const Error& e) {
      require_one_line(e);  // rank above kMaxRank
    }
  }
  if (!file.find("q") || !file.find("v") || !file.find("decay")) return Outcome::parsed;
  cli::OperatorInputs in;
  try {
    in = cli::load_operator_inputs(file, "fuzz-input", std::nullopt);
  } catch (const Error& e) {
    require_one_line(e);
    return Outcome::rejected_inputs;
  }
  if (!small(in)) return Outcome::too_large;
  // Every host backend of this build (the reference; the fast CPU backend when compiled in):
  // each must run or refuse with an error, never crash.
  Outcome outcome = Outcome::ran;
  for (Backend backend : available_backends()) {
    if (backend != Backend::reference && backend != Backend::cpu) continue;
    cli::Placement placement;
    placement.backend = backend;
    Options options;
    options.check_finite = (size & 1) != 0;
    options.num_threads = 1;
    options.chunk_size = size % 7 == 0 ? 0 : static_cast<int64_t>(size % 7);  // small chunks: many chunk boundaries
    try {
      cli::OperatorOutputs out = cli::run_operator(in, placement, options);
      if (out.tensors.size() != (in.has_gradients() ? 8u : 3u)) __builtin_trap();
    } catch (const Error& e) {
      require_one_line(e);
      if (e.kind() == ErrorKind::internal) __builtin_trap();
      outcome = Outcome::rejected_by_validation;
    }
  }
  return outcome;
}

}  // namespace rhoscan::fuzz

#ifndef RHOSCAN_FUZZ_NO_ENTRY_POINT
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rhoscan::fuzz::check_input(data, size);
  return 0;
}
#endif
