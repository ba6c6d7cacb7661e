#!/bin/bash
# Session 9 call 5: the right orientation's chunk walk rotated by row tile (binary r) against HEAD
# (old) and the no-load ablation (v5, wrong results, timing only); GPU cases of every fine/mixed/
# split/planned kernel on r.
cd "$(dirname "$0")"
for f in spartac_*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac_r kernels test --filter "fine|mixed|planned|split" --json $OUT/r/test_r.json > $OUT/r/test_r.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_r.log | head
S="1024x1024x1024 f32 unstructured"
F1="$S@0.95 fine\$|$S@0.95 fine left\$|$S@0.95 fine tile64s4\$|$S@0.95 fine tile32s16k2\$|$S@0.99 fine\$|$S@0.99 fine left\$|$S@0.9 fine\$|$S@0.5 fine\$|1024x1024x1024 f32 mixed32x32@0.9+0.01 mixed32x32+fine\$"
T="4096x4096x4096 f32"
F4="$T unstructured@0.99 fine\$|$T unstructured@0.99 fine left\$|$T unstructured@0.95 fine\$|$T unstructured@0.95 fine left\$|$T unstructured@0.9 fine\$|$T unstructured@0.5 fine\$|$T mixed32x32@0.9+0.01 mixed32x32+fine\$|$T mixed32x32@0.9+0.01 fine\$"
for v in old r v5; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1" --reps 100 --json $OUT/r/a1024_$v.json > $OUT/r/a1024_$v.log 2>&1
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4" --reps 20 --json $OUT/r/a4096_$v.json > $OUT/r/a4096_$v.log 2>&1
done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
V=('old','r','v5')
for s in ('1024','4096'):
    rows={}
    for v in V:
        for r in json.load(open(f'{out}/a{s}_{v}.json')): rows.setdefault(r['label'],{})[v]=r
    for k,d in rows.items(): print(f"{k:60s} " + "  ".join(f"{v} {d[v]['ms']:.4f}" for v in V if v in d) + f"  r ok {d['r']['ok']}")
P
cd $OUT && tar czf r.tgz r && rm -rf r
