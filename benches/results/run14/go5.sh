#!/bin/bash
# Session 8 call 5: every GPU case on the auto-3xTF32 binary; per-kernel durations of the mixed case (ncu, clocks not locked).
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac_t kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head -20
for f in "4096x4096x4096 f32 mixed32x32@0.9+0.01 mixed32x32+fine$" "4096x4096x4096 f32 block32x32@0.9 block32x32$" "4096x4096x4096 f32 unstructured@0.99 fine$"; do
  /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -k regex:spmm ./spartac_t kernels bench --sizes 4096 --dtypes f32 --filter "$f" --reps 3 > $OUT/r/ncu_$(echo $f | tr -c 'a-z0-9' '_').log 2>&1
  echo "== $f"; grep -E "spmm_|gpu__time_duration|dram__bytes" $OUT/r/ncu_$(echo $f | tr -c 'a-z0-9' '_').log | tail -12
done
cd $OUT && tar czf r.tgz r && rm -rf r
