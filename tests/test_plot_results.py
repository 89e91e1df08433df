#!/usr/bin/env python3
"""bench/plot_results.py on the repository's own results, and on files it must refuse.

Exit 0 on success, 1 on a failed check, 77 (ctest's skip code) when matplotlib is missing.
Usage: test_plot_results.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("skipped: this Python has no matplotlib (Debian: python3-matplotlib)")
    sys.exit(77)

source = sys.argv[1]
script = os.path.join(source, "bench", "plot_results.py")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAILED:", message)


def run(results, out):
    return subprocess.run([sys.executable, script, "--results", results, "--out", out],
                          capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    # 1. The committed results: every plot written, each a real PNG with something drawn.
    out = os.path.join(tmp, "plots")
    done = run(os.path.join(source, "bench", "results"), out)
    check(done.returncode == 0, f"plotting bench/results exited {done.returncode}: {done.stderr}")
    for name in ("cuda_builds.png", "bdh8k_backends.png", "cpu_ratios.png"):
        path = os.path.join(out, name)
        ok = os.path.exists(path)
        check(ok, f"{name} not written")
        if ok:
            with open(path, "rb") as f:
                data = f.read()
            check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG")
            check(len(data) > 20000, f"{name} is only {len(data)} bytes: nothing drawn?")

    # 2. A malformed line is refused, naming the file and the line.
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "cuda-x.jsonl"), "w") as f:
        f.write(json.dumps({"case": "BDH-8k", "dtype": "bfloat16"}) + "\n{not json\n")
    done = run(bad, os.path.join(tmp, "bad-plots"))
    check(done.returncode != 0, "a malformed JSON line was accepted")
    check("cuda-x.jsonl:2" in done.stderr, f"the error does not name file and line: {done.stderr!r}")

    # 3. Only CPU results: only the CPU plot, and no crash on the missing GPU files.
    cpu_only = os.path.join(tmp, "cpu-only")
    os.makedirs(cpu_only)
    with open(os.path.join(source, "bench", "results", "cpu-2026-11-30.jsonl")) as src, \
            open(os.path.join(cpu_only, "cpu-2026-11-30.jsonl"), "w") as dst:
        dst.write(src.read())
    out = os.path.join(tmp, "cpu-plots")
    done = run(cpu_only, out)
    check(done.returncode == 0, f"CPU-only results exited {done.returncode}: {done.stderr}")
    check(sorted(os.listdir(out)) == ["cpu_ratios.png"], f"CPU-only results wrote {sorted(os.listdir(out))}")

    # 4. CUDA files with and without a date in their names (the build plot marks where each day's
    #    file begins; a file without a date gets no mark): both plotted, builds from both drawn.
    days = os.path.join(tmp, "days")
    os.makedirs(days)
    def row(commit, ms):
        return json.dumps({"case": "BDH-8k", "B": 8, "H": 4, "T": 512, "L": 8192, "E": 256, "dtype": "bfloat16",
                           "direction": "forward", "median_ms": ms, "commit": commit}) + "\n"
    with open(os.path.join(days, "cuda-h200-2026-12-01.jsonl"), "w") as f:
        f.write(row("aaaaaaa", 2.0) + row("bbbbbbb", 1.5))
    with open(os.path.join(days, "cuda-undated.jsonl"), "w") as f:
        f.write(row("ccccccc", 1.0))
    out = os.path.join(tmp, "days-plots")
    done = run(days, out)
    check(done.returncode == 0, f"dated and undated CUDA files exited {done.returncode}: {done.stderr}")
    check(os.path.exists(os.path.join(out, "cuda_builds.png")), "cuda_builds.png not written for dated and undated files")

print("ok" if not failures else f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
