#!/bin/bash
# Session 11 call 11 (call 10 again, its 256s9g3 variant now 256s7g3: 9 stages no longer fit beside the staging rows): the warp-specialized wgmma kernel with a staged epilogue (rows through shared memory, 16-byte stores;
# in place when accumulating or at 128 accumulator registers). Its GPU cases, and the
# 1024^3 and 4096^3 f16 rows (auto, the wgmma-ws tiles) next to the binary of call 9 (spartac_c9, in place).
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
timeout 120 ./spartac kernels test --filter "wgmma|f16 block|bf16 block|mixed" > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head -5
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.5 block32x32$|f16 block32x32@0.95 block32x32$|wgmma-ws$'
for b in spartac spartac_c9; do
  timeout 150 ./$b kernels bench --sizes 1024,4096 --dtypes f16 --filter "$F" --json $OUT/r/ours_$b.json > $OUT/r/bench_$b.log 2>&1; echo "$b bench rc=$?"
done
for b in spartac spartac_c9; do echo "== $b"; grep -E " ms " $OUT/r/bench_$b.log | awk '{print $2, $5,$7,$8,$9,$10}'; done
cd $OUT && tar czf r.tgz r && rm -rf r
