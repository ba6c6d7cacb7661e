#!/usr/bin/env bash
# HPEC Sparse DNN Challenge on one GPU through the compiled task graph (spartac hpec run
# --backend cuda), with the PyTorch baselines in the same call. One JSON per run under $OUT.
# Run on the GPU machine with the stripped release binary:
#   TARBALL=$OUT/hpec_gpu.tgz BIN=./target/gpu/spartac OUT=/tmp/hpec benches/hpec_gpu.sh
# (in the device tool's command $OUT is the folder that comes back: the archive goes there, the
# runs elsewhere; TARBALL comes first, since assignments expand left to right)
# SETS picks the groups (default: all single-GPU ones, in this order): real ablations sweep merge
# mnist torch big huge (`huge`: 16384 and 65536 neurons, HUGE_NETS narrows it) (`merge`: row merging and the few-rows kernels on and off, MERGE_NETS narrows it). `multigpu` (not in the default) runs 1024 and 4096 neurons on 1, 2 and 4 GPUs
# with and without input hashing (benches/results/hpec_multigpu.md); NETS narrows it, e.g.
# NETS="1024x120 4096x1920", VARIANTS="1 2h 4h" (GPUs, h: with input hashing).
# Inputs as in PEERS.md: the 1,200 real images repeated to 60,000 (950 categories survive);
# `mnist` and `big` use the 60,000 MNIST-derived images (more survive: more work).
# TARBALL, when set, is rewritten after every run (a cut-off call keeps what ran).
set -uo pipefail
BIN=${BIN:-./target/release/spartac}
OUT=${OUT:-./hpec_gpu_out}
SETS=${SETS:-real ablations sweep merge mnist torch big huge}
LIMIT=${LIMIT:-240}
COMMON=${COMMON:-}   # appended to every spartac run, e.g. "--fine-tile auto"
TAG=${TAG:-}         # appended to every run name
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} SPARTAC_CACHE_DIR=${SPARTAC_CACHE_DIR:-/tmp/spartac-cache}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# The archive is built outside $OUT (an archive written into the folder it reads fails).
save() {
  [[ -n "${TARBALL:-}" ]] || return 0
  local tmp; tmp=$(mktemp /tmp/hpec_gpu.XXXXXX)
  tar czf "$tmp" -C "$OUT" --exclude='net*' --exclude="$(basename "$TARBALL")" . && mv "$tmp" "$TARBALL"
}
run() { # name, args...
  local name=$1$TAG; shift
  timeout "$LIMIT" /usr/bin/time -v "$BIN" hpec run --backend cuda --json "$@" $COMMON > "$OUT/$name.json" 2> "$OUT/$name.err"
  local rc=$?
  echo "$name rc=$rc $(python3 -c "
import json
d=json.load(open('$OUT/$name.json'))
print('ms=%.3f compile_s=%.2f load_s=%.2f cats=%d devMiB=%.0f %s prof=%s gpus=%d batch=%d images=%s busy_ms=%s' % (d['seconds']*1e3, d['compile_seconds'], d['kernel_load_seconds'], d['categories'], d['device_bytes']/2**20, d['verdict'], {k: round(v,2) for k,v in (d.get('profile_ms_by_kind') or {}).items()}, d['gpus'], d['batch'], d.get('images_per_gpu'), [round(b*1e3,2) for b in d.get('busy_seconds_per_gpu') or []]))" 2>/dev/null || tail -2 "$OUT/$name.err" | tr '\n' ' ')"
  save
}
has() { [[ " $SETS " == *" $1 "* ]]; }
GPUS=$(nvidia-smi -L | wc -l)
REAL="--repeat-images --image-count 60000"
if has real; then
  run real_1024x120_1200
  run real_1024x120 $REAL --profile
  for L in 480 1920; do run real_1024x$L --neurons 1024 --layers $L $REAL; done
fi
if has ablations; then # 1024x120, one setting changed from the defaults each
  run abl_no_compaction $REAL --compact-every 0
  run abl_compact_every_layer $REAL --compact-first 0 --compact-every 1
  run abl_stream_launches $REAL --no-graph
  run abl_streamed_weights $REAL --stream-weights
  run abl_simt $REAL --engine simt
  run abl_plan_at_batch $REAL --plan-rows 60000
  run abl_auto_tile $REAL --fine-tile auto
  run abl_batch_6000 $REAL --batch 6000
  run abl_merge_from_0 $REAL --merge-from 0
  run abl_merge_from_16 $REAL --merge-from 16
  run abl_few_rows_16 $REAL --few-rows 16
  run abl_few_rows_256 $REAL --few-rows 256
fi
if has sweep; then # fine tiles (SWEEP_TILES) on SWEEP_NETS (r: repeated real images, m: MNIST)
  for net in ${SWEEP_NETS:-r1024x480}; do
    n=${net:1}; N=${n%x*}; L=${n#*x}
    if [[ $net == r* ]]; then IN="$REAL"; else IN="--mnist-images --image-count 60000"; fi
    for t in ${SWEEP_TILES:-64,24,6,1 64,31,6,1 64,16,4,1 64,16,8,1 32,31,6,1}; do
      run sweep_${net}_t${t//,/-} --neurons $N --layers $L $IN --fine-tile $t
    done
  done
fi
if has merge; then # merging identical rows and the few-rows kernels, each turned off alone and both
  for net in ${MERGE_NETS:-r1024x120 r1024x1920 m1024x120 m1024x1920 m4096x120 m4096x480}; do
    n=${net:1}; N=${n%x*}; L=${n#*x}
    if [[ $net == r* ]]; then IN="$REAL"; else IN="--mnist-images --image-count 60000"; fi
    run merge_${net} --neurons $N --layers $L $IN
    run merge_${net}_no_merge --neurons $N --layers $L $IN --no-merge
    run merge_${net}_no_few --neurons $N --layers $L $IN --few-rows 0
    [[ $net == r1024x120 || $net == m4096x120 ]] && run merge_${net}_neither --neurons $N --layers $L $IN --no-merge --few-rows 0
    [[ $net == r1024x120 || $net == m1024x120 ]] && run merge_${net}_profile --neurons $N --layers $L $IN --profile
  done
fi
has mnist && run mnist_1024x120 --mnist-images --profile
if has torch; then
  for L in ${TORCH_LAYERS:-120 480}; do
    "$BIN" hpec generate --neurons 1024 --layers $L --out "$OUT/net$L" --images 1200 > /dev/null
    timeout "$LIMIT" python3 benches/hpec_torch.py --dir "$OUT/net$L" --count 60000 2>/dev/null | tee "$OUT/torch_1024x$L.jsonl"
    rm -rf "$OUT/net$L"
    save
  done
fi
if has big; then # MNIST-derived inputs, truth by the f64 reference
  run mnist_4096x120 --neurons 4096 --layers 120 --image-count 60000
  run mnist_4096x480 --neurons 4096 --layers 480 --image-count 60000
  run mnist_4096x1920 --neurons 4096 --layers 1920 --image-count 60000
fi
if has huge; then # 16384 and 65536 neurons (planned on the sparse mask), MNIST-derived inputs
  # 65536x480 and x1920 do not fit (benches/results/hpec_gpu.md); one network per call
  for net in ${HUGE_NETS:-16384x120 16384x480 16384x1920}; do
    run mnist_$net --neurons ${net%x*} --layers ${net#*x} --image-count 60000
  done
fi
if has multigpu; then # one network at a time: 1 GPU, then 2 and 4 with and without input hashing
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  for net in ${NETS:-1024x120 1024x480 1024x1920 4096x120 4096x480 4096x1920}; do
    n=${net%x*} l=${net#*x}
    if [[ $n == 1024 ]]; then args="--neurons 1024 --layers $l $REAL"; else args="--neurons $n --layers $l --image-count 60000"; fi
    if [[ $n$l == 1024120 ]]; then args=$REAL; fi
    for v in ${VARIANTS:-1 2 2h 4 4h}; do # GPUs, h: with input hashing
      g=${v%h}
      (( g <= GPUS )) || continue
      if [[ $v == *h ]]; then run mg_${net}_g${g}_hash $args --gpus $g --hash-inputs; else run mg_${net}_g$g $args --gpus $g; fi
    done
  done
fi
