#!/bin/bash
# Session 12 call 8: W blocks packed as their shared-memory image and landed by bulk copies; one producer thread,
# no proxy fence per step. GPU cases of the wgmma kernels, f16 block rows and wgmma-ws tiles at 1024^3, 4096^3.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
timeout 150 ./spartac kernels test --filter "wgmma|f16 block|bf16 block|mixed" > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases|error" $OUT/r/test.log | head -5
timeout 200 ./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter 'block32x32@0.5 block32x32$|block32x32@0.9 block32x32$|block32x32@0.95 block32x32$|block32x32@0.99 block32x32$|mixed32x32@0.9+0.01 block32x32$|wgmma-ws$' --json $OUT/r/ours.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E " ms " $OUT/r/bench.log | awk '{print $2, $3, $4, $5, $6, $7, $8}'
cd $OUT && tar czf r.tgz r && rm -rf r
