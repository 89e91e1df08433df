#include "support/problem.h"

#include <cmath>
#include <numeric>
#include <stdexcept>

#include "core/dtype.h"

namespace rhoscan::testing {

using detail::load_as_double;
using detail::store_from_double;

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int> storage_order)
    : dtype_(dtype), shape_(std::move(shape)), order_(std::move(storage_order)) {
  const int rank = static_cast<int>(shape_.size());
  if (order_.empty()) {
    order_.resize(rank);
    std::iota(order_.begin(), order_.end(), 0);
  }
  strides_.assign(rank, 0);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides_[order_[i]] = stride;
    stride *= std::max<int64_t>(shape_[order_[i]], 1);
  }
  storage_.assign(static_cast<size_t>(numel()) * dtype_size(dtype_), 0);
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

TensorView HostTensor::view() const {
  TensorView v;
  v.data = storage_.empty() ? nullptr : storage_.data();
  v.dtype = dtype_;
  v.device = Device::cpu;
  v.rank = static_cast<int>(shape_.size());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = shape_[i];
    v.strides[i] = strides_[i];
  }
  return v;
}

int64_t HostTensor::offset(int64_t index) const {
  int64_t off = 0;
  for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
    off += (index % shape_[d]) * strides_[d];
    index /= shape_[d];
  }
  return off;
}

std::vector<double> HostTensor::values() const {
  std::vector<double> out(numel());
  for (int64_t i = 0; i < numel(); ++i) out[i] = load_as_double(storage_.data(), dtype_, offset(i));
  return out;
}

void HostTensor::set_values(const std::vector<double>& values) {
  if (static_cast<int64_t>(values.size()) != numel()) throw std::logic_error("set_values: size");
  for (int64_t i = 0; i < numel(); ++i) store_from_double(storage_.data(), dtype_, offset(i), values[i]);
}

void HostTensor::fill(double x) { set_values(std::vector<double>(numel(), x)); }

HostTensor HostTensor::converted(DType dtype) const {
  HostTensor out(dtype, shape_, order_);
  out.set_values(values());
  return out;
}

std::string ProblemSpec::name() const {
  std::string s = "B" + std::to_string(B) + "_H" + std::to_string(H) + "_Hv" + std::to_string(Hv) +
                  "_T" + std::to_string(T) + "_L" + std::to_string(L) + "_E" + std::to_string(E) +
                  "_" + dtype_name(dtype) + "_state" + dtype_name(state_dtype);
  if (initial_rho) s += "_rho";
  if (initial_rho_norm) s += "_norm";
  if (grad_rho_out) s += "_gR";
  if (grad_rho_norm_out) s += "_gN";
  if (bthl_layout) s += "_bthl";
  if (zero_q_rows) s += "_zerorows";
  switch (decay) {
    case DecayKind::random: break;
    case DecayKind::with_zeros_and_ones: s += "_decay01"; break;
    case DecayKind::all_zero: s += "_decay0"; break;
    case DecayKind::all_one: s += "_decay1"; break;
  }
  return s + "_seed" + std::to_string(seed);
}

Problem::Problem(const ProblemSpec& s) : spec(s) {
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<int> seq_order = s.bthl_layout ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{};
  q = HostTensor(s.dtype, {s.B, s.H, s.T, s.L}, seq_order);
  v = HostTensor(s.dtype, {s.B, s.Hv, s.T, s.E}, seq_order);
  decay = HostTensor(s.state_dtype, {s.H, s.L});
  context = HostTensor(s.dtype, {s.B, s.H, s.T, s.E}, seq_order);
  rho_out = HostTensor(s.state_dtype, {s.B, s.H, s.L, s.E});
  rho_norm_out = HostTensor(s.state_dtype, {s.B, s.H, s.L});
  grad_context = HostTensor(s.dtype, {s.B, s.H, s.T, s.E}, seq_order);
  grad_q = HostTensor(s.dtype, {s.B, s.H, s.T, s.L}, seq_order);
  grad_v = HostTensor(s.dtype, {s.B, s.Hv, s.T, s.E}, seq_order);
  grad_decay = HostTensor(s.state_dtype, {s.H, s.L});
  grad_rho = HostTensor(s.state_dtype, {s.B, s.H, s.L, s.E});
  grad_rho_norm = HostTensor(s.state_dtype, {s.B, s.H, s.L});

  // q: non-negative (BDH's ReLU output), sparse; optionally whole rows of zeros.
  std::vector<double> qv(q.numel());
  for (double& x : qv) x = unit(rng) < s.q_zero_fraction ? 0.0 : unit(rng);
  if (s.zero_q_rows)
    for (int64_t row = 0; row < s.B * s.H * s.T; ++row)
      if (row % 3 == 1)
        for (int64_t l = 0; l < s.L; ++l) qv[row * s.L + l] = 0.0;
  q.set_values(qv);
  std::vector<double> vv(v.numel());
  for (double& x : vv) x = normal(rng);
  v.set_values(vv);
  std::vector<double> dv(decay.numel());
  for (size_t i = 0; i < dv.size(); ++i) {
    switch (s.decay) {
      case DecayKind::random: dv[i] = 0.5 + 0.5 * unit(rng); break;
      case DecayKind::with_zeros_and_ones: dv[i] = i % 3 == 0 ? 0.0 : i % 3 == 1 ? 1.0 : unit(rng); break;
      case DecayKind::all_zero: dv[i] = 0.0; break;
      case DecayKind::all_one: dv[i] = 1.0; break;
    }
  }
  decay.set_values(dv);
  if (s.initial_rho) {
    rho = HostTensor(s.state_dtype, {s.B, s.H, s.L, s.E});
    std::vector<double> r(rho->numel());
    for (double& x : r) x = normal(rng);
    rho->set_values(r);
  }
  if (s.initial_rho_norm) {
    rho_norm = HostTensor(s.state_dtype, {s.B, s.H, s.L});
    std::vector<double> n(rho_norm->numel());
    for (double& x : n) x = 2.0 * unit(rng);  // a decayed sum of non-negative q: non-negative
    rho_norm->set_values(n);
  }
  std::vector<double> g(grad_context.numel());
  for (double& x : g) x = normal(rng);
  grad_context.set_values(g);
  if (s.grad_rho_out) {
    grad_rho_out = HostTensor(s.state_dtype, {s.B, s.H, s.L, s.E});
    std::vector<double> r(grad_rho_out->numel());
    for (double& x : r) x = normal(rng);
    grad_rho_out->set_values(r);
  }
  if (s.grad_rho_norm_out) {
    grad_rho_norm_out = HostTensor(s.state_dtype, {s.B, s.H, s.L});
    std::vector<double> r(grad_rho_norm_out->numel());
    for (double& x : r) x = normal(rng);
    grad_rho_norm_out->set_values(r);
  }
}

Problem Problem::as_float64() const {
  Problem p = *this;
  p.spec.dtype = DType::float64;
  p.spec.state_dtype = DType::float64;
  for (HostTensor* t : {&p.q, &p.v, &p.decay, &p.context, &p.rho_out, &p.rho_norm_out, &p.grad_context,
                        &p.grad_q, &p.grad_v, &p.grad_decay, &p.grad_rho, &p.grad_rho_norm})
    *t = t->converted(DType::float64);
  for (std::optional<HostTensor>* t : {&p.rho, &p.rho_norm, &p.grad_rho_out, &p.grad_rho_norm_out})
    if (*t) **t = (*t)->converted(DType::float64);
  return p;
}

Problem Problem::reference_solution() const {
  Problem ref = as_float64();
  Options r;
  r.backend = Backend::reference;
  forward(ref.forward_args(), r);
  backward(ref.backward_args(), r);
  return ref;
}

static std::optional<TensorView> opt_view(const std::optional<HostTensor>& t) {
  if (!t) return std::nullopt;
  return t->view();
}

ForwardArgs Problem::forward_args() const {
  ForwardArgs a;
  a.q = q.view();
  a.v = v.view();
  a.decay = decay.view();
  a.rho = opt_view(rho);
  a.rho_norm = opt_view(rho_norm);
  a.context = context.view();
  a.rho_out = rho_out.view();
  a.rho_norm_out = rho_norm_out.view();
  return a;
}

BackwardArgs Problem::backward_args() const {
  BackwardArgs a;
  a.q = q.view();
  a.v = v.view();
  a.decay = decay.view();
  a.rho = opt_view(rho);
  a.rho_norm = opt_view(rho_norm);
  a.grad_context = grad_context.view();
  a.grad_rho_out = opt_view(grad_rho_out);
  a.grad_rho_norm_out = opt_view(grad_rho_norm_out);
  a.grad_q = grad_q.view();
  a.grad_v = grad_v.view();
  a.grad_decay = grad_decay.view();
  a.grad_rho = grad_rho.view();
  a.grad_rho_norm = grad_rho_norm.view();
  return a;
}

double rms_rel(const std::vector<double>& x, const std::vector<double>& ref) {
  if (x.size() != ref.size()) throw std::logic_error("rms_rel: sizes differ");
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    diff += (x[i] - ref[i]) * (x[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

double forward_tolerance(DType dtype) {
  switch (dtype) {
    case DType::float64: return 1e-10;
    case DType::float32: return 1e-5;
    default: return 5e-3;
  }
}

double gradient_tolerance(DType dtype) {
  switch (dtype) {
    case DType::float64: return 1e-9;
    case DType::float32: return 1e-4;
    default: return 5e-3;
  }
}

}  // namespace rhoscan::testing
