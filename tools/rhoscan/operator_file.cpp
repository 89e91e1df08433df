#include "operator_file.h"

#include <cstring>
#include <memory>

#include "core/dtype.h"

#ifdef RHOSCAN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rhoscan::cli {
namespace {

using io::StoredTensor;

[[noreturn]] void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StoredTensor converted(const StoredTensor& t, DType dtype) {
  if (t.dtype == dtype) return t;
  StoredTensor out;
  out.name = t.name;
  out.dtype = dtype;
  out.shape = t.shape;
  const int64_t n = t.numel();
  out.bytes.resize(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i)
    detail::store_from_double(out.bytes.data(), dtype, i, detail::load_as_double(t.bytes.data(), t.dtype, i));
  return out;
}

}  // namespace

// Sizes come from a user's file: the byte count is checked for overflow.
StoredTensor zero_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, d, &bytes))
      fail(ErrorKind::invalid_argument, "output " + name + " of shape " + shape_string(shape) + " is too large to allocate");
  StoredTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape;
  t.bytes.assign(static_cast<size_t>(bytes), 0);
  return t;
}

std::vector<double> tensor_values(const StoredTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = detail::load_as_double(t.bytes.data(), t.dtype, static_cast<int64_t>(i));
  return out;
}

void set_value(StoredTensor& t, int64_t i, double value) {
  detail::store_from_double(t.bytes.data(), t.dtype, i, value);
}

namespace {

DType at_least_float32(DType d) { return d == DType::float64 ? DType::float64 : DType::float32; }

const char* const kInputNames[] = {"q", "v", "decay", "rho", "rho_norm", "grad_context", "grad_rho", "grad_rho_norm"};

}  // namespace

const char* layout_name(Layout layout) { return layout == Layout::bthl ? "bthl" : "bhtl"; }

Layout parse_layout(const std::string& name) {
  if (name == "bhtl") return Layout::bhtl;
  if (name == "bthl") return Layout::bthl;
  throw Error(ErrorKind::invalid_argument, "layout must be bhtl or bthl, got '" + name + "'");
}

OperatorInputs load_operator_inputs(const io::SafetensorsFile& file, const std::string& label_raw,
                                    std::optional<Layout> layout) {
  const std::string label = io::printable(label_raw);  // one-line messages whatever the path
  OperatorInputs in;
  auto meta = file.metadata.find("layout");
  if (meta != file.metadata.end()) {
    Layout from_file = parse_layout(meta->second);
    if (layout && *layout != from_file)
      fail(ErrorKind::invalid_argument, label + ": --layout " + layout_name(*layout) +
                                            " contradicts the file's metadata layout " + layout_name(from_file));
    layout = from_file;
  }
  in.layout = layout.value_or(Layout::bhtl);
  const bool bthl = in.layout == Layout::bthl;

  for (const StoredTensor& t : file.tensors) {
    bool known = false;
    for (const char* n : kInputNames) known = known || t.name == n;
    if (!known)
      fail(ErrorKind::io, label + ": unknown tensor '" + io::printable(t.name) +
                              "' (inputs are q, v, decay, rho, rho_norm, grad_context, grad_rho, grad_rho_norm)");
  }
  // Names are plain ASCII by now (they matched a known name), so messages stay one line.
  auto ranked = [&](const char* name, size_t rank_lo, size_t rank_hi, const char* symbolic) -> const StoredTensor* {
    const StoredTensor* t = file.find(name);
    if (t != nullptr && (t->shape.size() < rank_lo || t->shape.size() > rank_hi))
      fail(ErrorKind::io, label + ": tensor '" + name + "' has shape " + shape_string(t->shape) +
                              "; expected " + symbolic);
    return t;
  };
  const char* seq_q = bthl ? "rank 4, [B, T, H, L]" : "rank 4, [B, H, T, L]";
  const char* seq_v = bthl ? "rank 4, [B, T, Hv, E]" : "rank 4, [B, Hv, T, E]";
  const char* seq_c = bthl ? "rank 4, [B, T, H, E]" : "rank 4, [B, H, T, E]";
  for (const char* required : {"q", "v", "decay"}) file.get(required, label);
  in.q = *ranked("q", 4, 4, seq_q);
  in.v = *ranked("v", 4, 4, seq_v);
  const StoredTensor* decay = ranked("decay", 2, 3, "rank 2 or 3, [H, L] or [1, H, L]");
  const StoredTensor* rho = ranked("rho", 4, 4, "rank 4, [B, H, L, E]");
  const StoredTensor* rho_norm = ranked("rho_norm", 3, 3, "rank 3, [B, H, L]");
  const StoredTensor* grad_context = ranked("grad_context", 4, 4, seq_c);
  const StoredTensor* grad_rho = ranked("grad_rho", 4, 4, "rank 4, [B, H, L, E]");
  const StoredTensor* grad_rho_norm = ranked("grad_rho_norm", 3, 3, "rank 3, [B, H, L]");
  if ((grad_rho || grad_rho_norm) && !grad_context)
    fail(ErrorKind::invalid_argument,
         label + ": grad_rho / grad_rho_norm (gradients of the final state) need grad_context");

  const int t_dim = bthl ? 1 : 2, h_dim = bthl ? 2 : 1;
  in.B = in.q.shape[0];
  in.H = in.q.shape[h_dim];
  in.T = in.q.shape[t_dim];
  in.L = in.q.shape[3];
  in.Hv = in.v.shape[h_dim];
  in.E = in.v.shape[3];
  // Checked here, before outputs sized from q and v are allocated; the library checks the rest.
  if (in.v.shape[0] != in.B || in.v.shape[t_dim] != in.T || (in.Hv != 1 && in.Hv != in.H))
    fail(ErrorKind::invalid_argument,
         label + ": v has shape " + shape_string(in.v.shape) + " but q has shape " + shape_string(in.q.shape) +
             "; v must be " + (bthl ? "[B, T, Hv, E]" : "[B, Hv, T, E]") + " with the same B and T and Hv = 1 or H");

  bool any_f64 = in.q.dtype == DType::float64;
  for (const StoredTensor* s : {rho, rho_norm, grad_rho, grad_rho_norm})
    any_f64 = any_f64 || (s && s->dtype == DType::float64);
  in.state_dtype = any_f64 ? DType::float64 : DType::float32;
  in.decay = converted(*decay, at_least_float32(decay->dtype));
  auto state = [&](const StoredTensor* t) -> std::optional<StoredTensor> {
    if (!t) return std::nullopt;
    return converted(*t, in.state_dtype);
  };
  in.rho = state(rho);
  in.rho_norm = state(rho_norm);
  in.grad_rho = state(grad_rho);
  in.grad_rho_norm = state(grad_rho_norm);
  if (grad_context) in.grad_context = *grad_context;
  return in;
}

OperatorInputs OperatorInputs::as_float64() const {
  OperatorInputs out = *this;
  auto to64 = [](StoredTensor& t) { t = converted(t, DType::float64); };
  to64(out.q);
  to64(out.v);
  to64(out.decay);
  for (auto* t : {&out.rho, &out.rho_norm, &out.grad_context, &out.grad_rho, &out.grad_rho_norm})
    if (*t) to64(**t);
  out.state_dtype = DType::float64;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Placement

std::string Placement::description() const {
  std::string where = device == Device::cuda ? "cuda:" + std::to_string(device_index) : "host tensors";
  return std::string("backend ") + backend_name(resolve_backend(backend, device)) + " on " + where;
}

Placement resolve_placement(const std::string& device, const std::string& backend, std::optional<DType> dtype) {
  Placement p;
  p.backend = parse_backend(backend);
  auto bad = [](const std::string& m) { fail(ErrorKind::invalid_argument, m); };
  std::string d = device;
  if (d == "auto") {
    if (p.backend == Backend::cuda) d = "cuda";
    else if (p.backend != Backend::automatic) d = "cpu";
    else {
#ifdef RHOSCAN_HAVE_CUDA
      d = backend_unavailable_reason(Backend::cuda).empty() && dtype != DType::float64 ? "cuda" : "cpu";
#else
      d = "cpu";
#endif
    }
  }
  if (d == "cpu") {
    p.device = Device::cpu;
  } else if (d == "vulkan") {
    if (p.backend != Backend::automatic && p.backend != Backend::vulkan)
      bad(std::string("--device vulkan runs the vulkan backend; it contradicts --backend ") + backend_name(p.backend));
    p.device = Device::cpu;  // the Vulkan backend takes host tensors and moves them itself
    p.backend = Backend::vulkan;
  } else if (d == "cuda" || d.rfind("cuda:", 0) == 0) {
#ifndef RHOSCAN_HAVE_CUDA
    fail(ErrorKind::backend_unavailable,
         "--device cuda: this rhoscan was built without the CUDA backend (configure with nvcc found)");
#else
    p.device = Device::cuda;
    if (d.size() > 5) {
      std::string n = d.substr(5);
      if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
        bad("--device: expected cuda:N, got '" + d + "'");
      p.device_index = std::stoi(n);
    }
    if (p.backend != Backend::automatic && p.backend != Backend::cuda)
      bad(std::string("--device cuda needs the cuda backend, not --backend ") + backend_name(p.backend));
#endif
  } else {
    bad("--device must be cpu, cuda, cuda:N, vulkan or auto, got '" + device + "'");
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Running

const StoredTensor* OperatorOutputs::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<io::NamedView> OperatorOutputs::named_views() const {
  std::vector<io::NamedView> out;
  for (const auto& t : tensors) out.push_back({t.name, t.view()});
  return out;
}

namespace {

#ifdef RHOSCAN_HAVE_CUDA
void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    fail(rc == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::backend_unavailable,
         std::string("CUDA ") + what + ": " + cudaGetErrorString(rc));
}

// Device copies of host tensors, freed on destruction.
class CudaMirror {
 public:
  explicit CudaMirror(int device) : device_(device) { cuda_check(cudaSetDevice(device), "cudaSetDevice"); }
  CudaMirror(const CudaMirror&) = delete;
  CudaMirror& operator=(const CudaMirror&) = delete;
  ~CudaMirror() {
    for (void* p : buffers_) cudaFree(p);
  }
  // The same view (shape, strides) over a device copy of `t`'s bytes.
  TensorView upload(const StoredTensor& t, TensorView host) {
    void* d = nullptr;
    if (!t.bytes.empty()) {
      cuda_check(cudaMalloc(&d, t.bytes.size()), "cudaMalloc");
      buffers_.push_back(d);
      cuda_check(cudaMemcpy(d, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    }
    host.data = d;
    host.device = Device::cuda;
    host.device_index = device_;
    return host;
  }
  void download(StoredTensor& t, const TensorView& dev) {
    if (!t.bytes.empty())
      cuda_check(cudaMemcpy(t.bytes.data(), dev.data, t.bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  }

 private:
  int device_;
  std::vector<void*> buffers_;
};
#endif

}  // namespace

OperatorOutputs run_operator(const OperatorInputs& in, const Placement& placement, Options options) {
  options.backend = placement.backend;
  const bool bthl = in.layout == Layout::bthl;
  const int64_t B = in.B, H = in.H, T = in.T, L = in.L, E = in.E;
  auto seq_shape = [&](int64_t heads, int64_t last) {
    return bthl ? std::vector<int64_t>{B, T, heads, last} : std::vector<int64_t>{B, heads, T, last};
  };
  const DType data = in.q.dtype, state = in.state_dtype;

  OperatorOutputs out;
  out.tensors.push_back(zero_tensor("context", data, seq_shape(H, E)));
  out.tensors.push_back(zero_tensor("rho", state, {B, H, L, E}));
  out.tensors.push_back(zero_tensor("rho_norm", state, {B, H, L}));
  if (in.has_gradients()) {
    out.tensors.push_back(zero_tensor("grad_q", data, in.q.shape));
    out.tensors.push_back(zero_tensor("grad_v", data, in.v.shape));
    out.tensors.push_back(zero_tensor("grad_decay", in.decay.dtype, in.decay.shape));
    out.tensors.push_back(zero_tensor("grad_rho", state, {B, H, L, E}));
    out.tensors.push_back(zero_tensor("grad_rho_norm", state, {B, H, L}));
  }

  // Logical views ([B, H, T, *] order whatever the storage order) of host memory.
  auto host_view = [&](const StoredTensor& t, bool sequence) {
    TensorView v = t.view();
    return sequence && bthl ? v.permuted({0, 2, 1, 3}) : v;
  };
  std::vector<TensorView> out_views;
  for (const auto& t : out.tensors) {
    bool sequence = t.name == "context" || t.name == "grad_q" || t.name == "grad_v";
    out_views.push_back(host_view(t, sequence));
  }

#ifdef RHOSCAN_HAVE_CUDA
  std::unique_ptr<CudaMirror> mirror;
  if (placement.device == Device::cuda) mirror = std::make_unique<CudaMirror>(placement.device_index);
#endif
  auto input = [&](const StoredTensor& t, bool sequence) {
    TensorView v = host_view(t, sequence);
#ifdef RHOSCAN_HAVE_CUDA
    if (mirror) v = mirror->upload(t, v);
#endif
    return v;
  };
  auto optional_input = [&](const std::optional<StoredTensor>& t) -> std::optional<TensorView> {
    if (!t) return std::nullopt;
    return input(*t, false);
  };
#ifdef RHOSCAN_HAVE_CUDA
  if (mirror)
    for (size_t i = 0; i < out.tensors.size(); ++i) out_views[i] = mirror->upload(out.tensors[i], out_views[i]);
#endif

  ForwardArgs f;
  f.q = input(in.q, true);
  f.v = input(in.v, true);
  f.decay = input(in.decay, false);
  f.rho = optional_input(in.rho);
  f.rho_norm = optional_input(in.rho_norm);
  f.context = out_views[0];
  f.rho_out = out_views[1];
  f.rho_norm_out = out_views[2];
  forward(f, options);

  if (in.has_gradients()) {
    BackwardArgs b;
    b.q = f.q;
    b.v = f.v;
    b.decay = f.decay;
    b.rho = f.rho;
    b.rho_norm = f.rho_norm;
    b.grad_context = input(*in.grad_context, true);
    b.grad_rho_out = optional_input(in.grad_rho);
    b.grad_rho_norm_out = optional_input(in.grad_rho_norm);
    b.grad_q = out_views[3];
    b.grad_v = out_views[4];
    b.grad_decay = out_views[5];
    b.grad_rho = out_views[6];
    b.grad_rho_norm = out_views[7];
    backward(b, options);
  }

#ifdef RHOSCAN_HAVE_CUDA
  if (mirror)
    for (size_t i = 0; i < out.tensors.size(); ++i) mirror->download(out.tensors[i], out_views[i]);
#endif
  return out;
}

}  // namespace rhoscan::cli
