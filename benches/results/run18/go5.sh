#!/bin/bash
# Session 12 call 5: A's tiles by TMA (cp.async.bulk.tensor, tensor map encoded by the runtime) against
# cp.async (SPARTAC_WS_TMA=0, experiment switch); two k-block rows per stage by default. GPU cases of the
# wgmma kernels, 4096^3 f16 rows and wgmma-ws tiles, ablations.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
timeout 150 ./spartac kernels test --filter "wgmma|f16 block|bf16 block|mixed" > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases|error" $OUT/r/test.log | head -5
for tma in 1 0; do
SPARTAC_WS_TMA=$tma timeout 150 ./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter 'block32x32@0.5 block32x32$|block32x32@0.9 block32x32$|block32x32@0.95 block32x32$|block32x32@0.99 block32x32$|wgmma-ws$' --json $OUT/r/ours_tma$tma.json > $OUT/r/bench_tma$tma.log 2>&1; echo "bench tma=$tma rc=$?"
grep -E " ms " $OUT/r/bench_tma$tma.log | awk '{print $2, $3, $4, $5, $6, $7, $8}'
done
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.95 block32x32$|f16 block32x32@0.5 block32x32$'
for a in nocopy,noepi nomma,noepi; do
  SPARTAC_ABLATE=$a timeout 100 ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "$F" > $OUT/r/bench_$a.log 2>&1
  echo "tma $a: $(grep -E ' ms ' $OUT/r/bench_$a.log | awk '{print $4"="$6}' | tr '\n' ' ')"
done
cd $OUT && tar czf r.tgz r && rm -rf r
