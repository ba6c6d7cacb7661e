#!/bin/bash
# Session 9 call 7: v8 = the right kernel copying A's rows by 16-byte cp.async untransposed (wrong results, timing only), against v5 (no loads) and v7 (register copy, left-like pattern)
cd "$(dirname "$0")"
for f in spartac_*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
S="1024x1024x1024 f32 unstructured"
F1="$S@0.95 fine\$|$S@0.95 fine left\$|$S@0.95 fine tile64s4\$"
T="4096x4096x4096 f32"
F4="$T unstructured@0.99 fine\$|$T unstructured@0.95 fine\$"
for v in old v5 v7 v8; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1" --reps 100 --json $OUT/r/a1024_$v.json > $OUT/r/a1024_$v.log 2>&1
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4" --reps 20 --json $OUT/r/a4096_$v.json > $OUT/r/a4096_$v.log 2>&1
done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
V=('old','v5','v7','v8')
for s in ('1024','4096'):
    rows={}
    for v in V:
        for r in json.load(open(f'{out}/a{s}_{v}.json')): rows.setdefault(r['label'],{})[v]=r
    for k,d in rows.items(): print(f"{k:60s} " + "  ".join(f"{v} {d[v]['ms']:.4f}" for v in V if v in d))
P
cd $OUT && tar czf r.tgz r && rm -rf r
