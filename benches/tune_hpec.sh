#!/usr/bin/env bash
# `spartac tune` on an HPEC network per layer, on the GPU machine: the network is exported as an
# ONNX model (`spartac hpec export`: per layer MatMul with the sparse weight + Add + Relu + Min),
# whose 120 MatMuls the tune takes like any model's; then the untuned and the tuned compile +
# run, both checked against the CPU executor. (`spartac hpec run --backend cuda` plans its layers
# itself and does not read the tune cache yet.)
# usage: BIN=./target/gpu/spartac OUT=/tmp/tune-hpec [NEURONS=1024] [LAYERS=120] [BATCH=1024]
#        [BUDGET=8m] [REPEAT=50] benches/tune_hpec.sh
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="$OUT/cache"
ONNX="$OUT/hpec.onnx"
$BIN hpec export --neurons "${NEURONS:-1024}" --layers "${LAYERS:-120}" --batch "${BATCH:-1024}" --out "$ONNX" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
run() {
  local name=$1; shift
  $BIN compile "$ONNX" -o "$OUT/$name.sparta" --json "$OUT/$name.compile.json" "$@" 2>&1 \
    | tee "$OUT/$name.compile.log" | tail -6
  $BIN run "$OUT/$name.sparta" --random 7 --backend cuda --check --repeat "${REPEAT:-50}" \
    --json "$OUT/$name.run.json" 2>&1 | tee "$OUT/$name.run.log" | tail -3
}
echo "== untuned (no tune cache)"
run untuned --tune-cache "$OUT/no-tune-cache"
echo "== tune"
SECONDS=0
$BIN tune "$ONNX" --budget "${BUDGET:-8m}" --cache "$OUT/tune" --json "$OUT/tune.json" --plot "$OUT/tune.png" 2>&1 \
  | tee "$OUT/tune.log" | tail -20
echo "tune wall time: ${SECONDS} s" | tee -a "$OUT/tune.log"
echo "== tuned"
run tuned --tune-cache "$OUT/tune"
