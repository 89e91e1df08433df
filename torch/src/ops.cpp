// The rhoscan operators in PyTorch's dispatcher (torch.ops.rhoscan.*):
//
//   rho_attention           forward: (q, v, decay, rho?, rho_norm?, layout, chunk_size, save_keys)
//                           -> (context, rho, rho_norm); save_keys: autograd's saved buffer also
//                           holds the normalised keys (rhoscan::saved_numel's with_keys)
//   rho_attention_backward  the forward's inputs + grad_context?, grad_rho_out?, grad_rho_norm_out?,
//                           layout, chunk_size, rho_grad, saved?
//                           -> (grad_q, grad_v, grad_decay, grad_rho, grad_rho_norm); grad_rho is
//                           empty (shape [0]) when rho_grad is false (autograd: no initial rho)
//   rho_attention_with_saved  the forward, also returning `saved` (float32 [n], n from
//                           rhoscan::saved_numel, with the keys if save_keys): what the CUDA
//                           backward would recompute; the
//                           autograd wrapper uses it for CUDA tensors that need gradients
//   rho_attention_step      one token, functional: (q, v, decay, rho?, rho_norm?)
//                           -> (context, new rho, new rho_norm)
//   available_backends      the rhoscan backends usable in this process
//
// Each op has one device kernel for CPU and CUDA (the tensors become rhoscan::TensorViews, no
// copies; rhoscan validates and runs), a Meta kernel that only allocates the outputs (fake
// tensors, torch.compile), and an Autograd kernel (forward and step; the backward op is
// differentiable once, not twice). Outputs are allocated by the same function for the device and
// Meta kernels, so their shapes, dtypes and strides agree by construction.
#include <ATen/ATen.h>
#include <ATen/DeviceGuard.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <torch/version.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rhoscan/rhoscan.h"
#ifdef RHOSCAN_TORCH_CUDA
#include "cuda_stream.h"
#endif

namespace rhoscan::pt {
namespace {

using at::Tensor;
using OptTensor = c10::optional<Tensor>;
using Triple = std::tuple<Tensor, Tensor, Tensor>;
using Quad = std::tuple<Tensor, Tensor, Tensor, Tensor>;
using Grads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;

bool present(const OptTensor& t) { return t.has_value() && t->defined(); }
OptTensor optional_of(const Tensor& t) { return t.defined() ? OptTensor(t) : OptTensor(); }

// ---- argument checks that rhoscan cannot do (it never sees torch types) ---------------------

// Error messages are built by plain string concatenation and thrown as c10 errors directly,
// never through a std::ostream written from this library (TORCH_CHECK builds its message with
// one, and c10's operator<< for SymInt or Device writes into it): against PyTorch 2.11's wheel
// such a stream crashed inside libstdc++'s locale facets (docs/PYTORCH.md, "Known problems").
std::string piece(const char* s) { return s; }
std::string piece(const std::string& s) { return s; }
std::string piece(std::string_view s) { return std::string(s); }
std::string piece(int64_t x) { return std::to_string(x); }
std::string piece(int x) { return std::to_string(x); }
std::string piece(at::ScalarType t) { return c10::toString(t); }
std::string piece(const c10::Device& d) { return d.str(); }
std::string piece(at::Layout l) {
  switch (l) {
    case at::kStrided: return "Strided";
    case at::kSparse: return "Sparse";
    default: return "non-strided (" + std::to_string(static_cast<int>(l)) + ")";
  }
}
std::string piece(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  ((s += piece(parts)), ...);
  return s;
}

#define RHOSCAN_SOURCE_LOCATION \
  c10::SourceLocation { __func__, __FILE__, static_cast<uint32_t>(__LINE__) }
// Throws c10::ERROR_TYPE (ValueError -> Python ValueError, ...) when `cond` is false; the
// message is only built then.
#define RHOSCAN_CHECK(ERROR_TYPE, cond, ...) \
  do {                                       \
    if (!(cond)) throw ::c10::ERROR_TYPE(RHOSCAN_SOURCE_LOCATION, cat(__VA_ARGS__)); \
  } while (false)

// One size, as text: concrete sizes as numbers, symbolic ones (under tracing) as "?".
std::string size_text(const c10::SymInt& s) {
#if TORCH_VERSION_MAJOR >= 2
  if (auto v = s.maybe_as_int()) return std::to_string(*v);
  return "?";
#else
  return s.is_symbolic() ? "?" : std::to_string(s.as_int_unchecked());
#endif
}

std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + size_text(t.sym_size(i));
  return s + "]";
}

std::optional<DType> rhoscan_dtype(at::ScalarType s) {
  switch (s) {
    case at::kDouble: return DType::float64;
    case at::kFloat: return DType::float32;
    case at::kBFloat16: return DType::bfloat16;
    case at::kHalf: return DType::float16;
    default: return std::nullopt;
  }
}

// The layout of q, v and context: [B, H, T, *] or sequence-first [B, T, H, *].
enum class Layout { bhtl, bthl };

Layout parse_layout(c10::string_view layout, const char* op) {
  const std::string s(layout.data(), layout.size());
  if (s == "bhtl") return Layout::bhtl;
  if (s == "bthl") return Layout::bthl;
  RHOSCAN_CHECK(ValueError, false, "rhoscan.", op, ": layout must be \"bhtl\" (q [B, H, T, L]) or \"bthl\" ",
                    "(q [B, T, H, L]), got \"", s, "\"");
  return Layout::bhtl;  // not reached
}

// What every kernel (Meta included) needs before it can read sizes: a dense tensor of a
// floating dtype rhoscan knows, with the rank its role requires.
void check_arg(const char* op, const char* name, const Tensor& t, int64_t rank_lo, int64_t rank_hi) {
  RHOSCAN_CHECK(ValueError, t.defined(), "rhoscan.", op, ": ", name, " is an undefined tensor");
  RHOSCAN_CHECK(ValueError, t.layout() == at::kStrided, "rhoscan.", op, ": ", name,
                    ": only dense (strided) tensors are supported, got layout ", t.layout());
  RHOSCAN_CHECK(ValueError, rhoscan_dtype(t.scalar_type()).has_value(), "rhoscan.", op, ": ", name, ": dtype ",
                    t.scalar_type(), " is not supported (float64, float32, bfloat16, float16)");
  RHOSCAN_CHECK(ValueError, t.dim() >= rank_lo && t.dim() <= rank_hi, "rhoscan.", op, ": ", name,
                    ": expected rank ", rank_lo, (rank_hi != rank_lo ? " or " + std::to_string(rank_hi) : ""),
                    ", got rank ", t.dim(), " with shape ", shape_string(t));
}

void check_inputs(const char* op, const Tensor& q, const Tensor& v, const Tensor& decay,
                  const OptTensor& rho, const OptTensor& rho_norm, bool step) {
  const int64_t r = step ? 3 : 4;
  check_arg(op, "q", q, r, r);
  check_arg(op, "v", v, r, r);
  check_arg(op, "decay", decay, 2, 3);
  if (present(rho)) check_arg(op, "rho", *rho, 4, 4);
  if (present(rho_norm)) check_arg(op, "rho_norm", *rho_norm, 3, 3);
}

// The state dtype: that of the first state tensor given; otherwise float64 for float64 problems
// and float32 for the others (SPEC.md: states are never 16-bit).
at::ScalarType state_dtype(const Tensor& q, std::initializer_list<const OptTensor*> states) {
  for (const OptTensor* s : states)
    if (present(*s)) return (*s)->scalar_type();
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

struct Sizes {
  c10::SymInt B, H, T, L, E;
};

Sizes sizes_of(const Tensor& q, const Tensor& v, Layout layout, bool step) {
  if (step) return {q.sym_size(0), q.sym_size(1), 1, q.sym_size(2), v.sym_size(2)};
  const bool seq_first = layout == Layout::bthl;
  return {q.sym_size(0), q.sym_size(seq_first ? 2 : 1), q.sym_size(seq_first ? 1 : 2), q.sym_size(3),
          v.sym_size(3)};
}

// [B, H, T, E] or [B, T, H, E]: the user's layout, contiguous in it.
std::vector<c10::SymInt> context_shape(const Sizes& s, Layout layout) {
  if (layout == Layout::bthl) return {s.B, s.T, s.H, s.E};
  return {s.B, s.H, s.T, s.E};
}

// ---- output allocation: shared by the device kernels and the Meta kernels --------------------

Triple allocate_forward(const Tensor& q, const Tensor& v, const OptTensor& rho,
                        const OptTensor& rho_norm, Layout layout, bool step) {
  const Sizes s = sizes_of(q, v, layout, step);
  const auto state = q.options().dtype(state_dtype(q, {&rho, &rho_norm}));
  std::vector<c10::SymInt> context = step ? std::vector<c10::SymInt>{s.B, s.H, s.E} : context_shape(s, layout);
  return {at::empty_symint(context, q.options()), at::empty_symint({s.B, s.H, s.L, s.E}, state),
          at::empty_symint({s.B, s.H, s.L}, state)};
}

// A concrete size (the saved buffer's length is a function of the sizes, not a symbolic
// expression: under torch.compile with dynamic shapes this specialises on them).
int64_t concrete(const c10::SymInt& s) {
#if TORCH_VERSION_MAJOR >= 2
  return s.guard_int(__FILE__, __LINE__);
#else
  return s.as_int_unchecked();
#endif
}

// grad_rho is [B,H,L,E], or empty (shape [0]) when rho_grad is false: the autograd wrapper asks for
// it only when an initial rho was given, since on CUDA it costs a pass over T·L·E (the reverse
// state recurrence) that nothing would use.
Grads allocate_backward(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                        const OptTensor& rho_norm, const OptTensor& grad_rho_out,
                        const OptTensor& grad_rho_norm_out, Layout layout, bool rho_grad) {
  const Sizes s = sizes_of(q, v, layout, false);
  const auto state =
      q.options().dtype(state_dtype(q, {&rho, &rho_norm, &grad_rho_out, &grad_rho_norm_out}));
  return {at::empty_symint(q.sym_sizes(), q.options()), at::empty_symint(v.sym_sizes(), v.options()),
          at::empty_symint(decay.sym_sizes(), decay.options()),
          rho_grad ? at::empty_symint({s.B, s.H, s.L, s.E}, state) : at::empty({0}, state),
          at::empty_symint({s.B, s.H, s.L}, state)};
}

// ---- torch::Tensor -> rhoscan::TensorView ---------------------------------------------------

TensorView view_of(const char* op, const char* name, const Tensor& t, bool seq_first = false) {
  RHOSCAN_CHECK(ValueError, t.device().is_cpu() || t.device().is_cuda(), "rhoscan.", op, ": ", name,
                    " is on device ", t.device(), "; rhoscan takes cpu and cuda tensors");
  TensorView view;
  view.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  view.dtype = *rhoscan_dtype(t.scalar_type());
  view.device = t.is_cuda() ? Device::cuda : Device::cpu;
  view.device_index = t.is_cuda() ? t.get_device() : 0;
  view.rank = static_cast<int>(t.dim());  // check_arg bounded it by 4
  for (int i = 0; i < view.rank; ++i) {
    view.shape[i] = t.size(i);
    view.strides[i] = t.stride(i);
  }
  // [B, T, H, X] storage seen as the logical [B, H, T, X] that rhoscan indexes.
  return seq_first ? view.permuted({0, 2, 1, 3}) : view;
}

std::optional<TensorView> view_of(const char* op, const char* name, const OptTensor& t) {
  if (!present(t)) return std::nullopt;
  return view_of(op, name, *t);
}

Options options_for(const Tensor& q, int64_t chunk_size) {
  Options options;
  options.chunk_size = chunk_size;
  options.num_threads = at::get_num_threads();  // torch.set_num_threads applies to rhoscan too
  if (q.is_cuda()) {
#ifdef RHOSCAN_TORCH_CUDA
    options.stream = detail::current_cuda_stream(q.get_device());
#else
    RHOSCAN_CHECK(Error, false, "rhoscan: this extension was built against a PyTorch without CUDA; rebuild it "
                       "against a CUDA PyTorch to use CUDA tensors");
#endif
  }
  return options;
}

// rhoscan::Error -> the PyTorch error type Python users expect (ValueError for bad input).
template <class F>
void call_rhoscan(F&& run) {
  try {
    run();
  } catch (const Error& e) {
    const ErrorKind kind = e.kind();
    RHOSCAN_CHECK(ValueError, kind != ErrorKind::invalid_argument && kind != ErrorKind::unsupported, e.what());
    RHOSCAN_CHECK(NotImplementedError, kind != ErrorKind::backend_unavailable, e.what());
    RHOSCAN_CHECK(OutOfMemoryError, kind != ErrorKind::out_of_memory, e.what());
    RHOSCAN_CHECK(Error, false, e.what());  // io, internal
  }
}

// The forward's saved buffer: float32 [rhoscan::saved_numel(...)], zeros (so that what a backend
// leaves unwritten is defined; the CUDA forward fills it).
Tensor allocate_saved(const Tensor& q, const Tensor& v, const OptTensor& rho, Layout layout, int64_t chunk_size,
                      bool save_keys) {
  const Sizes s = sizes_of(q, v, layout, false);
  int64_t n = 0;
  call_rhoscan([&] {
    n = saved_numel(concrete(s.B), concrete(s.H), concrete(s.T), concrete(s.L), *rhoscan_dtype(q.scalar_type()),
                    present(rho), chunk_size, save_keys);
  });
  return at::zeros({n}, q.options().dtype(at::kFloat));
}

// ---- device kernels (CPU and CUDA) and Meta kernels ----------------------------------------

Triple forward_meta(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                    const OptTensor& rho_norm, c10::string_view layout, int64_t chunk_size, bool /*save_keys*/) {
  const Layout l = parse_layout(layout, "forward");
  check_inputs("forward", q, v, decay, rho, rho_norm, false);
  return allocate_forward(q, v, rho, rho_norm, l, false);
}

// The forward on the device; `saved`, when given, is filled as well (rhoscan::ForwardArgs::saved).
Triple run_forward(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                   const OptTensor& rho_norm, c10::string_view layout, int64_t chunk_size, const Tensor* saved) {
  const Layout l = parse_layout(layout, "forward");
  const bool seq_first = l == Layout::bthl;
  check_inputs("forward", q, v, decay, rho, rho_norm, false);
  auto [context, rho_out, rho_norm_out] = allocate_forward(q, v, rho, rho_norm, l, false);
  const char* op = "forward";
  ForwardArgs args;
  args.q = view_of(op, "q", q, seq_first);
  args.v = view_of(op, "v", v, seq_first);
  args.decay = view_of(op, "decay", decay);
  args.rho = view_of(op, "rho", rho);
  args.rho_norm = view_of(op, "rho_norm", rho_norm);
  args.context = view_of(op, "context", context, seq_first);
  args.rho_out = view_of(op, "rho_out", rho_out);
  args.rho_norm_out = view_of(op, "rho_norm_out", rho_norm_out);
  if (saved != nullptr) args.saved = view_of(op, "saved", *saved);
  const at::OptionalDeviceGuard guard(at::device_of(q));
  const Options options = options_for(q, chunk_size);
  call_rhoscan([&] { rhoscan::forward(args, options); });
  return {context, rho_out, rho_norm_out};
}

// (save_keys only shapes the saved buffer, which this op does not return)
Triple forward_kernel(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                      const OptTensor& rho_norm, c10::string_view layout, int64_t chunk_size, bool /*save_keys*/) {
  return run_forward(q, v, decay, rho, rho_norm, layout, chunk_size, nullptr);
}

Quad forward_with_saved_meta(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                             const OptTensor& rho_norm, c10::string_view layout, int64_t chunk_size, bool save_keys) {
  auto [context, rho_out, rho_norm_out] = forward_meta(q, v, decay, rho, rho_norm, layout, chunk_size, save_keys);
  return {context, rho_out, rho_norm_out,
          allocate_saved(q, v, rho, parse_layout(layout, "forward"), chunk_size, save_keys)};
}

Quad forward_with_saved_kernel(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                               const OptTensor& rho_norm, c10::string_view layout, int64_t chunk_size, bool save_keys) {
  check_inputs("forward", q, v, decay, rho, rho_norm, false);
  const Tensor saved = allocate_saved(q, v, rho, parse_layout(layout, "forward"), chunk_size, save_keys);
  auto [context, rho_out, rho_norm_out] = run_forward(q, v, decay, rho, rho_norm, layout, chunk_size, &saved);
  return {context, rho_out, rho_norm_out, saved};
}

Grads backward_meta(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                    const OptTensor& rho_norm, const OptTensor& grad_context,
                    const OptTensor& grad_rho_out, const OptTensor& grad_rho_norm_out,
                    c10::string_view layout, int64_t chunk_size, bool rho_grad, const OptTensor& saved) {
  const Layout l = parse_layout(layout, "backward");
  check_inputs("backward", q, v, decay, rho, rho_norm, false);
  return allocate_backward(q, v, decay, rho, rho_norm, grad_rho_out, grad_rho_norm_out, l, rho_grad);
}

Grads backward_kernel(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                      const OptTensor& rho_norm, const OptTensor& grad_context,
                      const OptTensor& grad_rho_out, const OptTensor& grad_rho_norm_out,
                      c10::string_view layout, int64_t chunk_size, bool rho_grad, const OptTensor& saved) {
  const Layout l = parse_layout(layout, "backward");
  const bool seq_first = l == Layout::bthl;
  const char* op = "backward";
  check_inputs(op, q, v, decay, rho, rho_norm, false);
  if (present(grad_context)) check_arg(op, "grad_context", *grad_context, 4, 4);
  if (present(grad_rho_out)) check_arg(op, "grad_rho_out", *grad_rho_out, 4, 4);
  if (present(grad_rho_norm_out)) check_arg(op, "grad_rho_norm_out", *grad_rho_norm_out, 3, 3);
  auto [grad_q, grad_v, grad_decay, grad_rho, grad_rho_norm] =
      allocate_backward(q, v, decay, rho, rho_norm, grad_rho_out, grad_rho_norm_out, l, rho_grad);
  // No gradient for context (only the final state is used): a zero one.
  const Tensor grad_c = present(grad_context)
                            ? *grad_context
                            : at::zeros_symint(context_shape(sizes_of(q, v, l, false), l), q.options());
  BackwardArgs args;
  args.q = view_of(op, "q", q, seq_first);
  args.v = view_of(op, "v", v, seq_first);
  args.decay = view_of(op, "decay", decay);
  args.rho = view_of(op, "rho", rho);
  args.rho_norm = view_of(op, "rho_norm", rho_norm);
  args.grad_context = view_of(op, "grad_context", grad_c, seq_first);
  args.grad_rho_out = view_of(op, "grad_rho_out", grad_rho_out);
  args.grad_rho_norm_out = view_of(op, "grad_rho_norm_out", grad_rho_norm_out);
  args.grad_q = view_of(op, "grad_q", grad_q, seq_first);
  args.grad_v = view_of(op, "grad_v", grad_v, seq_first);
  args.grad_decay = view_of(op, "grad_decay", grad_decay);
  if (rho_grad) args.grad_rho = view_of(op, "grad_rho", grad_rho);
  args.grad_rho_norm = view_of(op, "grad_rho_norm", grad_rho_norm);
  if (present(saved)) {
    RHOSCAN_CHECK(ValueError, saved->layout() == at::kStrided && saved->dim() == 1 && saved->scalar_type() == at::kFloat,
                  "rhoscan.backward: saved must be the float32 rank-1 tensor that rho_attention_with_saved returned, got ",
                  saved->scalar_type(), " with shape ", shape_string(*saved));
    args.saved = view_of(op, "saved", *saved);
  }
  const at::OptionalDeviceGuard guard(at::device_of(q));
  const Options options = options_for(q, chunk_size);
  call_rhoscan([&] { rhoscan::backward(args, options); });
  return {grad_q, grad_v, grad_decay, grad_rho, grad_rho_norm};
}

Triple step_meta(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                 const OptTensor& rho_norm) {
  check_inputs("step", q, v, decay, rho, rho_norm, true);
  return allocate_forward(q, v, rho, rho_norm, Layout::bhtl, true);
}

// The state is copied into the new outputs and rhoscan::step updates the copies in place, so
// the caller's rho and rho_norm are never modified. The copy is checked here first (shape,
// dtype, device), since rhoscan only sees the copies.
Triple step_kernel(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                   const OptTensor& rho_norm) {
  const char* op = "step";
  check_inputs(op, q, v, decay, rho, rho_norm, true);
  auto [context, rho_new, rho_norm_new] = allocate_forward(q, v, rho, rho_norm, Layout::bhtl, true);
  auto copy_state = [&](const char* name, const OptTensor& from, Tensor& to, const char* symbolic) {
    if (!present(from)) {
      to.zero_();
      return;
    }
    RHOSCAN_CHECK(ValueError, from->sizes() == to.sizes(), "rhoscan.step: ", name, ": expected shape ", symbolic,
                      " = ", to.sizes(), ", got ", from->sizes(), " (q is ", q.sizes(), ", v is ",
                      v.sizes(), ")");
    RHOSCAN_CHECK(ValueError, from->scalar_type() == to.scalar_type(), "rhoscan.step: ", name, ": dtype ",
                      from->scalar_type(), " differs from ", to.scalar_type(),
                      ", the dtype of the other state tensor");
    RHOSCAN_CHECK(ValueError, from->device() == q.device(), "rhoscan.step: ", name, " is on ", from->device(),
                      " but q is on ", q.device(), "; all tensors must be on one device");
    to.copy_(*from);
  };
  copy_state("rho", rho, rho_new, "[B, H, L, E]");
  copy_state("rho_norm", rho_norm, rho_norm_new, "[B, H, L]");
  StepArgs args;
  args.q = view_of(op, "q", q);
  args.v = view_of(op, "v", v);
  args.decay = view_of(op, "decay", decay);
  args.rho = view_of(op, "rho", rho_new);
  args.rho_norm = view_of(op, "rho_norm", rho_norm_new);
  args.context = view_of(op, "context", context);
  const at::OptionalDeviceGuard guard(at::device_of(q));
  const Options options = options_for(q, 0);
  call_rhoscan([&] { rhoscan::step(args, options); });
  return {context, rho_new, rho_norm_new};
}

std::vector<std::string> available_backends_op() {
  std::vector<std::string> names;
  for (Backend b : available_backends()) names.emplace_back(backend_name(b));
  return names;
}

// ---- autograd -------------------------------------------------------------------------------

const auto& forward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("rhoscan::rho_attention", "")
                       .typed<decltype(forward_kernel)>();
  return op;
}
const auto& backward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("rhoscan::rho_attention_backward", "")
                       .typed<decltype(backward_kernel)>();
  return op;
}
const auto& forward_with_saved_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("rhoscan::rho_attention_with_saved", "")
                       .typed<decltype(forward_with_saved_kernel)>();
  return op;
}
const auto& step_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("rhoscan::rho_attention_step", "")
                       .typed<decltype(step_kernel)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// context, rho and rho_norm are differentiable with respect to q, v, decay, rho and rho_norm.
// Nothing of size T·L·E is saved. keep_saved (CUDA tensors that need gradients): the forward also
// fills the `saved` buffer (rho_attention_with_saved; about 1/60 of q's bytes, up to a quarter of
// them at long L), which spares the backward recomputing the normaliser and the scores; with
// save_keys it also holds the normalised keys (twice q's bytes more for 16-bit q), which spare the
// backward's normaliser pass.
class RhoAttentionFunction : public torch::autograd::Function<RhoAttentionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& v,
                               const Tensor& decay, const OptTensor& rho, const OptTensor& rho_norm,
                               c10::string_view layout, int64_t chunk_size, bool keep_saved, bool save_keys) {
    Triple out;
    Tensor saved;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if (keep_saved) {
        auto [context, rho_out, rho_norm_out, kept] =
            forward_with_saved_op().call(q, v, decay, rho, rho_norm, layout, chunk_size, save_keys);
        out = {context, rho_out, rho_norm_out};
        saved = kept;
      } else {
        out = forward_op().call(q, v, decay, rho, rho_norm, layout, chunk_size, save_keys);
      }
    }
    ctx->save_for_backward({q, v, decay, rho.value_or(Tensor()), rho_norm.value_or(Tensor()), saved});
    ctx->saved_data["layout"] = std::string(layout.data(), layout.size());
    ctx->saved_data["chunk_size"] = chunk_size;
    ctx->set_materialize_grads(false);  // absent upstream gradients stay absent (cheaper)
    return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const int64_t n_inputs = 9;
    if (!grads[0].defined() && !grads[1].defined() && !grads[2].defined())
      return variable_list(n_inputs);
    const std::string layout = ctx->saved_data["layout"].toStringRef();
    auto [gq, gv, gd, gr, gn] = backward_op().call(
        saved[0], saved[1], saved[2], optional_of(saved[3]), optional_of(saved[4]),
        optional_of(grads[0]), optional_of(grads[1]), optional_of(grads[2]), layout,
        ctx->saved_data["chunk_size"].toInt(), /*rho_grad=*/saved[3].defined(), optional_of(saved[5]));
    return {gq, gv, gd, saved[3].defined() ? gr : Tensor(), saved[4].defined() ? gn : Tensor(),
            Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// One token: the backward of the T = 1 forward, through the [B, H, 1, *] views of its tensors.
class RhoAttentionStepFunction : public torch::autograd::Function<RhoAttentionStepFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& v,
                               const Tensor& decay, const OptTensor& rho, const OptTensor& rho_norm) {
    Triple out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = step_op().call(q, v, decay, rho, rho_norm);
    }
    ctx->save_for_backward({q, v, decay, rho.value_or(Tensor()), rho_norm.value_or(Tensor())});
    ctx->set_materialize_grads(false);
    return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    if (!grads[0].defined() && !grads[1].defined() && !grads[2].defined()) return variable_list(5);
    OptTensor grad_context;
    if (grads[0].defined()) grad_context = grads[0].unsqueeze(2);
    auto [gq, gv, gd, gr, gn] = backward_op().call(
        saved[0].unsqueeze(2), saved[1].unsqueeze(2), saved[2], optional_of(saved[3]),
        optional_of(saved[4]), grad_context, optional_of(grads[1]), optional_of(grads[2]), "bhtl", 0,
        /*rho_grad=*/saved[3].defined(), /*saved=*/OptTensor());
    return {gq.squeeze(2), gv.squeeze(2), gd, saved[3].defined() ? gr : Tensor(),
            saved[4].defined() ? gn : Tensor()};
  }
};

Triple forward_autograd(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                        const OptTensor& rho_norm, c10::string_view layout, int64_t chunk_size, bool save_keys) {
  // Whether a backward can follow (inside Function::forward grad mode is off, so decide here).
  auto needs_grad = [](const Tensor& t) { return t.defined() && t.requires_grad(); };
  const bool keep_saved = q.is_cuda() && torch::autograd::GradMode::is_enabled() &&
                          (needs_grad(q) || needs_grad(v) || needs_grad(decay) || needs_grad(rho.value_or(Tensor())) ||
                           needs_grad(rho_norm.value_or(Tensor())));
  auto out = RhoAttentionFunction::apply(q, v, decay, rho, rho_norm, layout, chunk_size, keep_saved, save_keys);
  return {out[0], out[1], out[2]};
}

Triple step_autograd(const Tensor& q, const Tensor& v, const Tensor& decay, const OptTensor& rho,
                     const OptTensor& rho_norm) {
  auto out = RhoAttentionStepFunction::apply(q, v, decay, rho, rho_norm);
  return {out[0], out[1], out[2]};
}

}  // namespace
}  // namespace rhoscan::pt

TORCH_LIBRARY(rhoscan, m) {
  m.def("rho_attention(Tensor q, Tensor v, Tensor decay, Tensor? rho=None, Tensor? rho_norm=None, "
        "str layout=\"bhtl\", int chunk_size=0, bool save_keys=False) -> (Tensor, Tensor, Tensor)");
  m.def("rho_attention_backward(Tensor q, Tensor v, Tensor decay, Tensor? rho, Tensor? rho_norm, "
        "Tensor? grad_context, Tensor? grad_rho_out, Tensor? grad_rho_norm_out, "
        "str layout=\"bhtl\", int chunk_size=0, bool rho_grad=True, Tensor? saved=None) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("rho_attention_with_saved(Tensor q, Tensor v, Tensor decay, Tensor? rho=None, Tensor? rho_norm=None, "
        "str layout=\"bhtl\", int chunk_size=0, bool save_keys=False) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("rho_attention_step(Tensor q, Tensor v, Tensor decay, Tensor? rho=None, "
        "Tensor? rho_norm=None) -> (Tensor, Tensor, Tensor)");
  m.def("available_backends() -> str[]", &rhoscan::pt::available_backends_op);
}

TORCH_LIBRARY_IMPL(rhoscan, CPU, m) {
  m.impl("rho_attention_with_saved", &rhoscan::pt::forward_with_saved_kernel);
  m.impl("rho_attention", &rhoscan::pt::forward_kernel);
  m.impl("rho_attention_backward", &rhoscan::pt::backward_kernel);
  m.impl("rho_attention_step", &rhoscan::pt::step_kernel);
}

TORCH_LIBRARY_IMPL(rhoscan, CUDA, m) {
  m.impl("rho_attention_with_saved", &rhoscan::pt::forward_with_saved_kernel);
  m.impl("rho_attention", &rhoscan::pt::forward_kernel);
  m.impl("rho_attention_backward", &rhoscan::pt::backward_kernel);
  m.impl("rho_attention_step", &rhoscan::pt::step_kernel);
}

TORCH_LIBRARY_IMPL(rhoscan, Meta, m) {
  m.impl("rho_attention_with_saved", &rhoscan::pt::forward_with_saved_meta);
  m.impl("rho_attention", &rhoscan::pt::forward_meta);
  m.impl("rho_attention_backward", &rhoscan::pt::backward_meta);
  m.impl("rho_attention_step", &rhoscan::pt::step_meta);
}

TORCH_LIBRARY_IMPL(rhoscan, Autograd, m) {
  m.impl("rho_attention", &rhoscan::pt::forward_autograd);
  m.impl("rho_attention_step", &rhoscan::pt::step_autograd);
  // Differentiating the backward (double backward) raises a clear error instead of a wrong zero.
  m.impl("rho_attention_backward", torch::autograd::autogradNotImplementedFallback());
  // Internal to the forward's autograd (it runs below it); called directly with inputs that need
  // gradients it raises instead of returning outputs without a graph.
  m.impl("rho_attention_with_saved", torch::autograd::autogradNotImplementedFallback());
}
