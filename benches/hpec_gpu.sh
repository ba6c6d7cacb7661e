#!/usr/bin/env bash
# HPEC Sparse DNN Challenge on one GPU through the compiled task graph (spartac hpec run
# --backend cuda), with the PyTorch baselines in the same call. JSON per run under $OUT.
# Run on the GPU machine with the stripped release binary:
#   BIN=./target/gpu/spartac OUT=/tmp/hpec benches/hpec_gpu.sh
# SETS picks the groups (default: all): real, ablations, mnist, torch, big.
# Inputs as in PEERS.md: the 1,200 real images repeated to 60,000 (950 categories survive);
# `mnist` runs the 60,000 MNIST-derived images instead (12,920 survive 1024x120: more work).
set -uo pipefail
BIN=${BIN:-./target/release/spartac}
OUT=${OUT:-./hpec_gpu_out}
SETS=${SETS:-real ablations mnist torch big}
LIMIT=${LIMIT:-240}
# Appended to every spartac run (say "--plan-rows 1000"), and a tag appended to the run names.
COMMON=${COMMON:-}
TAG=${TAG:-}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} SPARTAC_CACHE_DIR=${SPARTAC_CACHE_DIR:-/tmp/spartac-cache}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() { # name, args...
  local name=$1$TAG; shift
  timeout "$LIMIT" /usr/bin/time -v "$BIN" hpec run --backend cuda --json "$@" $COMMON > "$OUT/$name.json" 2> "$OUT/$name.err"
  local rc=$?
  echo "$name rc=$rc $(python3 -c "
import json
d=json.load(open('$OUT/$name.json'))
print('ms=%.3f compile_s=%.2f load_s=%.2f cats=%d peakMiB=%.0f %s prof=%s' % (d['seconds']*1e3, d['compile_seconds'], d['kernel_load_seconds'], d['categories'], d['device_bytes']/2**20, d['verdict'], {k: round(v,2) for k,v in (d.get('profile_ms_by_kind') or {}).items()}))" 2>/dev/null || tail -2 "$OUT/$name.err" | tr '\n' ' ')"
}
has() { [[ " $SETS " == *" $1 "* ]]; }
REAL="--repeat-images --image-count 60000"
if has real; then
  run real_1024x120_1200
  run real_1024x120 $REAL --profile
  for L in ${LAYERS:-480 1920}; do run real_1024x$L --neurons 1024 --layers $L $REAL; done
fi
if has ablations; then
  run abl_no_compaction $REAL --compact-every 0
  run abl_compact_every_4 $REAL --compact-every 4
  run abl_stream_launches $REAL --no-graph
  run abl_streamed_weights $REAL --stream-weights
  run abl_simt $REAL --engine simt
  run abl_batch_6000 $REAL --batch 6000
fi
has mnist && run mnist_1024x120 --mnist-images --profile
if has torch; then
  for L in ${TORCH_LAYERS:-120}; do
    "$BIN" hpec generate --neurons 1024 --layers $L --out "$OUT/net$L" --images 1200 > /dev/null
    timeout "$LIMIT" python3 benches/hpec_torch.py --dir "$OUT/net$L" --count 60000 | tee "$OUT/torch_1024x$L.jsonl"
    rm -rf "$OUT/net$L"
  done
fi
if has big; then
  for N in ${BIG:-4096 16384}; do run mnist_${N}x120 --neurons $N --layers 120 --image-count 60000; done
fi
