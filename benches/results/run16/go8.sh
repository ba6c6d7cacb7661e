#!/bin/bash
# Session 10 call 8: the widening prepass for 16-bit B in the left orientation (Bw = B in fp32,
# so the left fine kernel takes the ring), on top of call 7's code. Every GPU case; fp16 left fine
# with and without the prepass at 1024^3 and 4096^3 (90/95/99%) with the peers in the same call;
# fp16 right defaults for reference.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
F='fine left$|fine left transposing$|fine left prepass$|f16 unstructured@0.95 fine$|f16 unstructured@0.99 fine$'
./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter "$F" --dump /tmp/d --json $OUT/r/ours.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
python3 spmm_peers.py $OUT/r/ours.json /tmp/d $OUT/r/peers.json $OUT/r/table.md > $OUT/r/peers.log 2>&1; echo "peers rc=$?"
grep -E " ms |error" $OUT/r/bench.log | awk '{print $2,$3,$4,$5,$6,$7,$8,$9}'
grep -E "unstructured" $OUT/r/table.md | cut -d'|' -f2-11
cd $OUT && tar czf r.tgz r && rm -rf r
