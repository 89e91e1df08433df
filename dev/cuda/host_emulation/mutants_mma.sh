#!/usr/bin/env bash
# Sensitivity check of emulate_mma.cpp: plants known bugs (one at a time) in a copy of src/cuda
# and expects run_mma's check to fail on each (a mutant that passes is reported as MISSED).
#   dev/cuda/host_emulation/mutants_mma.sh [NAME_SUBSTRING]      (from anywhere; a few minutes)
# NAME_SUBSTRING: only the mutants whose name contains it (e.g. "scores:"). The hv1 mutants are
# quicker with EMU_PROBLEMS=Hv1 (only the Hv = 1 problems: EMU_PROBLEMS=Hv1 mutants_mma.sh hv1:).
set -u
cd "$(dirname "$0")/../../.."
root=$(pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$root/dev/cuda/host_emulation/shim.h" "$dir/"
# name | file | text | replacement | EMU_CP_ASYNC mode | expected (caught, or missed where the
# mutant is known to pass: a missing cp.async wait with eager copies shows why the default defers)
# [| extra compiler flags, e.g. to build a kernel version that is not the default, so that a
# mutant's text lands in compiled code [| the emulation's kernel substring: only those cases run]]
mutants=(
  "A rows of ldmatrix (warp_mma_32x32)|src/cuda/mma.cuh|ldsm_x4(a[mt], As + (m + (lane & 15)) * lda + k0 + (lane >> 4) * 8)|ldsm_x4(a[mt], As + (m + (lane & 7)) * lda + k0 + (lane >> 4) * 8)|deferred|caught"
  "B trans column half (warp_mma_32x32)|src/cuda/mma.cuh|ldsm_x4_trans(b[np], Bs + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ldb + n + (lane >> 4) * 8)|ldsm_x4_trans(b[np], Bs + (k0 + (lane >> 4) * 8 + (lane & 7)) * ldb + n + ((lane >> 3) & 1) * 8)|deferred|caught"
  "accumulator column (for_each_acc)|src/cuda/mma.cuh|n0 + 8 * nt + 2 * q + r % 2|n0 + 8 * nt + 2 * q + r / 2|deferred|caught"
  "pack: a row group's stores all at its first row|src/cuda/chunk_products.cuh|        rr[k] = r;\n|        rr[k] = rr[0];\n|deferred|caught||pack_bf16"
  "pack: the next row without the head's carry into b|src/cuda/chunk_products.cuh|    b += db + carry_add(h, dh, carry, Hr);|    b += db; carry_add(h, dh, carry, Hr);|deferred|caught||pack_bf16"
  "pack: the row group's loads without advancing the row|src/cuda/chunk_products.cuh|          r += warps;\n          next_row();|          r += warps;|deferred|caught||pack_bf16"
  "states: no wait for the next stage|src/cuda/chunk_products.cuh|      cp_async_wait<NS - 1>();\n|\n|deferred|caught"
  "states: no wait (eager cp.async misses it)|src/cuda/chunk_products.cuh|      cp_async_wait<NS - 1>();\n|\n|eager|missed"
  "states: the next item's first tiles from the wrong item (the pipeline across items)|src/cuda/chunk_products.cuh|it += target / d.nC * gridDim.x,|it += target / d.nC,|deferred|caught"
  "states: bf16 staging stores without the swizzle|src/cuda/chunk_products.cuh|return (s0 ^ (8 * nt)) + (16 * mt + 8 * hf) * 32;|return (s0 + 8 * nt) + (16 * mt + 8 * hf) * 32;|deferred|caught"
  "states: the last chunk's decay a^Cn from the first chunk's length|src/cuda/chunk_products.cuh|ipow(al, static_cast<int>(d.chunk_len(d.nC - 1)))|ipow(al, static_cast<int>(d.chunk_len(0)))|deferred|caught"
  "scores: a^16 off by one|src/cuda/chunk_products.cuh|f16[e] = a8[e] * a8[e], f32[e]|f16[e] = a8[e] * a8[e] * a[e], f32[e]|deferred|caught"
  "scores: diagonal pairs one short|src/cuda/chunk_products.cuh|for (int m = n + 1; m < 8; ++m) {|for (int m = n + 1; m < 7; ++m) {|deferred|caught"
  "scores: diagonal triangle without its decay|src/cuda/chunk_products.cuh|            if (m < 7) r *= a[e];\n|\n|deferred|caught"
  "scores: diagonal quadrant with the wrong power|src/cuda/chunk_products.cuh|put_pair(W.xs8[8 * s16 + m], lane, u0, u1);|put_pair(W.xs8[8 * s16 + m], lane, u0 * a8[0], u1 * a8[1]);|deferred|caught"
  "scores: diagonal quadrant rows of the upper half|src/cuda/chunk_products.cuh|i = 16 * sb + 8 + g,|i = 16 * sb + g,|deferred|caught"
  "scores: diagonal quadrant A rows 8-15 from the next block|src/cuda/chunk_products.cuh|ldsm_x4(af, A + (lane \\& 7) * kScS + k0 + 16 * kk|ldsm_x4(af, A + (lane \\& 15) * kScS + k0 + 16 * kk|deferred|caught"
  "scores: triangle sums to the wrong lanes|src/cuda/chunk_products.cuh|halving_step<2>(v, lane), halving_step<1>(v, lane);|halving_step<1>(v, lane), halving_step<2>(v, lane);|deferred|caught"
  "output: P not transposed for dv|src/cuda/chunk_products.cuh|pm = Pc[kDv ? j * C + i : i * C + j];|pm = Pc[i * C + j];|deferred|caught"
  "output: intra-chunk Y tile without the column offset|src/cuda/chunk_products.cuh|fetch_rows(hs, HS, Y + yr * d.Ep + e0, d.Ep, ET);|fetch_rows(hs, HS, Y + yr * d.Ep, d.Ep, ET);|deferred|caught"
  "output: no barrier after the stage's wait (a race: caught when the threads interleave)|src/cuda/chunk_products.cuh|        cp_async_wait<0>();\n      }\n      __syncthreads();\n      warp_mma_32x32<false, false>|        cp_async_wait<0>();\n      }\n      warp_mma_32x32<false, false>|deferred|caught"
  "readback: lo plane dropped (H's lo tile fetched from the hi plane)|src/cuda/backward.cu|cp_async16(tile(stage, 1) + o, Hs_lo + so);|cp_async16(tile(stage, 1) + o, Hs + so);|deferred|caught"
  "readback v2: a fetch piece's shared row swapped with its neighbour's|src/cuda/backward.cu|const uint32_t f_dst = s0 + 2 * (fr * kRbS + fp);|const uint32_t f_dst = s0 + 2 * ((fr ^ 1) * kRbS + fp);|deferred|caught||chunk_readback_mma"
  "readback v2: a fetch piece's shared column of the neighbouring piece (equivalent: every tile's columns swap alike, a permutation of the E contraction)|src/cuda/backward.cu|const uint32_t f_dst = s0 + 2 * (fr * kRbS + fp);|const uint32_t f_dst = s0 + 2 * (fr * kRbS + (fp ^ 8));|deferred|missed||chunk_readback_mma"
  "readback v2: the second piece's state sources 16 rows on, not 32|src/cuda/backward.cu|s32 = s + 32 * Ep;|s32 = s + 16 * Ep;|deferred|caught||chunk_readback_mma"
  "readback v2: the lo pass's A fragments at the hi plane's offset|src/cuda/backward.cu|warp_mma_32x32_u32<false, true, kRbS, kRbS, 64>(acc, a + kTileB, b);|warp_mma_32x32_u32<false, true, kRbS, kRbS, 64>(acc, a, b);|deferred|caught||chunk_readback_mma"
  "readback v2: the split values' pass with Y's hi tile (remainders' offset dropped)|src/cuda/backward.cu|if constexpr (kLo) warp_mma_32x32_u32<false, true, kRbS, kRbS, 64>(acc, a, b + 2 * kTileB);|if constexpr (kLo) warp_mma_32x32_u32<false, true, kRbS, kRbS, 64>(acc, a, b);|deferred|caught||chunk_readback_mma"
  "readback v2: every chunk with the last chunk's length (clamp, zero fill, stores)|src/cuda/backward.cu|const int Cn = c == nC - 1 ? CnLast : C;|const int Cn = CnLast;|deferred|caught||chunk_readback_mma"
  "readback v2: the short chunk's clamp one row short (min(r, Cn - 2))|src/cuda/backward.cu|yr0 = min(fr, Cn - 1), yr1 = min(fr + 32, Cn - 1);|yr0 = min(fr, Cn - 2), yr1 = min(fr + 32, Cn - 2);|deferred|caught||chunk_readback_mma"
  "readback v2: the short chunk's zero-fill sizes of the two pieces swapped|src/cuda/backward.cu|yb0 = fr < Cn ? 16u : 0u, yb1 = fr + 32 < Cn ? 16u : 0u;|yb0 = fr + 32 < Cn ? 16u : 0u, yb1 = fr < Cn ? 16u : 0u;|deferred|caught||chunk_readback_mma"
  "readback v2: the block's first chunk without dividing by the latent tiles|src/cuda/backward.cu|c = static_cast<int>(blockIdx.x / nlt % nC),|c = static_cast<int>(blockIdx.x % nC),|deferred|caught||chunk_readback_mma"
  "readback v2: HdH with one bf16 pair's halves swapped (A_end hi)|src/cuda/backward.cu|hdh[k] += (lo_f(h0.x) + lo_f(h1.x)) * (lo_f(a0.x) + lo_f(a1.x));|hdh[k] += (lo_f(h0.x) + lo_f(h1.x)) * (hi_f(a0.x) + lo_f(a1.x));|deferred|caught||chunk_readback_mma"
  "readback v2: HdH's elements 0 and 1 summed in the other order (bitwise only)|src/cuda/backward.cu|        hdh[k] += (lo_f(h0.x) + lo_f(h1.x)) * (lo_f(a0.x) + lo_f(a1.x));\n        hdh[k] += (hi_f(h0.x) + hi_f(h1.x)) * (hi_f(a0.x) + hi_f(a1.x));\n|        hdh[k] += (hi_f(h0.x) + hi_f(h1.x)) * (hi_f(a0.x) + hi_f(a1.x));\n        hdh[k] += (lo_f(h0.x) + lo_f(h1.x)) * (lo_f(a0.x) + lo_f(a1.x));\n|deferred|caught||chunk_readback_mma"
  "readback v2: the full blocks' row pointer one row per (nt, cc)|src/cuda/backward.cu|p += cc == 0 ? L : 7 * L;|p += L;|deferred|caught||chunk_readback_mma"
  "readback v2: the U warps' B fragments from G's tile|src/cuda/backward.cu|(is_u ? 5 * kTileB : 4 * kTileB)|(4 * kTileB)|deferred|caught||chunk_readback_mma"
  "cross: a split's partial left out of the sum|src/cuda/quadratic.cuh|for (int s = 1; s < nsplit; ++s) acc +=|for (int s = 2; s < nsplit; ++s) acc +=|deferred|caught"
  "cross: a key fragment's upper 8 latents with the lower ones' factors (the warp tile)|src/cuda/quadratic.cuh|bf[c][np][3] = scaled(bf[c][np][3], f1)|bf[c][np][3] = scaled(bf[c][np][3], f0)|deferred|caught"
  "cross v3: the second row block's factor at the first one's distance|src/cuda/quadratic.cuh|max((cr ? xI1 : xI0) - (ck ? kJ1 : kJ0) - 1, 0) * C|max(xI0 - (ck ? kJ1 : kJ0) - 1, 0) * C|deferred|caught"
  "cross v3: no barrier before a stage is read and refilled|src/cuda/quadratic.cuh|      __syncthreads();          // ... and everyone's; the stage|      // ... and everyone's; the stage|deferred|caught"
  "cross v3: the stage read before its tile has landed|src/cuda/quadratic.cuh|cp_async_wait<NS - 2>();  // this thread's copies|cp_async_wait<NS - 1>();  // this thread's copies|deferred|caught"
  "cross v3: every diagonal item as the first (blocks (5, 4), (7, 6) of eight chunks never written)|src/cuda/quadratic.cuh|const int64_t t = g - R;|const int64_t t = 0;|deferred|caught"
  "states v2: K pieces' shared rows KRS - 8 apart (a fixed piece's row wrong)|src/cuda/chunk_products.cuh|d.Lp, std::integral_constant<int, KRS>{}, 2 * KRS * KS,|d.Lp, std::integral_constant<int, KRS>{}, 2 * (KRS - 8) * KS,|deferred|caught||chunk_states_mma"
  "states v2: V pieces' shared column of the neighbouring piece (a fixed piece's column wrong)|src/cuda/chunk_products.cuh|v_dst = s0 + kVOff + 2 * (vr0 * VS + vp);|v_dst = s0 + kVOff + 2 * (vr0 * VS + (vp ^ 8));|deferred|caught||chunk_states_mma"
  "states v2: the running token row moves forward in reverse|src/cuda/chunk_products.cuh|ft_step = kReverse ? -C : C;|ft_step = C;|deferred|caught||chunk_states_mma"
  "states v2: the short chunk's row limit (clamp, zero fill) on every chunk|src/cuda/chunk_products.cuh|const int lim = (kReverse ? fstep == 0 : fstep == nC - 1) ? CnLast : C;|const int lim = CnLast;|deferred|caught||chunk_states_mma"
  "states v2: the running decomposition's stride one item too long (items skipped)|src/cuda/chunk_products.cuh|const int grid = static_cast<int>(gridDim.x), per_bh = nlt * net;|const int grid = static_cast<int>(gridDim.x) + 1, per_bh = nlt * net;|deferred|caught||chunk_states_mma"
  "states v2: the next item's first tiles from the current item (no advance)|src/cuda/chunk_products.cuh|        advance(nbh, nlt_, net_);\n|\n|deferred|caught||chunk_states_mma"
  "states v2: a staged row's read 9 rows on per k instead of 8 (staging offset)|src/cuda/chunk_products.cuh|\&staging[sr + k * (32 / PR) * kStStS<S>]|\&staging[sr + k * (32 / PR + 1) * kStStS<S>]|deferred|caught||chunk_states_mma"
  "states v2: the forward stores' state row not advanced per chunk|src/cuda/chunk_products.cuh|const int hr_step = kReverse ? -static_cast<int>(d.Lp) : static_cast<int>(d.Lp);|const int hr_step = kReverse ? -static_cast<int>(d.Lp) : 0;|deferred|caught||chunk_states_mma"
  "states v2: init's row pointer one row per (mt, hf) instead of 8|src/cuda/chunk_products.cuh|row += 8 * init.s[2];|row += init.s[2];|deferred|caught||chunk_states_mma"
  "states v2: the lo pass's B fragments from the hi plane (split values)|src/cuda/chunk_products.cuh|bv + (kVloOff - kVOff) + j * kKV|bv + j * kKV|deferred|caught||chunk_states_mma"
  "states v2: the k steps of a short chunk one short (Cn / 16)|src/cuda/chunk_products.cuh|const int nk = (Cn + 15) / 16;|const int nk = Cn / 16;|deferred|caught||chunk_states_mma"
  "output v2: X pieces' shared row of the neighbouring row (a fixed piece's row wrong)|src/cuda/chunk_products.cuh|x_dst = s0 + 2 * (xr0 * XS + xp)|x_dst = s0 + 2 * ((xr0 ^ 1) * XS + xp)|deferred|caught||chunk_output"
  "output v2: S and Y pieces' shared column of the neighbouring piece (a fixed piece's column wrong)|src/cuda/chunk_products.cuh|h_dst = s0 + kHOff + 2 * (hr0 * HS + hp)|h_dst = s0 + kHOff + 2 * (hr0 * HS + (hp ^ 8))|deferred|caught||chunk_output"
  "output v2: the running S source moves by 64 elements per L tile, not 64 rows|src/cuda/chunk_products.cuh|xg += LT, hg += static_cast<int64_t>(LT) * Ep;|xg += LT, hg += LT;|deferred|caught||chunk_output"
  "output v2: the short chunk's row limit (clamp, zero fill, stores) from the first chunk|src/cuda/chunk_products.cuh|const int Cn = c == nC - 1 ? CnLast : C, e0 = et * ET;|const int Cn = c == 0 ? CnLast : C, e0 = et * ET;|deferred|caught||chunk_output"
  "output v2: the running decomposition's stride one item too long (items skipped)|src/cuda/chunk_products.cuh|const int grid = static_cast<int>(gridDim.x), per_bh = nC * net;|const int grid = static_cast<int>(gridDim.x) + 1, per_bh = nC * net;|deferred|caught||chunk_output"
  "output v2: the first item's chunk without the division by the column tiles (items skipped)|src/cuda/chunk_products.cuh|int c = static_cast<int>(blockIdx.x) / net % nC, et|int c = static_cast<int>(blockIdx.x) % nC, et|deferred|caught||chunk_output"
  "output v2: dv's Pm not transposed (element path, C < 64)|src/cuda/chunk_products.cuh|pm[u][k] = !p_vec \&\& jj < Cn \&\& i0 + k < jj ? Pc[jj * C + i0 + k] : 0.0f;|pm[u][k] = !p_vec \&\& jj < Cn \&\& i0 + k < jj ? Pc[(i0 + k) * C + jj] : 0.0f;|deferred|caught||chunk_output"
  "output v2: forward Pm's float4 path only for pieces wholly below the diagonal (the straddling ones left zero)|src/cuda/chunk_products.cuh|if (p_vec \&\& i < Cn \&\& xp < i) {|if (p_vec \&\& i < Cn \&\& xp + 8 <= i) {|deferred|caught||chunk_output"
  "output v2: the packed 16-bit stores at the neighbouring 8 columns|src/cuda/chunk_products.cuh|*reinterpret_cast<Pair*>(row + 8 * nt)|*reinterpret_cast<Pair*>(row + 8 * (nt ^ 1))|deferred|caught||chunk_output"
  "output v2: out_ws float2 row pointer one row per (mt, hf) instead of 8|src/cuda/chunk_products.cuh|row += 8 * d.E;|row += d.E;|deferred|caught||chunk_output"
  "output v2: the lo pass's B fragments from the hi plane (split values)|src/cuda/chunk_products.cuh|warp_mma_32x32_u32<false, false, XS, HS, 64>(acc, a_ln, b_ln + kHB);|warp_mma_32x32_u32<false, false, XS, HS, 64>(acc, a_ln, b_ln);|deferred|caught||chunk_output"
  "output v2: float32 S converted with a piece's second 4 columns from its first (the fixed piece's load)|src/cuda/chunk_products.cuh|const float4 v = *reinterpret_cast<const float4*>(hs_src + 16 * r * Ep + 4);|const float4 v = *reinterpret_cast<const float4*>(hs_src + 16 * r * Ep);|deferred|caught||chunk_output"
  "final state: no wait for the step's tiles|src/cuda/quadratic.cuh|      cp_async_wait<NS - 2>();  // this step's tiles have landed|      // this step's tiles have landed|deferred|caught||final_state_mma"
  "final state: the stage read before its tiles have landed (the wait one group short)|src/cuda/quadratic.cuh|      cp_async_wait<NS - 2>();  // this step's tiles have landed|      cp_async_wait<NS - 1>();  // this step's tiles have landed|deferred|caught||final_state_mma"
  "final state: no barrier between a step's tiles landing and their reads|src/cuda/quadratic.cuh|      __syncthreads();          // ... everyone's (and the stage fetch_next|      // ... everyone's (and the stage fetch_next|deferred|caught||final_state_mma"
  "final state: no chunk factor (S not decayed before a chunk's tokens)|src/cuda/quadratic.cuh|if (c > 0) {  // S <- a^Cn_c S|if (false) {  // S <- a^Cn_c S|deferred|caught||final_state_mma"
  "final state: the last chunk's factor a^C instead of a^Cn|src/cuda/quadratic.cuh|decay_s[LT + tid] = ipow(a, CnLast);|decay_s[LT + tid] = ipow(a, C);|deferred|caught||final_state_mma"
  "final state: the lo pass dropped (split values)|src/cuda/quadratic.cuh|constexpr int kPasses = kLo ? 2 : 1,|constexpr int kPasses = 1,|deferred|caught||final_state_mma"
  "final state: the fetch cursor's next item one on, not a grid on|src/cuda/quadratic.cuh|        advance(fbh, flt, fet);\n|        fet += 1, flt += fet / net, fet %= net, fbh += flt / nlt, flt %= nlt;\n|deferred|caught||final_state_mma"
  "final state: the next sub-step's B fragments into the set in use|src/cuda/quadratic.cuh|frag_b(fb[(j + 1) % 2],|frag_b(fb[j % 2],|deferred|caught||final_state_mma"
  "final state: the next k16's A fragments into the set in use|src/cuda/quadratic.cuh|frag_a(fa[((j + 1) / kPasses) % 2],|frag_a(fa[(j / kPasses) % 2],|deferred|caught||final_state_mma"
  "final state: checked float2 stores with the pair's columns swapped|src/cuda/quadratic.cuh|*reinterpret_cast<float2*>(row + e) = make_float2(acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1])|*reinterpret_cast<float2*>(row + e) = make_float2(acc[mt][nt][2 * hf + 1], acc[mt][nt][2 * hf])|deferred|caught||final_state_mma"
  "final state: float2 stores, an odd E's last column dropped|src/cuda/quadratic.cuh|else if (e < d.E)  // (odd E|else if (false)  // (odd E|deferred|caught||final_state_mma"
  "quadratic output: the diagonal block's own token (j' <= i')|src/cuda/quadratic.cuh|j < i) ? x[k]|j <= i) ? x[k]|deferred|caught"
  "quadratic output: the V block of the next chunk|src/cuda/quadratic.cuh|const bf16* Vj = V + (bh * d.T + int64_t{J} * C) * d.Ep + e0;|const bf16* Vj = V + (bh * d.T + int64_t{J + (J < I)} * C) * d.Ep + e0;|deferred|caught"
  "quadratic output: no wait for the next stage|src/cuda/quadratic.cuh|        cp_async_wait<1>();\n|\n|deferred|caught"
  "states: split stores' lo plane dropped|src/cuda/chunk_products.cuh|if (lo) hi = __floats2bfloat162_rn(|if (false) hi = __floats2bfloat162_rn(|deferred|caught"
  "cross values: the diagonal items dropped|src/cuda/quadratic_backward.cuh|const int64_t per_pair = npairs + (Mdiag != nullptr ? d.nC : 0);|const int64_t per_pair = npairs;|deferred|caught"
  "cross values: a diagonal block into the next chunk's M slot|src/cuda/quadratic_backward.cuh|float* Mc = Mdiag + (bh * d.nC + I) * d.nsplit * C * C;|float* Mc = Mdiag + (bh * d.nC + (I + 1) % d.nC) * d.nsplit * C * C;|deferred|caught"
  "cross values: a diagonal block with the previous chunk's values|src/cuda/quadratic_backward.cuh|      I = J = k - npairs;|      I = k - npairs, J = I > 0 ? I - 1 : 0;|deferred|caught"
  "cross values: lo plane left zero|src/cuda/quadratic_backward.cuh|Mlo[o + i * kQB + j] = __float2bfloat16_rn(x - __bfloat162float(hi));|Mlo[o + i * kQB + j] = __float2bfloat16_rn(0.0f);|deferred|caught"
  "quad readback: W's lo pass from M's hi plane|src/cuda/quadratic_backward.cuh|warp_mma_32x32_u32<true, true, kQrOS, kQrMS, 64>(acc, a_op + so, b_w + so + kLoB);|warp_mma_32x32_u32<true, true, kQrOS, kQrMS, 64>(acc, a_op + so, b_w + so);|deferred|caught||quad_readback_mma"
  "quad readback: U's lo pass dropped|src/cuda/quadratic_backward.cuh|warp_mma_32x32_u32<true, false, kQrOS, kQrMS, 64>(acc, a_op + so, b_u + so + kLoB);|{}|deferred|caught||quad_readback_mma"
  "quad readback: the rows' a^C from the wrong half of the warp tile|src/cuda/quadratic_backward.cuh|return aC[wm + 16 * mt + 8 * hf + g];|return aC[wm + 16 * mt + g];|deferred|caught||quad_readback_mma"
  "quad readback: HdH' without the decay of its running sum|src/cuda/quadratic_backward.cuh|dp[mt][hf] = row_scale(mt, hf) * dp[mt][hf] + x;|dp[mt][hf] = dp[mt][hf] + x;|deferred|caught||quad_readback_mma"
  "quad readback: HdH' into slot K instead of K-1|src/cuda/quadratic_backward.cuh|(K >= 1 ? K - 1 : d.nC - 1)|(K >= 1 ? K : d.nC - 1)|deferred|caught||quad_readback_mma"
  "quad readback: split keys' third pass dropped|src/cuda/quadratic_backward.cuh|if constexpr (kKeyLo) warp_mma_32x32_u32<true, true, kQrOS, kQrMS, 64>(acc, a_op + so + (kOpLoB - kOpB), b_w + so);|if constexpr (false) warp_mma_32x32_u32<true, true, kQrOS, kQrMS, 64>(acc, a_op + so + (kOpLoB - kOpB), b_w + so);|deferred|caught||quad_readback_mma"
  "quad readback: the operand fragments' precomputed address 8 latents on|src/cuda/quadratic_backward.cuh|const uint32_t a_op = s0 + kOpB + 2 * a_lane;|const uint32_t a_op = s0 + kOpB + 2 * (a_lane + 8);|deferred|caught||quad_readback_mma"
  "quad readback: fetch into the stage being read (stage offset swapped)|src/cuda/quadratic_backward.cuh|const uint32_t so = st ? kStageB : 0u;\n      cp_async16_u32(m_dst|const uint32_t so = st ? 0u : kStageB;\n      cp_async16_u32(m_dst|deferred|caught||quad_readback_mma"
  "quad readback: M lo's tile at the hi tile's stage offset|src/cuda/quadratic_backward.cuh|cp_async16_u32(m_dst + so + kLoB, Mlo + blk);|cp_async16_u32(m_dst + so, Mlo + blk);|deferred|caught||quad_readback_mma"
  "quad readback: the operand's chunk one on (the pointer advance off by a chunk)|src/cuda/quadratic_backward.cuh|const int64_t oo = tile0 + c * cstride;|const int64_t oo = tile0 + (c + 1) * cstride;|deferred|caught||quad_readback_mma"
  "quad readback: the U steps' M block from the W steps' order (I ascending)|src/cuda/quadratic_backward.cuh|const int I = w ? K : nC - 1 - (s - K), J = w ? s : K;|const int I = w ? K : K + 1 + (s - K), J = w ? s : K;|deferred|caught||quad_readback_mma"
  "quad readback: the tail chunk's row limit on every chunk (the hoisted predicate)|src/cuda/quadratic_backward.cuh|const int lim = c == nC - 1 ? lim_last : lim_full;|const int lim = lim_last;|deferred|caught||quad_readback_mma"
  "quad readback: HdH' dot with the bf16 pair's halves swapped|src/cuda/quadratic_backward.cuh|x += __uint_as_float(r << 16) * acc[mt][nt][2 * hf];|x += __uint_as_float(r \& 0xffff0000u) * acc[mt][nt][2 * hf];|deferred|caught||quad_readback_mma"
  "quad readback: HdH' dot with the fragment's row and token halves swapped|src/cuda/quadratic_backward.cuh|const uint32_t r = xf[mt][nt / 2][hf + 2 * (nt % 2)];|const uint32_t r = xf[mt][nt / 2][2 * hf + (nt % 2)];|deferred|caught||quad_readback_mma"
  "quad readback: HdH' fragments of the first token half in both warp columns|src/cuda/quadratic_backward.cuh|const uint32_t a_xk = s0 + kXkB + 2 * (a_lane + wn * kQrOS);|const uint32_t a_xk = s0 + kXkB + 2 * a_lane;|deferred|caught||quad_readback_mma"
  "quad readback: no wait for the step's tiles|src/cuda/quadratic_backward.cuh|fetch(s + 1, st ^ 1);  // into the stage that step s - 1 consumed\n        cp_async_wait<1>();|fetch(s + 1, st ^ 1);  // into the stage that step s - 1 consumed|deferred|caught||quad_readback_mma"
  "quad readback: U's lo pass from M's hi plane|src/cuda/quadratic_backward.cuh|warp_mma_32x32_u32<true, false, kQrOS, kQrMS, 64>(acc, a_op + so, b_u + so + kLoB);|warp_mma_32x32_u32<true, false, kQrOS, kQrMS, 64>(acc, a_op + so, b_u + so);|deferred|caught||quad_readback_mma"
  "quad readback: W and U stores' row pointer one row per (nt, c)|src/cuda/quadratic_backward.cuh|p += c == 0 ? d.L : 7 * d.L;|p += d.L;|deferred|caught||quad_readback_mma"
  "quad readback: split keys' tile at the operand's offset|src/cuda/quadratic_backward.cuh|cp_async16_u32(o_dst + so + (kOpLoB - kOpB) + 2 * 16 * kQrOS * k, ol + k * o_step, src_bytes(lim, k));|cp_async16_u32(o_dst + so + 2 * 16 * kQrOS * k, ol + k * o_step, src_bytes(lim, k));|deferred|caught||quad_readback_mma"
  "quad readback (warp_mma_32x32_u32): B's k halves of the transposing load swapped|src/cuda/mma.cuh|ldsm_x4_trans_u32(bf[np], b + 2 * (k0 * kLdb + 16 * np));|ldsm_x4_trans_u32(bf[np], b + 2 * ((k0 ^ 16) * kLdb + 16 * np));|deferred|caught||quad_readback_mma"
  "quad dv: the intra-chunk step reads all of P (its upper triangle)|src/cuda/quadratic_backward.cuh|(s > 0 |(s >= 0 |deferred|caught"
  "bwd_local v5: Y's Horner step without a^16 (every earlier sub-block at distance 0)|src/cuda/backward.cu|        y0[r] = u * y0[r];|        y0[r] = y0[r];|deferred|caught||bwd_local v5"
  "bwd_local v5: Y1's Horner step without f(16) y0 (da's cross term)|src/cuda/backward.cu|y1[r] = u * y1[r] + fu * y0[r];|y1[r] = u * y1[r];|deferred|caught||bwd_local v5"
  "bwd_local v5: the lo·hi pass dropped|src/cuda/backward.cu|    mma_bf16_16816(acc, al, bh[0], bh[1]);\n|\n|deferred|caught||bwd_local v5"
  "bwd_local v5: Z's block of M not transposed|src/cuda/backward.cu|a_frag(true, I, K, ah, al);|a_frag(false, K, I, ah, al);|deferred|caught||bwd_local v5"
  "bwd_local v5: no barrier between M's split and the products|src/cuda/backward.cu|    __syncthreads();  // M's hi / lo tiles complete\n|\n|deferred|caught||bwd_local v5"
  "bwd_local v5: no barrier between the products and the N walk (red, the tables in ns)|src/cuda/backward.cu|    __syncthreads();  // w, u, red[0] written; the tables (ns) are consumed\n|\n|deferred|caught||bwd_local v5"
  "bwd_local v5: the FFMA loop from j = 0 (the products' pairs counted twice)|src/cuda/backward.cu|for (int j0 = i0 \& ~15; j0 < i0;|for (int j0 = 0; j0 < i0;|deferred|caught||bwd_local v5"
  "bwd_local v5: M's rows past Cn not masked (stale rows of ms for C < 64, NaN in the emulation)|src/cuda/backward.cu|    const bool ok = i < Cn;\n    uint32_t hi, lo;|    const bool ok = true;\n    uint32_t hi, lo;|deferred|caught||bwd_local v5"
  "bwd_local v5: M's tile by cp.async from the wrong offsets (rows 32-63 from rows 0-31)|src/cuda/backward.cu|Mc + 4 * threadIdx.x + 1024 * k);|Mc + 4 * threadIdx.x + 1024 * (k % 2));|deferred|caught||bwd_local v5"
  "bwd_local v5: 1/s of the group's first row for all four|src/cuda/backward.cu|const float rs = ms[i][LT];|const float rs = ms[i0][LT];|deferred|caught||bwd_local v5"
  "bwd_local v5: N walk, a segment's start without the first segment (the wrong start)|src/cuda/backward.cu|for (int v = 0; v < warp; ++v) {|for (int v = 1; v < warp; ++v) {|deferred|caught||bwd_local v5"
  "bwd_local v5: no barrier between the segments' z and their use (segment starts)|src/cuda/backward.cu|    __syncthreads();  // the segments' z\n|\n|deferred|caught||bwd_local v5"
  "bwd_local v5: reverse scan, a segment's carry without its decay power a^8|src/cuda/backward.cu|cy[0] = xv.x + a8[0] * cy[0];\n          cy[1] = xv.y + a8[1] * cy[1];|cy[0] = xv.x + cy[0];\n          cy[1] = xv.y + cy[1];|deferred|caught||bwd_local v5"
  "bwd_local v5: reverse scan, the carry into ib without a^(e0-1-i)|src/cuda/backward.cu|ib = make_float2(ib.x + pw[0] * cy[0], ib.y + pw[1] * cy[1]);|ib = make_float2(ib.x + cy[0], ib.y + cy[1]);|deferred|caught||bwd_local v5"
  "bwd_local v5: no barrier between the segments' x and the carries|src/cuda/backward.cu|      __syncthreads();  // the segments' x\n|\n|deferred|caught||bwd_local v5"
  "bwd_local v5: ibn without the carry term|src/cuda/backward.cu|make_float2(il.x + cy[0] * y.x, il.y + cy[1] * y.y)|make_float2(il.x, il.y)|deferred|caught||bwd_local v5"
  "bwd_local v5: bsum without the later segments' carry|src/cuda/backward.cu|bsum[0] = x.x + a8[0] * cy[0];|bsum[0] = x.x;|deferred|caught||bwd_local v5"
  "bwd_local v5: zsum, the last segment's length taken as 8 at a tail chunk|src/cuda/backward.cu|aT = ipow64(a[u], Cn - 8 * (nseg - 1))|aT = ipow64(a[u], 8)|deferred|caught||bwd_local v5"
  "bwd_local v5: gc reduce-scatter, xor 8 keeps the partner's row (lane mix-up)|src/cuda/backward.cu|float gc = b3 ? k1 : k0;|float gc = b3 ? k0 : k1;|deferred|caught||bwd_local v5"
  "bwd_local v5: gc reduce-scatter, a lane stores its neighbour row's total|src/cuda/backward.cu|const int i = i0 + lane / 8;|const int i = i0 + (lane / 8 ^ 1);|deferred|caught||bwd_local v5"
  "bwd_local v5: the running decomposition wraps lt one step late (lt = nlt kept: an item past L)|src/cuda/backward.cu|    const int c1 = lt >= nlt;|    const int c1 = lt > nlt;|deferred|caught||bwd_local v5"
  "bwd_local v5: the running decomposition drops c's carry into h (b, h of the next pair)|src/cuda/backward.cu|    h += dh + c2;|    h += dh;|deferred|caught||bwd_local v5"
  "bwd_local v5: the running decomposition drops h's carry into b|src/cuda/backward.cu|    b += db + c3;|    b += db;|deferred|caught||bwd_local v5"
  "bwd_local v5: a fixed piece's shared row one off its global row (rows pr ^ 1)|src/cuda/backward.cu|const uint32_t pso = 4 * (pr * RS + px);|const uint32_t pso = 4 * ((pr ^ 1) * RS + px);|deferred|caught||bwd_local v5"
  "bwd_local v5: the pieces' row limit from C, not Cn (the tail chunk's rows past Cn not zero-filled)|src/cuda/backward.cu|const int lim = l0 + px < L ? Cn - pr : 0;|const int lim = l0 + px < L ? C - pr : 0;|deferred|caught||bwd_local v5"
  "bwd_local v5: the pieces' row limit without the check on L (a latent tile past L read)|src/cuda/backward.cu|const int lim = l0 + px < L ? Cn - pr : 0;|const int lim = Cn - pr;|deferred|caught||bwd_local v5"
  "bwd_local v5: q's piece pointer a half step on (8 rows, not 16)|src/cuda/backward.cu|qp += 16 * q.s[2])|qp += 8 * q.s[2])|deferred|caught||bwd_local v5"
  "bwd_local v5: dqp's float4 store at the next 4 latents|src/cuda/backward.cu|*reinterpret_cast<float4*>(p + 16 * k * L) = make_float4(|*reinterpret_cast<float4*>(p + 16 * k * L + 4) = make_float4(|deferred|caught||bwd_local v5"
  "bwd_local v5: dap, Bsum, Zs of both latents at the lane's first|src/cuda/backward.cu|const int64_t o = cb + x0 + u;|const int64_t o = cb + x0;|deferred|caught||bwd_local v5"
  "bwd_local v5: N_0 from pair 0's rows of Nc (the [bh][nC + 1] offset without bh L)|src/cuda/backward.cu|ms[xc][LT + 1] = xok ? Nc[cb + bh * L + xc] : 0.0f;|ms[xc][LT + 1] = xok ? Nc[cb + xc] : 0.0f;|deferred|caught||bwd_local v5"
  "bwd_local v5: both latents' decay from the lane's first|src/cuda/backward.cu|const float a[2] = {ms[x0][LT + 2], ms[x0 + 1][LT + 2]};|const float a[2] = {ms[x0][LT + 2], ms[x0][LT + 2]};|deferred|caught||bwd_local v5"
  "bwd_local v5: the full-segment path of the reverse scan taken on a short segment|src/cuda/backward.cu|if (e0 == s0 + 8) {  // (the local recurrence, a full segment)|if (e0 > s0) {  // (the local recurrence, a full segment)|deferred|caught||bwd_local v5"
  "bwd_local v5: 1/s of the pair's first chunk for every chunk (the row base without c C)|src/cuda/backward.cu|1.0f / s[row0 + threadIdx.x]|1.0f / s[bh * d.T + threadIdx.x]|deferred|caught||bwd_local v5"
  "final state: the full-tile fast path at a partial tile (its condition on Lp, Ep instead of L, E)|src/cuda/quadratic.cuh|if (pairs && l0 + wm + 64 <= d.L && e0 + wn + 64 <= d.E) {|if (pairs && l0 + wm + 64 <= d.Lp && e0 + wn + 64 <= d.Ep) {|deferred|caught||final_state_mma"
  "final state: the running item decode drops the column tiles' carry|src/cuda/quadratic.cuh|lt += dlt + c1;|lt += dlt;|deferred|caught||final_state_mma"
  "final state: a full tile's float2 stores at the wrong column immediate|src/cuda/quadratic.cuh|*reinterpret_cast<float2*>(row + 8 * nt)|*reinterpret_cast<float2*>(row + 8 * (nt ^ 1))|deferred|caught||final_state_mma"
  "final state: the hoisted row limit from the wrong chunk (the short last one at chunk 0)|src/cuda/quadratic.cuh|const int lim = (fstep == nC - 1 ? CnLast : C) - row0;|const int lim = (fstep == 0 ? CnLast : C) - row0;|deferred|caught||final_state_mma"
  "final state: the A fragments from stage 0 at every step|src/cuda/quadratic.cuh|const uint32_t a_st = a_ln + so, b_st = b_ln + so;|const uint32_t a_st = a_ln, b_st = b_ln + so;|deferred|caught||final_state_mma"
  "final state: the lo pass's B fragments from the hi plane (split values)|src/cuda/quadratic.cuh|b_st + pass * kVloB|b_st|deferred|caught||final_state_mma"
  "final state: the fetch's running token row one short per chunk|src/cuda/quadratic.cuh|        ft += d.C;|        ft += d.C - 1;|deferred|caught||final_state_mma"
  "final state: h of bh in 32-bit without the quotient's multiple of H|src/cuda/quadratic.cuh|b = q, h = x - q * H;|b = q, h = x - q;|deferred|caught||final_state_mma"
  "final state: a full tile's row pointer one row per (mt, hf) instead of 8|src/cuda/quadratic.cuh|row += 8 * out.s[2];|row += out.s[2];|deferred|caught||final_state_mma"
  "final state: sub-batches (past 2^30 pairs) with rho not moved to the first pair's head|src/cuda/quadratic.cuh|+ b0 * out.s[0] + h0 * out.s[1];|+ b0 * out.s[0];|deferred|caught||final_state_mma, sub-batches"
  "hv1: pack: the per-row copy one batch row short|src/cuda/chunk_products.cuh|rows = d.v_packed_rows() * d.T;|rows = (d.v_packed_rows() - (d.v_rows ? 1 : 0)) * d.T;|deferred|caught||pack_bf16"
  "hv1: pack: a per-row copy's b from the pair's b of the row index|src/cuda/chunk_products.cuh|b = d.v_rows ? d.bh0 / d.H + bh : d.b_of(bh)|b = d.b_of(bh)|deferred|caught||pack_bf16"
  "hv1: states v2: the values' row of the pair within an item (the first step's right)|src/cuda/chunk_products.cuh|const int vd = v_delta(bh);|const int vd = 0;|deferred|caught||chunk_states_mma forward"
  "hv1: states v2: the next item's first values' row of the current item|src/cuda/chunk_products.cuh|fetch(stage ^ 1, 0, ft, v_delta(nbh), nlt_, net_);|fetch(stage ^ 1, 0, ft, vd, nlt_, net_);|deferred|caught||chunk_states_mma forward"
  "hv1: output v2: Y of the pair's row (values per batch row)|src/cuda/chunk_products.cuh|const int ydelta = kDv ? 0 : d.v_row_delta32(bh) * static_cast<int>(d.T);|const int ydelta = 0;|deferred|caught||chunk_output_mma forward"
  "hv1: readback v2: v of the pair's row|src/cuda/backward.cu|const int64_t vdo = d.v_rows ? (d.v_row(bh) - bh) * d.T * Ep : 0;|const int64_t vdo = 0;|deferred|caught||chunk_readback_mma"
  "hv1: final state: V's row not moved at the next item|src/cuda/quadratic.cuh|        if (fbh < d.nbh) fvd = int64_t{d.v_row_delta32(fbh)} * d.T;\n|\n|deferred|caught||final_state_mma"
  "hv1: cross_values: v of the pair's row|src/cuda/quadratic_backward.cuh|vb + (d.v_row(bh) * d.T + J * d.C) * d.Ep|vb + (bh * d.T + J * d.C) * d.Ep|deferred|caught||cross_values_mma"
  "hv1: quadratic output: V of the pair's row|src/cuda/quadratic.cuh|const int64_t vr = d.v_row(bh);|const int64_t vr = bh;|deferred|caught||quadratic_output_mma"
  "final state: sub-batches (past 2^30 pairs) with the decay of the batch's first head|src/cuda/quadratic.cuh|f(s, first, a32 + h0 * d.L, o);|f(s, first, a32, o);|deferred|caught||final_state_mma, sub-batches"
)
missed=0
for m in "${mutants[@]}"; do
  IFS='|' read -r name file from to mode expect flags only <<<"$m"
  [[ "$name" == *"${1:-}"* ]] || continue
  rm -rf "$dir/src" && mkdir -p "$dir/src" && cp -r "$root/src/cuda" "$dir/src/"
  if ! python3 - "$dir/$file" "$from" "$to" <<'PY'
import sys
path, a, b = (x.replace("\\n", "\n").replace("\\&", "&") for x in sys.argv[1:4])
s = open(path).read()
if a not in s:
    sys.exit(f"mutant text not found in {path}: {a!r}")
open(path, "w").write(s.replace(a, b, 1))
PY
  then missed=$((missed + 1)); continue; fi
  (cd "$dir" && python3 "$root/dev/cuda/host_emulation/extract.py" --mma kernels_mma.h) &&
    g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -w ${EMU_CXXFLAGS:-} ${flags:-} -I "$dir" "$root/dev/cuda/host_emulation/emulate_mma.cpp" -o "$dir/emu" || exit 2
  # (the limit covers a whole run: a mutant expected to be missed runs every kernel on every
  # problem, about 6 minutes on two busy cores since the quadratic forward's cases came in)
  if EMU_CP_ASYNC=$mode EMU_STOP_AT_FIRST=1 timeout 1200 "$dir/emu" ${only:+"$only"} >"$dir/log" 2>&1; then
    got=missed
  else
    got=caught
  fi
  where=$(grep -m1 -B1 'FAIL\|emulation error' "$dir/log" | head -1 | sed 's/^ *//')
  if [ "$got" = "$expect" ]; then echo "ok       $got ($mode cp.async): $name${where:+  [$where]}"
  else echo "UNEXPECTED $got ($mode cp.async): $name"; missed=$((missed + 1)); fi
done
echo "$missed unexpected"
[ "$missed" = 0 ]
