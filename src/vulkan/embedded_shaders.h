// The SPIR-V modules compiled from src/vulkan/shaders/*.comp at build time (embed_spirv.cmake).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rhoscan::vulkan {

struct EmbeddedShader {
  const char* name;  // the .comp file's stem
  const uint32_t* words;
  std::size_t word_count;
};

const std::vector<EmbeddedShader>& embedded_shaders();

}  // namespace rhoscan::vulkan
