// Validation of every public entry point (SPEC.md, "Inputs that are errors").
//
// Each check throws rhoscan::Error naming the operation, the argument and the shapes it saw,
// before any output is touched.
#include "core/validate.h"

#include <algorithm>
#include <string>
#include <vector>

namespace rhoscan::detail {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

class Validator {
 public:
  explicit Validator(const char* op) : op_(op) {}

  [[noreturn]] void fail(const std::string& message,
                         ErrorKind kind = ErrorKind::invalid_argument) const {
    throw Error(kind, text(message));
  }
  // The text fail() would throw.
  std::string text(const std::string& message) const { return std::string("rhoscan.") + op_ + ": " + message; }

  // Structural checks of one tensor: rank, dtype class, null data, negative strides, and
  // element counts and extents that overflow int64.
  void check_view(const char* name, const TensorView& t, int rank_lo, int rank_hi) {
    if (t.rank < rank_lo || t.rank > rank_hi) {
      std::string want = rank_lo == rank_hi ? str(rank_lo) : str(rank_lo) + " or " + str(rank_hi);
      fail(std::string(name) + ": expected rank " + want + ", got rank " + str(t.rank) +
           " with shape " + t.shape_string());
    }
    if (static_cast<int>(t.dtype) < 0 || static_cast<int>(t.dtype) > 3)
      fail(std::string(name) + ": unsupported dtype code " + str(static_cast<int>(t.dtype)));
    if (static_cast<int>(t.device) < 0 || static_cast<int>(t.device) > 2)
      fail(std::string(name) + ": unknown device code " + str(static_cast<int>(t.device)));
    int64_t count = 1, extent = 0;
    for (int i = 0; i < t.rank; ++i) {
      if (t.shape[i] < 0)
        fail(std::string(name) + ": negative size in shape " + t.shape_string());
      if (t.strides[i] < 0)
        fail(std::string(name) + ": negative stride " + str(t.strides[i]) + " in dimension " +
             str(i) + " of shape " + t.shape_string());
      if (__builtin_mul_overflow(count, t.shape[i], &count))
        fail(std::string(name) + ": the element count of shape " + t.shape_string() +
                 " overflows a 64-bit index",
             ErrorKind::invalid_argument);
    }
    if (count > 0) {
      for (int i = 0; i < t.rank; ++i) {
        int64_t term;
        if (__builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &term) ||
            __builtin_add_overflow(extent, term, &extent))
          fail(std::string(name) + ": shape " + t.shape_string() +
               " with its strides spans more elements than a 64-bit index holds");
      }
      int64_t bytes;
      if (__builtin_mul_overflow(extent + 1, static_cast<int64_t>(dtype_size(t.dtype)), &bytes))
        fail(std::string(name) + ": shape " + t.shape_string() +
             " spans more bytes than a 64-bit index holds");
      if (t.data == nullptr) fail(std::string(name) + ": null data pointer for shape " + t.shape_string());
    }
    if (view_count_ == kMaxViews) fail("internal: too many tensors", ErrorKind::internal);
    views_[view_count_++] = {name, &t};
  }

  void check_shape(const char* name, const TensorView& t, std::initializer_list<int64_t> want,
                   const char* symbolic) {
    bool ok = static_cast<int>(want.size()) == t.rank;
    for (int i = 0; ok && i < t.rank; ++i) ok = t.shape[i] == want.begin()[i];
    if (!ok) {
      std::string w = "[";
      for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + str(want.begin()[i]);
      fail(std::string(name) + ": expected shape " + symbolic + " = " + w + "], got " +
           t.shape_string() + context());
    }
  }

  void check_dtype_state(const char* name, const TensorView& t, DType want) {
    if (t.dtype != DType::float32 && t.dtype != DType::float64)
      fail(std::string(name) + ": dtype " + dtype_name(t.dtype) +
           " is not allowed: states and decay are float32 or float64");
    if (t.dtype != want)
      fail(std::string(name) + ": dtype " + dtype_name(t.dtype) + " differs from " +
           dtype_name(want) + ", the dtype of the other state tensors");
  }

  void check_dtype_data(const char* name, const TensorView& t, DType want, const char* ref) {
    if (t.dtype != want)
      fail(std::string(name) + ": dtype " + dtype_name(t.dtype) + " differs from " + ref +
           "'s dtype " + dtype_name(want));
  }

  // Every view must live on the same device (and the same CUDA ordinal).
  void check_devices() {
    const Named& first = views_[0];
    for (int i = 0; i < view_count_; ++i) {
      const auto& [name, t] = views_[i];
      if (t->device != first.view->device ||
          (t->device == Device::cuda && t->device_index != first.view->device_index))
        fail(std::string(name) + " is on " + device_name(t->device) + ":" + str(t->device_index) +
             " but " + first.name + " is on " + device_name(first.view->device) + ":" +
             str(first.view->device_index) + "; all tensors must be on one device");
    }
  }

  // Every view's memory as the backend needs it (a Vulkan tensor inside its buffer).
  void check_memory(const BackendImpl& backend) const {
    for (int i = 0; i < view_count_; ++i) {
      const auto& [name, t] = views_[i];
      std::string why = backend.memory_reason(*t);
      if (!why.empty()) fail(std::string(name) + " " + t->shape_string() + ": " + why);
    }
  }

  // The problem's defining shapes, appended to shape messages (formatted only on failure).
  void set_context(const TensorView* q, const TensorView* v) {
    context_q_ = q;
    context_v_ = v;
  }
  std::string context() const {
    if (!context_q_) return "";
    return " (q is " + context_q_->shape_string() + ", v is " + context_v_->shape_string() + ")";
  }

  // Outputs: a layout that maps two indices to one element is an error (a race, a wrong sum).
  void check_no_self_overlap(const char* name, const TensorView& t) {
    std::pair<int64_t, int64_t> dims[kMaxRank];  // (stride, size) of dims with size > 1
    int n = 0;
    for (int i = 0; i < t.rank && i < kMaxRank; ++i)  // rank was checked by check_view
      if (t.shape[i] > 1) dims[n++] = {t.strides[i], t.shape[i]};
    for (int i = 1; i < n; ++i)  // insertion sort by stride: at most kMaxRank entries
      for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
    int64_t needed = 1;
    for (int i = 0; i < n; ++i) {
      auto [stride, size] = dims[i];
      if (stride < needed)
        fail(std::string(name) + ": output strides make elements overlap (shape " +
             t.shape_string() + ")");
      needed = stride * size;
    }
  }

  // An output may not share memory with any other tensor, except the allowed exact aliases
  // (a final state written over its initial state).
  void check_no_overlap(const char* out_name, const TensorView& out,
                        const std::vector<const TensorView*>& allowed_aliases) {
    if (out.numel() == 0) return;
    auto range = [](const TensorView& t) {
      int64_t extent = 0;
      for (int i = 0; i < t.rank; ++i) extent += (t.shape[i] - 1) * t.strides[i];
      auto lo = reinterpret_cast<uintptr_t>(t.data);
      return std::pair<uintptr_t, uintptr_t>{lo, lo + (extent + 1) * dtype_size(t.dtype)};
    };
    auto [olo, ohi] = range(out);
    for (int i = 0; i < view_count_; ++i) {
      const auto& [name, t] = views_[i];
      if (t == &out || t->numel() == 0) continue;
      bool alias_ok = false;
      for (const TensorView* a : allowed_aliases) {
        if (a != t) continue;
        bool same = a->data == out.data && a->dtype == out.dtype && a->rank == out.rank;
        for (int i = 0; same && i < a->rank; ++i)
          same = a->shape[i] == out.shape[i] && (a->shape[i] <= 1 || a->strides[i] == out.strides[i]);
        alias_ok = same;
      }
      if (alias_ok) continue;
      auto [lo, hi] = range(*t);
      if (lo < ohi && olo < hi)
        fail(std::string(out_name) + " " + out.shape_string() + " overlaps the memory of " + name +
             " " + t->shape_string() + "; outputs must not share memory with other arguments");
    }
  }

  const char* op() const { return op_; }

 private:
  struct Named {
    const char* name;
    const TensorView* view;
  };
  const char* op_;
  // Fixed storage: validation allocates nothing unless it fails (step() is called per token).
  static constexpr int kMaxViews = 16;
  const TensorView* context_q_ = nullptr;
  const TensorView* context_v_ = nullptr;
  Named views_[kMaxViews] = {};
  int view_count_ = 0;
};

// The shared part of forward, backward and step: q, v and decay define the problem.
struct Core {
  Problem p;
  int64_t decay_stride[2];
};

Core check_core(Validator& check, const TensorView& q, const TensorView& v, const TensorView& decay,
                bool step) {
  Core c;
  Problem& p = c.p;
  check.check_view("q", q, step ? 3 : 4, step ? 3 : 4);
  check.check_view("v", v, step ? 3 : 4, step ? 3 : 4);
  check.check_view("decay", decay, 2, 3);
  p.B = q.shape[0];
  p.H = q.shape[1];
  p.T = step ? 1 : q.shape[2];
  p.L = q.shape[step ? 2 : 3];
  p.E = v.shape[step ? 2 : 3];
  p.Hv = v.shape[1];
  p.dtype = q.dtype;
  p.device = q.device;
  p.device_index = q.device_index;
  bool v_ok = v.shape[0] == p.B && (step || v.shape[2] == p.T) && (p.Hv == 1 || p.Hv == p.H);
  if (!v_ok)
    check.fail(std::string("v: shape ") + v.shape_string() + " does not fit q " + q.shape_string() + ": v must be " +
               (step ? "[B, Hv, E]" : "[B, Hv, T, E]") + " with B = " + str(p.B) +
               (step ? "" : ", T = " + str(p.T)) + " and Hv = 1 or H = " + str(p.H));
  if (p.L < 1) check.fail("q: the latent size L must be at least 1, got shape " + q.shape_string());
  if (p.E < 1) check.fail("v: the embedding size E must be at least 1, got shape " + v.shape_string());
  check.check_dtype_data("v", v, p.dtype, "q");
  // decay: [H, L] or [1, H, L]
  int off = decay.rank - 2;
  if ((decay.rank == 3 && decay.shape[0] != 1) || decay.shape[off] != p.H || decay.shape[off + 1] != p.L)
    check.fail("decay: expected shape [H, L] = [" + str(p.H) + ", " + str(p.L) + "] or [1, " +
               str(p.H) + ", " + str(p.L) + "], got " + decay.shape_string() + " (q is " + q.shape_string() + ")");
  if (decay.dtype != DType::float32 && decay.dtype != DType::float64)
    check.fail(std::string("decay: dtype ") + dtype_name(decay.dtype) +
               " is not allowed: decay is float32 or float64");
  p.decay_dtype = decay.dtype;
  c.decay_stride[0] = decay.strides[off];
  c.decay_stride[1] = decay.strides[off + 1];
  check.set_context(&q, &v);
  return c;
}

void copy_strides(int64_t* dst, const TensorView& t) {
  for (int i = 0; i < t.rank; ++i) dst[i] = t.strides[i];
}

// v's stride array with a zero head stride when Hv == 1 (see params.h).
void copy_v_strides(int64_t* dst, const TensorView& v) {
  copy_strides(dst, v);
  if (v.shape[1] == 1) dst[1] = 0;
}

// Runs the check now (values_satisfy), or appends it to `deferred` where the backend settles its
// checks itself (defers_value_checks): the same error either way.
void check_values(Validator& check, const BackendImpl& backend, const Options& options, DeferredChecks& deferred,
                  const char* name, const TensorView* t, BackendImpl::ValueRule rule) {
  if (t == nullptr || t->numel() == 0) return;
  const bool unit = rule == BackendImpl::ValueRule::unit_interval;
  // (the message only where it may be needed: a passing check allocates nothing, as the CPU
  // backend's step promises)
  auto message = [&] {
    return std::string(name) + " " + t->shape_string() +
           (unit ? ": every value must be finite and in [0, 1]" : ": contains NaN or Inf (check_finite is on)");
  };
  if (backend.defers_value_checks()) {
    DeferredCheck d;
    d.kind = unit ? DeferredCheck::Kind::unit_interval : DeferredCheck::Kind::finite;
    d.view = *t;
    d.message = check.text(message());
    deferred.push_back(std::move(d));
  } else if (!backend.values_satisfy(*t, rule, options)) {
    check.fail(message());
  }
}

void check_supported(Validator& check, const BackendImpl& backend, const Problem& p) {
  std::string why = backend.unsupported_reason(p);
  if (!why.empty())
    check.fail(std::string("backend ") + backend_name(backend.id()) + " cannot run this problem: " +
                   why,
               ErrorKind::unsupported);
}

// ForwardArgs::saved, BackwardArgs::saved: float32, rank 1, contiguous, of saved_numel's length with
// or without the keys; returns whether it has the keys' layout (where both lengths are equal, no
// keys are reserved and it has not).
bool check_saved_view(Validator& check, const TensorView& t, const Problem& p, bool has_rho,
                      const Options& options) {
  check.check_view("saved", t, 1, 1);
  const SavedLayout g = saved_layout(p.B, p.H, p.T, p.L, p.dtype, has_rho, options.chunk_size);
  const SavedLayout gk = saved_layout(p.B, p.H, p.T, p.L, p.dtype, has_rho, options.chunk_size, true);
  if (t.dtype != DType::float32)
    check.fail(std::string("saved: dtype ") + dtype_name(t.dtype) + " is not allowed: the saved buffer is float32");
  if (t.shape[0] != g.total && t.shape[0] != gk.total)
    check.fail("saved: expected shape [" + str(g.total) + "]" +
               (gk.total != g.total ? " or, with the keys, [" + str(gk.total) + "]" : std::string()) +
               " (rhoscan::saved_numel for q [" + str(p.B) + ", " + str(p.H) + ", " + str(p.T) + ", " + str(p.L) +
               "] " + dtype_name(p.dtype) + ", " + (has_rho ? "with" : "without") + " an initial rho, chunk_size " +
               str(options.chunk_size) + "), got " + t.shape_string());
  if (t.shape[0] > 1 && t.strides[0] != 1)
    check.fail("saved: must be contiguous (stride 1), got stride " + str(t.strides[0]) + " for shape " +
               t.shape_string());
  return gk.keys && t.shape[0] == gk.total;
}

bool saved_header_matches(const SavedHeader& h, const Problem& p, bool has_rho_norm, const Options& options) {
  return h.magic == kSavedMagic && h.version == kSavedVersion && h.B == p.B && h.H == p.H && h.T == p.T &&
         h.L == p.L && h.C == saved_chunk(options.chunk_size) && h.dtype == static_cast<int>(p.dtype) &&
         (h.has_rho_norm != 0) == has_rho_norm;
}

// The backward's saved buffer against the header its forward wrote: the same shapes, chunk,
// dtype and initial normaliser (the values themselves cannot be checked): saved_header_matches,
// and on a mismatch the error that says which part differs.
uint32_t check_saved_header(Validator& check, const SavedHeader& h, const Problem& p, bool has_rho_norm,
                            const Options& options) {
  if (saved_header_matches(h, p, has_rho_norm, options)) return h.filled;
  if (h.magic != kSavedMagic || h.version != kSavedVersion)
    check.fail("saved: its header was not written by this version's CUDA forward (magic " + str(h.magic) +
               ", version " + str(h.version) + "; expected " + str(kSavedMagic) + ", " + str(kSavedVersion) +
               "): pass the `saved` that rhoscan::forward filled");
  const int64_t C = saved_chunk(options.chunk_size);
  auto q_text = [](int64_t B, int64_t H, int64_t T, int64_t L, int dtype, int64_t C, bool n0) {
    return "q [" + str(B) + ", " + str(H) + ", " + str(T) + ", " + str(L) + "] " +
           dtype_name(static_cast<DType>(dtype)) + ", chunk " + str(C) + ", " + (n0 ? "with" : "without") +
           " an initial rho_norm";
  };
  // (the magic and version match, so the shapes, chunk, dtype or initial normaliser differ)
  check.fail("saved: written by a forward of " + q_text(h.B, h.H, h.T, h.L, h.dtype, h.C, h.has_rho_norm != 0) +
             ", but this backward has " + q_text(p.B, p.H, p.T, p.L, static_cast<int>(p.dtype), C, has_rho_norm));
}

}  // namespace

const BackendImpl& select_backend(const char* op, Backend requested, Device device) {
  auto fail = [&](ErrorKind kind, const std::string& m) -> void {
    throw Error(kind, std::string("rhoscan.") + op + ": " + m);
  };
  Backend id = resolve_backend(requested, device);
  const BackendImpl* backend = find_backend(id);
  if (backend == nullptr)
    fail(ErrorKind::backend_unavailable,
         std::string("backend ") + backend_name(id) + " is not compiled into this build");
  std::string why = backend->unavailable_reason();
  if (!why.empty())
    fail(ErrorKind::backend_unavailable,
         std::string("backend ") + backend_name(id) + " is not available: " + why);
  if (!backend->accepts(device)) {
    std::string takes;
    for (Device d : {Device::cpu, Device::cuda, Device::vulkan})
      if (backend->accepts(d)) takes += std::string(takes.empty() ? "" : " or ") + device_name(d);
    fail(ErrorKind::invalid_argument, std::string("the tensors are on ") + device_name(device) +
                                          " but backend " + backend_name(id) + " takes " + takes +
                                          " tensors");
  }
  return *backend;
}

ValidatedForward validate_forward(const ForwardArgs& a, const Options& options) {
  Validator check("forward");
  Core core = check_core(check, a.q, a.v, a.decay, false);
  const Problem& p0 = core.p;
  const int64_t B = p0.B, H = p0.H, T = p0.T, L = p0.L, E = p0.E;
  DType state_dtype = a.rho_out.dtype;
  if (a.rho) {
    check.check_view("rho", *a.rho, 4, 4);
    check.check_shape("rho", *a.rho, {B, H, L, E}, "[B, H, L, E]");
    state_dtype = a.rho->dtype;
  }
  if (a.rho_norm) {
    check.check_view("rho_norm", *a.rho_norm, 3, 3);
    check.check_shape("rho_norm", *a.rho_norm, {B, H, L}, "[B, H, L]");
  }
  check.check_view("context", a.context, 4, 4);
  check.check_shape("context", a.context, {B, H, T, E}, "[B, H, T, E]");
  check.check_dtype_data("context", a.context, p0.dtype, "q");
  check.check_view("rho_out", a.rho_out, 4, 4);
  check.check_shape("rho_out", a.rho_out, {B, H, L, E}, "[B, H, L, E]");
  check.check_view("rho_norm_out", a.rho_norm_out, 3, 3);
  check.check_shape("rho_norm_out", a.rho_norm_out, {B, H, L}, "[B, H, L]");
  if (a.rho) check.check_dtype_state("rho", *a.rho, state_dtype);
  if (a.rho_norm) check.check_dtype_state("rho_norm", *a.rho_norm, state_dtype);
  check.check_dtype_state("rho_out", a.rho_out, state_dtype);
  check.check_dtype_state("rho_norm_out", a.rho_norm_out, state_dtype);
  const bool saved_keys = a.saved && check_saved_view(check, *a.saved, p0, a.rho.has_value(), options);
  check.check_devices();
  for (auto [name, out] : {std::pair{"context", &a.context}, {"rho_out", &a.rho_out},
                           {"rho_norm_out", &a.rho_norm_out}})
    check.check_no_self_overlap(name, *out);
  if (a.saved) check.check_no_overlap("saved", *a.saved, {});
  check.check_no_overlap("context", a.context, {});
  check.check_no_overlap("rho_out", a.rho_out, {a.rho ? &*a.rho : nullptr});
  check.check_no_overlap("rho_norm_out", a.rho_norm_out, {a.rho_norm ? &*a.rho_norm : nullptr});

  ValidatedForward out;
  ForwardParams& f = out.params;
  f.p = core.p;
  f.p.state_dtype = state_dtype;
  const BackendImpl& backend = select_backend("forward", options.backend, f.p.device);
  check.check_memory(backend);
  check_supported(check, backend, f.p);
  if (options.chunk_size < 0) check.fail("options.chunk_size must be 0 (default) or positive");
  check_values(check, backend, options, f.deferred, "decay", &a.decay, BackendImpl::ValueRule::unit_interval);
  if (options.check_finite) {
    using R = BackendImpl::ValueRule;
    check_values(check, backend, options, f.deferred, "q", &a.q, R::finite);
    check_values(check, backend, options, f.deferred, "v", &a.v, R::finite);
    check_values(check, backend, options, f.deferred, "rho", a.rho ? &*a.rho : nullptr, R::finite);
    check_values(check, backend, options, f.deferred, "rho_norm", a.rho_norm ? &*a.rho_norm : nullptr, R::finite);
  }
  f.q = a.q.data;                 copy_strides(f.q_stride, a.q);
  f.v = a.v.data;                 copy_v_strides(f.v_stride, a.v);
  f.decay = a.decay.data;         f.decay_stride[0] = core.decay_stride[0]; f.decay_stride[1] = core.decay_stride[1];
  if (a.rho) { f.rho0 = a.rho->data; copy_strides(f.rho0_stride, *a.rho); }
  if (a.rho_norm) { f.rho_norm0 = a.rho_norm->data; copy_strides(f.rho_norm0_stride, *a.rho_norm); }
  f.context = a.context.data;     copy_strides(f.context_stride, a.context);
  f.rho = a.rho_out.data;         copy_strides(f.rho_stride, a.rho_out);
  f.rho_norm = a.rho_norm_out.data; copy_strides(f.rho_norm_stride, a.rho_norm_out);
  if (a.saved && a.saved->numel() > 0 && backend.reads_saved()) {
    f.saved = static_cast<float*>(a.saved->data);
    f.saved_keys = saved_keys;
  }
  f.options = options;
  out.backend = &backend;
  return out;
}

ValidatedBackward validate_backward(const BackwardArgs& a, const Options& options, bool cached_header) {
  Validator check("backward");
  Core core = check_core(check, a.q, a.v, a.decay, false);
  const Problem& p0 = core.p;
  const int64_t B = p0.B, H = p0.H, Hv = p0.Hv, T = p0.T, L = p0.L, E = p0.E;
  // The state dtype comes from the first state tensor present; float32 when there is none.
  std::optional<DType> state_dtype;
  auto state = [&](const char* name, const std::optional<TensorView>& t, bool norm) {
    if (!t) return;
    check.check_view(name, *t, norm ? 3 : 4, norm ? 3 : 4);
    if (norm) check.check_shape(name, *t, {B, H, L}, "[B, H, L]");
    else check.check_shape(name, *t, {B, H, L, E}, "[B, H, L, E]");
    if (!state_dtype) state_dtype = t->dtype;
    check.check_dtype_state(name, *t, *state_dtype);
  };
  state("rho", a.rho, false);
  state("rho_norm", a.rho_norm, true);
  state("grad_rho_out", a.grad_rho_out, false);
  state("grad_rho_norm_out", a.grad_rho_norm_out, true);
  state("grad_rho", a.grad_rho, false);
  state("grad_rho_norm", a.grad_rho_norm, true);
  check.check_view("grad_context", a.grad_context, 4, 4);
  check.check_shape("grad_context", a.grad_context, {B, H, T, E}, "[B, H, T, E]");
  check.check_dtype_data("grad_context", a.grad_context, p0.dtype, "q");
  check.check_view("grad_q", a.grad_q, 4, 4);
  check.check_shape("grad_q", a.grad_q, {B, H, T, L}, "[B, H, T, L]");
  check.check_dtype_data("grad_q", a.grad_q, p0.dtype, "q");
  check.check_view("grad_v", a.grad_v, 4, 4);
  check.check_shape("grad_v", a.grad_v, {B, Hv, T, E}, "[B, Hv, T, E]");
  check.check_dtype_data("grad_v", a.grad_v, p0.dtype, "q");
  check.check_view("grad_decay", a.grad_decay, 2, 3);
  {
    const TensorView& g = a.grad_decay;
    int off = g.rank - 2;
    if ((g.rank == 3 && g.shape[0] != 1) || g.shape[off] != H || g.shape[off + 1] != L)
      check.fail("grad_decay: expected shape [H, L] = [" + str(H) + ", " + str(L) +
                 "] or [1, H, L], got " + g.shape_string());
    check.check_dtype_data("grad_decay", g, p0.decay_dtype, "decay");
  }
  const bool saved_keys = a.saved && check_saved_view(check, *a.saved, p0, a.rho.has_value(), options);
  check.check_devices();
  std::vector<std::pair<const char*, const TensorView*>> outputs = {
      {"grad_q", &a.grad_q}, {"grad_v", &a.grad_v}, {"grad_decay", &a.grad_decay}};
  if (a.grad_rho) outputs.push_back({"grad_rho", &*a.grad_rho});
  if (a.grad_rho_norm) outputs.push_back({"grad_rho_norm", &*a.grad_rho_norm});
  for (auto [name, out] : outputs) {
    check.check_no_self_overlap(name, *out);
    check.check_no_overlap(name, *out, {});
  }

  ValidatedBackward out;
  BackwardParams& b = out.params;
  b.p = core.p;
  b.p.state_dtype = state_dtype.value_or(DType::float32);
  const BackendImpl& backend = select_backend("backward", options.backend, b.p.device);
  check.check_memory(backend);
  check_supported(check, backend, b.p);
  if (options.chunk_size < 0) check.fail("options.chunk_size must be 0 (default) or positive");
  check_values(check, backend, options, b.deferred, "decay", &a.decay, BackendImpl::ValueRule::unit_interval);
  if (options.check_finite) {
    using R = BackendImpl::ValueRule;
    auto opt = [](const std::optional<TensorView>& t) { return t ? &*t : nullptr; };
    check_values(check, backend, options, b.deferred, "q", &a.q, R::finite);
    check_values(check, backend, options, b.deferred, "v", &a.v, R::finite);
    check_values(check, backend, options, b.deferred, "rho", opt(a.rho), R::finite);
    check_values(check, backend, options, b.deferred, "rho_norm", opt(a.rho_norm), R::finite);
    check_values(check, backend, options, b.deferred, "grad_context", &a.grad_context, R::finite);
    check_values(check, backend, options, b.deferred, "grad_rho_out", opt(a.grad_rho_out), R::finite);
    check_values(check, backend, options, b.deferred, "grad_rho_norm_out", opt(a.grad_rho_norm_out), R::finite);
  }
  b.q = a.q.data;                 copy_strides(b.q_stride, a.q);
  b.v = a.v.data;                 copy_v_strides(b.v_stride, a.v);
  b.decay = a.decay.data;         b.decay_stride[0] = core.decay_stride[0]; b.decay_stride[1] = core.decay_stride[1];
  if (a.rho) { b.rho0 = a.rho->data; copy_strides(b.rho0_stride, *a.rho); }
  if (a.rho_norm) { b.rho_norm0 = a.rho_norm->data; copy_strides(b.rho_norm0_stride, *a.rho_norm); }
  b.grad_context = a.grad_context.data; copy_strides(b.grad_context_stride, a.grad_context);
  if (a.grad_rho_out) { b.grad_rho_out = a.grad_rho_out->data; copy_strides(b.grad_rho_out_stride, *a.grad_rho_out); }
  if (a.grad_rho_norm_out) {
    b.grad_rho_norm_out = a.grad_rho_norm_out->data;
    copy_strides(b.grad_rho_norm_out_stride, *a.grad_rho_norm_out);
  }
  b.grad_q = a.grad_q.data;       copy_strides(b.grad_q_stride, a.grad_q);
  b.grad_v = a.grad_v.data;       copy_strides(b.grad_v_stride, a.grad_v);
  {
    int off = a.grad_decay.rank - 2;
    b.grad_decay = a.grad_decay.data;
    b.grad_decay_stride[0] = a.grad_decay.strides[off];
    b.grad_decay_stride[1] = a.grad_decay.strides[off + 1];
  }
  if (a.grad_rho) { b.grad_rho0 = a.grad_rho->data; copy_strides(b.grad_rho0_stride, *a.grad_rho); }
  if (a.grad_rho_norm) { b.grad_rho_norm0 = a.grad_rho_norm->data; copy_strides(b.grad_rho_norm0_stride, *a.grad_rho_norm); }
  if (a.saved && a.saved->numel() > 0 && backend.reads_saved()) {
    // A header the backend remembers from its forward is checked now and compared with the
    // device's later (deferred, in stream order: no wait here); otherwise read back now.
    // (a cached header that would fail the checks is read back: the error must be the device's)
    std::optional<SavedHeader> header;
    if (cached_header && backend.defers_value_checks()) header = backend.cached_saved_header(*a.saved);
    if (header && !saved_header_matches(*header, b.p, a.rho_norm.has_value(), options)) header.reset();
    if (header) {
      DeferredCheck d;
      d.kind = DeferredCheck::Kind::saved_header;
      d.view = *a.saved;
      d.header = *header;
      b.deferred.push_back(std::move(d));
    } else {
      header = backend.saved_header(*a.saved, options);
    }
    b.saved_filled = check_saved_header(check, *header, b.p, a.rho_norm.has_value(), options);
    b.saved = static_cast<const float*>(a.saved->data);
    b.saved_keys = saved_keys;
  }
  b.options = options;
  out.backend = &backend;
  return out;
}

ValidatedStep validate_step(const StepArgs& a, const Options& options) {
  Validator check("step");
  Core core = check_core(check, a.q, a.v, a.decay, true);
  const int64_t B = core.p.B, H = core.p.H, L = core.p.L, E = core.p.E;
  check.check_view("rho", a.rho, 4, 4);
  check.check_shape("rho", a.rho, {B, H, L, E}, "[B, H, L, E]");
  check.check_view("rho_norm", a.rho_norm, 3, 3);
  check.check_shape("rho_norm", a.rho_norm, {B, H, L}, "[B, H, L]");
  check.check_dtype_state("rho", a.rho, a.rho.dtype);
  check.check_dtype_state("rho_norm", a.rho_norm, a.rho.dtype);
  check.check_view("context", a.context, 3, 3);
  check.check_shape("context", a.context, {B, H, E}, "[B, H, E]");
  check.check_dtype_data("context", a.context, core.p.dtype, "q");
  check.check_devices();
  for (auto [name, out] : {std::pair{"context", &a.context}, {"rho", &a.rho}, {"rho_norm", &a.rho_norm}}) {
    check.check_no_self_overlap(name, *out);
    check.check_no_overlap(name, *out, {});
  }

  ValidatedStep out;
  StepParams& s = out.params;
  s.p = core.p;
  s.p.state_dtype = a.rho.dtype;
  const BackendImpl& backend = select_backend("step", options.backend, s.p.device);
  check.check_memory(backend);
  check_supported(check, backend, s.p);
  check_values(check, backend, options, s.deferred, "decay", &a.decay, BackendImpl::ValueRule::unit_interval);
  if (options.check_finite) {
    using R = BackendImpl::ValueRule;
    check_values(check, backend, options, s.deferred, "q", &a.q, R::finite);
    check_values(check, backend, options, s.deferred, "v", &a.v, R::finite);
    check_values(check, backend, options, s.deferred, "rho", &a.rho, R::finite);
    check_values(check, backend, options, s.deferred, "rho_norm", &a.rho_norm, R::finite);
  }
  s.q = a.q.data;               copy_strides(s.q_stride, a.q);
  s.v = a.v.data;               copy_strides(s.v_stride, a.v);
  if (a.v.shape[1] == 1) s.v_stride[1] = 0;
  s.decay = a.decay.data;       s.decay_stride[0] = core.decay_stride[0]; s.decay_stride[1] = core.decay_stride[1];
  s.rho = a.rho.data;           copy_strides(s.rho_stride, a.rho);
  s.rho_norm = a.rho_norm.data; copy_strides(s.rho_norm_stride, a.rho_norm);
  s.context = a.context.data;   copy_strides(s.context_stride, a.context);
  s.options = options;
  out.backend = &backend;
  return out;
}

}  // namespace rhoscan::detail
