#!/bin/bash
# Session 11 call 5: the warp-specialized wgmma kernel (default now 256 rows x 2 block columns, ring
# as deep as fits) against mma.sync (auto) at 50/90/95/99% 32x32 blocks, 1024^3 and 4096^3, f16,
# with cuBLAS/cuSPARSE/Triton in the same call; every wgmma GPU case.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
timeout 180 ./spartac kernels test --filter "wgmma" --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases|rror" $OUT/r/test.log | head -20
F='f16 block32x32@0.5 block32x32$|f16 block32x32@0.9 block32x32$|f16 block32x32@0.95 block32x32$|f16 block32x32@0.99 block32x32$|wgmma-ws$|f16 block32x32@0.9 block32x32 wgmma$'
timeout 300 ./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter "$F" --dump /tmp/d --json $OUT/r/ours.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E " ms |rror" $OUT/r/bench.log | awk '{print $2,$3,$4,$5,$6,$7,$8,$9,$10}'
timeout 250 python3 spmm_peers.py $OUT/r/ours.json /tmp/d $OUT/r/peers.json $OUT/r/table.md > $OUT/r/peers.log 2>&1; echo "peers rc=$?"
cut -d'|' -f2-12 $OUT/r/table.md
cd $OUT && tar czf r.tgz r && rm -rf r
