// rhoscan: the rho-attention operator (decayed, normalised linear attention) of BDH.
//
// The contract is SPEC.md; this header is its C++ form. Every entry point validates all of its
// inputs before it writes anything and throws rhoscan::Error with a message that names the
// argument and the shapes it saw.
//
// Shapes (logical; any strides, in elements, so [B,T,H,L] storage is a permuted view):
//   q        [B, H, T, L]     v        [B, Hv, T, E]  (Hv = 1 or H)
//   decay    [H, L] or [1, H, L]
//   rho      [B, H, L, E]     rho_norm [B, H, L]      context [B, H, T, E]
// q, v, context and their gradients share one dtype (float64, float32, bfloat16, float16).
// decay and its gradient share one dtype, float32 or float64. Every state tensor (initial,
// final, and their gradients) shares one dtype, float32 or float64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rhoscan {

// ---------------------------------------------------------------------------------------------
// Errors

enum class ErrorKind : int {
  invalid_argument,     // a shape, dtype, stride, value or device that the contract rejects
  unsupported,          // valid input that the chosen backend cannot run (dtype, size)
  backend_unavailable,  // backend not compiled in, no device, no driver
  out_of_memory,        // workspace could not be allocated
  io,                   // file reading / writing (the CLI and safetensors reader)
  internal,             // a failed kernel launch or a bug: please report
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

// ---------------------------------------------------------------------------------------------
// Tensor views (non-owning)

enum class DType : int { float64 = 0, float32 = 1, bfloat16 = 2, float16 = 3 };
// Where a tensor's memory lives. The Vulkan backend takes host (cpu) tensors, which it moves to
// its device itself, and device-resident ones (vulkan: memory of a rhoscan::VulkanBuffer,
// <rhoscan/vulkan.h>), which it uses in place.
enum class Device : int { cpu = 0, cuda = 1, vulkan = 2 };

const char* dtype_name(DType dtype) noexcept;    // "float64", "float32", "bfloat16", "float16"
std::size_t dtype_size(DType dtype) noexcept;    // bytes per element
const char* device_name(Device device) noexcept; // "cpu", "cuda", "vulkan"

inline constexpr int kMaxRank = 5;

struct TensorView {
  void* data = nullptr;  // may be null only when numel() == 0
  DType dtype = DType::float32;
  Device device = Device::cpu;
  int device_index = 0;  // CUDA ordinal; ignored on the CPU
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // in elements, may be any non-negative values

  // A row-major (C-contiguous) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu, int device_index = 0);
  static TensorView contiguous(void* data, DType dtype, const std::vector<int64_t>& shape,
                               Device device = Device::cpu, int device_index = 0);
  // A view with explicit strides (in elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, Device device = Device::cpu,
                            int device_index = 0);
  // The same memory with dimensions reordered: result.shape[i] = shape[order[i]].
  // Example: a contiguous [B,T,H,L] buffer viewed as [B,H,T,L] is .permuted({0, 2, 1, 3}).
  TensorView permuted(std::initializer_list<int> order) const;

  int64_t numel() const noexcept;
  std::string shape_string() const;  // "[2, 4, 16, 64]"
};

// ---------------------------------------------------------------------------------------------
// Options

enum class Backend : int {
  automatic = 0,  // the fastest compiled-in backend for the tensors' device
  reference = 1,  // CPU, float64 arithmetic, evaluates SPEC.md step by step (the oracle)
  cpu = 2,        // CPU, chunked, multi-threaded
  cuda = 3,       // NVIDIA GPUs
  vulkan = 4,     // any Vulkan 1.1 GPU (and Mesa's lavapipe); host or vulkan tensors
};

const char* backend_name(Backend backend) noexcept;  // "auto", "reference", "cpu", "cuda", "vulkan"
// Parses the names above ("fast" is accepted for "cpu"); throws Error(invalid_argument).
Backend parse_backend(const std::string& name);
// The backends compiled into this build whose runtime requirements (device, driver) are met.
std::vector<Backend> available_backends();
// Why a backend is not available ("" when it is).
std::string backend_unavailable_reason(Backend backend);

struct Options {
  Backend backend = Backend::automatic;
  int64_t chunk_size = 0;        // 0: the backend's default; otherwise >= 1
  bool check_finite = false;     // reject NaN / Inf in q, v, states, upstream gradients (a pass)
  bool deterministic = true;     // bitwise-reproducible gradients (no order-varying atomics)
  bool allow_tf32 = false;       // reserved: CUDA float32 on TF32 tensor cores (ignored today)
  int num_threads = 0;           // CPU backends: 0 = all hardware threads
  int64_t max_workspace_bytes = 0;  // device workspace cap; 0 = backend default (docs/API.md)
  void* stream = nullptr;        // CUDA: a cudaStream_t to run on (null: the default stream)
};

inline constexpr double kEps = 1e-6;

// ---------------------------------------------------------------------------------------------
// Operations. Outputs are written, never allocated; every output must be on the inputs' device.
// A final-state output may be the same view as the matching initial state (in-place update);
// any other overlap between an output and another tensor is an error.

struct ForwardArgs {
  TensorView q, v, decay;
  std::optional<TensorView> rho, rho_norm;  // initial state; zeros when absent
  TensorView context;                       // out [B, H, T, E]
  TensorView rho_out, rho_norm_out;         // out: final state [B,H,L,E], [B,H,L]
  // Optional out: what the backward would recompute (float32, contiguous, [saved_numel(...)]).
  // The CUDA backend fills it; the other backends leave it as it is. Pass it to the backward of
  // the same q, decay and rho_norm (BackwardArgs::saved).
  std::optional<TensorView> saved;
};

struct BackwardArgs {
  // The forward's inputs (the backward recomputes what it needs from them).
  TensorView q, v, decay;
  std::optional<TensorView> rho, rho_norm;
  // Upstream gradients: dLoss/dcontext and, optionally, dLoss/d(final rho), dLoss/d(final rho_norm).
  TensorView grad_context;
  std::optional<TensorView> grad_rho_out, grad_rho_norm_out;
  // Outputs: gradients of q [B,H,T,L], v [B,Hv,T,E] (summed over heads when Hv = 1), decay
  // (shape of decay), and, when given, of the initial states (defined even if no initial state
  // was passed: the gradient with respect to a zero initial state).
  TensorView grad_q, grad_v, grad_decay;
  std::optional<TensorView> grad_rho, grad_rho_norm;
  // Optional in: the `saved` buffer a CUDA forward of the same q, decay and rho_norm filled. The
  // CUDA backward checks its header (shapes, chunk, dtype, initial rho_norm) and then uses what it
  // holds instead of recomputing it; the other backends ignore it. Its values cannot be checked:
  // a buffer from another forward gives wrong gradients.
  std::optional<TensorView> saved;
};

struct StepArgs {
  TensorView q;         // [B, H, L]
  TensorView v;         // [B, Hv, E]
  TensorView decay;     // [H, L] or [1, H, L]
  TensorView rho;       // [B, H, L, E] state, updated in place
  TensorView rho_norm;  // [B, H, L]   state, updated in place
  TensorView context;   // out [B, H, E]: the read of the state before this token
};

// The float32 element count of ForwardArgs::saved for q [B, H, T, L] of `dtype`, with or without an
// initial rho, at options.chunk_size `chunk_size` (0: the default). A function of the shapes
// only (docs/API.md, "Saved for the backward"): 0 when there is nothing to save (B·H·T = 0).
// with_keys: also room for the normalised keys (16-bit q where the intra-chunk scores are saved:
// twice q's bytes more), so that the CUDA backward skips its normaliser pass; a buffer of either
// length is accepted, and its length says which it is.
int64_t saved_numel(int64_t B, int64_t H, int64_t T, int64_t L, DType dtype, bool has_rho, int64_t chunk_size = 0,
                    bool with_keys = false);

void forward(const ForwardArgs& args, const Options& options = {});
void backward(const BackwardArgs& args, const Options& options = {});
void step(const StepArgs& args, const Options& options = {});

// The backend `automatic` resolves to for tensors on `device`.
Backend resolve_backend(Backend requested, Device device);

const char* version() noexcept;

}  // namespace rhoscan
