#!/usr/bin/env bash
# The sparse matmul kernels of benches/results/spmm_gpu.md on one GPU, with the peers in the same
# call: `spartac kernels test` (every kernel family against the f64 reference), then per set a
# `spartac kernels bench` and benches/spmm_peers.py (cuBLAS, cuSPARSE, Triton BSR through torch)
# on the same matrices. The `ours_*.json` files are also the input of `spartac costdb fit`.
# Run on the GPU machine, from the repository root, with the stripped release binary:
#   TARBALL=$OUT/spmm_gpu.tar.xz BIN=./target/gpu/spartac OUT=/tmp/spmm benches/spmm_gpu.sh
# (in the device tool's command $OUT is the folder that comes back: the archive goes there, the
# runs elsewhere; TARBALL comes first, since assignments expand left to right)
# SETS picks the groups (default: all, in this order):
#   test    every GPU correctness case (test.json, test.log)
#   f32     fp32 at 1024^3 and 4096^3: fine (auto, and 3xTF32 / SIMT / both 3xTF32 widths forced),
#           32x32 blocks, the mixed pattern under every cover, planned, cuBLAS, left fine; peers
#   f16     fp16 main rows at 1024^3 and 4096^3: fine, 32x32 and 64x64 blocks, mixed covers, planned,
#           dense, cuBLAS, left rows; peers
#   i8      the same rows in int8 (cuBLAS int8 through torch._int_mm as the peer)
#   shapes  the fp32 3xTF32 block kernel on every block shape the planner offers it (8x8 to 128x32,
#           50/90/99%), the mixed covers and planned: the samples of the cost DB's block_tf32 entry;
#           no peers
# Per set under $OUT: bench_SET.log, ours_SET.json and, with peers, peers_SET.{json,log} and
# table_SET.md. TARBALL, when set, is rewritten after every set (a cut-off call keeps what ran).
# Time on an H200: about 200 s for test + f32, 100-150 s for each other set.
set -uo pipefail
BIN=${BIN:-./target/release/spartac}
OUT=${OUT:-./spmm_gpu_out}
SETS=${SETS:-test f32 f16 i8 shapes}
SIZES=${SIZES:-1024,4096}
LIMIT=${LIMIT:-300}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
# The archive is built outside $OUT (an archive written into the folder it reads fails).
save() {
  [[ -n "${TARBALL:-}" ]] || return 0
  local tmp; tmp=$(mktemp /tmp/spmm_gpu.XXXXXX)
  tar cJf "$tmp" -C "$OUT" --exclude="$(basename "$TARBALL")" . && mv "$tmp" "$TARBALL"
}
bench() { # set, dtype, filter, peers (1 or 0)
  local set=$1 dtype=$2 filter=$3 peers=$4 dump=/tmp/spmm_gpu_dump_$1
  rm -rf "$dump"
  timeout "$LIMIT" "$BIN" kernels bench --sizes "$SIZES" --dtypes "$dtype" --filter "$filter" \
    --dump "$dump" --json "$OUT/ours_$set.json" > "$OUT/bench_$set.log" 2>&1
  echo "bench $set rc=$? cases=$(grep -c ' ms ' "$OUT/bench_$set.log")"
  grep -E "rror|WRONG" "$OUT/bench_$set.log" | head -5
  if [[ $peers == 1 ]]; then
    timeout "$LIMIT" python3 "$here/spmm_peers.py" "$OUT/ours_$set.json" "$dump" \
      "$OUT/peers_$set.json" "$OUT/table_$set.md" > "$OUT/peers_$set.log" 2>&1
    echo "peers $set rc=$?"
  fi
  rm -rf "$dump"
  save
}
has() { [[ " $SETS " == *" $1 "* ]]; }
if has test; then
  timeout "$LIMIT" "$BIN" kernels test --json "$OUT/test.json" > "$OUT/test.log" 2>&1
  echo "test rc=$?"; grep -E "FAIL|of .* cases" "$OUT/test.log" | head
  save
fi
MAIN='fine$|block32x32$|mixed32x32+fine$|planned$|dense$|cublas$|fine left$|block32x32 left$|block64x64$'
has f32 && bench f32 f32 'fine$|fine tf32x3$|fine simt$|n1 tf32x3$|n2 tf32x3$|mixed32x32+fine$|block32x32$|planned$|cublas$|fine left$' 1
has f16 && bench f16 f16 "$MAIN" 1
has i8 && bench i8 i8 "$MAIN" 1
has shapes && bench shapes f32 'block8x8$|block16x16$|block32x8$|block32x16$|block8x32$|block64x32$|block128x32$|block32x32$|mixed32x32+fine$|fine$|planned$' 0
