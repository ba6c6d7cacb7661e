#!/bin/bash
# Session 12 call 12 (final, binary of the schedule-walking consumers): every GPU case (A by TMA, W by bulk copies, k-block rows per stage,
# one wgmma path per live-slot set), the full f16 table (1024^3, 4096^3) with the peers in the same call,
# and Nsight Compute on the warp-specialized kernel at 4096^3 f16 32x32 90%.
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
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --set full -k regex:spmm_block_wgmma_ws -c 1 -o $OUT/r/ws ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "f16 block32x32@0.9 block32x32$" --reps 1 > $OUT/r/ncu_ws.log 2>&1; echo "ncu rc=$?"
$NCU -i $OUT/r/ws.ncu-rep --page details > $OUT/r/details_ws.txt 2>&1
$NCU -i $OUT/r/ws.ncu-rep --page raw --csv > $OUT/r/raw_ws.csv 2>&1
rm -f $OUT/r/ws.ncu-rep
grep -E "Duration|L2 Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|L1/TEX Cache Throughput|DRAM Throughput" $OUT/r/details_ws.txt | head -8
cd $OUT && tar czf r.tgz r && rm -rf r
