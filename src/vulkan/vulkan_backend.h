// Internal hooks of the Vulkan backend for the benchmark (bench/vulkan_bench.cpp); not public API.
#pragma once

#include <string>

namespace rhoscan::vulkan {

// Device time (GPU timestamps, milliseconds) of the last forward / backward / step call,
// uploads and downloads included, host packing excluded; 0 when the device has no timestamps.
double last_device_ms();
// The part of last_device_ms() spent in the compute kernels (after the uploads, before the
// downloads): what a backend whose tensors already live on the device would take.
double last_kernel_ms();
// Bytes of device and staging memory the last call allocated (its peak: all are held together).
unsigned long long last_device_bytes();
// The device the backend runs on, e.g. "NVIDIA H200 (discrete GPU, Vulkan 1.3)".
std::string device_description();

}  // namespace rhoscan::vulkan
