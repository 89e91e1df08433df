// TensorView helpers and the name tables of the public enums.
#include <string>

#include "rhoscan/rhoscan.h"

namespace rhoscan {

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::float64: return "float64";
    case DType::float32: return "float32";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
  }
  return "unknown-dtype";
}

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::float64: return 8;
    case DType::float32: return 4;
    case DType::bfloat16:
    case DType::float16: return 2;
  }
  return 0;
}

const char* device_name(Device device) noexcept {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
    case Device::vulkan: return "vulkan";
  }
  return "unknown-device";
}

static TensorView make_contiguous(void* data, DType dtype, const int64_t* shape, int rank,
                                  Device device, int device_index) {
  if (rank < 0 || rank > kMaxRank)
    throw Error(ErrorKind::invalid_argument,
                "TensorView: rank " + std::to_string(rank) + " is above the maximum of " +
                    std::to_string(kMaxRank));
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.device_index = device_index;
  view.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    view.shape[i] = shape[i];
    view.strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  return view;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device, int device_index) {
  return make_contiguous(data, dtype, shape.begin(), static_cast<int>(shape.size()), device,
                         device_index);
}

TensorView TensorView::contiguous(void* data, DType dtype, const std::vector<int64_t>& shape,
                                  Device device, int device_index) {
  return make_contiguous(data, dtype, shape.data(), static_cast<int>(shape.size()), device,
                         device_index);
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device,
                               int device_index) {
  if (shape.size() != strides.size())
    throw Error(ErrorKind::invalid_argument,
                "TensorView::strided: " + std::to_string(shape.size()) + " sizes but " +
                    std::to_string(strides.size()) + " strides");
  TensorView view = make_contiguous(data, dtype, shape.begin(), static_cast<int>(shape.size()),
                                    device, device_index);
  int i = 0;
  for (int64_t s : strides) view.strides[i++] = s;
  return view;
}

TensorView TensorView::permuted(std::initializer_list<int> order) const {
  if (static_cast<int>(order.size()) != rank)
    throw Error(ErrorKind::invalid_argument,
                "TensorView::permuted: " + std::to_string(order.size()) +
                    " indices for a tensor of rank " + std::to_string(rank));
  TensorView out = *this;
  bool seen[kMaxRank] = {};
  int i = 0;
  for (int d : order) {
    if (d < 0 || d >= rank || seen[d])
      throw Error(ErrorKind::invalid_argument,
                  "TensorView::permuted: the order is not a permutation of 0.." +
                      std::to_string(rank - 1));
    seen[d] = true;
    out.shape[i] = shape[d];
    out.strides[i] = strides[d];
    ++i;
  }
  return out;
}

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* backend_name(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic: return "auto";
    case Backend::reference: return "reference";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::vulkan: return "vulkan";
  }
  return "unknown-backend";
}

Backend parse_backend(const std::string& name) {
  if (name == "auto" || name == "automatic") return Backend::automatic;
  if (name == "reference") return Backend::reference;
  if (name == "cpu" || name == "fast") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  if (name == "vulkan") return Backend::vulkan;
  throw Error(ErrorKind::invalid_argument,
              "unknown backend '" + name + "' (expected auto, reference, cpu, fast, cuda or vulkan)");
}

}  // namespace rhoscan
