// The operator's tensors as the CLI files hold them (shared by `run`, `verify` and the fuzz
// target): reading the inputs of a safetensors file, running forward (+ backward) on a chosen
// backend and device, and the outputs to write back.
//
// File tensor names and stored shapes (layout bhtl; with layout bthl the [B, *, T, *] tensors
// are stored [B, T, *, *]):
//   inputs   q [B,H,T,L]  v [B,Hv,T,E]  decay [H,L] or [1,H,L]
//            optional: rho [B,H,L,E]  rho_norm [B,H,L]  (initial state)
//            optional: grad_context [B,H,T,E]  grad_rho [B,H,L,E]  grad_rho_norm [B,H,L]
//                      (upstream gradients; grad_rho / grad_rho_norm are of the FINAL state)
//   outputs  context [B,H,T,E]  rho [B,H,L,E]  rho_norm [B,H,L]  (final state)
//            with grad_context: grad_q, grad_v, grad_decay (shapes of q, v, decay),
//                      grad_rho [B,H,L,E], grad_rho_norm [B,H,L] (of the INITIAL state)
// q, v, grad_context keep their dtype; decay and the states are promoted to float32 when stored
// in a 16-bit type (float64 states when q or any state is float64).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "rhoscan/rhoscan.h"

namespace rhoscan::cli {

// A zero-filled tensor (Error(invalid_argument) when its byte count overflows).
io::StoredTensor zero_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
// Element values in storage order, as double.
std::vector<double> tensor_values(const io::StoredTensor& t);
// Sets element `i` (storage order), rounded to the tensor's dtype.
void set_value(io::StoredTensor& t, int64_t i, double value);

enum class Layout { bhtl, bthl };
const char* layout_name(Layout layout);
Layout parse_layout(const std::string& name);  // "bhtl" or "bthl", else Error(invalid_argument)

struct OperatorInputs {
  Layout layout = Layout::bhtl;
  io::StoredTensor q, v, decay;
  std::optional<io::StoredTensor> rho, rho_norm;
  std::optional<io::StoredTensor> grad_context, grad_rho, grad_rho_norm;
  DType state_dtype = DType::float32;
  int64_t B = 0, H = 0, Hv = 0, T = 0, L = 0, E = 0;

  bool has_gradients() const { return grad_context.has_value(); }
  // Every tensor converted to float64 (the values are unchanged): the reference's inputs.
  OperatorInputs as_float64() const;
};

// The operator's inputs from a parsed file. `layout`: from the command line; when absent, the
// file's "layout" metadata, else bhtl. Throws Error(io / invalid_argument) with a one-line
// message for a missing or unknown tensor, a wrong rank, or sizes that cannot be allocated.
OperatorInputs load_operator_inputs(const io::SafetensorsFile& file, const std::string& label,
                                    std::optional<Layout> layout);

// Where the tensors live and which backend runs them, from --device and --backend.
struct Placement {
  Device device = Device::cpu;
  int device_index = 0;
  Backend backend = Backend::automatic;
  std::string description() const;  // "cpu fast backend" etc., for messages
};
// device: cpu | cuda | cuda:N | vulkan | auto; backend: the names of rhoscan::parse_backend.
// auto is cuda where the CUDA backend is available and takes the inputs' dtype (when given: not
// float64, which the CPU backends run), else cpu. run and verify resolve once to check the
// arguments before reading the file, then again with the file's dtype.
Placement resolve_placement(const std::string& device, const std::string& backend,
                            std::optional<DType> dtype = std::nullopt);

struct OperatorOutputs {
  std::vector<io::StoredTensor> tensors;  // in output-file order
  const io::StoredTensor* find(const std::string& name) const;
  std::vector<io::NamedView> named_views() const;
};

// Forward, and backward when the inputs hold grad_context. Tensors are copied to the GPU and
// back when placement.device is cuda.
OperatorOutputs run_operator(const OperatorInputs& in, const Placement& placement, Options options);

}  // namespace rhoscan::cli
