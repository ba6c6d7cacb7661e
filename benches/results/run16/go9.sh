#!/bin/bash
# Session 10 call 9: the transpose prepass writing A's row tiles in reverse order (the last tiles
# written, still in L2, are the ones the fine kernel's first CTAs read) against the committed
# order, interleaved twice, at 4096^3 (fp32 95/99%, fp16 99%, the fp32 mixed cover).
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
F='f32 unstructured@0.95 fine$|f32 unstructured@0.99 fine$|f16 unstructured@0.99 fine$|f32 mixed32x32@0.9+0.01 mixed32x32+fine$'
./spartac_rev kernels test --filter "prepass|2048|left" --json $OUT/r/test_rev.json > $OUT/r/test_rev.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_rev.log
for i in 1 2; do for b in spartac spartac_rev; do
  ./$b kernels bench --sizes 4096 --dtypes f32,f16 --filter "$F" --json $OUT/r/${b}_$i.json > $OUT/r/${b}_$i.log 2>&1
  echo "$b $i: $(grep -E ' ms ' $OUT/r/${b}_$i.log | awk '{for (j = 1; j <= NF; j++) if ($j == "ms") print $(j - 1)}' | tr '\n' ' ')"
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
