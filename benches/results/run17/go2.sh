#!/bin/bash
# Session 11 call 2: the warp-specialized wgmma kernel with lag = stages - 2 (call 1 capped it at 3)
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
timeout 180 ./spartac kernels test --filter "wgmma" --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases|rror" $OUT/r/test.log | head -20
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.9 block32x32 wgmma$|f16 block32x32@0.9 block32x32 tile128s6 wgmma$|wgmma-ws$'
timeout 240 ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "$F" --dump /tmp/d --json $OUT/r/ours.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E " ms |rror" $OUT/r/bench.log | awk '{print $2,$3,$4,$5,$6,$7,$8,$9,$10}'
timeout 200 python3 spmm_peers.py $OUT/r/ours.json /tmp/d $OUT/r/peers.json $OUT/r/table.md > $OUT/r/peers.log 2>&1; echo "peers rc=$?"
cut -d'|' -f2-9 $OUT/r/table.md
cd $OUT && tar czf r.tgz r && rm -rf r
