// `rhoscan verify`: a backend against the float64 reference on the tensors of a file, with
// SPEC.md's tolerances.
#include <cmath>
#include <cstdio>

#include "args.h"
#include "operator_file.h"
#include "rhoscan/commands.h"

namespace rhoscan::cli {
namespace {

const char* verify_help() {
  return R"(usage: rhoscan verify IN.safetensors [options]

Runs the chosen backend and the float64 reference on the inputs of IN (the same file format as
`rhoscan run`: q, v, decay, optional rho, rho_norm, grad_context, grad_rho, grad_rho_norm) and
prints, for every output, the RMS relative error ||x - ref||_2 / ||ref||_2 (||x||_2 when the
reference is all zero) against SPEC.md's tolerance for q's dtype:
  float32            1e-5 forward outputs (context, rho, rho_norm), 1e-4 gradients
  bfloat16, float16  5e-3
  float64            1e-10 forward, 1e-9 gradients
The reference runs on float64 copies of the inputs (the same values), so it is exact to double
precision. Gradients are checked when IN holds grad_context.

options:
  --backend B           reference | fast | cpu | cuda | vulkan | auto (default auto)
  --device D            cpu | cuda | cuda:N | vulkan | auto (default auto), as for `rhoscan run`
  --chunk N             chunk size for chunked backends (default: the backend's choice)
  --threads N           CPU threads (default: all)
  --layout bhtl|bthl    storage order of q, v, grad_context (default: the file's metadata, else bhtl)

exit status:
  0  every output is within its tolerance
  1  at least one output is not (or is not finite)
  2  bad usage, malformed file, invalid input, or an unavailable backend or device
)";
}

double rms_rel(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0, norm_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
    norm_x += x[i] * x[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(norm_x);
}

bool is_gradient(const std::string& name) { return name.rfind("grad_", 0) == 0; }

double tolerance(DType dtype, bool gradient) {
  switch (dtype) {
    case DType::float64: return gradient ? 1e-9 : 1e-10;
    case DType::float32: return gradient ? 1e-4 : 1e-5;
    default: return 5e-3;
  }
}

int verify_main(const std::vector<std::string>& argv) {
  Args args("verify", argv, {"--device", "--backend", "--chunk", "--threads", "--layout"}, {});
  args.expect_positional(1, "one input file (rhoscan verify IN.safetensors)");
  const std::string input = args.positional()[0];
  Placement placement = resolve_placement(args.value_or("--device", "auto"), args.value_or("--backend", "auto"));
  Options options;
  options.chunk_size = args.integer("--chunk", 0, 1, int64_t{1} << 30);
  options.num_threads = static_cast<int>(args.integer("--threads", 0, 1, 4096));
  std::optional<Layout> layout;
  if (auto l = args.value("--layout")) layout = parse_layout(*l);

  io::SafetensorsFile file = io::read_safetensors(input);
  OperatorInputs inputs = load_operator_inputs(file, input, layout);
  placement = resolve_placement(args.value_or("--device", "auto"), args.value_or("--backend", "auto"), inputs.q.dtype);
  OperatorOutputs got = run_operator(inputs, placement, options);
  Placement reference;
  reference.backend = Backend::reference;
  OperatorOutputs want = run_operator(inputs.as_float64(), reference, Options{});

  std::printf("rhoscan verify: %s, %s inputs, B=%lld H=%lld Hv=%lld T=%lld L=%lld E=%lld, against the float64 reference\n",
              placement.description().c_str(), dtype_name(inputs.q.dtype), static_cast<long long>(inputs.B),
              static_cast<long long>(inputs.H), static_cast<long long>(inputs.Hv), static_cast<long long>(inputs.T),
              static_cast<long long>(inputs.L), static_cast<long long>(inputs.E));
  std::printf("  %-14s %-9s %12s %10s  %s\n", "output", "dtype", "rms_rel", "tolerance", "result");
  bool all_pass = true;
  for (const io::StoredTensor& t : got.tensors) {
    const io::StoredTensor* ref = want.find(t.name);
    if (ref == nullptr) throw Error(ErrorKind::internal, "the reference did not produce " + t.name);
    double err = rms_rel(tensor_values(t), tensor_values(*ref));
    double tol = tolerance(inputs.q.dtype, is_gradient(t.name));
    bool pass = std::isfinite(err) && err <= tol;
    all_pass = all_pass && pass;
    std::printf("  %-14s %-9s %12.3e %10.0e  %s\n", t.name.c_str(), dtype_name(t.dtype), err, tol, pass ? "pass" : "FAIL");
  }
  std::printf("%s\n", all_pass ? "all outputs within tolerance" : "FAILED: some outputs exceed their tolerance");
  return all_pass ? kExitOk : kExitFailed;
}

const Registration kVerify{"verify", "compare a backend with the float64 reference on a file's inputs",
                           verify_help, verify_main};

}  // namespace
}  // namespace rhoscan::cli
