#!/usr/bin/env bash
# The model zoo through spartac: per model (models/zoo.py exports) and dtype, `spartac compile`
# (dense, no TeSA) and, with RUN=1 on the GPU machine, `spartac run --check` timed; then one
# markdown table (benches/zoo_table.py) of ops, compile time, and the result or the gaps. With
# TORCH=1 (GPU machine), per model after spartac, benches/zoo_torch.py times the same model in
# PyTorch (eager, torch.compile + CUDA graph) in the same dtypes into $OUT/$m-torch.jsonl, and
# the table adds torch's time and spartac's speed against it per dtype, with a geometric mean.
# usage: BIN=./target/release/spartac ZOO=.cache/zoo OUT=/tmp/zoo [MODELS="resnet50 gpt2"]
#        [DTYPES="f32 f16"] [RUN=0|1] [TORCH=0|1] [REPEAT=100] [PYTHON=python3] benches/zoo.sh
# (here PYTHON="env PYTHONPATH=.cache/py-torch python3"; the GPU machine's python3 has torch)
# A model that does not compile records its one-line error (each op type without a GPU kernel,
# with its node count); the table lists those gaps.
set -uo pipefail
: "${BIN:?}" "${ZOO:?}" "${OUT:?}"
mkdir -p "$OUT"
MODELS="${MODELS:-$(ls "$ZOO"/*.onnx 2>/dev/null | xargs -n1 basename | sed 's/\.onnx$//')}"
for m in $MODELS; do
  for d in ${DTYPES:-f32 f16}; do
    f="$OUT/$m-$d"
    start=$(date +%s%N)
    if "$BIN" compile "$ZOO/$m.onnx" --dtype "$d" -o "$f.sparta" --json "$f.compile.json" > "$f.compile.log" 2>&1; then
      status=compiled
    else
      status=failed
    fi
    secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    echo "{\"model\": \"$m\", \"dtype\": \"$d\", \"status\": \"$status\", \"compile_s\": $secs}" > "$f.status.json"
    echo "== $m $d: $status in ${secs}s"
    [ "$status" = failed ] && tail -1 "$f.compile.log"
    if [ "$status" = compiled ] && [ "${RUN:-0}" = 1 ]; then
      "$BIN" run "$f.sparta" --random 7 --backend cuda --check --repeat "${REPEAT:-100}" \
        --json "$f.run.json" > "$f.run.log" 2>&1
      grep -iE "relative error|median|error" "$f.run.log" | head -3
    fi
    rm -f "$f.sparta"
  done
  if [ "${TORCH:-0}" = 1 ]; then
    # One process per model: torch.compile's caches and the CUDA graph pools end with it.
    ${PYTHON:-python3} "$(dirname "$0")/zoo_torch.py" "$m" --dtypes "$(echo ${DTYPES:-f32 f16} | tr ' ' ,)" \
      --repeat "${REPEAT:-100}" > "$OUT/$m-torch.jsonl" 2> "$OUT/$m-torch.log" || tail -1 "$OUT/$m-torch.log"
    grep -h '"engine"' "$OUT/$m-torch.jsonl" | cut -c1-160
  fi
done
${PYTHON:-python3} "$(dirname "$0")/zoo_table.py" "$ZOO" "$OUT" | tee "$OUT/zoo_table.md"
