#!/bin/bash
# Session 14 call 3: groups of 16 columns (two n8 tiles per step) in the 3xTF32 fine kernel. Every GPU case; the fp32
# table at 1024^3 and 4096^3 (fine: auto, tf32x3, simt, both widths forced; mixed, planned, cuBLAS) with cuBLAS /
# cuSPARSE in the same call.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
timeout 200 ./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
F='fine$|fine tf32x3$|fine simt$|n1 tf32x3$|n2 tf32x3$|mixed32x32+fine$|block32x32$|planned$|cublas$|fine left$'
timeout 300 ./spartac kernels bench --sizes 1024,4096 --dtypes f32 --filter "$F" --dump /tmp/d --json $OUT/r/ours_f32.json > $OUT/r/bench_f32.log 2>&1; echo "bench rc=$?"
grep -E "rror|WRONG" $OUT/r/bench_f32.log | head -5
timeout 250 python3 spmm_peers.py $OUT/r/ours_f32.json /tmp/d $OUT/r/peers_f32.json $OUT/r/table_f32.md > $OUT/r/peers_f32.log 2>&1; echo "peers rc=$?"
grep -E "unstructured|mixed" $OUT/r/table_f32.md | cut -d'|' -f2-8
cd $OUT && tar czf r.tgz r && rm -rf r
