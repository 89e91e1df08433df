# Sourced by this folder's device calls (bash device-callN.sh, from the repository root): the
# summary S and JSON lines J under $OUT, logs in L (the caller's LOGS, packed into one tarball:
# only 8 files come back from $OUT), the call's clock and its helpers, the card's name first.
#   stage NAME   a line "== NAME (t s)" in the summary
#   late N       true once the call has run N seconds (a stage skips itself, so that the summary
#                and the tarball come back within the 600 s limit)
#   pack         the logs into $OUT/logs.tgz (again after each stage: a call cut short keeps them)
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt L=$LOGS J=$OUT/bench.jsonl
mkdir -p $L
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
late() { [ $(( $(date +%s) - t0 )) -gt $1 ]; }
pack() { (cd $L && tar czf $OUT/logs.tgz . 2>/dev/null); }
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
#   build_and_test   the build with the tests (scripts/cuda_device_run.sh build, exits on failure),
#                    then the CUDA suite and the harness's CUDA cases with their lines in the summary
#                    (limits: TEST_CUDA_S, default 150; TEST_BACKENDS_S, default 120)
build_and_test() {
  stage build
  OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
  stage tests
  (cd /tmp/b && timeout ${TEST_CUDA_S:-150} tests/test_cuda > $L/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $L/test_cuda.log | head -20 >> $S
  (cd /tmp/b && timeout ${TEST_BACKENDS_S:-120} tests/test_backends --gtest_filter='*cuda*' > $L/test_backends.log 2>&1
   echo "test_backends (cuda) rc=$?") >> $S
  grep -E "^\[  (PASSED|FAILED) " $L/test_backends.log | head -5 >> $S
  pack
}
#   sanitize TEST LATE TIMEOUT TOOLS...   compute-sanitizer's TOOLS on test_cuda's Cuda.TEST, each
#                    skipped once the call has run LATE seconds, its rc and summary line in the summary
sanitize() {
  local test=$1 after=$2 limit=$3 tool
  shift 3
  stage sanitize
  for tool in "$@"; do
    late $after && { echo "(skipped: late) $tool" >> $S; continue; }
    timeout $limit compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
      --gtest_filter="Cuda.$test" > $L/$tool.log 2>&1
    echo "$tool ($test) rc=$?" >> $S; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/$tool.log | head -3 >> $S
  done
  pack
}
#   figures          main's figures (BDH-8k, long-T8192, BDH-base, the step) into the summary and J
figures() {
  stage figures
  timeout 60 $R bench --device cuda --cases BDH-8k,long-T8192,BDH-base,step-8k --backward --repeats 5 \
    --json $J --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long|step)" >> $S
  pack
}
#   ab VAR "VALUES" ROUNDS LATE BENCH_ARGS...   rounds of `rhoscan bench` alternating VAR over VALUES
#                    (each round skipped once the call has run LATE seconds), JSON commit labels
#                    "$RHOSCAN_COMMIT+VAR_lowercase=value"
ab() {
  local var=$1 values=$2 rounds=$3 after=$4 r v
  shift 4
  stage ab
  for r in $(seq $rounds); do
    late $after && { echo "(round $r skipped: late)" >> $S; break; }
    for v in $values; do
      echo "-- $var=$v (round $r)" >> $S
      env $var=$v timeout 40 $R bench --device cuda "$@" --repeats 5 --json $J \
        --commit "$RHOSCAN_COMMIT+$(echo ${var#RHOSCAN_CUDA_} | tr A-Z a-z)=$v" 2>&1 | grep -E "^(BDH|long|shape|step)" >> $S
    done
  done
  pack
}
#   ncu_durations VAR "VALUES" REGEX CASE LATE   Nsight Compute's durations, DRAM bytes and warp
#                    instructions of the kernels matching REGEX in CASE's bench, per value of VAR
#                    (NCU_BENCH_ARGS: more bench arguments, e.g. --backward)
ncu_durations() {
  local var=$1 values=$2 regex=$3 case_name=$4 after=$5 v
  local m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
  stage ncu
  for v in $values; do
    late $after && { echo "(skipped: late) ncu $var=$v" >> $S; continue; }
    env $var=$v timeout 40 ncu --clock-control none -k regex:$regex --metrics $m --csv $R bench \
      --device cuda --cases $case_name --repeats 1 ${NCU_BENCH_ARGS:-} > $L/ncu-$regex-$v.csv 2>&1
    echo "-- $var=$v, $case_name" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$regex-$v.csv >> $S 2>&1
  done
  pack
}
#   state_ab ROUNDS LATE     rounds of `rhoscan bench --with-state --backward` at BDH-8k and BDH-base with
#                    the forward on the chunked path and the backward on each path (each round skipped
#                    once the call has run LATE seconds), JSON commit labels
#                    "$RHOSCAN_COMMIT+forward_path=chunked+backward_path=PATH"
state_ab() {
  local rounds=$1 after=$2 r b
  stage "ab with the state"
  for r in $(seq $rounds); do
    late $after && { echo "(round $r skipped: late)" >> $S; break; }
    for b in chunked quadratic; do
      echo "-- round $r, forward chunked, backward $b, with the state" >> $S
      RHOSCAN_CUDA_FORWARD_PATH=chunked RHOSCAN_CUDA_BACKWARD_PATH=$b timeout 60 $R bench --device cuda \
        --cases BDH-8k,BDH-base --backward --repeats 5 --with-state --json $J \
        --commit "$RHOSCAN_COMMIT+forward_path=chunked+backward_path=$b" 2>&1 | grep -E "^(BDH|long)" >> $S
    done
  done
  pack
}
