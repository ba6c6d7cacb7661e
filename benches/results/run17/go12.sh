#!/bin/bash
# Session 11 call 12 (final): every GPU case with the staged epilogue (auto takes the warp-specialized
# wgmma kernel for every f16/bf16 right block cover but dense), then the full f16 table (the main rows of every
# bench case list, 1024^3 and 4096^3) with the peers in the same call, and the wgmma variants.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
timeout 300 ./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
F='fine$|block32x32$|mixed32x32+fine$|planned$|dense$|cublas$|fine left$|block32x32 left$|block64x64$|wgmma$|wgmma-ws$|mmasync$'
timeout 400 ./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter "$F" --dump /tmp/d --json $OUT/r/ours_f16.json > $OUT/r/bench_f16.log 2>&1; echo "bench rc=$?"
grep -E "rror" $OUT/r/bench_f16.log | head -3
timeout 400 python3 spmm_peers.py $OUT/r/ours_f16.json /tmp/d $OUT/r/peers_f16.json $OUT/r/table_f16.md > $OUT/r/peers_f16.log 2>&1; echo "peers rc=$?"
grep -E "block32x32|mixed" $OUT/r/table_f16.md | cut -d'|' -f2-12
cd $OUT && tar czf r.tgz r && rm -rf r
