#!/usr/bin/env bash
# End-to-end MiniLM-L6 (batch 32 x sequence 128) on the GPU machine: spartac compile + run
# (checked against the CPU executor on the same inputs) for dense and pruned cases, and the
# PyTorch baselines (benches/e2e_torch.py) in the same call.
# usage: BIN=./target/gpu/spartac OUT=/tmp/e2e [CASES="dense b90"] [TORCH=1] [FINE_TILE=64,16,6,1] benches/e2e_gpu.sh
# (suffixes add flags: _t --fine-tile $FINE_TILE, _f16 --dtype f16, _nolib --no-library, _nofuse, _noprop, _noshrink)
# Needs .device/minilm-l6.stripped.onnx (benches/e2e_prepare.py strip, here).
# MODEL=efficientnet: EfficientNet-Lite0 (batch 32 x 3 x 224 x 224) instead, cases dense c50 c70 c70_noshrink
# (output-channel pruning, models/tesa/efficientnet-lite0-channels-{50,70}.json), the ONNX model
# from $CONV_MODEL (default .device/efficientnet-lite0.onnx: copy .cache/models/efficientnet-lite0.onnx
# there and carry .device), files in $OUT named efficientnet-CASE.*, torch in efficientnet-torch.jsonl.
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="$OUT/cache"
if [ "${MODEL:-minilm}" = efficientnet ]; then
  ONNX="${CONV_MODEL:-.device/efficientnet-lite0.onnx}"
  PREFIX=efficientnet-
  DEFAULT_CASES="dense c50 c70"
  TORCH_MODEL="--model efficientnet"
else
  ONNX="$OUT/minilm-l6.onnx"
  [ -f "$ONNX" ] || python3 benches/e2e_prepare.py restore .device/minilm-l6.stripped.onnx "$ONNX"
  PREFIX=
  DEFAULT_CASES="dense b50 b90 b95 u95 b90_noprop b90_nofuse"
  TORCH_MODEL=
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
tesa() {
  case "${1%%_f16*}" in
    dense|dense_nofuse) echo "" ;;
    b50|b50_t) echo "--tesa models/tesa/minilm-l6-block32-50.json" ;;
    b90|b90_noprop|b90_nofuse|b90_t) echo "--tesa models/tesa/minilm-l6-block32-90.json" ;;
    b95|b95_t) echo "--tesa models/tesa/minilm-l6-block32-95.json" ;;
    u95|u95_t) echo "--tesa models/tesa/minilm-l6-unstructured-95.json" ;;
    c50|c70) b=${1%%_*}; echo "--tesa models/tesa/efficientnet-lite0-channels-${b#c}.json" ;;
    c70_noshrink) echo "--tesa models/tesa/efficientnet-lite0-channels-70.json" ;;
  esac
}
extra() {
  # every suffix of the case adds its flag: dense_f16_nolib = --dtype f16 --no-library
  local f=""
  case "$1" in *_f16|*_f16_*) f="$f --dtype f16" ;; esac
  case "$1" in *_noprop*) f="$f --no-propagate" ;; esac
  case "$1" in *_nofuse*) f="$f --no-fuse" ;; esac
  case "$1" in *_noshrink*) f="$f --no-shrink" ;; esac
  case "$1" in *_nolib*) f="$f --no-library" ;; esac
  case "$1" in *_t) f="$f --fine-tile ${FINE_TILE:-64,16,6,1}" ;; esac
  echo "$f"
}
for c in ${CASES:-$DEFAULT_CASES}; do
  echo "== $c"
  f="$OUT/$PREFIX$c"
  $BIN compile "$ONNX" $(tesa $c) $(extra $c) -o "$f.sparta" --json "$f.compile.json" 2>&1 | tee "$f.compile.log" | tail -4
  $BIN run "$f.sparta" --random 7 --backend cuda --check --repeat ${REPEAT:-200} --profile \
    --json "$f.run.json" 2>&1 | tee "$f.run.log" | tail -25
done
if [ "${TORCH:-1}" = 1 ]; then
  python3 benches/e2e_torch.py $TORCH_MODEL --repeat ${REPEAT:-200} ${TORCH_ARGS:-} 2>&1 | tee "$OUT/${PREFIX}torch.jsonl" | grep -v Warning
fi
