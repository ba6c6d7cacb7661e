#!/bin/bash
# Session 9 call 3: ablations of the fine kernel (timing only; v1 and v2 compute wrong results on
# purpose): old = HEAD; v1 = no D-tile copies (both orientations); v2 = right epilogue stores
# directly instead of staging the C tile in shared memory. Where does right lose to left?
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
S="1024x1024x1024 f32 unstructured@0.95 fine"
F1="$S\$|$S left\$|$S tile64s4\$|$S tile64s4 left\$|1024x1024x1024 f32 unstructured@0.99 fine\$|1024x1024x1024 f32 unstructured@0.99 fine left\$"
F4="4096x4096x4096 f32 unstructured@0.99 fine\$|4096x4096x4096 f32 unstructured@0.99 fine left\$|4096x4096x4096 f32 unstructured@0.95 fine\$|4096x4096x4096 f32 unstructured@0.95 fine left\$"
for v in old v1 v2; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1" --reps 100 --json $OUT/r/a1024_$v.json > $OUT/r/a1024_$v.log 2>&1
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4" --reps 20 --json $OUT/r/a4096_$v.json > $OUT/r/a4096_$v.log 2>&1
done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
for s in ('1024','4096'):
    rows={}
    for v in ('old','v1','v2'):
        for r in json.load(open(f'{out}/a{s}_{v}.json')): rows.setdefault(r['label'],{})[v]=r['ms']
    for k,d in rows.items(): print(f"{k:60s} " + "  ".join(f"{v} {d.get(v,0):.4f}" for v in ('old','v1','v2')))
P
cd $OUT && tar czf r.tgz r && rm -rf r
