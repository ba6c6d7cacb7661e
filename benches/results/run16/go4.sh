#!/bin/bash
# Session 10 call 4: the committed code (the prepass from 8 column tiles up): every GPU case, ours
# and the peers (cuBLAS with the TF32 rate for the fp32 floor, cuSPARSE, Triton BSR) at 1024^3 and
# 4096^3 in the same call, the mixed pattern under every cover (the fine cover now takes the
# prepass too, so the mixed goal's best single cover moves).
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
F1024="1024x1024x1024 f32 unstructured@0.5 fine$|1024x1024x1024 f32 unstructured@0.9 fine$|1024x1024x1024 f32 unstructured@0.95 fine$|1024x1024x1024 f32 unstructured@0.99 fine$|1024x1024x1024 f32 unstructured@0.95 fine left$|1024x1024x1024 f32 unstructured@0.99 fine left$|1024x1024x1024 f32 mixed32x32@0.9+0.01 mixed32x32+fine$|1024x1024x1024 f32 mixed32x32@0.9+0.01 fine$|1024x1024x1024 f32 mixed32x32@0.9+0.01 block32x32$|x1024x256 f32 unstructured@0.99 fine$|x1024x256 f32 unstructured@0.95 fine$|1024x1024x1024 f32 block32x32@0.9 block32x32$"
F4096="4096x4096x4096 f32 unstructured@0.5 fine$|4096x4096x4096 f32 unstructured@0.9 fine$|4096x4096x4096 f32 unstructured@0.95 fine$|4096x4096x4096 f32 unstructured@0.99 fine$|4096x4096x4096 f32 unstructured@0.95 fine left$|4096x4096x4096 f32 unstructured@0.99 fine left$|4096x4096x4096 f32 mixed32x32@0.9+0.01 mixed32x32+fine$|4096x4096x4096 f32 mixed32x32@0.9+0.01 fine$|4096x4096x4096 f32 mixed32x32@0.9+0.01 block32x32$|4096x4096x4096 f32 mixed32x32@0.9+0.01 planned$|4096x4096x4096 f32 mixed32x32@0.9+0.01 mixed32x32+fine transposing$|4096x4096x4096 f32 block32x32@0.5 block32x32$|4096x4096x4096 f32 block32x32@0.9 block32x32$|4096x4096x4096 f32 block32x32@0.95 block32x32$|4096x4096x4096 f32 block32x32@0.99 block32x32$|4096x4096x4096 f32 unstructured@0 dense$|4096x4096x4096 f16 block32x32@0.9 block32x32$|4096x4096x4096 f16 block32x32@0.9 block32x32 left$|4096x4096x4096 f16 unstructured@0.95 fine$"
./spartac kernels bench --sizes 1024 --dtypes f32 --filter "$F1024" --dump /tmp/d1 --json $OUT/r/ours1024.json > $OUT/r/bench1024.log 2>&1; echo "b1024 rc=$?"
python3 spmm_peers.py $OUT/r/ours1024.json /tmp/d1 $OUT/r/peers1024.json $OUT/r/table1024.md > $OUT/r/peers1024.log 2>&1; echo "p1024 rc=$?"
./spartac kernels bench --sizes 4096 --dtypes f32,f16 --filter "$F4096" --dump /tmp/d2 --json $OUT/r/ours4096.json > $OUT/r/bench4096.log 2>&1; echo "b4096 rc=$?"
python3 spmm_peers.py $OUT/r/ours4096.json /tmp/d2 $OUT/r/peers4096.json $OUT/r/table4096.md > $OUT/r/peers4096.log 2>&1; echo "p4096 rc=$?"
grep -E " ms " $OUT/r/bench1024.log $OUT/r/bench4096.log | sed 's/.*log://' | awk '{print $2,$3,$4,$5,$6,$7,$8,$9}'
cat $OUT/r/table4096.md | head -40
cd $OUT && tar czf r.tgz r && rm -rf r
