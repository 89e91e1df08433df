// `rhoscan run`: the operator (forward, and backward when upstream gradients are given) on the
// tensors of a safetensors file, written to another safetensors file.
#include <chrono>
#include <cstdio>

#include "args.h"
#include "operator_file.h"
#include "rhoscan/commands.h"

namespace rhoscan::cli {
namespace {

const char* run_help() {
  return R"(usage: rhoscan run IN.safetensors -o OUT.safetensors [options]

Runs the rho-attention operator (SPEC.md) on the tensors of IN and writes its outputs to OUT.
Forward always; forward and backward when IN holds grad_context.

options:
  -o, --output PATH     output file (required); written atomically: a temporary file beside
                        PATH, renamed into place, so PATH appears only when everything succeeded
  --device D            cpu | cuda | cuda:N | vulkan | auto (default auto: cuda when this build
                        has the CUDA backend, a GPU is present and the file is not float64,
                        else cpu). cuda copies the
                        tensors to the GPU with the CUDA runtime; vulkan runs the vulkan backend
                        on host tensors (it moves them to its device itself)
  --backend B           reference | fast | cpu | cuda | vulkan | auto (default auto: the fastest
                        backend for the device). fast = cpu (chunked, multi-threaded);
                        reference = float64 arithmetic, step by step (the oracle)
  --chunk N             chunk size for chunked backends (default: the backend's choice)
  --threads N           CPU threads (default: all)
  --check-finite        reject NaN / Inf in q, v, states and upstream gradients (costs a pass)
  --layout bhtl|bthl    storage order of q, v, context and their gradients (default: the file's
                        "layout" metadata, else bhtl). bthl stores them [B, T, H, *]

input tensors (IN):
  q              [B, H, T, L]    queries (BDH: non-negative, sparse)
  v              [B, Hv, T, E]   values, Hv = 1 or H
  decay          [H, L] or [1, H, L], in [0, 1]
  rho            [B, H, L, E]    optional initial state (zeros when absent)
  rho_norm       [B, H, L]       optional initial normaliser (zeros when absent)
  grad_context   [B, H, T, E]    optional upstream gradient dLoss/dcontext: requests backward
  grad_rho       [B, H, L, E]    optional dLoss/d(final rho)       (needs grad_context)
  grad_rho_norm  [B, H, L]       optional dLoss/d(final rho_norm)  (needs grad_context)
  Any other tensor name is an error. Dtypes F64, F32, BF16, F16. q, v and grad_context share one
  dtype. decay and the states are used as float32 when stored in BF16/F16 (float64 when q or a
  state is F64).

output tensors (OUT):
  context        [B, H, T, E]    q's dtype
  rho, rho_norm  [B, H, L, E], [B, H, L]: the final state (float32, or float64 as above)
  with grad_context, also the gradients of the inputs:
  grad_q, grad_v, grad_decay     shapes and dtypes of q, v, decay
  grad_rho, grad_rho_norm        gradients of the INITIAL state (also when none was given)

exit status:
  0  success
  1  internal error (please report)
  2  bad usage, malformed file (truncated, bad header JSON, offsets outside the data, unknown
     dtype, missing or unknown tensor, wrong rank), invalid input (SPEC.md's error cases), or a
     backend or device that is not available. One line on stderr; OUT is not written.
)";
}

int run_main(const std::vector<std::string>& argv) {
  Args args("run", argv, {"-o", "--output", "--device", "--backend", "--chunk", "--threads", "--layout"},
            {"--check-finite"});
  args.expect_positional(1, "one input file (rhoscan run IN.safetensors -o OUT.safetensors)");
  auto output = args.value("-o");
  if (auto o = args.value("--output")) {
    if (output) throw Error(ErrorKind::invalid_argument, "give the output once (-o or --output)");
    output = o;
  }
  if (!output) throw Error(ErrorKind::invalid_argument, "missing -o OUT.safetensors (see rhoscan run --help)");
  const std::string input = args.positional()[0];

  Placement placement = resolve_placement(args.value_or("--device", "auto"), args.value_or("--backend", "auto"));
  Options options;
  options.chunk_size = args.integer("--chunk", 0, 1, int64_t{1} << 30);
  options.num_threads = static_cast<int>(args.integer("--threads", 0, 1, 4096));
  options.check_finite = args.flag("--check-finite");
  std::optional<Layout> layout;
  if (auto l = args.value("--layout")) layout = parse_layout(*l);

  io::SafetensorsFile file = io::read_safetensors(input);
  OperatorInputs inputs = load_operator_inputs(file, input, layout);
  placement = resolve_placement(args.value_or("--device", "auto"), args.value_or("--backend", "auto"), inputs.q.dtype);
  auto start = std::chrono::steady_clock::now();
  OperatorOutputs outputs = run_operator(inputs, placement, options);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  const Backend used = resolve_backend(placement.backend, placement.device);
  io::write_safetensors(*output, outputs.named_views(),
                        {{"producer", std::string("rhoscan ") + version() + " run"},
                         {"backend", backend_name(used)},
                         {"layout", layout_name(inputs.layout)}});
  std::printf("rhoscan run: %s (B=%lld H=%lld Hv=%lld T=%lld L=%lld E=%lld, %s%s) -> %s in %.3f ms\n",
              inputs.has_gradients() ? "forward+backward" : "forward", static_cast<long long>(inputs.B),
              static_cast<long long>(inputs.H), static_cast<long long>(inputs.Hv), static_cast<long long>(inputs.T),
              static_cast<long long>(inputs.L), static_cast<long long>(inputs.E), dtype_name(inputs.q.dtype),
              (", " + placement.description()).c_str(), output->c_str(), ms);
  return kExitOk;
}

const Registration kRun{"run", "run the operator on a safetensors file, write its outputs", run_help, run_main};

}  // namespace
}  // namespace rhoscan::cli
