#!/usr/bin/env python3
"""Plots of bench/results/*.jsonl, for people who would rather look than read the JSON lines.

    /usr/bin/python3 bench/plot_results.py [--results bench/results] [--out bench/results/plots]

Writes three PNG files (matplotlib; Debian's python3-matplotlib):
  cuda_builds.png      CUDA bfloat16 time of each benchmark case, build after build (log scale),
                       with the issues' targets where they are given in milliseconds, about 30
                       commits named and each measurement day's start marked;
  bdh8k_backends.png   BDH-8k (B8 H4 T512 L8192 E256) forward and forward+backward on every
                       backend and dtype, latest build of each, with the flash-linear-attention
                       composition of PERFORMANCE-NOTES.md for scale;
  cpu_ratios.png       the CPU backend's share of the machine's sgemm rate and its speed-up over
                       the per-token loop, latest idle-machine run, against the issue's targets.
Only what the files hold is drawn: a case missing from a build is a gap, not a zero. The CUDA
plots leave out the H100's files (cuda-h100-*.jsonl: A/Bs that landed on an H100, another card's
times); the others are the H200's.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Targets stated in milliseconds by the issues (4 and 5), BDH-8k only; the other cases' targets
# are fractions of the limit, drawn as the limit line.
CUDA_TARGET_MS = {("BDH-8k", "forward"): 0.6, ("BDH-8k", "forward+backward"): 1.7}
# flash-linear-attention's chunk_gla composition, measured elsewhere (PERFORMANCE-NOTES.md).
FLA_BDH8K_MS = {"forward": 12.1, "forward+backward": 34.4}
DIRECTIONS = ("forward", "forward+backward")


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
    return rows


def in_order(values):
    """Distinct values in first-seen order (the files are appended build after build)."""
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def shape_of(r):
    """A case is its shape: names changed between builds (bdh-8k, BDH-8k), shapes did not."""
    return tuple(r.get(k) for k in ("B", "H", "T", "L", "E"))


def on_main_line(commit):
    """Whether a measured build is in the history of the checked-out commit: branches that were
    measured and not merged (their lines stay in the JSON) are left out of the build plot. Outside
    a git checkout every build counts."""
    try:
        return subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], capture_output=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).returncode in (0, 128)
    except OSError:
        return True


def is_build_row(r):
    """A build's own measurement: not a compile-time variant measured beside it ("commit+FLAG"), nor
    a run from a carried state (`bench --with-state`)."""
    return "+" not in r.get("commit", "") and not r.get("with_state")


def plot_cuda_builds(rows, out):
    # builds only, and unmerged branches left out
    rows = [r for r in rows if r.get("dtype") == "bfloat16" and "median_ms" in r and is_build_row(r)]
    keep = {c: on_main_line(c) for c in in_order(r["commit"] for r in rows)}
    rows = [r for r in rows if keep[r["commit"]]]
    commits = in_order(r["commit"] for r in rows)
    shapes = in_order(shape_of(r) for r in rows)
    name = {shape_of(r): r["case"] for r in rows}  # the latest name of each shape
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for n, shape in enumerate(shapes):
        colour = colours[n % len(colours)]
        for direction, style in (("forward", "-"), ("forward+backward", "--"), ("step", "-")):
            by_commit = {r["commit"]: r for r in rows if shape_of(r) == shape and r["direction"] == direction}
            xs = [i for i, c in enumerate(commits) if c in by_commit]
            if not xs:
                continue
            ax.plot(xs, [by_commit[commits[i]]["median_ms"] for i in xs], style, marker="o", color=colour,
                    label=f"{name[shape]} {direction}")
            if (name[shape], direction) in CUDA_TARGET_MS:
                ax.axhline(CUDA_TARGET_MS[(name[shape], direction)], color=colour, linestyle=style, linewidth=0.8,
                           alpha=0.6, label=f"target: {name[shape]} {direction}")
    ax.set_yscale("log")
    # over a hundred builds: every build a minor tick, about 30 of them named, and a dotted line with
    # the date where a day's file (cuda-<machine>-<date>.jsonl) begins
    step = max(1, -(-len(commits) // 30))
    last = len(commits) - 1
    named = [i for i in range(len(commits)) if (i % step == 0 and last - i >= step / 2) or i == last]
    ax.set_xticks(range(len(commits)), minor=True)
    ax.set_xticks(named, [commits[i] for i in named], rotation=45, ha="right", fontsize=8)
    day = {}
    for r in rows:
        day.setdefault(r["commit"], r.get("_day"))
    for i, c in enumerate(commits):
        if day[c] and (i == 0 or day[c] != day[commits[i - 1]]):
            ax.axvline(i - 0.5, color="grey", linestyle=":", linewidth=0.8)
            ax.text(i - 0.3, 0.99, day[c][5:], transform=ax.get_xaxis_transform(), fontsize=7, va="top",
                    color="grey")
    ax.set_xlabel("build on the main line, in the order measured (every " +
                  (f"{step}th " if step > 1 else "") + "commit named; dotted: a new day's measurements, MM-DD)")
    ax.set_ylabel("median time, ms (log)")
    ax.set_title("CUDA backend, bfloat16, H200: time per build (solid: forward or step, dashed: forward+backward)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def latest(rows, **match):
    """The last row of a build (is_build_row) matching `match`."""
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items()) and is_build_row(r)]
    return found[-1] if found else None


def plot_bdh8k_backends(cuda_rows, vulkan_rows, out):
    bars = []  # (label, {direction: ms})
    for dtype in ("bfloat16", "float16", "float32"):
        times = {d: r["median_ms"] for d in DIRECTIONS
                 if (r := latest(cuda_rows, case="BDH-8k", dtype=dtype, direction=d))}
        if times:
            bars.append((f"CUDA {dtype}", times))
    vk = {d: r for d in DIRECTIONS
          if (r := latest(vulkan_rows, case="BDH-8k", tensors="vulkan", direction=d))}
    if vk:
        bars.append(("Vulkan float32\n(device tensors)", {d: r["median_ms"] for d, r in vk.items()}))
        host = {d: r["host_tensors_median_ms"] for d, r in vk.items() if "host_tensors_median_ms" in r}
        if host:
            bars.append(("Vulkan float32\n(host tensors)", host))
    bars.append(("FLA chunk_gla\ncomposition (bf16)", dict(FLA_BDH8K_MS)))
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.38
    for k, d in enumerate(DIRECTIONS):
        xs = [i + (k - 0.5) * width for i in range(len(bars))]
        ys = [b[1].get(d, float("nan")) for b in bars]
        drawn = ax.bar(xs, ys, width, label=d)
        ax.bar_label(drawn, fmt="%.1f", fontsize=7)
    for d, ms in ((d, CUDA_TARGET_MS[("BDH-8k", d)]) for d in DIRECTIONS):
        ax.axhline(ms, linestyle="--", linewidth=1, color="black" if d == "forward" else "grey",
                   label=f"CUDA target, {d}: {ms} ms")
    ax.set_yscale("log")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("median time, ms (log)")
    ax.set_title("BDH-8k (B8 H4 T512 L8192 E256, Hv 1) on the H200: latest build of each backend")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_cpu_ratios(rows, out):
    # The idle-machine run: the last build that measured both cases in both directions.
    rows = [r for r in rows if r.get("device") == "cpu" and "speedup_vs_naive" in r]
    if not rows:
        return False
    commit = rows[-1]["commit"]
    rows = [r for r in rows if r["commit"] == commit]
    labels = [f"{r['case']}\n{r['direction']}" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.bar(labels, [r["limit_fraction"] for r in rows], color="tab:blue")
    for direction, target in (("forward", 0.50), ("forward+backward", 0.35)):
        left.axhline(target, linestyle="--", linewidth=1, color="black" if direction == "forward" else "grey",
                     label=f"target, {direction}: {target:.0%}")
    left.set_ylabel("share of this machine's sgemm rate")
    left.legend(fontsize=8)
    right.bar(labels, [r["speedup_vs_naive"] for r in rows], color="tab:orange")
    right.axhline(10, linestyle="--", linewidth=1, color="black", label="target: 10x")
    right.set_ylabel("speed-up over the per-token loop")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"CPU backend, float32, 2 threads (commit {commit})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=os.path.join(here, "results"))
    parser.add_argument("--out", default=os.path.join(here, "results", "plots"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    def load(prefix, leave_out=None):
        rows = []
        for name in sorted(os.listdir(args.results)):
            if leave_out and name.startswith(leave_out):
                continue
            if name.startswith(prefix) and name.endswith(".jsonl"):
                day = re.search(r"\d{4}-\d{2}-\d{2}", name)  # the files are one per measurement day
                for r in read_jsonl(os.path.join(args.results, name)):
                    r["_day"] = day.group(0) if day else None
                    rows.append(r)
        return rows

    cuda, vulkan, cpu = load("cuda-", leave_out="cuda-h100-"), load("vulkan-"), load("cpu-")
    written = []
    if cuda:
        plot_cuda_builds(cuda, os.path.join(args.out, "cuda_builds.png"))
        written.append("cuda_builds.png")
    if cuda or vulkan:
        plot_bdh8k_backends(cuda, vulkan, os.path.join(args.out, "bdh8k_backends.png"))
        written.append("bdh8k_backends.png")
    if plot_cpu_ratios(cpu, os.path.join(args.out, "cpu_ratios.png")):
        written.append("cpu_ratios.png")
    print(f"wrote {', '.join(written)} to {args.out}")


if __name__ == "__main__":
    main()
