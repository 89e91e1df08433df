#!/usr/bin/env bash
# Round 37, call 8 (carry .gpucarry with COMMIT and gtest-src): the review's cleanup (ipow_of_product,
# RecordedEvent's flag): build with the tests, the CUDA suite and the harness's CUDA cases.
LOGS=/tmp/logs8 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
stage end
pack
