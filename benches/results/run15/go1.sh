#!/bin/bash
# Session 9 call 1: the right orientation's D tile through registers (16-byte loads, 4 x 4
# register transposition, 16-byte stores) against the 4-byte transposing cp.async (binary old),
# 1024^3 and 4096^3, with every GPU case on the new binary and the peers at 1024^3.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
./spartac_n kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
S="f32 unstructured@0.95 fine"
F1="1024x1024x1024 $S\$|1024x1024x1024 $S left\$|1024x1024x1024 $S tile64s4\$|1024x1024x1024 $S tile32s8k2\$|1024x1024x1024 $S tile64s4k2\$|1024x1024x1024 $S tile32s16k2\$|1024x1024x1024 $S tile128s2\$|1024x1024x1024 $S tile128s4k2\$|1024x1024x1024 f32 unstructured@0.99 fine\$|1024x1024x1024 f32 unstructured@0.9 fine\$|1024x1024x1024 f32 mixed32x32@0.9+0.01 mixed32x32+fine\$"
F4="4096x4096x4096 f32 unstructured@0.9 fine\$|4096x4096x4096 f32 unstructured@0.95 fine\$|4096x4096x4096 f32 unstructured@0.99 fine\$|4096x4096x4096 f32 mixed32x32@0.9+0.01 mixed32x32+fine\$"
for v in old n; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1" --reps 100 --dump /tmp/d1 --json $OUT/r/b1024_$v.json > $OUT/r/b1024_$v.log 2>&1; echo "1024 $v rc=$?"
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4" --reps 30 --json $OUT/r/b4096_$v.json > $OUT/r/b4096_$v.log 2>&1; echo "4096 $v rc=$?"
done
python3 spmm_peers.py $OUT/r/b1024_n.json /tmp/d1 $OUT/r/peers1024.json $OUT/r/table1024.md > $OUT/r/peers1024.log 2>&1; echo "p1024 rc=$?"
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
for s in ('1024','4096'):
    rows={}
    for v in ('old','n'):
        for r in json.load(open(f'{out}/b{s}_{v}.json')): rows.setdefault(r['label'],{})[v]=r
    for k,d in rows.items():
        o,n=d.get('old',{}),d.get('n',{})
        print(f"{k:64s} old {o.get('ms',0):.4f}  new {n.get('ms',0):.4f}  ratio {o.get('ms',0)/max(n.get('ms',1e-9),1e-9):.3f}  ok {n.get('ok')}")
P
cat $OUT/r/table1024.md | head -30
cd $OUT && tar czf r.tgz r && rm -rf r
