#!/bin/bash
# Session 13 call 1: the fp32 fine kernel on tensor cores (3xTF32 on gathered k, Engine::Tf32x3):
# every GPU case, then the fp32 fine rows at 1024^3 and 4096^3 (SIMT loop kernel and tf32x3, its tiles)
# with cuBLAS / cuSPARSE in the same call.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
timeout 300 ./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
grep -E "tf32x3" $OUT/r/test.log | grep -E "fine" | head -20
F='unstructured@0.5 fine$|unstructured@0.9 fine$|unstructured@0.95 fine$|unstructured@0.99 fine$|fine tf32x3$|fine tile.*tf32x3$'
timeout 300 ./spartac kernels bench --sizes 1024,4096 --dtypes f32 --filter "$F" --dump /tmp/d --json $OUT/r/ours_f32.json > $OUT/r/bench_f32.log 2>&1; echo "bench rc=$?"
grep -E "rror|WRONG" $OUT/r/bench_f32.log | head -5
timeout 300 python3 spmm_peers.py $OUT/r/ours_f32.json /tmp/d $OUT/r/peers_f32.json $OUT/r/table_f32.md > $OUT/r/peers_f32.log 2>&1; echo "peers rc=$?"
cut -d'|' -f2-10 $OUT/r/table_f32.md | head -40
cd $OUT && tar czf r.tgz r && rm -rf r
