#!/bin/bash
# Session 8 call 3: the fine-kernel tile sweep on binary e (simple loop for short runs), 1024^3 and 4096^3, 95% and 99%, both orientations.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
F="$(cat filter_sweep.txt)"
./spartac_e kernels bench --sizes 1024 --dtypes f32 --filter "$F" --json $OUT/r/sweep1024.json > $OUT/r/sweep1024.log 2>&1; echo "1024 rc=$?"
./spartac_e kernels bench --sizes 4096 --dtypes f32 --filter "$F" --reps 30 --json $OUT/r/sweep4096.json > $OUT/r/sweep4096.log 2>&1; echo "4096 rc=$?"
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
for s in ('1024','4096'):
    for r in json.load(open(f'{out}/sweep{s}.json')):
        print(f"{r['label']:60s} {r['ms']:.4f} ok={r['ok']}")
P
cd $OUT && tar czf r.tgz r && rm -rf r
