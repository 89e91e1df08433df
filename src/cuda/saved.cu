// The forward's saved buffer on the device (core/saved.h): its header, written by the forward on
// the caller's stream, and read back by validation before a backward uses the buffer.
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/ops.h"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {
namespace {

// The header travels as a kernel argument, so the write is ordered on the stream like the
// sections' kernels (no host buffer that must outlive an asynchronous copy).
struct HeaderWords {
  uint32_t w[detail::kSavedHeaderFloats];
};

__global__ void write_saved_header_kernel(float* saved, HeaderWords header) {
  grid_dependency_wait();
  const int i = threadIdx.x;
  if (i < detail::kSavedHeaderFloats) reinterpret_cast<uint32_t*>(saved)[i] = header.w[i];
}

}  // namespace

void write_saved_header(float* saved, const detail::SavedHeader& header, void* stream) {
  HeaderWords words{};
  std::memcpy(words.w, &header, sizeof header);
  write_saved_header_kernel<<<1, detail::kSavedHeaderFloats, 0, static_cast<cudaStream_t>(stream)>>>(saved, words);
  RHOSCAN_CUDA_LAUNCHED("write_saved_header_kernel");
}

// On the caller's stream (the forward that wrote it may still be queued there), then a wait: the
// backward's validation needs the header on the host where the cache below has none (a buffer
// this process's forward did not write, or one whose header changed since).
detail::SavedHeader read_saved_header(const TensorView& saved, const Options& options) {
  DeviceGuard guard(saved.device_index);
  const cudaStream_t stream = static_cast<cudaStream_t>(options.stream);
  detail::SavedHeader header;
  RHOSCAN_CUDA_CHECK(cudaMemcpyAsync(&header, saved.data, sizeof header, cudaMemcpyDeviceToHost, stream));
  RHOSCAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return header;
}

namespace {

struct CachedHeader {
  int device;
  const void* saved;
  detail::SavedHeader header;
};
// A training step holds one saved buffer per layer between its forward and backward; 256 entries
// cover deep models, and the oldest entry goes first (a miss only costs the read above).
constexpr size_t kCachedHeaders = 256;
std::mutex cache_mutex;
std::vector<CachedHeader> cache;  // oldest first

}  // namespace

void remember_saved_header(int device, const void* saved, const detail::SavedHeader& header) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (size_t i = 0; i < cache.size(); ++i)
    if (cache[i].device == device && cache[i].saved == saved) {
      cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  if (cache.size() == kCachedHeaders) cache.erase(cache.begin());
  cache.push_back({device, saved, header});
}

std::optional<detail::SavedHeader> cached_saved_header(int device, const void* saved) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (const CachedHeader& c : cache)
    if (c.device == device && c.saved == saved) return c.header;
  return std::nullopt;
}

void forget_saved_header(int device, const void* saved) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (size_t i = 0; i < cache.size(); ++i)
    if (cache[i].device == device && cache[i].saved == saved) {
      cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
}

}  // namespace rhoscan::cuda_detail
