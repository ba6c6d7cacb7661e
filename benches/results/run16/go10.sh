#!/bin/bash
# Session 10 call 10 (review): the fine kernel, transpose and widen templates share one
# four-element load (templates/load4.cuh). Every GPU case, and the prepass rows' timings.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log
F='f32 unstructured@0.95 fine$|f32 unstructured@0.99 fine$|f16 unstructured@0.99 fine$|f16 unstructured@0.99 fine left$|f16 unstructured@0.95 fine left$'
./spartac kernels bench --sizes 4096 --dtypes f32,f16 --filter "$F" --json $OUT/r/ours.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E " ms " $OUT/r/bench.log | awk '{print $2,$3,$4,$5,$6,$7,$8}'
cd $OUT && tar czf r.tgz r && rm -rf r
