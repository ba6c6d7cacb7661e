#!/bin/bash
# Session 8 call 2: d (simple/pipelined by run length, double-buffered entries) vs e (same, single entry buffer); ncu of e's 4096^3 99% right kernel.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
F1024="1024x1024x1024 f32 unstructured@0.9 fine$|1024x1024x1024 f32 unstructured@0.95 fine$|1024x1024x1024 f32 unstructured@0.99 fine$|1024x1024x1024 f32 unstructured@0.95 fine left$|1024x1024x1024 f32 unstructured@0.99 fine left$|x1024x256 f32 unstructured@0.95 fine$"
F4096="4096x4096x4096 f32 unstructured@0.9 fine$|4096x4096x4096 f32 unstructured@0.95 fine$|4096x4096x4096 f32 unstructured@0.99 fine$|4096x4096x4096 f32 unstructured@0.95 fine left$|4096x4096x4096 f32 unstructured@0.99 fine left$|4096x4096x4096 f32 mixed32x32@0.9+0.01"
./spartac_e kernels test --json $OUT/r/test_e.json > $OUT/r/test_e.log 2>&1; echo "test e rc=$?"; tail -1 $OUT/r/test_e.log
for v in d e; do
  ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F1024" --json $OUT/r/b1024_$v.json > $OUT/r/b1024_$v.log 2>&1; echo "$v 1024 rc=$?"
  ./spartac_$v kernels bench --sizes 4096 --dtypes f32 --filter "$F4096" --reps 30 --json $OUT/r/b4096_$v.json > $OUT/r/b4096_$v.log 2>&1; echo "$v 4096 rc=$?"
done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
rows={}
for v in 'de':
    for s in ('1024','4096'):
        p=f'{out}/b{s}_{v}.json'
        if not os.path.exists(p): continue
        for r in json.load(open(p)):
            rows.setdefault((r['label'], str(r['cover'])),{})[v]=r['ms']
for k,d in rows.items():
    print(k, ' '.join(f"{v}={d.get(v)}" for v in 'de'))
P
timeout 200 /usr/local/cuda/bin/ncu --set full -k regex:spmm_fine -c 1 -o $OUT/r/ncu_e99 ./spartac_e kernels bench --sizes 4096 --dtypes f32 --filter "4096x4096x4096 f32 unstructured@0.99 fine$" --reps 1 > $OUT/r/ncu_e99.log 2>&1; echo "ncu rc=$?"
/usr/local/cuda/bin/ncu -i $OUT/r/ncu_e99.ncu-rep --page details > $OUT/r/ncu_e99.txt 2>&1
/usr/local/cuda/bin/ncu -i $OUT/r/ncu_e99.ncu-rep --page source --csv --print-source sass > $OUT/r/ncu_e99_source.csv 2>&1
grep -E "Duration|Throughput|Issued|Stall|Warp Cycles|Eligible|Active Warps" $OUT/r/ncu_e99.txt | head -40
cd $OUT && tar czf r.tgz r && rm -rf r
