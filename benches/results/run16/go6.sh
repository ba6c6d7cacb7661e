#!/bin/bash
# Session 10 call 6: the prepass for 16-bit A (widened to an fp32 At). Every GPU case; fp16 (and
# bf16 at 4096^3) fine right with the prepass and without (registers), default and forced, the
# fp16 mixed pattern's covers; fp32 defaults for reference.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
for s in 1024 4096; do
  F="f16 unstructured@0.5 fine\$|f16 unstructured@0.9 fine\$|f16 unstructured@0.95 fine\$|f16 unstructured@0.99 fine\$|f16 unstructured@0.5 fine transposing\$|f16 unstructured@0.9 fine transposing\$|f16 unstructured@0.95 fine transposing\$|f16 unstructured@0.99 fine transposing\$|f16 unstructured@0.5 fine prepass\$|f16 unstructured@0.9 fine prepass\$|f16 unstructured@0.95 fine prepass\$|f16 unstructured@0.99 fine prepass\$|f16 mixed32x32@0.9+0.01 mixed32x32+fine\$|f16 mixed32x32@0.9+0.01 fine\$|f16 mixed32x32@0.9+0.01 block32x32\$|f16 mixed32x32@0.9+0.01 planned\$|f16 mixed32x32@0.9+0.01 mixed32x32+fine transposing\$|f32 unstructured@0.99 fine\$|f32 unstructured@0.95 fine\$"
  ./spartac kernels bench --sizes $s --dtypes f16,f32 --filter "$F" --json $OUT/r/ours$s.json > $OUT/r/bench$s.log 2>&1; echo "b$s rc=$?"
  grep -E " ms |error" $OUT/r/bench$s.log | awk '{print $2,$3,$4,$5,$6,$7,$8}'
done
./spartac kernels bench --sizes 4096 --dtypes bf16 --filter "bf16 unstructured@0.95 fine\$|bf16 unstructured@0.99 fine\$" --json $OUT/r/oursbf16.json > $OUT/r/benchbf16.log 2>&1; echo "bbf16 rc=$?"
grep -E " ms |error" $OUT/r/benchbf16.log | awk '{print $2,$3,$4,$5,$6,$7,$8}'
cd $OUT && tar czf r.tgz r && rm -rf r
