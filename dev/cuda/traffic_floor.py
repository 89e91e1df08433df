#!/usr/bin/env python3
"""The DRAM traffic of the CUDA backend's quadratic paths, pass by pass, and the time it takes at
the 4.3 TB/s that `rhoscan bench`'s physical limit assumes: the floor of the present pass
structure, whatever each kernel's own efficiency. Every array a pass reads is counted once (its
re-reads across a kernel's items are taken to hit the L2: an under-estimate), every array it
writes once; arrays under a megabyte are left out.

    python3 dev/cuda/traffic_floor.py                 # BDH-8k (B8 H4 T512 L8192 E256, Hv 1, bf16)
    python3 dev/cuda/traffic_floor.py 8 4 512 8192 256

Against the measured kernels: `dev/cuda/ncu_summary.py` on a log with dram__bytes_read.sum and
dram__bytes_write.sum (bench/results/round27-prepared/device-call1.sh collects one).
"""
import sys

DRAM = 4.3e12  # bytes per second
C = 64         # the quadratic paths' chunk


def passes(B, H, T, L, E, keys_saved=False):
    """[(direction, kernel, bytes read, bytes written)] of the quadratic forward and backward
    (bfloat16, Hv = 1, the forward's saved buffer kept for the backward, as `rhoscan bench
    --backward` runs them)."""
    pairs, nC = B * H, (T + C - 1) // C
    plane16 = pairs * T * L * 2           # q, Xq, Kq, dq: [pairs][T][L] bf16
    plane32 = pairs * T * L * 4           # W (in dqp), U: [pairs][T][L] float32
    rho = pairs * L * E * 4               # the final state, float32
    Nc = pairs * (nC + 1) * L * 4         # the chunk-start normalisers
    chunk_rows = pairs * nC * L * 4       # dap, Bsum, Zs, Bend: [pairs][nC][L] float32
    Pcross = pairs * nC * (nC - 1) // 2 * C * C * 4
    M = pairs * nC * (nC - 1) // 2 * C * C * 2 * 2  # hi + lo
    small = lambda x: x if x >= 1e6 else 0
    out = [
        ("forward", "norm_sums (s, chunk sums)", plane16, small(Nc)),
        ("forward", "norm_carry", small(Nc), small(Nc)),
        ("forward", "norm_scores_mma (Xq, Kq, P)", plane16 + small(Nc), 2 * plane16),
        ("forward", "cross_scores_wgmma", 2 * plane16, small(Pcross)),
        ("forward", "final_state_wgmma", plane16, rho),
        ("forward", "quadratic_output_mma", small(Pcross), small(pairs * T * E * 2)),
    ]
    if not keys_saved:
        out.append(("backward", "norm_apply (Xq, Kq)", plane16 + small(Nc), 2 * plane16))
    out += [
        ("backward", "cross_values_mma (M)", 0, small(M)),
        ("backward", "quad_readback_wgmma (W, U)", 2 * plane16 + small(M), 2 * plane32),
        ("backward", "bwd_local (dq partials)", plane16 + 2 * plane32 + small(Nc), plane32 + 3 * small(chunk_rows)),
        ("backward", "bscan", 2 * small(chunk_rows), small(chunk_rows)),
        ("backward", "dq_final", plane32 + small(chunk_rows), plane16),
    ]
    return out


def fusions(B, H, T, L, E):
    """[(change to the pass structure, bytes it takes off a forward+backward)]: what is not moved
    any more, whatever the kernels' efficiency."""
    pairs = B * H
    plane16, plane32 = pairs * T * L * 2, pairs * T * L * 4
    norm_apply = next(r + w for _, name, r, w in passes(B, H, T, L, E) if name.startswith("norm_apply"))
    return [
        ("readback and bwd_local in one kernel (W, U on chip)", 4 * plane32),
        ("the forward's keys kept for the backward (no norm_apply)", norm_apply),
        ("cross_scores and final_state reading Kq once", plane16),
        ("norm_sums folded into norm_scores (q read once)", plane16),
    ]


def table(B, H, T, L, E, keys_saved=False):
    rows = passes(B, H, T, L, E, keys_saved)
    lines = [f"B{B} H{H} T{T} L{L} E{E}, bfloat16, Hv 1{', keys saved' if keys_saved else ''}: "
             "DRAM traffic per pass, floor at 4.3 TB/s",
             f"{'direction':9s} {'pass':32s} {'read GB':>8s} {'written GB':>10s} {'floor ms':>8s}"]
    totals = {}
    for direction, name, r, w in rows:
        lines.append(f"{direction:9s} {name:32s} {r / 1e9:8.3f} {w / 1e9:10.3f} {(r + w) / DRAM * 1e3:8.3f}")
        tr, tw = totals.get(direction, (0, 0))
        totals[direction] = (tr + r, tw + w)
    for direction, (r, w) in totals.items():
        lines.append(f"{direction:9s} {'total':32s} {r / 1e9:8.3f} {w / 1e9:10.3f} {(r + w) / DRAM * 1e3:8.3f}")
    r, w = sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())
    lines.append(f"{'both':9s} {'forward+backward':32s} {r / 1e9:8.3f} {w / 1e9:10.3f} {(r + w) / DRAM * 1e3:8.3f}")
    return lines, r + w


if __name__ == "__main__":
    shape = [int(x) for x in sys.argv[1:6]] if len(sys.argv) >= 6 else [8, 4, 512, 8192, 256]
    B, H, T, L, E = shape
    if not (T <= 1024 and L >= 2 * T):
        print(f"(T = {T}, L = {L}: the forward takes the chunked path there (quadratic: T <= 1024, L >= 2 T; "
              "the backward's: L >= T), whose passes this table does not model)")
    lines, both = table(*shape)
    print("\n".join(lines))
    print()
    print("Changes to the pass structure, each alone (forward+backward floor, ms):")
    for name, saved in fusions(*shape):
        print(f"  {name:58s} -{saved / 1e9:6.3f} GB  {(both - saved) / DRAM * 1e3:6.3f}")
    saved = sum(x for _, x in fusions(*shape))
    print(f"  {'all four':58s} -{saved / 1e9:6.3f} GB  {(both - saved) / DRAM * 1e3:6.3f}")
