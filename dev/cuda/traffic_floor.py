#!/usr/bin/env python3
"""The DRAM traffic of the CUDA backend's bfloat16 forward and backward, pass by pass, and the time it
takes at the 4.3 TB/s that `rhoscan bench`'s physical limit assumes: the floor of the present pass
structure, whatever each kernel's own efficiency. Every array a pass reads is counted once (its
re-reads across a kernel's items are taken to hit the L2: an under-estimate), every array it
writes once; arrays under a megabyte are left out. The paths are chosen as the backend chooses them
(no initial states, the forward's saved buffer kept for the backward without the keys, as
`rhoscan bench --backward` runs them): the quadratic forward where T <= 1024 and L >= 2 T, the
quadratic backward where T <= 1024 and L >= T, `chunk_scan_mma` for a chunked forward with L <= 256,
else the chunk-state kernels.

    python3 dev/cuda/traffic_floor.py                 # BDH-8k, BDH-base and long-T8192
    python3 dev/cuda/traffic_floor.py 8 4 512 8192 256
    python3 dev/cuda/traffic_floor.py --backward quadratic 24 4 512 256 256   # a path forced

Against the measured kernels: `dev/cuda/ncu_summary.py` on a log with dram__bytes_read.sum and
dram__bytes_write.sum (bench/results/round27-prepared/device-call1.sh collects one).
"""
import argparse

DRAM = 4.3e12  # bytes per second
C = 64         # the chunk of every 16-bit path
CASES = {"BDH-8k": (8, 4, 512, 8192, 256), "BDH-base": (24, 4, 512, 256, 256), "long-T8192": (1, 4, 8192, 2048, 256)}


FORCED = {}    # --forward / --backward: a path forced, as RHOSCAN_CUDA_FORWARD_PATH / _BACKWARD_PATH do


def paths(T, L):
    """(forward path, backward path) as the backend picks them for bfloat16 without initial states."""
    forward = "quadratic" if T <= 1024 and L >= 2 * T else "scan" if L <= 256 else "chunked"
    backward = "quadratic" if T <= 1024 and (L >= T or (T <= 512 and 2 * L >= T)) else "chunked"
    return FORCED.get("forward", forward), FORCED.get("backward", backward)


def planes(B, H, T, L, E):
    """Bytes of the [pairs][T][L] bf16 and float32 arrays and of a plane of bf16 chunk-start states."""
    pairs, nC = B * H, (T + C - 1) // C
    return pairs * T * L * 2, pairs * T * L * 4, pairs * nC * L * E * 2


def passes(B, H, T, L, E, keys_saved=False):
    """[(direction, kernel, bytes read, bytes written)] of the forward and the backward, Hv = 1."""
    pairs, nC = B * H, (T + C - 1) // C
    # q, Xq, Kq, dq (bf16); W (in dqp), U (float32); a plane of chunk-start states (bf16)
    plane16, plane32, states = planes(B, H, T, L, E)
    rho = pairs * L * E * 4               # the final state, float32
    ctx = pairs * T * E * 2               # the context (and G)
    Nc = pairs * (nC + 1) * L * 4         # the chunk-start normalisers
    chunk_rows = pairs * nC * L * 4       # dap, Bsum, Zs, Bend: [pairs][nC][L] float32
    Pcross = pairs * nC * (nC - 1) // 2 * C * C * 2  # bf16 (float32 until round 31)
    M = pairs * nC * (nC - 1) // 2 * C * C * 2 * 2  # hi + lo
    small = lambda x: x if x >= 1e6 else 0
    forward, backward = paths(T, L)
    out = [
        ("forward", "norm_sums (s, chunk sums)", plane16, small(Nc)),
        ("forward", "norm_carry", small(Nc), small(Nc)),
        ("forward", "norm_scores_mma (Xq, Kq, P)", plane16 + small(Nc), 2 * plane16),
    ]
    if forward == "quadratic":
        out += [("forward", "cross_scores_wgmma", 2 * plane16, small(Pcross)),
                ("forward", "final_state_wgmma", plane16, rho),
                ("forward", "quadratic_output_mma", small(Pcross), small(ctx))]
    elif forward == "scan":
        out += [("forward", "chunk_scan_mma", 2 * plane16, small(ctx) + rho)]
    else:
        out += [("forward", "chunk_states_mma", plane16, states + rho),
                ("forward", "chunk_output_mma", plane16 + states, small(ctx))]
    if not keys_saved:
        out.append(("backward", "norm_apply (Xq, Kq)", plane16 + small(Nc), 2 * plane16))
    if backward == "quadratic":
        if not (forward == "quadratic" and L >= 8 * T):  # the saved buffer holds Pcross only there
            out.append(("backward", "cross_scores_wgmma", 2 * plane16, small(Pcross)))
        out += [("backward", "cross_values_mma (M)", 0, small(M)),
                ("backward", "quad_readback_wgmma (W, U)", 2 * plane16 + small(M), 2 * plane32)]
    else:
        out += [("backward", "chunk_states_mma (H, hi + lo)", plane16, 2 * states),
                ("backward", "chunk_states_mma (A_end, hi + lo)", plane16, 2 * states),
                ("backward", "chunk_output_mma (dv)", plane16 + states, 0),
                ("backward", "chunk_readback_mma (W, U)", 4 * states, 2 * plane32)]
    out += [
        ("backward", "bwd_local (dq partials)", plane16 + 2 * plane32 + small(Nc), plane32 + 3 * small(chunk_rows)),
        ("backward", "bscan", 2 * small(chunk_rows), small(chunk_rows)),
        ("backward", "dq_final", plane32 + small(chunk_rows), plane16),
    ]
    return out


def limit_ms(B, H, T, L, E, both):
    """`rhoscan bench`'s physical limit (tools/rhoscan/bench_cuda.cpp), bfloat16, Hv = 1."""
    flops = B * H * (4 * T * L * E + T * C * L + T * C * E) * (3 if both else 1)
    state = B * H * L * E * 4 + B * H * L * 4
    moved = B * H * T * L * 2 + B * T * E * 2 + B * H * T * E * 2 + state
    if both:
        moved += 2 * B * H * T * L * 2 + 2 * B * T * E * 2 + B * H * T * E * 2
    return max(flops / 790e12, moved / DRAM) * 1e3


def targets_ms(B, H, T, L, E):
    """Issues 4 and 5: BDH-8k's times, elsewhere 25 % (forward) and 20 % (forward+backward) of the limit."""
    if (B, H, T, L, E) == CASES["BDH-8k"]:
        return 0.6, 1.7
    return limit_ms(B, H, T, L, E, False) / 0.25, limit_ms(B, H, T, L, E, True) / 0.20


def fusions(B, H, T, L, E):
    """[(change to the pass structure, bytes it takes off a forward+backward)]: what is not moved
    any more, whatever the kernels' efficiency."""
    rows = passes(B, H, T, L, E)
    moved = lambda prefix: sum(r + w for _, name, r, w in rows if name.startswith(prefix))
    plane16, plane32, states = planes(B, H, T, L, E)
    out = [("the readback and bwd_local in one kernel (W, U on chip)", 4 * plane32),
           ("the forward's keys kept for the backward (no norm_apply)", moved("norm_apply")),
           ("norm_sums folded into norm_scores (q read once)", plane16)]
    forward, backward = paths(T, L)
    if forward == "quadratic":
        out.append(("cross_scores and final_state reading Kq once", plane16))
    # the state planes of passes()' rows: the chunked forward writes one and reads it; the chunked
    # backward writes two hi + lo pairs, reads one plane for dv and four for the readback
    state_traffic = (2 * states if forward == "chunked" else 0) + (9 * states if backward == "chunked" else 0)
    if state_traffic:
        # chunk-start states kept per window of 512 tokens (an eighth of the planes), the products
        # inside a window as the quadratic paths' (Xq and Kq read once more in each direction)
        out.append(("states per 512-token window, not per 64-token chunk", state_traffic * 7 // 8 - 4 * plane16))
    return out


def report(B, H, T, L, E):
    forward, backward = paths(T, L)
    rows = passes(B, H, T, L, E)
    lines = [f"B{B} H{H} T{T} L{L} E{E}, bfloat16, Hv 1: the {forward} forward and the {backward} backward",
             f"{'direction':9s} {'pass':34s} {'read GB':>8s} {'written GB':>10s} {'floor ms':>8s}"]
    totals = {}
    for direction, name, r, w in rows:
        lines.append(f"{direction:9s} {name:34s} {r / 1e9:8.3f} {w / 1e9:10.3f} {(r + w) / DRAM * 1e3:8.3f}")
        tr, tw = totals.get(direction, (0, 0))
        totals[direction] = (tr + r, tw + w)
    for direction, (r, w) in totals.items():
        lines.append(f"{direction:9s} {'total':34s} {r / 1e9:8.3f} {w / 1e9:10.3f} {(r + w) / DRAM * 1e3:8.3f}")
    both = sum(r + w for r, w in totals.values())
    lines.append(f"{'both':9s} {'forward+backward':34s} {'':8s} {both / 1e9:10.3f} {both / DRAM * 1e3:8.3f}")
    fwd = sum(totals["forward"]) / DRAM * 1e3
    t_fwd, t_both = targets_ms(B, H, T, L, E)
    lines.append(f"targets: forward {t_fwd:.3f} ms (floor {fwd:.3f}: {'above' if fwd > t_fwd else 'below'} it), "
                 f"forward+backward {t_both:.3f} ms (floor {both / DRAM * 1e3:.3f}: "
                 f"{'above' if both / DRAM * 1e3 > t_both else 'below'} it)")
    lines.append("changes to the pass structure, each alone (forward+backward floor):")
    for name, saved in fusions(B, H, T, L, E):
        lines.append(f"  {name:60s} -{saved / 1e9:6.3f} GB  {(both - saved) / DRAM * 1e3:6.3f} ms")
    return lines


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", nargs="*", type=int, help="B H T L E (default: the three benchmark cases)")
    ap.add_argument("--forward", choices=["quadratic", "scan", "chunked"], help="force the forward's path")
    ap.add_argument("--backward", choices=["quadratic", "chunked"], help="force the backward's path")
    args = ap.parse_args()
    if args.shape and len(args.shape) != 5:
        ap.error("a shape is five numbers: B H T L E")
    FORCED.update({k: v for k, v in (("forward", args.forward), ("backward", args.backward)) if v})
    for shape in [tuple(args.shape)] if args.shape else list(CASES.values()):
        print("\n".join(report(*shape)))
        print()
