// Thread-block clusters (sm_90): a cluster's blocks run at once on the multiprocessors of one GPC
// and can read each other's shared memory (distributed shared memory) and wait at one barrier.
// The few PTX instructions a cluster kernel needs, and the launch with a cluster dimension. No
// library kernel uses them since the cluster forward (a fused forward with the state split over a
// cluster's blocks) was measured on the H200 and removed (docs/CUDA.md, "The cluster forward");
// dev/cuda/dsmem_exchange.cu measures the exchange with them, and the host emulation
// (dev/cuda/host_emulation/shim.h) has the same functions, a cluster's blocks run as threads at
// once, for the next cluster kernel (docs/CUDA.md, What is left: quad_readback_mma's M tiles).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common.cuh"

namespace rhoscan::cuda_detail {

// This block's rank in its cluster (blocks of a 1-D cluster of n are n consecutive blockIdx.x,
// rank blockIdx.x % n) and the cluster's block count.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_blocks() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
// The cluster barrier in two halves: arrive (after this thread's shared-memory writes that other
// blocks will read: release) and wait (before reading theirs: acquire). Every thread of every
// block of the cluster arrives once per phase; work between the two halves overlaps the wait.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The shared::cluster address of the same byte in block `rank`'s shared memory as the local
// shared-memory address `addr` (smem_addr's form).
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, unsigned rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// 16 and 4 bytes from a shared::cluster address (another block's shared memory, or this one's).
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
  return v;
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}

// kernel<<<grid, block, smem, stream>>>(args...) in clusters of `cluster` blocks along x (grid a
// multiple of it), with PDL where the device has it (launch_kernel's); cluster sizes past 8 need
// the kernel's non-portable-size attribute, which this sets.
template <typename... Params, typename... Args>
void launch_cluster_kernel(const char* name, void (*kernel)(Params...), unsigned grid, unsigned cluster, unsigned block,
                           size_t smem, cudaStream_t stream, Args&&... args) {
  if (cluster > 8) check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), name);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = cluster, attrs[0].val.clusterDim.y = 1, attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attrs;
  config.numAttrs = RHOSCAN_PDL && programmatic_launch_supported() ? 2 : 1;
  cudaError_t status = cudaLaunchKernelEx(&config, kernel, args...);
  if (status != cudaSuccess && config.numAttrs == 2) {
    // (not yet run on a GPU: should a driver refuse PDL together with a cluster dimension, a plain
    // cluster launch; the kernel's griddepcontrol.wait then returns at once)
    (void)cudaGetLastError();
    config.numAttrs = 1;
    status = cudaLaunchKernelEx(&config, kernel, args...);
  }
  check_cuda(status, name);
}

// How many clusters of `cluster` blocks of `block` threads and `smem` bytes the device can hold
// at once (0: none fits, e.g. too large a cluster for a GPC).
template <typename... Params>
int max_active_clusters(void (*kernel)(Params...), unsigned cluster, unsigned block, size_t smem) {
  if (cluster > 8) check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                              "cudaFuncSetAttribute(non-portable cluster size)");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(cluster);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // (a size the device cannot run at all: none)
    return 0;
  }
  return n;
}

}  // namespace rhoscan::cuda_detail
