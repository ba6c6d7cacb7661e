#!/usr/bin/env bash
# `spartac tune` on MiniLM-L6 (batch 32 x sequence 128) on the GPU machine: the untuned
# compile + run, the tune (its time, report, JSON and plot), then the tuned compile + run, both
# runs checked against the CPU executor, in one call.
# usage: BIN=./target/gpu/spartac OUT=/tmp/tune [TESA=models/tesa/minilm-l6-block32-90.json]
#        [BUDGET=6m] [REPEAT=200] benches/tune_gpu.sh
# Needs .device/minilm-l6.stripped.onnx (benches/e2e_prepare.py strip, here). The tune cache is
# $OUT/tune: run the script again (same OUT) and the tune resumes where its budget stopped it.
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="$OUT/cache"
TESA=${TESA:-models/tesa/minilm-l6-block32-90.json}
ONNX="$OUT/minilm-l6.onnx"
[ -f "$ONNX" ] || python3 benches/e2e_prepare.py restore .device/minilm-l6.stripped.onnx "$ONNX"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
run() {
  local name=$1; shift
  $BIN compile "$ONNX" --tesa "$TESA" -o "$OUT/$name.sparta" --json "$OUT/$name.compile.json" "$@" 2>&1 \
    | tee "$OUT/$name.compile.log" | tail -6
  $BIN run "$OUT/$name.sparta" --random 7 --backend cuda --check --repeat "${REPEAT:-200}" \
    --json "$OUT/$name.run.json" 2>&1 | tee "$OUT/$name.run.log" | tail -3
}
echo "== untuned (no tune cache)"
run untuned --tune-cache "$OUT/no-tune-cache"
echo "== tune"
SECONDS=0
$BIN tune "$ONNX" --tesa "$TESA" --budget "${BUDGET:-6m}" --cache "$OUT/tune" \
  --json "$OUT/tune.json" --plot "$OUT/tune.png" 2>&1 | tee "$OUT/tune.log" | tail -50
echo "tune wall time: ${SECONDS} s" | tee -a "$OUT/tune.log"
echo "== tuned"
run tuned --tune-cache "$OUT/tune"
