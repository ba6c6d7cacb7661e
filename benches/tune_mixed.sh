#!/usr/bin/env bash
# `spartac tune` on the 4096^2 mixed pattern (SparTA Fig. 16: 90% of the 32x32 blocks pruned plus
# 1% of all elements kept in the pruned ones) as one MatMul, on the GPU machine: the model is
# written there (`spartac synth matmul`, 64 MB: not carried), then the untuned compile + run, the
# tune, and the tuned compile + run, both runs checked against the CPU executor.
# usage: BIN=./target/gpu/spartac OUT=/tmp/tune-mixed [M=4096] [SEED=1] [BUDGET=4m] [REPEAT=200]
#        benches/tune_mixed.sh
# The tune cache is $OUT/tune: run again with the same OUT and the tune resumes.
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="$OUT/cache"
M=${M:-4096}
ONNX="$OUT/mixed.onnx"
TESA="$OUT/mixed.tesa.json"
$BIN synth matmul --m "$M" --k 4096 --n 4096 --pattern mixed32x32@0.9+0.01 --seed "${SEED:-1}" \
  -o "$ONNX" --tesa-out "$TESA" || exit 1
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
$BIN tune "$ONNX" --tesa "$TESA" --budget "${BUDGET:-4m}" --cache "$OUT/tune" \
  --json "$OUT/tune.json" --plot "$OUT/tune.png" 2>&1 | tee "$OUT/tune.log" | tail -20
echo "tune wall time: ${SECONDS} s" | tee -a "$OUT/tune.log"
echo "== tuned"
run tuned --tune-cache "$OUT/tune"
