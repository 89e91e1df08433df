#include "checkpoint.h"

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "io/safetensors.h"

namespace bdh {
namespace {

// A CPU float32 contiguous copy that stays alive while its view is written.
struct HostCopy {
  std::string name;
  torch::Tensor tensor;
};

torch::Tensor to_host(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
}

}  // namespace

void save_checkpoint(const std::string& path, Model& model, const AdamW* optimizer,
                     std::map<std::string, std::string> metadata) {
  std::vector<HostCopy> copies;
  for (const auto& item : model->named_parameters())
    copies.push_back({"model." + item.key(), to_host(item.value())});
  if (optimizer) {
    for (const auto& s : optimizer->slots) {
      copies.push_back({"adamw." + s.name + ".exp_avg", to_host(s.exp_avg)});
      copies.push_back({"adamw." + s.name + ".exp_avg_sq", to_host(s.exp_avg_sq)});
    }
    metadata["adamw.steps"] = std::to_string(optimizer->steps);
  }
  for (const auto& [key, value] : model->config.to_metadata()) metadata[key] = value;
  std::vector<rhoscan::io::NamedView> views;
  for (auto& c : copies) {
    std::vector<int64_t> shape(c.tensor.sizes().begin(), c.tensor.sizes().end());
    views.push_back({c.name, rhoscan::TensorView::contiguous(c.tensor.data_ptr(),
                                                             rhoscan::DType::float32, shape)});
  }
  rhoscan::io::write_safetensors(path, views, metadata);
}

LoadedCheckpoint read_checkpoint(const std::string& path) {
  auto file = rhoscan::io::read_safetensors(path);
  LoadedCheckpoint out;
  out.metadata = file.metadata;
  out.config = Config::from_metadata(file.metadata, path);
  for (const auto& t : file.tensors) {
    if (t.dtype != rhoscan::DType::float32)
      throw std::runtime_error(path + ": tensor '" + t.name + "' is " +
                               rhoscan::dtype_name(t.dtype) + ", expected float32");
    auto tensor = torch::empty(t.shape, torch::kFloat32);
    if (!t.bytes.empty()) std::memcpy(tensor.data_ptr(), t.bytes.data(), t.bytes.size());
    out.tensors[t.name] = tensor;
  }
  return out;
}

namespace {

const torch::Tensor& find_tensor(const LoadedCheckpoint& checkpoint, const std::string& name,
                                 const torch::Tensor& like, const std::string& label) {
  auto it = checkpoint.tensors.find(name);
  if (it == checkpoint.tensors.end())
    throw std::runtime_error(label + ": missing tensor '" + name + "'");
  if (!it->second.sizes().equals(like.sizes())) {
    std::ostringstream s;
    s << label << ": tensor '" << name << "' has shape " << it->second.sizes() << ", expected "
      << like.sizes();
    throw std::runtime_error(s.str());
  }
  return it->second;
}

}  // namespace

void load_model(const LoadedCheckpoint& checkpoint, Model& model, const std::string& label) {
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters())
    item.value().copy_(find_tensor(checkpoint, "model." + item.key(), item.value(), label));
}

bool load_optimizer(const LoadedCheckpoint& checkpoint, AdamW& optimizer,
                    const std::string& label) {
  auto it = checkpoint.metadata.find("adamw.steps");
  if (it == checkpoint.metadata.end()) return false;
  torch::NoGradGuard no_grad;
  for (auto& s : optimizer.slots) {
    s.exp_avg.copy_(find_tensor(checkpoint, "adamw." + s.name + ".exp_avg", s.exp_avg, label));
    s.exp_avg_sq.copy_(
        find_tensor(checkpoint, "adamw." + s.name + ".exp_avg_sq", s.exp_avg_sq, label));
  }
  optimizer.steps = std::stoll(it->second);
  return true;
}

}  // namespace bdh
