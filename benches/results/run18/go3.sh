#!/bin/bash
# Session 12 call 3: one straight-line wgmma path per set of live slots (one commit, one gsb0 per step).
# GPU cases of the wgmma kernels, the 4096^3 f16 block rows and the wgmma-ws tiles, and the ablations again.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
timeout 150 ./spartac kernels test --filter "wgmma|f16 block|bf16 block|mixed" > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head -5
timeout 150 ./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter 'block32x32$|wgmma-ws$' --json $OUT/r/ours.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E " ms " $OUT/r/bench.log | awk '{print $2, $4, $5, $6, $7, $8, $9, $10}'
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.95 block32x32$|f16 block32x32@0.5 block32x32$'
for a in nocopy,noepi nomma,noepi; do
  SPARTAC_ABLATE=$a timeout 100 ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "$F" > $OUT/r/bench_$a.log 2>&1
  echo "$a: $(grep -E ' ms ' $OUT/r/bench_$a.log | awk '{print $4"="$6}' | tr '\n' ' ')"
done
cd $OUT && tar czf r.tgz r && rm -rf r
