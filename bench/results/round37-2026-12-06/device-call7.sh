#!/usr/bin/env bash
# Round 37, call 7 (carry .gpucarry with COMMIT and gtest-src): the final main of the round (the tests'
# forward_backward_saved refactor has not run on a GPU before): build with the tests, the CUDA suite
# and the harness's CUDA cases, then main's figures.
LOGS=/tmp/logs7 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
figures
stage end
pack
