#!/bin/bash
# Session 12 call 4: KR schedule rows per ring stage (SPARTAC_WS_KR, experiment switch): GPU cases of the
# wgmma-ws kernels at KR=2 and 3, then the 4096^3 f16 rows and wgmma-ws tiles at KR=1,2,3, and ablations at KR=2.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
for kr in 2 3; do
SPARTAC_WS_KR=$kr timeout 150 ./spartac kernels test --filter "wgmma|f16 block|bf16 block|mixed" > $OUT/r/test_kr$kr.log 2>&1; echo "test kr=$kr rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_kr$kr.log | head -5
done
for kr in 1 2 3; do
SPARTAC_WS_KR=$kr timeout 150 ./spartac kernels bench --sizes 4096 --dtypes f16 --filter 'block32x32@0.5 block32x32$|block32x32@0.9 block32x32$|block32x32@0.95 block32x32$|block32x32@0.99 block32x32$|wgmma-ws$' --json $OUT/r/ours_kr$kr.json > $OUT/r/bench_kr$kr.log 2>&1; echo "bench kr=$kr rc=$?"
grep -E " ms " $OUT/r/bench_kr$kr.log | awk '{print $3, $4, $5, $6, $7, $8}'
done
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.95 block32x32$|f16 block32x32@0.5 block32x32$'
for a in nocopy,noepi nomma,noepi nocopy,nomma,noepi; do
  SPARTAC_WS_KR=2 SPARTAC_ABLATE=$a timeout 100 ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "$F" > $OUT/r/bench_$a.log 2>&1
  echo "kr2 $a: $(grep -E ' ms ' $OUT/r/bench_$a.log | awk '{print $4"="$6}' | tr '\n' ' ')"
done
cd $OUT && tar czf r.tgz r && rm -rf r
