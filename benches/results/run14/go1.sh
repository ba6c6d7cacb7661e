#!/bin/bash
# Session 8 call 1: correctness of B and C, then A/B/C timings on the fine cases.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
F1024="1024x1024x1024 f32 unstructured@0.9 fine$|1024x1024x1024 f32 unstructured@0.95 fine$|1024x1024x1024 f32 unstructured@0.99 fine$|1024x1024x1024 f32 unstructured@0.95 fine left$|1024x1024x1024 f32 unstructured@0.99 fine left$|1024x1024x1024 f32 unstructured@0.95 fine tile64s4$|x1024x256 f32 unstructured@0.95 fine$"
F4096="4096x4096x4096 f32 unstructured@0.5 fine$|4096x4096x4096 f32 unstructured@0.9 fine$|4096x4096x4096 f32 unstructured@0.95 fine$|4096x4096x4096 f32 unstructured@0.99 fine$|4096x4096x4096 f32 unstructured@0.95 fine left$|4096x4096x4096 f32 unstructured@0.99 fine left$|4096x4096x4096 f32 mixed32x32@0.9+0.01"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
./spartac_b kernels test --json $OUT/test_b.json > $OUT/test_b.log 2>&1; echo "test b rc=$?"; tail -3 $OUT/test_b.log
./spartac_c kernels test --filter fine --json $OUT/test_c.json > $OUT/test_c.log 2>&1; echo "test c rc=$?"; tail -3 $OUT/test_c.log
for v in a b c; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1024" --json $OUT/b1024_$v.json > $OUT/b1024_$v.log 2>&1; echo "$v 1024 rc=$?"
done
for v in a b c; do
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4096" --reps 30 --json $OUT/b4096_$v.json > $OUT/b4096_$v.log 2>&1; echo "$v 4096 rc=$?"
done
python3 - <<'P'
import json,os,glob
out=os.environ['OUT']
rows={}
for v in 'abc':
    for s in ('1024','4096'):
        p=f'{out}/b{s}_{v}.json'
        if not os.path.exists(p): continue
        for r in json.load(open(p)):
            key=(r['label'], str(r['cover']))
            rows.setdefault(key,{})[v]=r['ms']
for k,d in rows.items():
    print(k, ' '.join(f"{v}={d.get(v)}" for v in 'abc'))
P
