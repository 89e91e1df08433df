// Warp-level tensor-core building blocks (sm_80+ mma.sync, used on sm_90a): ldmatrix fragment
// loads from shared memory, the m16n8k16 bf16 product with float32 accumulators, cp.async copies.
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, q = lane % 4):
//   A (16×16, 4 registers of 2 bf16): a0 (row g, k 2q..2q+1), a1 (row g+8), a2 (k+8), a3 (row g+8, k+8)
//   B (16×8, 2 registers):            b0 (k 2q..2q+1, col g), b1 (k+8)
//   C (16×8, 4 floats):               c0,c1 (row g, cols 2q, 2q+1), c2,c3 (row g+8)
// so a thread knows the rows of its accumulators: row scaling (the decay of a state) is local.
#pragma once

#include "cuda/common.cuh"

namespace rhoscan::cuda_detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8×8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// The same on a 32-bit shared-memory address (smem_addr's), for kernels that keep their fragment
// addresses as integers (warp_mma_32x32_u32): no generic-to-shared conversion per load, and
// constant offsets fold into the instruction's immediate.
__device__ __forceinline__ void ldsm_x4_u32(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans_u32(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte global -> shared copy; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
// cp_async16 to a 32-bit shared-memory address; src_bytes 16, or 0 for a zero fill (src not read).
__device__ __forceinline__ void cp_async16_u32(uint32_t dst, const void* src, uint32_t src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// kBytes (4 or 8) global -> shared copy through L1 (cp.async.ca: .cg copies only 16); zero-filled
// when !valid (src is then not read). dst and src aligned to kBytes.
template <int kBytes>
__device__ __forceinline__ void cp_async_small(void* dst, const void* src, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca: 4 or 8 bytes here (16: cp_async16)");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(kBytes),
               "r"(valid ? kBytes : 0));
}
// A hint that the 128-byte line holding p is wanted soon: the L2 fetches it from DRAM (no register
// waits for it; the host emulation ignores it).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- warpgroup MMA (wgmma, sm_90a) ----------------------------------------------------------
// A warpgroup (4 consecutive warps, the first a multiple of 4) computes D (64 × N, float32, in
// registers) += A (64 × 16) · B (16 × N), both operands in shared memory described by 64-bit
// descriptors (wgmma_desc_sw128, below). The instruction is asynchronous: wgmma_fence before the
// first one that reads accumulators written by ordinary instructions, wgmma_commit to close a
// group, wgmma_wait<n> until at most n groups are pending (the accumulators and the operands'
// shared memory belong to the tensor cores until then). Accumulator i of a thread (warp w of the
// warpgroup, g = lane / 4, q = lane % 4): row 16 w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) +
// 2 q + (i & 1): mma.m16n8's C layout, tile after tile along N.
// Shared memory written by ordinary stores or cp.async and read by wgmma (the async proxy) needs
// fence_proxy_async in each writing thread, after its writes are complete, before the barrier
// that hands the tile over.
// Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere the kernels that use these are
// never launched (wgmma_runs, quadratic_backward.cuh), and the bodies trap.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RHOSCAN_WGMMA_DEVICE 1
#else
#define RHOSCAN_WGMMA_DEVICE 0
#endif
__device__ __forceinline__ void wgmma_fence() {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// The accumulators as compiler-visible operands: after wgmma_wait, so that no read or write of
// them moves across the wait (CUTLASS's warpgroup_fence_operand).
template <int kN>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A's registers of a wgmma from registers (..._rs): used after its wait, they stay
// live (and theirs) until the products that read them are done, also where other code runs between
// the commit and the wait (cross_scores_wgmma's refill, issued under its products).
template <int kN>
__device__ __forceinline__ void wgmma_fence_operand(uint32_t (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(a[i])::"memory");
}
// D (64 × N) += A · B, bf16 operands, N = 64, 128 or 256 (N / 2 accumulators per thread). kTransA:
// A stored M-major (each k's 64 m contiguous), else K-major; kTransB: B stored N-major, else K-major
// (PTX's imm-trans-a / imm-trans-b). An N-major B wider than 64 is 64-wide tiles LBO bytes apart
// (wgmma_desc_sw128).
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1, %34, %35;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();
#endif
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "%64, %65, p, 1, 1, %66, %67;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();
#endif
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "%128, %129, p, 1, 1, %130, %131;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();
#endif
}

// D (64 × 64) += A · B with A from registers (wgmma's "RS" form): each warp of the warpgroup holds
// its 16 rows of A (warp w: rows 16 w ..) as mma.m16n8k16's A fragment (a[0] row g, k 2q..2q+1;
// a[1] row g + 8; a[2] row g, k 8 + 2q..; a[3] row g + 8, k 8 + 2q..), so that an ldmatrix.x4 of a
// K-major tile feeds it as it feeds mma.sync; B from shared memory as above. The registers of a
// belong to the tensor cores until the wgmma_wait that covers the instruction (wgmma_fence before
// it, after they were written).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
#else
  (void)d, (void)a, (void)desc_b;
  __trap();
#endif
}
// wgmma_m64n{kN}k16_bf16 by N (the accumulators' count kN / 2 fixes it, but is not deducible).
template <int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64k16_bf16(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kN == 64 || kN == 128 || kN == 256, "N = 64, 128 or 256");
  if constexpr (kN == 64) wgmma_m64n64k16_bf16<kTransA, kTransB>(d, desc_a, desc_b);
  if constexpr (kN == 128) wgmma_m64n128k16_bf16<kTransA, kTransB>(d, desc_a, desc_b);
  if constexpr (kN == 256) wgmma_m64n256k16_bf16<kTransA, kTransB>(d, desc_a, desc_b);
}

// One warp's 32×32 block, one k step (16): the 8 mma from A's fragments (row blocks mt) and B's
// (two ldmatrix.x4, each two 8-column tiles: regs {0,1} and {2,3}), in the one order that every
// variant below uses (so their sums agree bit for bit).
__device__ __forceinline__ void mma_32x32_k16(float (&acc)[2][4][4], const uint32_t (&af)[2][4],
                                              const uint32_t (&bf)[2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      mma_bf16_16816(acc[mt][nt], af[mt], bf[nt / 2][2 * (nt % 2)], bf[nt / 2][2 * (nt % 2) + 1]);
}
// One warp's 32×32 block of C += A·B over kdim (a multiple of 16), from bf16 tiles in shared
// memory. acc[mt][nt] is the 16×8 accumulator at rows m0 + 16 mt, columns n0 + 8 nt.
//   kATrans = false: A stored [m][k] (row stride lda);  true: A stored [k][m] (A^T).
//   kBTrans = false: B stored [k][n] (row stride ldb);  true: B stored [n][k] (B^T).
template <bool kATrans, bool kBTrans>
__device__ __forceinline__ void warp_mma_32x32(float (&acc)[2][4][4], const bf16* As, int lda, const bf16* Bs,
                                               int ldb, int m0, int n0, int kdim) {
  const int lane = threadIdx.x & 31;
#pragma unroll 4
  for (int k0 = 0; k0 < kdim; k0 += 16) {
    uint32_t a[2][4], b[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int m = m0 + 16 * mt;
      if (kATrans)
        ldsm_x4_trans(a[mt], As + (k0 + (lane >> 4) * 8 + (lane & 7)) * lda + m + ((lane >> 3) & 1) * 8);
      else
        ldsm_x4(a[mt], As + (m + (lane & 15)) * lda + k0 + (lane >> 4) * 8);
    }
#pragma unroll
    for (int np = 0; np < 2; ++np) {  // two 8-column tiles per ldmatrix.x4: regs {0,1} and {2,3}
      const int n = n0 + 16 * np;
      if (kBTrans)
        ldsm_x4(b[np], Bs + (n + (lane >> 4) * 8 + (lane & 7)) * ldb + k0 + ((lane >> 3) & 1) * 8);
      else
        ldsm_x4_trans(b[np], Bs + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ldb + n + (lane >> 4) * 8);
    }
    mma_32x32_k16(acc, a, b);
  }
}

// warp_mma_32x32 on 32-bit shared-memory addresses with compile-time row strides (in bf16
// elements) and kdim: the same ldmatrix fragments and the same mma sequence (hence the same sums,
// bit for bit), but every row address is the lane's base address plus an immediate. a, b: the
// lane's byte addresses for k0 = 0 and the first 16-row block (warp_mma_lane_a / _b below).
// The k loop is unrolled.
template <bool kATrans, bool kBTrans, int kLda, int kLdb, int kKdim>
__device__ __forceinline__ void warp_mma_32x32_u32(float (&acc)[2][4][4], uint32_t a, uint32_t b) {
  static_assert(kKdim % 16 == 0, "kdim: a multiple of 16");
#pragma unroll
  for (int k0 = 0; k0 < kKdim; k0 += 16) {
    uint32_t af[2][4], bf[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if (kATrans)
        ldsm_x4_trans_u32(af[mt], a + 2 * (k0 * kLda + 16 * mt));
      else
        ldsm_x4_u32(af[mt], a + 2 * (16 * mt * kLda + k0));
    }
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      if (kBTrans)
        ldsm_x4_u32(bf[np], b + 2 * (16 * np * kLdb + k0));
      else
        ldsm_x4_trans_u32(bf[np], b + 2 * (k0 * kLdb + 16 * np));
    }
    mma_32x32_k16(acc, af, bf);
  }
}
// Swizzled tiles: rows of ld bf16 (a multiple of 64: 128-byte groups), unpadded, with 16-byte chunk
// c of row r stored at chunk c ^ (r % 8) (bits 3 and up of c kept), every tile starting on a
// 128-byte boundary. The cp.async fills of such a tile write whole aligned 128-byte groups (into
// padded rows they do not: dev/cuda/cp_async_layout.cu measured 33-35 against 23 bytes per clock
// per SM on the H200), and the 8 rows of an ldmatrix matrix (8 consecutive rows at one logical
// chunk) still fall on 8 different bank groups. tile_offset: the byte offset of row r, chunk c
// (element 8 c) in such a tile (kSwizzle) or in a padded one.
template <bool kSwizzle>
__host__ __device__ constexpr uint32_t tile_offset(int r, int c, int ld) {
  return static_cast<uint32_t>(2 * r * ld + 16 * (kSwizzle ? (c ^ (r & 7)) : c));
}
// The lane's byte offsets of warp_mma_32x32's ldmatrix rows at k0 = 0, mt = np = 0 (as
// warp_mma_lane_a / _b, in bytes) in a tile of row stride ld, padded or swizzled. Swizzled, m0 and
// n0 must be multiples of 32 where they move the chunk (A stored [k][m], B stored [k][n]), so that
// the 16-element blocks mt, np = 1 are the chunk's bit 1: an XOR (warp_mma_32x32_tile).
template <bool kSwizzle, bool kATrans>
__device__ __forceinline__ uint32_t warp_mma_lane_a_tile(int lane, int m0, int ld) {
  return kATrans ? tile_offset<kSwizzle>((lane >> 4) * 8 + (lane & 7), m0 / 8 + ((lane >> 3) & 1), ld)
                 : tile_offset<kSwizzle>(m0 + (lane & 15), lane >> 4, ld);
}
template <bool kSwizzle, bool kBTrans>
__device__ __forceinline__ uint32_t warp_mma_lane_b_tile(int lane, int n0, int ld) {
  return kBTrans ? tile_offset<kSwizzle>(n0 + (lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1, ld)
                 : tile_offset<kSwizzle>(((lane >> 3) & 1) * 8 + (lane & 7), n0 / 8 + (lane >> 4), ld);
}
// warp_mma_32x32_u32 on padded (kSwizzle false: that function) or swizzled tiles, from the lane
// addresses of warp_mma_lane_a_tile / _b_tile: the same fragments and mma sequence (the same sums,
// bit for bit). Swizzled, a step of 16 elements along a row (2 chunks) is an XOR of the lane's
// address (32 bytes per block mt or np; 2 k0 bytes per k step: the logical chunk a lane starts
// from has those bits clear, so the XOR adds them) inside a 128-byte group, an add of 128 from one
// group to the next (rows need not be a power of two of groups); a step of rows an immediate (16
// rows keep r % 8).
// A swizzled row's lane address `a` moved k0 elements along the row (k0 a multiple of 16; the
// logical chunk the lane starts from has bits 1 and 2 clear): an XOR inside its 128-byte group, an
// add of 128 bytes per group from one group to the next.
__device__ __forceinline__ uint32_t swizzled_k_step(uint32_t a, int k0) {
  return (a ^ (2u * (k0 % 64))) + 128 * (k0 / 64);
}
template <bool kSwizzle, bool kATrans, bool kBTrans, int kLda, int kLdb, int kKdim>
__device__ __forceinline__ void warp_mma_32x32_tile(float (&acc)[2][4][4], uint32_t a, uint32_t b) {
  if constexpr (!kSwizzle) {
    warp_mma_32x32_u32<kATrans, kBTrans, kLda, kLdb, kKdim>(acc, a, b);
  } else {
    static_assert(kKdim % 16 == 0 && kLda % 64 == 0 && kLdb % 64 == 0, "kdim: a multiple of 16; rows of 128-byte groups");
#pragma unroll
    for (int k0 = 0; k0 < kKdim; k0 += 16) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        if (kATrans)
          ldsm_x4_trans_u32(af[mt], (a ^ (32u * mt)) + 2 * k0 * kLda);
        else
          ldsm_x4_u32(af[mt], swizzled_k_step(a, k0) + 2 * 16 * mt * kLda);
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        if (kBTrans)
          ldsm_x4_u32(bf[np], swizzled_k_step(b, k0) + 2 * 16 * np * kLdb);
        else
          ldsm_x4_trans_u32(bf[np], (b ^ (32u * np)) + 2 * k0 * kLdb);
      }
      mma_32x32_k16(acc, af, bf);
    }
  }
}
// One k step (16) of a warp's 16×32 block of C += A·B: A's fragment given (af, rows m0 .. m0 + 15:
// from ldmatrix or built in registers), B stored [k][n] read by ldmatrix.trans from the lane's
// address b for this k step: warp_mma_lane_b<false> (padded: the second 16 columns 32 bytes on) or
// warp_mma_lane_b_tile<kSwizzle, false> with n0 a multiple of 32 (swizzled: an XOR of 32 bytes, as
// warp_mma_32x32_tile's np). The B fragments and the mma sequence of warp_mma_32x32_u32's row block
// mt (kBTrans = false): the same sums per accumulator.
template <bool kSwizzle>
__device__ __forceinline__ void warp_mma_16x32_k16_tile(float (&acc)[4][4], const uint32_t (&af)[4], uint32_t b) {
  uint32_t bf[2][4];
#pragma unroll
  for (int np = 0; np < 2; ++np) ldsm_x4_trans_u32(bf[np], kSwizzle ? (b ^ (32u * np)) : b + 32u * np);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) mma_bf16_16816(acc[nt], af, bf[nt / 2][2 * (nt % 2)], bf[nt / 2][2 * (nt % 2) + 1]);
}
// The lane's element offsets of warp_mma_32x32's ldmatrix rows at k0 = 0, mt = 0 (np = 0) in a tile
// of row stride ld: A (rows m0 ..) and B (columns n0 ..).
template <bool kATrans>
__device__ __forceinline__ int warp_mma_lane_a(int lane, int m0, int ld) {
  return kATrans ? ((lane >> 4) * 8 + (lane & 7)) * ld + m0 + ((lane >> 3) & 1) * 8 : (m0 + (lane & 15)) * ld + (lane >> 4) * 8;
}
template <bool kBTrans>
__device__ __forceinline__ int warp_mma_lane_b(int lane, int n0, int ld) {
  return kBTrans ? (n0 + (lane >> 4) * 8 + (lane & 7)) * ld + ((lane >> 3) & 1) * 8
                 : (((lane >> 3) & 1) * 8 + (lane & 7)) * ld + n0 + (lane >> 4) * 8;
}

// Calls f(row, col, x) for each accumulator x of a warp's 32×32 block (warp_mma_32x32's acc): row
// m0 + 16 mt + g + 8 (r / 2), column n0 + 8 nt + 2 q + r % 2 of acc[mt][nt][r].
template <typename F>
__device__ __forceinline__ void for_each_acc(float (&acc)[2][4][4], int m0, int n0, F&& f) {
  const int lane = threadIdx.x & 31, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) f(m0 + 16 * mt + g + 8 * (r / 2), n0 + 8 * nt + 2 * q + r % 2, acc[mt][nt][r]);
}
// The same elements as adjacent pairs: f(row, even column, x at it, x at the column after).
template <typename F>
__device__ __forceinline__ void for_each_acc_pair(float (&acc)[2][4][4], int m0, int n0, F&& f) {
  const int lane = threadIdx.x & 31, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        f(m0 + 16 * mt + g + 8 * hf, n0 + 8 * nt + 2 * q, acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1]);
}

// A wgmma operand descriptor for a tile in the 128-byte swizzle (the layout of the swizzled tiles
// above with rows of exactly 64 bf16: row r of 128 bytes, 16-byte chunk c stored at c ^ (r % 8),
// eight rows an atom of 1024 bytes, the tile starting on a 1024-byte boundary). Fields (PTX ISA,
// "matrix descriptor"): start address >> 4 (bits 0-13), leading-dimension byte offset >> 4
// (16-29), stride-dimension byte offset >> 4 (32-45), swizzle mode 1 = 128 bytes (62-63).
// CUTLASS's canonical forms (T = 8 bf16 = 16 bytes):
//   K-major:  ((8, m), (T, 2k)) : ((8T, SBO), (1, T))       rows of 64 k, 8-row atoms SBO apart
//   MN-major: ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)) rows of 64 m/n per k, 8-k atoms SBO apart
// The tiles here are 64 wide in m / n, so LBO (the next 64 m / n) is never used: the M/N-major
// descriptors set it to the atom size anyway, as SBO, the K-major ones (which have no LBO) to 0. A k step of 16 moves the start by 32 bytes inside a K-major row (the
// hardware applies the XOR to the address it forms, so the tile's alignment is what matters) or by
// two atoms (2048 bytes) in an MN-major tile.
__host__ __device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_address, uint32_t lbo_bytes,
                                                             uint32_t sbo_bytes) {
  return uint64_t((smem_address & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}
constexpr uint32_t kWgmmaAtom = 1024;  // bytes: 8 rows of 128

}  // namespace rhoscan::cuda_detail
