#!/bin/bash
# Session 15 call 1: the 3xTF32 block kernel on every shape family the planner's cover offers it
# (8x8, 16x16, 32x8, 32x16, 8x32, 64x32, 128x32 and 32x32 at 50/90/99%, 1024^3 and 4096^3), for the
# cost DB's block_tf32 entry; the mixed pattern's covers and the planned case at both sizes.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
F='block8x8$|block16x16$|block32x8$|block32x16$|block8x32$|block64x32$|block128x32$|block32x32$|mixed32x32+fine$|fine$|planned$'
timeout 400 ./spartac kernels bench --sizes 1024,4096 --dtypes f32 --filter "$F" --json $OUT/r/ours_f32.json > $OUT/r/bench_f32.log 2>&1; echo "bench rc=$?"
grep -E "rror|WRONG" $OUT/r/bench_f32.log | head -5
grep -cE "block" $OUT/r/bench_f32.log
cd $OUT && tar czf r.tgz r && rm -rf r
