#!/usr/bin/env python3
"""dev/cuda/traffic_floor.py: its path rules against the constants the CUDA backend and the saved
buffer choose by (so that a changed rule in the code fails here until the model follows), and its
totals against its own rows.

Exit 0 on success, 1 on a failed check.
Usage: test_traffic_floor.py SOURCE_DIR
"""
import os
import re
import subprocess
import sys

source = sys.argv[1]
sys.path.insert(0, os.path.join(source, "dev", "cuda"))
import traffic_floor as tf  # noqa: E402

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAILED:", message)


def constant(path, pattern):
    text = open(os.path.join(source, path)).read()
    m = re.search(pattern, text)
    check(m is not None, f"{pattern!r} not found in {path}")
    return int(m.group(1)) if m else None


max_t = constant("src/cuda/quadratic.cuh", r"#define RHOSCAN_QUADRATIC_MAX_T (\d+)")
backward_l_per_t = constant("src/cuda/quadratic.cuh", r"#define RHOSCAN_QUADRATIC_MIN_L_PER_T (\d+)")
backward_half_l_max_t = constant("src/cuda/quadratic.cuh", r"#define RHOSCAN_QUADRATIC_BACKWARD_HALF_L_MAX_T (\d+)")
forward_l_per_t = constant("src/cuda/quadratic.cuh", r"#define RHOSCAN_QUADRATIC_FORWARD_MIN_L_PER_T (\d+)")
scan_max_lp = constant("src/cuda/chunk_scan.cuh", r"constexpr int kScanMaxLp = (\d+);")
saved_l_per_t = constant("src/core/saved.h", r"g\.cross_scores = .*L >= (\d+) \* T;")
chunk = constant("src/cuda/ops.h", r"constexpr int64_t kDefaultChunk = (\d+);")
check(chunk == tf.C, f"the model's chunk {tf.C}, the backend's default {chunk}")

# the rules at and around every threshold, for T below, at and past the quadratic paths' limit
for T in (1, 64, 256, 512, 576, max_t or 1024, (max_t or 1024) + 64):
    for L in sorted({64, 128, 256, 320, T // 2 - 1, T // 2, T // 2 + 1, T, 2 * T - 64, 2 * T, 8 * T - 64, 8 * T, 16 * T} - {0}):
        forward, backward = tf.paths(T, L)
        lp = (L + 63) // 64 * 64
        want_forward = ("quadratic" if T <= max_t and L >= forward_l_per_t * T
                        else "scan" if lp <= scan_max_lp else "chunked")
        want_backward = ("quadratic" if T <= max_t and (L >= backward_l_per_t * T or (T <= backward_half_l_max_t and 2 * L >= T))
                         else "chunked")
        check(forward == want_forward, f"T={T} L={L}: the model's forward {forward}, the backend's {want_forward}")
        check(backward == want_backward, f"T={T} L={L}: the model's backward {backward}, the backend's {want_backward}")
        names = [name for _, name, _, _ in tf.passes(1, 1, T, L, 256)]
        saved = T <= max_t and L >= saved_l_per_t * T
        check(("cross_scores_wgmma" in names[names.index("norm_apply (Xq, Kq)"):]) == (backward == "quadratic" and not saved),
              f"T={T} L={L}: the backward computes the cross scores exactly where the saved buffer lacks them")

# totals: the report's lines against the rows, and the keys' saving against the passes without them
for shape in tf.CASES.values():
    rows = tf.passes(*shape)
    moved = sum(r + w for _, _, r, w in rows)
    both = [line for line in tf.report(*shape) if line.startswith("both")]
    check(len(both) == 1 and abs(float(both[0].split()[-2]) - moved / 1e9) < 1e-3, f"{shape}: total {both}")
    keys = dict(tf.fusions(*shape))["the forward's keys kept for the backward (no norm_apply)"]
    without = sum(r + w for _, _, r, w in tf.passes(*shape, keys_saved=True))
    check(keys == moved - without, f"{shape}: the keys' saving {keys} against {moved - without}")

# the command line: three cases by default, a forced path, a bad shape refused
script = os.path.join(source, "dev", "cuda", "traffic_floor.py")
out = subprocess.run([sys.executable, script], capture_output=True, text=True).stdout
check(out.count("targets:") == 3, "three cases by default")
out = subprocess.run([sys.executable, script, "--backward", "quadratic", "24", "4", "512", "256", "256"],
                     capture_output=True, text=True).stdout
check("quad_readback_wgmma" in out and "chunk_states" not in out.split("backward", 1)[1].split("changes")[0],
      "--backward quadratic forces the quadratic backward's passes")
bad = subprocess.run([sys.executable, script, "1", "2", "3"], capture_output=True, text=True)
check(bad.returncode != 0 and "five numbers" in bad.stderr, "a shape of three numbers is refused")

print(f"{len(failures)} failure(s)" if failures else "traffic_floor.py: all checks passed")
sys.exit(1 if failures else 0)
