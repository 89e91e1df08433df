#!/usr/bin/env bash
# One device call that validates and measures a CUDA branch before it is merged (first written
# for cuda-next: the chunk-parallel normaliser scan), within the device tool's 10-minute limit:
#   dev       dev/cuda/*.cu harnesses (new kernel against the old one and a float64 reference,
#             old/new timings): what to read first;
#   build     googletest and the library (CUDA on, Vulkan off, -Xptxas -v in the build log);
#   test      ctest -R 'cuda|Cuda' (test_cuda and the cross-backend harness's CUDA cases; CTEST_ARGS
#             overrides);
#   bench     rhoscan bench --device cuda --backward (bfloat16, JSON lines with the commit);
#   sanitize  compute-sanitizer memcheck (test_cuda's affected cases, the harness's bf16 CUDA
#             cases, the dev harnesses with --small) and racecheck.
# The stages are scripts/cuda_device_run.sh's; this runs them in that order under one deadline
# (CHECK_BUDGET_S, default 560 s: a stage that cannot start with 30 s left is skipped and says
# so), and packs the logs after each stage, so that a run cut short still returns what it did.
# $OUT gets three files: summary.txt (every stage's short output), logs.tgz (all logs), and
# bench.jsonl.
#
# The device tool sends /work/main's checkout, not a branch's worktree: copy the branch into an
# ignored folder of /work/main (.gpucarry/ is in .git/info/exclude) and carry it with googletest:
#
#   cd /work/main && rm -rf .gpucarry/next && mkdir -p .gpucarry/next &&
#     git archive cuda-next | tar -x -C .gpucarry/next && git rev-parse --short cuda-next > .gpucarry/next/COMMIT
#
# then one call:
#
#   run(kind="nvidia-h200", timeout_s=600, carry=[".gpucarry/next", ".gpucarry/gtest-src"],
#       command="cd .gpucarry/next && bash scripts/cuda_next_check.sh")
#
# and read summary.txt (then logs.tgz: dev_norm_scan.log, ctest.log, memcheck*.log, ...).
# CHECK_STAGES picks other stages (e.g. "dev" alone, or "dev build profile").
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
LOGS=/tmp/cuda-next-logs
rm -rf "$LOGS"
mkdir -p "$LOGS" "$OUT"
export RHOSCAN_COMMIT=${RHOSCAN_COMMIT:-$(cat COMMIT 2>/dev/null || echo unknown)}
export CTEST_ARGS=${CTEST_ARGS:--R cuda|Cuda}
summary=$OUT/summary.txt
start=$(date +%s)
budget=${CHECK_BUDGET_S:-560}
echo "commit $RHOSCAN_COMMIT, stages: ${CHECK_STAGES:-dev build test bench sanitize}" > "$summary"

pack() {
  tar -czf "$OUT/logs.tgz" -C "$LOGS" .
  [ -f "$LOGS/bench.jsonl" ] && cp -f "$LOGS/bench.jsonl" "$OUT/"
  return 0
}

for stage in ${CHECK_STAGES:-dev build test bench sanitize}; do
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 30 ]; then
    echo "== $stage: skipped (${left} s left of ${budget})" | tee -a "$summary"
    continue
  fi
  if [ "$stage" != dev ] && [ "$stage" != build ] && [ ! -x /tmp/b/tests/test_cuda ]; then
    echo "== $stage: skipped (no library build)" | tee -a "$summary"
    continue
  fi
  echo "== $stage (${left} s left)" | tee -a "$summary"
  t0=$(date +%s)
  OUT=$LOGS timeout "$left" bash scripts/cuda_device_run.sh "$stage" 2>&1 | tee -a "$summary"
  echo "   ($stage: $(($(date +%s) - t0)) s)" | tee -a "$summary"
  pack
done
