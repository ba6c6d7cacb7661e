#!/bin/bash
# Session 14 call 2 (final, binary of the planner with the fitted fine tf32 entry): every GPU case; the fp32 table at 1024^3 and 4096^3
# (fine: auto, tf32x3, simt; blocks, mixed, planned, cuBLAS, left fine) with cuBLAS / cuSPARSE in the same call.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
timeout 200 ./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
F='fine$|fine tf32x3$|fine simt$|mixed32x32+fine$|block32x32$|planned$|cublas$|fine left$'
timeout 300 ./spartac kernels bench --sizes 1024,4096 --dtypes f32 --filter "$F" --dump /tmp/d --json $OUT/r/ours_f32.json > $OUT/r/bench_f32.log 2>&1; echo "bench rc=$?"
grep -E "rror|WRONG" $OUT/r/bench_f32.log | head -5
timeout 250 python3 spmm_peers.py $OUT/r/ours_f32.json /tmp/d $OUT/r/peers_f32.json $OUT/r/table_f32.md > $OUT/r/peers_f32.log 2>&1; echo "peers rc=$?"
grep -E "unstructured|mixed" $OUT/r/table_f32.md | cut -d'|' -f2-8
# fp16 block cases (kernels unchanged since run 18) with cuBLAS / cuSPARSE / Triton BSR in the same call.
timeout 200 ./spartac kernels bench --sizes 1024,4096 --dtypes f16 --filter 'block32x32$|cublas$|planned$' --dump /tmp/d16 --json $OUT/r/ours_f16.json > $OUT/r/bench_f16.log 2>&1; echo "bench16 rc=$?"
timeout 250 python3 spmm_peers.py $OUT/r/ours_f16.json /tmp/d16 $OUT/r/peers_f16.json $OUT/r/table_f16.md > $OUT/r/peers_f16.log 2>&1; echo "peers16 rc=$?"
grep -E "block32x32@0.9 " $OUT/r/table_f16.md | cut -d'|' -f2-12
cd $OUT && tar czf r.tgz r && rm -rf r
