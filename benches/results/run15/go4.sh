#!/bin/bash
# Session 9 call 4: the right copy variants: e1 = register copy (LDG.128 via __ldg, L1-allocating), v3 = the same with ld.global.cg, v4 = ld.global.nc.L1::no_allocate, v5 = e1 without the loads (stores zeros; timing only)
cd "$(dirname "$0")"
for f in spartac_*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
S="1024x1024x1024 f32 unstructured@0.95 fine"
F1="$S\$|$S left\$|$S tile64s4\$|$S tile64s4 left\$|1024x1024x1024 f32 unstructured@0.99 fine\$|1024x1024x1024 f32 unstructured@0.99 fine left\$"
F4="4096x4096x4096 f32 unstructured@0.99 fine\$|4096x4096x4096 f32 unstructured@0.99 fine left\$|4096x4096x4096 f32 unstructured@0.95 fine\$|4096x4096x4096 f32 unstructured@0.95 fine left\$"
for v in old e1 v3 v4 v5; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1" --reps 100 --json $OUT/r/a1024_$v.json > $OUT/r/a1024_$v.log 2>&1
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4" --reps 20 --json $OUT/r/a4096_$v.json > $OUT/r/a4096_$v.log 2>&1
done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
for s in ('1024','4096'):
    rows={}
    for v in ('old','e1','v3','v4','v5'):
        for r in json.load(open(f'{out}/a{s}_{v}.json')): rows.setdefault(r['label'],{})[v]=r['ms']
    for k,d in rows.items(): print(f"{k:60s} " + "  ".join(f"{v} {d.get(v,0):.4f}" for v in ('old','e1','v3','v4','v5')))
P
cd $OUT && tar czf r.tgz r && rm -rf r
