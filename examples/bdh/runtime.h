// Device and thread selection shared by the subcommands.
#pragma once

#include <stdexcept>
#include <string>
#include <thread>

#include <torch/torch.h>

namespace bdh {

// "auto": CUDA when libtorch sees a GPU, else the CPU.
inline torch::Device pick_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda" || name == "auto") {
    if (torch::cuda::is_available()) return torch::Device(torch::kCUDA, 0);
    if (name == "cuda")
      throw std::invalid_argument("--device cuda: libtorch sees no CUDA device");
    return torch::kCPU;
  }
  throw std::invalid_argument("--device: expected auto, cpu or cuda, got '" + name + "'");
}

// 0: every hardware thread (Debian's libtorch starts with one).
inline void set_threads(int64_t threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(threads));
}

}  // namespace bdh
