#!/usr/bin/env bash
# Round 23, call 6: the review commit (Quad, latent_groups_ok in bwd_local, dq_final's launch lambda): build and the CUDA suite.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
{
bash scripts/cuda_device_run.sh build || exit 1
timeout 120 $B/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/test_cuda.log
timeout 60 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
} 2>&1 | tee $OUT/summary.txt
