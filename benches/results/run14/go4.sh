#!/bin/bash
# Session 8 call 4: 3xTF32 block kernels: GPU correctness, then timings against the SIMT kernel in the same call.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac_t kernels test --filter "tf32x3|mixed" --json $OUT/r/test_t.json > $OUT/r/test_t.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_t.log | head -20
F="block32x32@0.9 block32x32$|block32x32@0.95 block32x32$|block32x32@0.99 block32x32$|block32x32@0.5 block32x32$| tf32x3|mixed32x32@0.9+0.01 mixed32x32+fine$|mixed32x32@0.9+0.01 fine$|dense$|dense cublas$"
./spartac_t kernels bench --sizes 4096,1024 --dtypes f32 --filter "$F" --reps 50 --json $OUT/r/bench_t.json > $OUT/r/bench_t.log 2>&1; echo "bench rc=$?"
grep -E "ms" $OUT/r/bench_t.log | head -60
cd $OUT && tar czf r.tgz r && rm -rf r
