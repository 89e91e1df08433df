#!/usr/bin/env python3
"""Where a kernel's time goes, from Nsight Compute's SASS source page as CSV
(`scripts/cuda_device_run.sh source` writes $OUT/source_<n>_sass.csv):

    python3 dev/cuda/sass_hotspots.py source_1_sass.csv [--top 30] [--window 64]

Prints the stall reasons summed over the kernel (shares of all warp-state samples), the executed
instruction mix by opcode, the instructions with the most samples (with their two main stall
reasons), and the samples and executed instructions per window of consecutive instructions, so
that a region (an item's start, a loop, a division's slow path) shows as a share of the kernel.
With --regions the code is cut after every block barrier (BAR) instead: each region is one phase
between two __syncthreads, with its stall mix, and a barrier stall on a region's first instructions
is the time its warps waited there for the block's slowest warp (round 23's bwd_local tail)."""
import argparse
import collections
import csv

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def number(x):
    return int(x) if x.isdigit() else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--regions", action="store_true", help="cut after each BAR instead of fixed windows")
    args = ap.parse_args()
    header, rows = None, []
    for r in csv.reader(open(args.csv)):
        if r and r[0] == "Address":
            header = r
        elif header and len(r) == len(header):
            rows.append(dict(zip(header, r)))
    if not rows:
        raise SystemExit(f"{args.csv}: no SASS rows (is it the source page with --print-source sass?)")
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = sum(number(r[SAMPLES]) for r in rows) or 1
    executed = sum(number(r[EXECUTED]) for r in rows) or 1
    print(f"{len(rows)} instructions, {samples} samples, {executed} warp instructions executed")
    by_stall = collections.Counter()
    by_op = collections.Counter()
    for r in rows:
        for s in stalls:
            by_stall[s[6:]] += number(r[s])
        by_op[opcode(r["Source"])] += number(r[EXECUTED])
    print("stalls:      " + "  ".join(f"{k} {v / samples:.3f}" for k, v in by_stall.most_common(8)))
    print("executed:    " + "  ".join(f"{k} {v / executed:.3f}" for k, v in by_op.most_common(12)))
    print(f"top {args.top} instructions by samples:")
    order = sorted(range(len(rows)), key=lambda i: -number(rows[i][SAMPLES]))
    for i in order[: args.top]:
        r = rows[i]
        main_stalls = sorted(((number(r[s]), s[6:]) for s in stalls), reverse=True)[:2]
        print(f"  {i:5d} {number(r[SAMPLES]) / samples:.3f}  {r['Source'].strip()[:56]:56s} "
              + " ".join(f"{name}:{n}" for n, name in main_stalls))
    if args.regions:
        cuts = [0] + [i + 1 for i, r in enumerate(rows) if opcode(r["Source"]) == "BAR"] + [len(rows)]
        spans = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
        print("regions between barriers (share of samples, share of executed instructions, main stalls):")
    else:
        spans = [(i, min(i + args.window, len(rows))) for i in range(0, len(rows), args.window)]
        print(f"windows of {args.window} instructions (share of samples, share of executed instructions):")
    for i, end in spans:
        block = rows[i:end]
        s = sum(number(r[SAMPLES]) for r in block) / samples
        e = sum(number(r[EXECUTED]) for r in block) / executed
        if s < 0.005 and e < 0.005:
            continue
        ops = collections.Counter(opcode(r["Source"]) for r in block)
        line = f"  {i:5d} {s:.3f} {e:.3f}  " + " ".join(f"{k}:{v}" for k, v in ops.most_common(5))
        if args.regions:
            st = collections.Counter({k[6:]: sum(number(r[k]) for r in block) for k in stalls})
            first = sum(number(r.get("stall_barrier", "0")) for r in block[:8]) / samples
            line += f"  | {end - i} instructions, barrier stall on the first 8 {first:.3f}; " + " ".join(
                f"{k}:{v / max(1, sum(st.values())):.2f}" for k, v in st.most_common(3))
        print(line)


if __name__ == "__main__":
    main()
