// Thread-block clusters (sm_90): a cluster's blocks run at once on the multiprocessors of one GPC
// and can read each other's shared memory (distributed shared memory) and wait at one barrier.
// The few PTX instructions a cluster kernel needs. No library kernel uses them since the cluster
// forward (a fused forward with the state split over a cluster's blocks) was measured on the H200
// and removed with its launcher (docs/CUDA.md, "The cluster forward"; the code at 40f0361);
// dev/cuda/dsmem_exchange.cu measures a cluster's exchange with them, and the host emulation
// (dev/cuda/host_emulation/shim.h) has the same functions, a cluster's blocks run as threads at
// once, for any later cluster kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>


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

}  // namespace rhoscan::cuda_detail
