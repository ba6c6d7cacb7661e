#!/bin/bash
# Session 9 call 11: v11 = A's rows by 16-byte cp.async into a staging layout (stride CHUNK + 4), then a
# transposition pass in shared memory (16-byte loads and stores, a barrier) per chunk: timing only (in place,
# racy); v8 = the same copy without the pass; v5 = no A loads. The cost of a correct version of this design.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
mkdir -p $OUT/r
S="1024x1024x1024 f32 unstructured"
A1="$S@0.95 fine\$|$S@0.95 fine left\$|$S@0.95 fine tile64s4\$|$S@0.99 fine\$"
A4="4096x4096x4096 f32 unstructured@0.95 fine\$|4096x4096x4096 f32 unstructured@0.99 fine\$|4096x4096x4096 f32 unstructured@0.99 fine left\$"
for v in spartac spartac_v5 spartac_v8 spartac_v11; do
  ./$v kernels bench --sizes 1024 --dtypes f32 --filter "$A1" --reps 100 --json $OUT/r/x1024_$v.json > /dev/null 2>&1
  ./$v kernels bench --sizes 4096 --dtypes f32 --filter "$A4" --reps 20 --json $OUT/r/x4096_$v.json > /dev/null 2>&1
done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
V=('spartac','spartac_v5','spartac_v8','spartac_v11')
for s in ('1024','4096'):
    rows={}
    for v in V:
        for r in json.load(open(f'{out}/x{s}_{v}.json')): rows.setdefault(r['label'],{})[v]=r['ms']
    for k,d in rows.items(): print(f"{k:56s} " + "  ".join(f"{v[8:] or 'head'} {d.get(v,0):.4f}" for v in V))
P
cd $OUT && tar czf r.tgz r && rm -rf r

