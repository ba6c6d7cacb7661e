#!/usr/bin/env bash
# BERT-family encoders end to end on the GPU machine: exports them with random weights
# (models/export_bert.py; torch, transformers and onnxscript are there), then per model and
# case spartac compile + run (checked against the CPU executor on the same inputs), and the
# PyTorch baselines (benches/e2e_torch.py, same configs) in the same call.
# usage: BIN=./target/release/spartac OUT=/tmp/bert [MODELS="minilm bert512 bertbase"]
#        [CASES="dense_f16 b90_f16"] [TORCH_DTYPES=f32,f16] [REPEAT=100] benches/e2e_bert.sh
# A case is dense|b50|b90 (models/tesa/matmul-block32-*.json: every MatMul weight) with
# suffixes _f16 / _bf16 (--dtype), _nolib (--no-library) and _apart (--no-merge-qkv); extra
# compile flags: $FLAGS.
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
mkdir -p "$OUT"; [ -e "$OUT/models" ] || mkdir -p "$OUT/models"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SPARTAC_CACHE_DIR="${SPARTAC_CACHE_DIR:-$OUT/cache}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
MODELS="${MODELS:-minilm bert512 bertbase}"
# Models already in $OUT/models (a link to another run's folder) are not exported again.
missing=$(for m in $MODELS; do [ -f "$OUT/models/$m.onnx" ] || echo "$m"; done)
[ -z "$missing" ] || python3 models/export_bert.py "$OUT/models" $missing 2>&1 | grep -v Warning | tail -5
for m in $MODELS; do
  for c in ${CASES:-dense_f16 b50_f16 b90_f16}; do
    echo "== $m $c"
    f="$OUT/$m-$c"
    tesa=""
    case "$c" in
      b50*) tesa="--tesa models/tesa/matmul-block32-50.json" ;;
      b90*) tesa="--tesa models/tesa/matmul-block32-90.json" ;;
      nm24b50*) tesa="--tesa models/tesa/matmul-2to4-block32-50.json" ;;
      nm24*) tesa="--tesa models/tesa/matmul-2to4.json" ;;
    esac
    flags="${FLAGS:-}"
    case "$c" in *_f16*) flags="$flags --dtype f16" ;; *_bf16*) flags="$flags --dtype bf16" ;; esac
    case "$c" in *_nolib*) flags="$flags --no-library" ;; esac
    case "$c" in *_apart*) flags="$flags --no-merge-qkv" ;; esac
    $BIN compile "$OUT/models/$m.onnx" $tesa $flags -o "$f.sparta" --json "$f.compile.json" > "$f.compile.log" 2>&1 \
      || { tail -3 "$f.compile.log"; continue; }
    tail -2 "$f.compile.log"
    $BIN run "$f.sparta" --random 7 --backend cuda --check --repeat "${REPEAT:-100}" --profile \
      --json "$f.run.json" > "$f.run.log" 2>&1
    grep -iE "median|check|error|relative" "$f.run.log" | head -6
  done
  if [ "${TORCH:-1}" = 1 ]; then
    python3 benches/e2e_torch.py --model "$m" --repeat "${REPEAT:-100}" --dtypes "${TORCH_DTYPES:-f16}" 2>&1 \
      | grep -v Warning | tee "$OUT/$m-torch.jsonl"
  fi
done
