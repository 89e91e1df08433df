// The CUDA forward: normaliser scan, then one of two paths for the context:
//   chunked   intra-chunk scores, chunk-start states, chunk outputs (chunk_kernels.cuh for the
//             formulas). The chunk-start states of a batch of (b, h) pairs live in a workspace
//             bounded by options.max_workspace_bytes (default 2 GiB): when all pairs do not fit at
//             once, the pairs are processed in consecutive batches. bfloat16 with Lp <= 256
//             (scan_applies): chunk_scan_mma instead of the states and outputs, no chunk-state
//             workspace (RHOSCAN_FORWARD_SCAN=0 at build time: the two kernels).
//   quadratic (quadratic.cuh) the tensor-core dtypes with no initial rho, T <= kQuadraticMaxT,
//             L >= 2 T and chunks of 64 (the measurements are at quadratic_shape): the whole lower
//             block-triangular score matrix instead of chunk-start states; the final state from
//             final_state_mma.
//   rows      (quadratic.cuh, quadratic_rows_mma) the quadratic path with its cross scores and
//             context in one kernel, Pcross never in global memory: bfloat16, Lp <= 256. Slower
//             than the default on the H200 (round 28: BDH-base 0.27 against 0.22 ms): only forced.
// RHOSCAN_CUDA_FORWARD_PATH=chunked|quadratic|rows (environment, read per call) forces a path where
// it applies (quadratic needs a tensor-core dtype and no initial rho; rows also bfloat16 and Lp <=
// 256, else it is quadratic): for tests and A/B runs.
// The deferred value checks (value_gate.h) are settled after the first batch's normaliser scan
// and packed values, which write only the workspace (the first batch's s, Nc and rho_norm go there
// too, copied out after the checks); every output, the saved buffer's P included, is written
// after them.
#include <cstdlib>
#include <cstring>

#include "cuda/chunk_products.cuh"
#include "cuda/chunk_scan.cuh"
#include "cuda/ops.h"
#include "cuda/quadratic.cuh"
#include "cuda/side_streams.h"
#include "cuda/value_gate.h"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {
namespace {

// Whether the tensor-core forward makes Qp, Xq and Kq in norm_scores_mma (with the intra-chunk
// scores) instead of norm_apply + chunk_scores_mma: by default (-DRHOSCAN_NORM_SCORES=0 at build
// time: never); RHOSCAN_CUDA_NORM_SCORES=0|1 (environment, read per call) forces either, for tests
// and A/B runs. Both make the same Xq, Kq and P bit for bit (the host emulation checks it).
#ifndef RHOSCAN_NORM_SCORES
#define RHOSCAN_NORM_SCORES 1
#endif
inline bool norm_scores_on() { return env_switch("RHOSCAN_CUDA_NORM_SCORES", RHOSCAN_NORM_SCORES != 0); }

// Whether the quadratic path applies (forward_path below): tensor-core dtype (rho_norm0 is fine:
// the normaliser scan takes it); then by default, if built with RHOSCAN_QUADRATIC_FORWARD=1, where
// quadratic_shape allows (quadratic.cuh: T, L >= 2 T, chunks of 64), or whatever
// RHOSCAN_CUDA_FORWARD_PATH says (chunked, or quadratic at any T and chunk; an unknown
// value counts as unset).
// With an initial rho (round 40: quadratic_output's kState adds Xq a^(I C) rho0 to the context, the
// final state's kernels a^T rho0 to rho_T) only where RHOSCAN_CUDA_FORWARD_PATH=quadratic forces it:
// measured slower than the chunked path so far (BDH-8k, H100: 1.91 against 1.74 ms in round 40,
// 2.05-2.17 against 1.75 in round 41; docs/CUDA.md, "The quadratic forward from an initial state"),
// so calls with rho0 keep the chunked path.
// The rows variant (quadratic_rows_mma): only where RHOSCAN_CUDA_FORWARD_PATH=rows and it applies
// (bfloat16, quadratic_rows_applies, no rho0); measured slower than the default where it does (docs/CUDA.md).
enum class ForwardPath { chunked, quadratic, rows };
inline ForwardPath forward_path(bool tensor_core, bool bf16_values, bool has_rho0, const Dims& d) {
  if (!tensor_core) return ForwardPath::chunked;
  const char* env = std::getenv("RHOSCAN_CUDA_FORWARD_PATH");
  if (has_rho0) return env != nullptr && std::strcmp(env, "quadratic") == 0 ? ForwardPath::quadratic : ForwardPath::chunked;
  const bool rows = bf16_values && quadratic_rows_applies(d);
  if (env != nullptr) {
    if (std::strcmp(env, "chunked") == 0) return ForwardPath::chunked;
    if (std::strcmp(env, "quadratic") == 0) return ForwardPath::quadratic;
    if (std::strcmp(env, "rows") == 0) return rows ? ForwardPath::rows : ForwardPath::quadratic;
  }
  return RHOSCAN_QUADRATIC_FORWARD && quadratic_shape(d.T, d.L, d.C, RHOSCAN_QUADRATIC_FORWARD_MIN_L_PER_T)
             ? ForwardPath::quadratic
             : ForwardPath::chunked;
}

// The saved buffer's header of a forward that fills `filled` (core/saved.h), checked against the
// layout's chunk.
detail::SavedHeader forward_saved_header(const detail::ForwardParams& f, const detail::SavedLayout& saved, int64_t C,
                                         uint32_t filled) {
  if (saved.C != C)
    throw Error(ErrorKind::internal, "rhoscan.forward (cuda): the saved layout's chunk differs from the kernels'");
  const detail::Problem& p = f.p;
  detail::SavedHeader header;
  header.magic = detail::kSavedMagic, header.version = detail::kSavedVersion;
  header.B = p.B, header.H = p.H, header.T = p.T, header.L = p.L, header.C = C;
  header.dtype = static_cast<int32_t>(p.dtype);
  header.has_rho_norm = f.rho_norm0 != nullptr;
  header.filled = filled;
  return header;
}
// The call's tensors as the kernels take them.
struct ForwardTensors {
  Str4 q, v, rho0, rho_out, ctx;
  Str3 n0, n_out;
  explicit ForwardTensors(const detail::ForwardParams& f)
      : q(str4(f.q, f.q_stride)), v(str4(f.v, f.v_stride)), rho0(str4(f.rho0, f.rho0_stride)),
        rho_out(str4(f.rho, f.rho_stride)), ctx(str4(f.context, f.context_stride)),
        n0(str3(f.rho_norm0, f.rho_norm0_stride)), n_out(str3(f.rho_norm, f.rho_norm_stride)) {}
};
// The decay as float32 [H][L], the first carving of the workspace (kept across its resets).
float* decay_to_f32(const detail::ForwardParams& f, Workspace& ws, cudaStream_t stream) {
  const detail::Problem& p = f.p;
  float* a32 = ws.take_floats(p.H * p.L);
  launch_kernel("decay_to_f32_kernel", decay_to_f32_kernel, grid_for(p.H * p.L, 256), 256, 0, stream, a32, f.decay,
                f.decay_stride[0], f.decay_stride[1], p.H, p.L, p.decay_dtype == DType::float64);
  return a32;
}

template <typename T>
void forward_typed(const detail::ForwardParams& f, cudaStream_t stream) {
  const detail::Problem& p = f.p;
  Dims d;
  d.H = p.H, d.T = p.T, d.L = p.L, d.E = p.E;
  d.C = f.options.chunk_size > 0 ? std::min<int64_t>(f.options.chunk_size, kMaxChunk) : kDefaultChunk;
  d.nC = (p.T + d.C - 1) / d.C;
  ValueGate gate(f.deferred, stream);
  constexpr bool kTC = kTensorCoreForward<T>;
  set_padding<kTC>(d);
  d.v_rows = kTC && p.Hv == 1 && p.H > 1;  // v packed once per batch row (see Dims)
  const int64_t BH = p.B * p.H;
  using QpT = std::conditional_t<kTC, bf16, float>;  // bf16 where only the mma scores read it
  const bool fused = kTC && norm_scores_on();         // norm_scores_mma: no Qp array at all
  // The saved buffer (core/saved.h): s and Nc always, P where its layout reserved it (every path
  // computes P), Pcross where it is reserved and this call took the quadratic path, Xq and Kq
  // where its layout has them (every tensor-core path makes them). The kernels write s, Nc,
  // Pcross and the keys in place of the workspace's (the first batch's s and Nc are copied there
  // after the checks; with the keys the checks are settled before the first batch instead, since
  // copying them would cost what saving them saves); P is copied (the workspace holds its L-split
  // partials).
  const detail::SavedLayout saved =
      detail::saved_layout(p.B, p.H, p.T, p.L, p.dtype, f.rho0 != nullptr, f.options.chunk_size, f.saved_keys);
  const bool save = f.saved != nullptr, save_diag = save && saved.diag_scores;
  const bool save_keys = kTC && save && saved.keys;
  if (save_keys && saved.keys_pair != d.T * d.Lp)
    throw Error(ErrorKind::internal, "rhoscan.forward (cuda): the saved keys' rows differ from the operands'");
  // Per pair, both paths: s and its latent blocks' partials (norm_sums_kernel), Qp, the
  // chunk-start normalisers, the intra-chunk scores (16 split slots), the bf16 operands. Chunked:
  // the chunk-start states. Quadratic: the cross-chunk scores Pcross [nC][nC][C][C] bf16 and the
  // float32 partials of their L splits.
  const int64_t common_bh = Workspace::floats(p.T) + Workspace::floats(norm_sums_blocks(p.L) * p.T) +
                            (fused ? 0 : Workspace::bytes<QpT>(p.T * p.L)) +
                            Workspace::floats((d.nC + 1) * p.L) + Workspace::floats(d.nC * 16 * d.C * d.C) +
                            operand_bytes<kTC, T>(d, save_keys ? 0 : 2, 1);
  // chunk_scan_mma keeps the chunk-start states in shared memory: no workspace for them
  const bool scan = scan_applies<T>(d, BH);
  const int64_t chunked_bh = common_bh + (scan ? 0 : chunk_state_bytes<StateT<kTC>>(d));
  const int64_t cap = workspace_cap(f.options.max_workspace_bytes, kDefaultWorkspaceCap);
  const int64_t shared = Workspace::floats(p.H * p.L);
  int64_t cross_nsplit = 1, per_bh = chunked_bh;
  bool quadratic = false, rows = false;  // rows: the quadratic path's context by quadratic_rows_mma
  if constexpr (kTC) {
    const ForwardPath path = forward_path(true, !kSplitValues<T>, f.rho0 != nullptr, d);
    if (path != ForwardPath::chunked) {
      rows = path == ForwardPath::rows;
      cross_nsplit = rows ? 1 : cross_splits(BH, d);
      // (rows: no Pcross, no partials)
      const int64_t quadratic_bh =
          rows ? common_bh
               : common_bh + Workspace::bytes<bf16>(d.nC * d.nC * d.C * d.C) +
                     Workspace::floats(cross_parts_planes(cross_nsplit) * d.nC * d.nC * d.C * d.C);
      // where even one pair does not fit the cap, the chunked path (or its out_of_memory error)
      quadratic = shared + quadratic_bh <= cap;
      if (quadratic) per_bh = quadratic_bh;
      rows = rows && quadratic;
    }
  }
  if (shared + per_bh > cap)
    throw Error(ErrorKind::out_of_memory,
                "rhoscan.forward (cuda): one (batch, head) pair needs " + std::to_string(shared + per_bh) +
                    " bytes of chunk workspace (T=" + std::to_string(p.T) + ", L=" + std::to_string(p.L) +
                    ", E=" + std::to_string(p.E) + "), over the cap of " + std::to_string(cap) +
                    " bytes: raise options.max_workspace_bytes");
  const bool save_scores = save && quadratic && !rows && saved.cross_scores;
  // (written after the checks)
  const detail::SavedHeader header =
      save ? forward_saved_header(f, saved, d.C,
                                  detail::kSavedNorm | (save_diag ? detail::kSavedDiagScores : 0u) |
                                      (save_scores ? detail::kSavedCrossScores : 0u) |
                                      (save_keys ? detail::kSavedKeys : 0u))
           : detail::SavedHeader{};
  const int64_t per_batch = balanced_batch(BH, (cap - shared) / per_bh);
  Workspace ws(shared + per_batch * per_bh, stream);
  const float* a32 = decay_to_f32(f, ws, stream);
  const ForwardTensors x(f);
  const Str4 q = x.q, v = x.v, rho0 = x.rho0, rho_out = x.rho_out, ctx = x.ctx;
  const Str3 n0 = x.n0, n_out = x.n_out;
  if (save_keys) {  // (a wait for the checks alone: the GPU idles for about a launch)
    gate.settle();
    write_saved_header(f.saved, header, stream);
    remember_saved_header(p.device_index, f.saved, header);
  }
  for (int64_t bh0 = 0; bh0 < BH; bh0 += per_batch) {
    d.bh0 = bh0;
    d.nbh = std::min(per_batch, BH - bh0);
    d.nsplit = score_splits(d.nbh, d.nC, p.L);
    // (before the checks are settled s and Nc go to the workspace, rho_norm nowhere yet)
    const bool gated = !gate.settled();
    float* s_saved = save ? f.saved + saved.s + bh0 * saved.s_pair : nullptr;
    float* Nc_saved = save ? f.saved + saved.Nc + bh0 * saved.Nc_pair : nullptr;
    float* s = save && !gated ? s_saved : ws.take_floats(d.nbh * p.T);
    float* s_parts = ws.take_floats(d.nbh * norm_sums_blocks(p.L) * p.T);
    QpT* Qp = fused ? nullptr : ws.take_array<QpT>(d.nbh * p.T * p.L);
    float* Nc = save && !gated ? Nc_saved : ws.take_floats(d.nbh * (d.nC + 1) * p.L);
    float* P_ws = ws.take_floats(d.nbh * d.nC * d.nsplit * d.C * d.C);
    StateT<kTC>* Hs = quadratic || scan ? nullptr : ws.take_array<StateT<kTC>>(d.nbh * d.nC * d.Lp * d.Ep);
    const bool cross = quadratic && !rows;  // Pcross: cross_scores, then quadratic_output
    bf16* Pcross = !cross        ? nullptr
                   : save_scores ? reinterpret_cast<bf16*>(f.saved + saved.Pcross) + bh0 * saved.Pcross_pair
                                 : ws.take_array<bf16>(d.nbh * d.nC * d.nC * d.C * d.C);
    float* Pparts =
        cross ? ws.take_floats(cross_parts_planes(cross_nsplit) * d.nbh * d.nC * d.nC * d.C * d.C) : nullptr;
    Operands16 o = take_operands<kTC, T>(ws, d, false, !save_keys);
    if (save_keys) {
      o.Xq = reinterpret_cast<bf16*>(f.saved + saved.Xq) + bh0 * saved.keys_pair;
      o.Kq = reinterpret_cast<bf16*>(f.saved + saved.Kq) + bh0 * saved.keys_pair;
    }
    launch_norm_scan<T>(d, q, a32, n0, s, s_parts, Qp, Nc, gated ? Str3{} : n_out, o.Xq, o.Kq, stream, false, !fused);
    pack_values<kTC, T>(d, v, o.vb, o.vlo, stream);
    if (gated) {
      gate.settle();
      if (save) {
        write_saved_header(f.saved, header, stream);
        remember_saved_header(p.device_index, f.saved, header);
        RHOSCAN_CUDA_CHECK(cudaMemcpyAsync(s_saved, s, sizeof(float) * d.nbh * p.T, cudaMemcpyDeviceToDevice, stream));
        RHOSCAN_CUDA_CHECK(cudaMemcpyAsync(Nc_saved, Nc, sizeof(float) * d.nbh * (d.nC + 1) * p.L,
                                           cudaMemcpyDeviceToDevice, stream));
      }
      launch_final_norm(d, Nc, n_out, stream);
    }
    // P straight into the saved buffer where it has one split (the same [nC][C][C] blocks per
    // pair); else split 0 of each [nsplit][C][C] slot holds the sum, copied there
    float* const P_saved = save_diag ? f.saved + saved.P + bh0 * saved.P_pair : nullptr;
    float* const P = P_saved != nullptr && d.nsplit == 1 ? P_saved : P_ws;
    if constexpr (kTC) {
      if (fused) launch_norm_scores<T>(d, q, a32, s, Nc, P, o, stream);  // (Xq and Kq before the fork)
    }
    // side streams (side_streams.h) beside chunk_scores (fused: nothing beside them, the keys come
    // with the scores): quadratic, cross_scores and final_state (rows: final_state beside
    // quadratic_rows); chunked (not chunk_scan), the chunk states
    const bool fork = (quadratic || !scan) && side_streams_on();
    cudaStream_t s1 = fork ? side_stream(1) : stream, s2 = fork && cross ? side_stream(2) : stream;
    const SideStreamsJoin join{stream, fork ? s1 : nullptr, fork && cross ? s2 : nullptr};
    if (fork) stream_wait(s1, stream);
    if (fork && !quadratic) launch_chunk_states<kTC, T, false>(d, q, v, a32, Qp, o, rho0, Hs, rho_out, s1);
    if constexpr (kTC) {
      if (fork && cross) {
        launch_cross_scores(d, cross_nsplit, o.Xq, o.Kq, a32, Pcross, Pparts, s1);
        stream_wait(s2, stream);
        launch_final_state<T>(d, a32, o, rho_out, s2, rho0);
      }
      if (fork && rows) launch_final_state<T>(d, a32, o, rho_out, s1);
    }
    if (!fused) launch_chunk_scores<kTC, T>(d, q, v, Str4{}, a32, Qp, P, nullptr, stream);
    if (P_saved != nullptr && P != P_saved) {
      const size_t CC = static_cast<size_t>(d.C * d.C) * sizeof(float);
      RHOSCAN_CUDA_CHECK(cudaMemcpy2DAsync(P_saved, CC, P, d.nsplit * CC, CC, static_cast<size_t>(d.nbh * d.nC),
                                           cudaMemcpyDeviceToDevice, stream));
    }
    // quadratic: only the final state, by final_state_mma (from rho0 where given); chunked: the
    // chunk states and the final state by the states kernel, or all of it (outputs and final state)
    // by chunk_scan_mma
    if constexpr (kTC) {
      if (quadratic && !fork) launch_final_state<T>(d, a32, o, rho_out, stream, rho0);
    }
    if (!quadratic && scan) launch_chunk_scan<T>(d, o, P, a32, rho0, ctx, rho_out, stream);
    if (!quadratic && !scan && !fork) launch_chunk_states<kTC, T, false>(d, q, v, a32, Qp, o, rho0, Hs, rho_out, stream);
    if constexpr (kTC) {
      if (cross) {
        if (fork) {
          stream_wait(stream, s1);  // Pcross
        } else {
          launch_cross_scores(d, cross_nsplit, o.Xq, o.Kq, a32, Pcross, Pparts, stream);
        }
        launch_quadratic_output<T>(d, P, Pcross, o, ctx, stream, a32, rho0);
      }
      if constexpr (!kSplitValues<T>) {
        if (rows) launch_quadratic_rows<T>(d, P, o, a32, ctx, stream);
      }
    }
    if (!quadratic && !scan) {
      if (fork) stream_wait(stream, s1);  // Hs
      launch_chunk_output<kTC, T, T, false>(d, q, v, a32, Qp, o, Hs, P, ctx, nullptr, stream);
    }
    ws.reset();
    ws.take_floats(p.H * p.L);  // a32 stays at the front
  }
  gate.settle();  // (B·H = 0: no batch ran)
}

}  // namespace

void run_forward(const detail::ForwardParams& f) {
  DeviceGuard guard(f.p.device_index);
  cudaStream_t stream = static_cast<cudaStream_t>(f.options.stream);
  switch (f.p.dtype) {
    case DType::float32: forward_typed<float>(f, stream); break;
    case DType::bfloat16: forward_typed<__nv_bfloat16>(f, stream); break;
    case DType::float16: forward_typed<__half>(f, stream); break;
    default: throw Error(ErrorKind::unsupported, "rhoscan.forward (cuda): float64 inputs are not supported");
  }
}

}  // namespace rhoscan::cuda_detail
