// BDH checkpoints as safetensors files (rhoscan::io): the model's parameters ("model.NAME"),
// the optimizer's moments ("adamw.NAME.exp_avg", "adamw.NAME.exp_avg_sq"), and metadata: the
// model configuration ("bdh.*"), the training step and anything the trainer adds.
#pragma once

#include <map>
#include <string>

#include "adamw.h"
#include "model.h"

namespace bdh {

void save_checkpoint(const std::string& path, Model& model, const AdamW* optimizer,
                     std::map<std::string, std::string> metadata);

struct LoadedCheckpoint {
  Config config;
  std::map<std::string, std::string> metadata;
  std::map<std::string, torch::Tensor> tensors;  // CPU float32, by stored name
};

LoadedCheckpoint read_checkpoint(const std::string& path);

// Copies "model.*" into the model's parameters (on whatever device they live); every
// parameter must be present with its exact shape.
void load_model(const LoadedCheckpoint& checkpoint, Model& model, const std::string& label);
// Restores the optimizer's moments and step count; false when the file has no optimizer state.
bool load_optimizer(const LoadedCheckpoint& checkpoint, AdamW& optimizer, const std::string& label);

}  // namespace bdh
