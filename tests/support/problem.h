// Test support: owning host tensors, random problems, and the error measure of SPEC.md.
//
// Every backend test builds a Problem (shapes, dtypes, which optional tensors exist, layout),
// runs it through the float64 reference and through the backend, and compares with rms_rel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rhoscan/rhoscan.h"

namespace rhoscan::testing {

// A strided tensor in host memory whose elements are stored in its dtype.
class HostTensor {
 public:
  HostTensor() = default;
  // Contiguous in `storage_order` (a permutation of the logical dims), e.g. {0,2,1,3} stores a
  // logical [B,H,T,L] tensor as [B,T,H,L].
  HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int> storage_order = {});

  TensorView view() const;  // a mutable view (the tensor owns its memory)
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }

  // Logical (row-major over shape) element values as double.
  std::vector<double> values() const;
  void set_values(const std::vector<double>& values);  // rounded to the dtype
  void fill(double x);
  HostTensor converted(DType dtype) const;  // same values and storage order, other dtype
  size_t bytes() const { return storage_.size(); }
  void* data() const { return storage_.data(); }

 private:
  int64_t offset(int64_t logical_index) const;
  DType dtype_ = DType::float32;
  std::vector<int64_t> shape_, strides_;
  std::vector<int> order_;
  mutable std::vector<unsigned char> storage_;
};

enum class DecayKind { random, with_zeros_and_ones, all_zero, all_one };

struct ProblemSpec {
  int64_t B = 1, H = 1, Hv = 1, T = 1, L = 1, E = 1;
  DType dtype = DType::float64;
  DType state_dtype = DType::float64;  // also the decay's dtype
  bool initial_rho = false, initial_rho_norm = false;
  bool grad_rho_out = false, grad_rho_norm_out = false;
  bool bthl_layout = false;           // q, v, context stored as [B, T, H, *]
  double q_zero_fraction = 0.3;       // fraction of q entries that are exactly 0
  bool zero_q_rows = false;           // make some whole q rows zero
  DecayKind decay = DecayKind::random;
  uint64_t seed = 1;
  std::string name() const;
};

// All tensors of one problem, forward and backward, inputs and outputs.
struct Problem {
  ProblemSpec spec;
  HostTensor q, v, decay;
  std::optional<HostTensor> rho, rho_norm;                  // initial state
  HostTensor context, rho_out, rho_norm_out;                // forward outputs
  HostTensor grad_context;
  std::optional<HostTensor> grad_rho_out, grad_rho_norm_out;  // upstream
  HostTensor grad_q, grad_v, grad_decay, grad_rho, grad_rho_norm;  // backward outputs

  explicit Problem(const ProblemSpec& spec);
  // The same inputs in float64 (outputs too), for the reference to evaluate exactly.
  Problem as_float64() const;
  // as_float64() with the float64 reference's forward and backward evaluated: the oracle's
  // outputs and gradients for these inputs.
  Problem reference_solution() const;

  ForwardArgs forward_args() const;
  BackwardArgs backward_args() const;
};

// A [B, H, 1, X] view as [B, H, X]: one token of a forward problem, as step() takes it.
inline TensorView squeeze_time(TensorView x) {
  x.rank = 3;
  x.shape[2] = x.shape[3];
  x.strides[2] = x.strides[3];
  return x;
}

// ‖x − ref‖₂ / ‖ref‖₂; when ‖ref‖₂ is 0 it returns ‖x‖₂ (an absolute measure).
double rms_rel(const std::vector<double>& x, const std::vector<double>& ref);

// Tolerances of SPEC.md for inputs of `dtype`.
double forward_tolerance(DType dtype);
double gradient_tolerance(DType dtype);

}  // namespace rhoscan::testing
