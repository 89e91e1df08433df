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
