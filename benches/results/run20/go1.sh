#!/bin/bash
# Session 14 call 1: every GPU case; then the fp32 fine/mixed/planned table at 1024^3, 2048^3 (the auto
# rule's 2^22 edge) and 4096^3 with the kernels' steps in the JSON (for `costdb fit`), the 99% tiles of the
# tf32 fine kernel, with cuBLAS / cuSPARSE in the same call.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
timeout 200 ./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
F='fine$|fine tf32x3$|fine simt$|r6 tf32x3$|r2 tf32x3$|mixed32x32+fine$|block32x32$|planned$|cublas$'
timeout 300 ./spartac kernels bench --sizes 1024,2048,4096 --dtypes f32 --filter "$F" --dump /tmp/d --json $OUT/r/ours_f32.json > $OUT/r/bench_f32.log 2>&1; echo "bench rc=$?"
grep -E "rror|WRONG" $OUT/r/bench_f32.log | head -5
timeout 250 python3 spmm_peers.py $OUT/r/ours_f32.json /tmp/d $OUT/r/peers_f32.json $OUT/r/table_f32.md > $OUT/r/peers_f32.log 2>&1; echo "peers rc=$?"
grep -E "unstructured|mixed" $OUT/r/table_f32.md | cut -d'|' -f2-8
cd $OUT && tar czf r.tgz r && rm -rf r
