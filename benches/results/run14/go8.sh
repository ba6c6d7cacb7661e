#!/bin/bash
# Session 8 call 8: 3xTF32 fragments by ldmatrix at 32-bit shared addresses; GPU tests of the fine/tf32/mixed/split cases; mixed timings.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac_t kernels test --filter "mixed|planned|split|tf32x3" --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head -20
F="mixed32x32@0.9+0.01|block32x32@0.9 block32x32$|unstructured@0.99 fine$"
./spartac_t kernels bench --sizes 4096,1024 --dtypes f32 --filter "$F" --reps 50 --json $OUT/r/bench.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E " ms " $OUT/r/bench.log | head -40
/usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum -k regex:spmm ./spartac_t kernels bench --sizes 4096 --dtypes f32 --filter "4096x4096x4096 f32 mixed32x32@0.9+0.01 mixed32x32+fine$" --reps 2 > $OUT/r/ncu_mixed.log 2>&1
grep -E "spmm_|gpu__time_duration" $OUT/r/ncu_mixed.log | tail -6
cd $OUT && tar czf r.tgz r && rm -rf r
