#!/bin/bash
# Session 10 call 2: the prepass with a 64 × 64, 16-byte transpose (call 1 had 32 × 32 tiles,
# 4-byte accesses), the prepass forcing the fp32 ring (1024^3 99%). Every GPU case; both ways to
# A's columns at 1024^3, 2048^3 and 4096^3; ncu kernel durations (clocks not locked) of the
# prepass and the fine kernel at 4096^3 99% and 95% and at 1024^3 95%.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
for s in 1024 2048 4096; do
  S="${s}x${s}x${s} f32"
  F="transposing\$|prepass\$|$S unstructured@0.95 fine\$|$S unstructured@0.99 fine\$|$S unstructured@0.95 fine left\$|$S unstructured@0.99 fine left\$|$S mixed32x32@0.9+0.01 mixed32x32+fine\$"
  ./spartac kernels bench --sizes $s --dtypes f32 --filter "$F" --json $OUT/r/ours$s.json > $OUT/r/bench$s.log 2>&1; echo "b$s rc=$?"
  grep -E " ms |error" $OUT/r/bench$s.log
done
NCU=/usr/local/cuda/bin/ncu
for c in "4096 4096x4096x4096 f32 unstructured@0.99 fine prepass\$" "4096 4096x4096x4096 f32 unstructured@0.95 fine prepass\$" "1024 1024x1024x1024 f32 unstructured@0.95 fine prepass\$" "4096 4096x4096x4096 f32 unstructured@0.99 fine transposing\$"; do
  set -- $c; s=$1; shift; f="$*"
  $NCU --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --launch-skip 2 --launch-count 4 ./spartac kernels bench --sizes $s --dtypes f32 --filter "$f" --reps 3 > $OUT/r/ncu_${s}_$(echo $f | tr ' @$' '___').txt 2>&1
  grep -E "transpose_f32|spmm_fine|gpu__time|dram__bytes" $OUT/r/ncu_${s}_$(echo $f | tr ' @$' '___').txt | head -24
done
cd $OUT && tar czf r.tgz r && rm -rf r
