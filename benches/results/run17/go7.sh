#!/bin/bash
# Session 11 call 7: two experiments on the warp-specialized wgmma kernel, each its own binary next to
# the committed one (spartac): spartac_w2 keeps two wgmma groups in flight (experiments/e1), spartac_nf
# drops the consumers' proxy fence (experiments/e2, timing only). The wgmma-ws GPU cases and the
# 4096^3 f16 wgmma-ws rows with each.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.5 block32x32$|f16 block32x32@0.95 block32x32$|wgmma-ws$'
for b in spartac spartac_w2 spartac_nf; do
  timeout 120 ./$b kernels test --filter "wgmma-ws" > $OUT/r/test_$b.log 2>&1; echo "$b test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_$b.log | head -5
  timeout 150 ./$b kernels bench --sizes 4096 --dtypes f16 --filter "$F" --json $OUT/r/ours_$b.json > $OUT/r/bench_$b.log 2>&1; echo "$b bench rc=$?"
done
for b in spartac spartac_w2 spartac_nf; do echo "== $b"; grep -E " ms " $OUT/r/bench_$b.log | awk '{print $5,$7,$8,$9,$10}'; done
cd $OUT && tar czf r.tgz r && rm -rf r
