#!/bin/bash
# Session 10 call 5: the full table of the committed code (the main rows of every bench case list:
# unstructured fine, 32x32 blocks, the mixed pattern under every cover, dense, left rows) at
# 1024^3 and 4096^3 for the dtypes in $1, ours and the peers in the same call; the input of the
# cost DB refit (`spartac costdb fit`).
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
D=${1:-f32}
F='fine$|block32x32$|mixed32x32+fine$|planned$|dense$|cublas$|fine left$|block32x32 left$|block64x64$'
./spartac kernels bench --sizes 1024,4096 --dtypes $D --filter "$F" --dump /tmp/d --json $OUT/r/ours_$D.json > $OUT/r/bench_$D.log 2>&1; echo "bench rc=$?"
python3 spmm_peers.py $OUT/r/ours_$D.json /tmp/d $OUT/r/peers_$D.json $OUT/r/table_$D.md > $OUT/r/peers_$D.log 2>&1; echo "peers rc=$?"
grep -c " ms " $OUT/r/bench_$D.log; grep -E "error" $OUT/r/bench_$D.log | head
cd $OUT && tar czf r.tgz r && rm -rf r
