# Sourced by benches/tune_*.sh (not run alone): the shared setup and the measured sequence of a
# tune on the GPU machine. Setup: LD_LIBRARY_PATH, SPARTAC_CACHE_DIR=$OUT/cache, $OUT/gpu.txt.
# `tune_flow ONNX [--tesa FILE]`: the untuned compile + run, the tune (its time, report, JSON
# and plot; the cache is $OUT/tune, so a second call with the same OUT resumes), then the tuned
# compile + run; both runs checked against the CPU executor; then the tune again on the same
# cache, its process wall time recorded (the warm re-tune). Knobs: BUDGET, REPEAT (defaults
# from the caller's DEFAULT_BUDGET and DEFAULT_REPEAT).
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="$OUT/cache"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"

tune_flow() {
  local onnx=$1; shift
  local model=("$onnx" "$@")
  run_one() {
    local name=$1; shift
    $BIN compile "${model[@]}" -o "$OUT/$name.sparta" --json "$OUT/$name.compile.json" "$@" 2>&1 \
      | tee "$OUT/$name.compile.log" | tail -6
    $BIN run "$OUT/$name.sparta" --random 7 --backend cuda --check --repeat "${REPEAT:-$DEFAULT_REPEAT}" \
      --json "$OUT/$name.run.json" 2>&1 | tee "$OUT/$name.run.log" | tail -3
  }
  echo "== untuned (no tune cache)"
  run_one untuned --tune-cache "$OUT/no-tune-cache"
  echo "== tune"
  SECONDS=0
  $BIN tune "${model[@]}" --budget "${BUDGET:-$DEFAULT_BUDGET}" --cache "$OUT/tune" \
    --json "$OUT/tune.json" --plot "$OUT/tune.png" 2>&1 | tee "$OUT/tune.log" | tail -50
  echo "tune wall time: ${SECONDS} s" | tee -a "$OUT/tune.log"
  echo "== tuned"
  run_one tuned --tune-cache "$OUT/tune"
  echo "== warm re-tune (same cache: nothing left to measure)"
  local t0; t0=$(date +%s%N)
  $BIN tune "${model[@]}" --budget "${BUDGET:-$DEFAULT_BUDGET}" --cache "$OUT/tune" \
    --json "$OUT/tune-warm.json" > "$OUT/tune-warm.log" 2>&1
  local rc=$?
  echo "warm re-tune wall time: $(( ($(date +%s%N) - t0) / 1000000 )) ms (exit $rc)" | tee -a "$OUT/tune-warm.log"
}
