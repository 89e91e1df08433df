#include "cuda/workspace.h"

#include <map>
#include <mutex>
#include <set>

#include "cuda/ops.h"

namespace rhoscan::cuda_detail {

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  if (status == cudaErrorMemoryAllocation)
    throw Error(ErrorKind::out_of_memory, std::string("rhoscan cuda: ") + what + ": " + cudaGetErrorString(status));
  throw Error(ErrorKind::internal, std::string("rhoscan cuda: ") + what + " failed: " + cudaGetErrorString(status));
}

Workspace::Workspace(int64_t bytes, cudaStream_t stream) : bytes_(bytes), stream_(stream) {
  if (bytes_ == 0) return;
  // Keep freed workspace in the device's default pool instead of returning it to the driver at
  // every synchronisation: the next call then allocates without a driver round trip. Once per
  // device.
  static std::mutex mutex;
  static std::set<int> configured;
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) {
    std::lock_guard<std::mutex> lock(mutex);
    cudaMemPool_t pool;
    if (configured.insert(device).second && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t threshold = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
  }
  void* p = nullptr;
  cudaError_t st = cudaMallocAsync(&p, static_cast<size_t>(bytes_), stream_);
  if (st != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorKind::out_of_memory, "rhoscan cuda: could not allocate " + std::to_string(bytes_) +
                                              " bytes of workspace: " + cudaGetErrorString(st));
  }
  base_ = static_cast<char*>(p);
}

Workspace::~Workspace() {
  if (base_) cudaFreeAsync(base_, stream_);
}

void* Workspace::take(int64_t bytes) {
  if (used_ + bytes > bytes_)
    throw Error(ErrorKind::internal, "rhoscan cuda: workspace carving exceeded its size (a bug)");
  void* p = base_ + used_;
  used_ += bytes;
  return p;
}

int device_compute_capability() {
  static std::mutex mutex;
  static std::map<int, int> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0, minor = 0;
  const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
  const int cc = ok ? 10 * major + minor : 0;
  known.emplace(device, cc);
  return cc;
}

bool programmatic_launch_supported() { return device_compute_capability() >= 90; }

int64_t workspace_cap(int64_t option, int64_t backend_default) { return option > 0 ? option : backend_default; }

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
    RHOSCAN_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

}  // namespace rhoscan::cuda_detail
