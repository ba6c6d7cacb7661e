#!/usr/bin/env bash
# End-to-end MiniLM-L6 (batch 32 x sequence 128) on the GPU machine: spartac compile + run
# (checked against the CPU executor on the same inputs) for dense and pruned cases, and the
# PyTorch baselines (benches/e2e_torch.py) in the same call.
# usage: BIN=./target/gpu/spartac OUT=/tmp/e2e [CASES="dense b90"] [TORCH=1] [FINE_TILE=64,16,6,1] benches/e2e_gpu.sh
# (a case ending in _t compiles with --fine-tile $FINE_TILE)
# Needs .device/minilm-l6.stripped.onnx (benches/e2e_prepare.py strip, here).
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="$OUT/cache"
MODEL="$OUT/minilm-l6.onnx"
[ -f "$MODEL" ] || python3 benches/e2e_prepare.py restore .device/minilm-l6.stripped.onnx "$MODEL"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
tesa() {
  case "$1" in
    dense|dense_nofuse) echo "" ;;
    b50|b50_t) echo "--tesa models/tesa/minilm-l6-block32-50.json" ;;
    b90|b90_noprop|b90_nofuse|b90_t) echo "--tesa models/tesa/minilm-l6-block32-90.json" ;;
    b95|b95_t) echo "--tesa models/tesa/minilm-l6-block32-95.json" ;;
    u95|u95_t) echo "--tesa models/tesa/minilm-l6-unstructured-95.json" ;;
  esac
}
extra() {
  case "$1" in
    *_noprop) echo "--no-propagate" ;;
    *_nofuse) echo "--no-fuse" ;;
    *_t) echo "--fine-tile ${FINE_TILE:-64,16,6,1}" ;;
  esac
}
for c in ${CASES:-dense b50 b90 b95 u95 b90_noprop b90_nofuse}; do
  echo "== $c"
  $BIN compile "$MODEL" $(tesa $c) $(extra $c) -o "$OUT/$c.sparta" --json "$OUT/$c.compile.json" 2>&1 | tee "$OUT/$c.compile.log" | tail -4
  $BIN run "$OUT/$c.sparta" --random 7 --backend cuda --check --repeat ${REPEAT:-200} --profile \
    --json "$OUT/$c.run.json" 2>&1 | tee "$OUT/$c.run.log" | tail -25
done
if [ "${TORCH:-1}" = 1 ]; then
  python3 benches/e2e_torch.py --repeat ${REPEAT:-200} ${TORCH_ARGS:-} 2>&1 | tee "$OUT/torch.jsonl" | grep -v Warning
fi
