// The cluster forward's launchers (cluster_scan.cuh): the plan of a call (latents per block,
// cluster size, latent groups, column tiles) and the two launches of a batch.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/cluster_scan.cuh"

namespace rhoscan::cuda_detail {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<int>(x) : fallback;
}

template <int kLT>
void launch_lt(const Dims& d, const ClusterScanPlan& plan, Str4 q, const bf16* vb, const float* a32, Str4 rho0, const float* N0,
               float* Cp, float* Pp, float* sp, Str4 rho, Str3 n_out, float* Nc_out, cudaStream_t stream) {
  auto kernel = cluster_scan_mma_kernel<kLT>;
  constexpr int smem = ClusterScanLayout<kLT>::bytes;
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t items = d.nbh * plan.groups * plan.col_tiles;
  // a cluster per item up to what the grid's x may hold; the clusters loop over the items
  const int64_t clusters = std::min<int64_t>(items, (int64_t{1} << 30) / plan.cs);
  launch_cluster_kernel("cluster_scan_mma_kernel", kernel, static_cast<unsigned>(clusters * plan.cs),
                        static_cast<unsigned>(plan.cs), kCsThreads, smem, stream, d, q, vb, a32, rho0, N0, plan.groups,
                        plan.col_tiles, Cp, Pp, sp, rho, n_out, Nc_out);
}

// Whether the device holds a cluster of cs blocks of the kLT kernel at once: asked once per device,
// latent tile and size (an occupancy query, not a per-call cost).
template <int kLT>
bool clusters_fit(int cs) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, bool> known;
  int dev = 0;
  RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(dev, cs);
  if (auto it = known.find(key); it != known.end()) return it->second;
  // (the occupancy query sees the kernel's shared-memory limit: raised first, as for the launch)
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(cluster_scan_mma_kernel<kLT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          ClusterScanLayout<kLT>::bytes));
  const bool fit = max_active_clusters(cluster_scan_mma_kernel<kLT>, static_cast<unsigned>(cs), kCsThreads,
                                       ClusterScanLayout<kLT>::bytes) > 0;
  known.emplace(key, fit);
  return fit;
}

}  // namespace

ClusterScanPlan cluster_scan_plan(const Dims& d) {
  ClusterScanPlan plan;
  plan.col_tiles = static_cast<int>((d.Ep + kCsET - 1) / kCsET);
  // 64 latents a block: the 128-latent kernel spills (ptxas, sm_90a: 255 registers and 220 bytes
  // of spill against 254 and none) and is taken only where RHOSCAN_CLUSTER_LT=128 asks, for the A/B
  plan.lt = 64;
  const int lt = env_int("RHOSCAN_CLUSTER_LT", 0);
  if (lt == 64 || lt == 128) plan.lt = lt;
  // (the kernels' static_cast<int> of latents: L < 2^30, cluster_scan_fits)
  const int tiles = static_cast<int>((d.L + plan.lt - 1) / plan.lt);
  plan.cs = 1;
  while (plan.cs * 2 <= kCsMaxCluster && plan.cs * 2 <= tiles) plan.cs *= 2;
  const int cs = env_int("RHOSCAN_CLUSTER_SIZE", 0);
  if (cs == 1 || cs == 2 || cs == 4 || cs == 8) plan.cs = cs;
  // a cluster size the device holds at once (a GPC's multiprocessors at one block each)
  while (plan.cs > 1 && !(plan.lt == 128 ? clusters_fit<128>(plan.cs) : clusters_fit<64>(plan.cs))) plan.cs /= 2;
  plan.groups = (tiles + plan.cs - 1) / plan.cs;
  return plan;
}

void launch_cluster_scan(const Dims& d, const ClusterScanPlan& plan, Str4 q, const bf16* vb, const float* a32, Str4 rho0,
                         const float* N0, float* Cp, float* Pp, float* sp, Str4 rho, Str3 n_out, float* Nc_out, Str4 ctx,
                         float* s_out, float* P_out, cudaStream_t stream) {
  if (!cluster_scan_fits(d))
    throw Error(ErrorKind::internal, "rhoscan.forward (cuda): the cluster forward's 32-bit indices do not hold");
  if (plan.lt == 128)
    launch_lt<128>(d, plan, q, vb, a32, rho0, N0, Cp, Pp, sp, rho, n_out, Nc_out, stream);
  else
    launch_lt<64>(d, plan, q, vb, a32, rho0, N0, Cp, Pp, sp, rho, n_out, Nc_out, stream);
  launch_kernel("cluster_scan_finalize_kernel", cluster_scan_finalize_kernel<bf16>, grid_for(d.nbh * d.nC), kFinThreads,
                kFinSmem, stream, d, plan.groups, plan.cp_cols(), static_cast<const float*>(Cp), static_cast<const float*>(Pp),
                static_cast<const float*>(sp), vb, ctx, s_out, P_out);
}

}  // namespace rhoscan::cuda_detail
