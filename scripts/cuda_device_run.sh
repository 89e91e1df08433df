#!/usr/bin/env bash
# One device call: build, CUDA tests, compute-sanitizer, benchmarks. Logs and JSON go to $OUT.
# usage (on the GPU machine, in the source root): scripts/cuda_device_run.sh [stages...]
#   stages: dev build test sanitize bench (default: build test sanitize bench); also profile, ncu,
#   workspace, source (full Nsight Compute set with source lines for SOURCE_KERNEL), crossover (both quadratic/chunked paths on CROSSOVER_SHAPES), ab (AB_VARIANTS), sanitize-all (the whole CUDA suite under memcheck and racecheck)
#   dev: builds and runs each standalone kernel harness dev/cuda/*.cu (one nvcc command each, the
#   one at the top of the file), printing its PASS/FAIL and timing lines; sanitize then also runs
#   them under memcheck with --small.
# googletest sources (the GPU image has none): GTEST_SRC, else the first of gtest-src,
# .gpucarry/gtest-src and ../gtest-src that exists.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=/tmp/b
stages=${*:-build test sanitize bench}
commit=${RHOSCAN_COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
for s in $stages; do
  case $s in
    build)
      # The GPU image may lack googletest: build the carried copy when present.
      gtest_src=${GTEST_SRC:-}
      for g in gtest-src .gpucarry/gtest-src ../gtest-src; do
        [ -z "$gtest_src" ] && [ -d "$g" ] && gtest_src=$g
      done
      if [ -n "$gtest_src" ]; then
        (cmake -S "$gtest_src" -B /tmp/gtb -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtinst -DCMAKE_BUILD_TYPE=Release \
          > $OUT/gtest.log 2>&1 && cmake --build /tmp/gtb -j16 --target install >> $OUT/gtest.log 2>&1) || echo "gtest build failed"
      fi
      { time (cmake -S . -B $B -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_PREFIX_PATH=/tmp/gtinst \
          -DCMAKE_CUDA_FLAGS="-Xptxas -v" > $OUT/configure.log 2>&1 && cmake --build $B -j16 > $OUT/build.log 2>&1); } 2>&1 | tail -3
      grep -E "error|spill|Used [0-9]+ registers" $OUT/build.log | grep -E "error|[1-9][0-9]* bytes spill" | head -20
      [ -x $B/tests/test_cuda ] || { echo "BUILD FAILED"; tail -30 $OUT/build.log; exit 1; } ;;
    dev)
      for f in dev/cuda/*.cu; do
        n=$(basename "$f" .cu)
        nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I src -I include "$f" -o /tmp/dev_$n \
          > "$OUT/dev_${n}_build.log" 2>&1 || { echo "dev $n: BUILD FAILED"; tail -20 "$OUT/dev_${n}_build.log"; continue; }
        timeout 240 /tmp/dev_$n > "$OUT/dev_$n.log" 2>&1; echo "dev $n rc=$?"
        grep -E "FAIL|PASS|old .* ms|no CUDA" "$OUT/dev_$n.log" | grep -v "^  PASS" | head -30
      done ;;
    test)
      (cd $B && timeout 240 ctest -j8 --output-on-failure ${CTEST_ARGS:-} > $OUT/ctest.log 2>&1); echo "ctest rc=$?"
      grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest.log | head -40 ;;
    sanitize)
      # SANITIZE_MEMCHECK_FILTER / SANITIZE_RACECHECK_FILTER: test_cuda's cases for the two tools
      # (e.g. the quadratic paths' tests after a change to their kernels)
      timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda \
        --gtest_filter="${SANITIZE_MEMCHECK_FILTER:-Cuda.BackwardIsBitwiseDeterministic:Cuda.TailChunkAndHvEqualsH:Cuda.SequenceFirstLayout:Cuda.StepMatchesForward}" \
        > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -5
      timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_backends --gtest_filter='*cuda*bfloat16*' \
        > $OUT/memcheck_harness.log 2>&1; echo "memcheck harness rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_harness.log | head -5
      timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda \
        --gtest_filter="${SANITIZE_RACECHECK_FILTER:-Cuda.TailChunkAndHvEqualsH:Cuda.StepMatchesForward}" > $OUT/racecheck.log 2>&1
      echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -5
      for x in /tmp/dev_*; do
        [ -x "$x" ] || continue
        n=$(basename "$x")
        timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$x" --small > "$OUT/memcheck_$n.log" 2>&1
        echo "memcheck $n rc=$?"; grep -E "ERROR SUMMARY|ALL PASS|FAIL:" "$OUT/memcheck_$n.log" | head -3
      done ;;
    ab)
      # Compile-time variants against the main build in the same session: AB_VARIANTS is a list of
      # CUDA flag sets separated by ';' (e.g. "-DRHOSCAN_STATES_STAGES=2;-DRHOSCAN_LOCAL_MIN_BLOCKS=2");
      # AB_TREES other source trees (directories carried beside this one, each with a COMMIT file:
      # e.g. the base of a round); each gets its own build of the CLI, and AB_CASES are benchmarked
      # in every build in turn, AB_ROUNDS times (default 1), so that a drift of the clocks shows.
      # AB_NCU_CASES (e.g. BDH-8k): then each build's kernel durations per case (Nsight Compute,
      # one forward and one forward+backward, ncu_summary.py), sorted, to $OUT/ab-durations.txt.
      IFS=';' read -ra variants <<< "${AB_VARIANTS:-}"
      builds=("$B") labels=("$commit")
      for i in "${!variants[@]}"; do
        vb=/tmp/b_ab$i
        cmake -S . -B $vb -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
          -DCMAKE_CUDA_FLAGS="${variants[$i]}" > $OUT/ab${i}_configure.log 2>&1 &&
          cmake --build $vb -j16 --target rhoscan_cli > $OUT/ab${i}_build.log 2>&1 &&
          { builds+=("$vb"); labels+=("$commit+${variants[$i]}"); } ||
          { echo "ab build '${variants[$i]}' failed"; tail -20 $OUT/ab${i}_build.log; }
      done
      i=0
      for tree in ${AB_TREES:-}; do
        vb=/tmp/b_tree$i
        cmake -S "$tree" -B $vb -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
          > $OUT/tree${i}_configure.log 2>&1 &&
          cmake --build $vb -j16 --target rhoscan_cli > $OUT/tree${i}_build.log 2>&1 &&
          { builds+=("$vb"); labels+=("$(cat "$tree/COMMIT" 2>/dev/null || echo "$tree")"); } ||
          { echo "ab build of $tree failed"; tail -20 $OUT/tree${i}_build.log; }
        i=$((i + 1))
      done
      for round in $(seq 1 "${AB_ROUNDS:-1}"); do
        for k in "${!builds[@]}"; do
          echo "-- ${labels[$k]} (round $round)"
          timeout 120 ${builds[$k]}/tools/rhoscan bench --device cuda --cases ${AB_CASES:-BDH-8k,long-T8192} --backward \
            --repeats 5 --json $OUT/bench-ab.jsonl --commit "${labels[$k]}" 2>&1 | grep -E "^(BDH|long|step)"
        done
      done
      ncu_cases=${AB_NCU_CASES:-}
      for cs in ${ncu_cases//,/ }; do
        for k in "${!builds[@]}"; do
          csv=$OUT/ab-ncu-$k-$cs.csv
          timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv ${builds[$k]}/tools/rhoscan bench \
            --device cuda --cases "$cs" --backward --repeats 1 > "$csv" 2>&1
          { echo "-- ${labels[$k]} $cs"; python3 dev/cuda/ncu_summary.py "$csv" | sort -k4 -g -r | head -12; } |
            tee -a $OUT/ab-durations.txt
        done
      done ;;
    source)
      # Nsight Compute's full set with source correlation for one launch of each of SOURCE_KERNELS
      # (regexes, space-separated; default bwd_local_kernel; `regex@case` profiles it in that bench case,
      # else SOURCE_CASE, default BDH-8k) in the case's forward+backward, from a
      # -lineinfo build of the CLI: $OUT/source_<n>.ncu-rep (open it in the Nsight Compute GUI),
      # the details page and the source page (CUDA lines with their samples, stalls and
      # instruction counts, CSV) as text.
      cmake -S . -B /tmp/b_lineinfo -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
        -DCMAKE_CUDA_FLAGS="-lineinfo" > $OUT/source_configure.log 2>&1 &&
        cmake --build /tmp/b_lineinfo -j16 --target rhoscan_cli > $OUT/source_build.log 2>&1 ||
        { echo "lineinfo build failed"; tail -20 $OUT/source_build.log; exit 1; }
      n=0
      for spec in ${SOURCE_KERNELS:-${SOURCE_KERNEL:-bwd_local_kernel}}; do
        n=$((n + 1))
        kernel=${spec%@*}; case_name=${SOURCE_CASE:-BDH-8k}
        [ "$spec" != "$kernel" ] && case_name=${spec#*@}
        echo "source_$n: $kernel in $case_name"
        timeout 200 ncu --clock-control none -k regex:$kernel -c 1 --set full --import-source yes \
          -o $OUT/source_$n /tmp/b_lineinfo/tools/rhoscan bench --device cuda --cases $case_name --backward --repeats 1 \
          > $OUT/source_${n}_ncu.log 2>&1; echo "ncu $kernel rc=$?"
        ncu --import $OUT/source_$n.ncu-rep --page details > $OUT/source_${n}_details.txt 2>&1
        ncu --import $OUT/source_$n.ncu-rep --page source --csv --print-source cuda > $OUT/source_${n}_cuda.csv 2>&1 ||
          ncu --import $OUT/source_$n.ncu-rep --page source --csv > $OUT/source_${n}_cuda.csv 2>&1
        ncu --import $OUT/source_$n.ncu-rep --page source --csv --print-source sass > $OUT/source_${n}_sass.csv 2>&1
        grep -E "Duration|Issued Warp|Eligible Warps|Warp Cycles Per Issued" $OUT/source_${n}_details.txt | head -8
        wc -l $OUT/source_${n}_cuda.csv $OUT/source_${n}_sass.csv
      done ;;
    crossover)
      # The quadratic paths' shape rule (quadratic.cuh: L >= RHOSCAN_QUADRATIC_MIN_L_PER_T * T): both
      # paths forced per call (RHOSCAN_CUDA_FORWARD_PATH / _BACKWARD_PATH) on CROSSOVER_SHAPES
      # (B,H,Hv,T,L,E, space-separated; default T = 512 with L = T/2 .. 4 T, as BDH-base), forward
      # and forward+backward, JSON lines labelled with the forced paths.
      shapes=""
      for sh in ${CROSSOVER_SHAPES:-24,4,1,512,256,256 24,4,1,512,512,256 16,4,1,512,1024,256 8,4,1,512,2048,256}; do
        shapes="$shapes --shape $sh"
      done
      for path in chunked quadratic; do
        echo "-- forward and backward paths: $path"
        RHOSCAN_CUDA_FORWARD_PATH=$path RHOSCAN_CUDA_BACKWARD_PATH=$path timeout 150 $B/tools/rhoscan bench \
          --device cuda $shapes --backward --repeats 5 --json $OUT/bench-crossover.jsonl --commit "$commit+paths=$path" \
          2>&1 | grep -E "^shape"
      done ;;
    workspace)
      # BDH-8k forward+backward under several workspace caps (MiB): what the batching of (b, h)
      # pairs costs.
      for mib in ${WORKSPACE_MIB:-2048 4096 8192}; do
        timeout 120 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --workspace-mib $mib \
          --json $OUT/bench-workspace.jsonl --commit "$commit" 2>&1 | grep -E "^BDH|peak memory"
      done ;;
    sanitize-all)
      # memcheck over every CUDA test (test_cuda and the harness's CUDA cases, all dtypes), then
      # racecheck over test_cuda: issue 4 asks for a clean sanitizer on the whole suite (the
      # sanitize stage covers a subset, to stay short). Measured at ff7f958 on the H200: memcheck
      # 18 s and 5 s, racecheck ~390 s (LargeLatentSmallT 103 s, SavedBufferReplacesTheRecomputation
      # 119 s), so after a build the stage fits one 10-minute device call only just;
      # RACECHECK_ALL_FILTER splits the racecheck over two calls (a gtest filter).
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda > $OUT/memcheck_all_cuda.log 2>&1
      echo "memcheck test_cuda rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_all_cuda.log | head -5
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_backends --gtest_filter='*cuda*' \
        > $OUT/memcheck_all_harness.log 2>&1
      echo "memcheck harness (cuda) rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_all_harness.log | head -5
      timeout 480 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda \
        --gtest_filter="${RACECHECK_ALL_FILTER:-*}" > $OUT/racecheck_all.log 2>&1
      echo "racecheck test_cuda rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck_all.log | head -5 ;;
    bench)
      timeout 240 $B/tools/rhoscan bench --device cuda --backward --repeats 5 --json $OUT/bench.jsonl --commit "$commit" 2>&1 | tee $OUT/bench.log ;;
    profile)
      # Per-kernel durations (no replay of the clocks: --clock-control none) for one forward+backward
      # of each benchmark case.
      for c in ${PROFILE_CASES:-BDH-8k BDH-base long-T8192}; do
        timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
          $B/tools/rhoscan bench --device cuda --cases $c --backward --repeats 1 > $OUT/ncu-$c.csv 2>&1
        echo "profile $c rc=$?"
        python3 dev/cuda/ncu_summary.py $OUT/ncu-$c.csv | sort -k4 -g -r | head -${PROFILE_TOP:-14}
      done ;;
    ncu)
      # Speed-of-light, occupancy and stall reasons of one launch of each heavy kernel at BDH-8k.
      for k in ${NCU_KERNELS:-chunk_states_mma chunk_scores_mma chunk_output_mma chunk_readback_mma bwd_local_kernel norm_apply_kernel norm_sums_kernel}; do
        timeout 90 ncu --clock-control none -k regex:$k -c 1 --section SpeedOfLight --section Occupancy \
          --section WarpStateStats --section MemoryWorkloadAnalysis \
          $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu-$k.txt 2>&1
        echo "== $k"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|L1/TEX Hit|DRAM Throughput" $OUT/ncu-$k.txt | head -16
      done ;;
  esac
done
