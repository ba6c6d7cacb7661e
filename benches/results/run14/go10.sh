#!/bin/bash
# Session 8 call 10: launch order of mixed covers (n: fine first, o: block first), fp32 and fp16, with the mma.sync accumulate epilogue reading ahead; GPU tests of mixed/split/planned on n.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac_n kernels test --filter "mixed|planned|split|block32x32" --json $OUT/r/test_n.json > $OUT/r/test_n.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_n.log | head
F="mixed32x32@0.9+0.01 mixed32x32+fine$|mixed32x32@0.9+0.01 planned$|mixed32x32@0.95+0.01 mixed32x32+fine$|mixed32x32@0.99+0.01 mixed32x32+fine$"
for v in n o; do ./spartac_$v kernels bench --sizes 4096,1024 --dtypes f32,f16 --filter "$F" --reps 50 --json $OUT/r/order_$v.json > $OUT/r/order_$v.log 2>&1; echo "$v rc=$?"; done
python3 - <<'P'
import json,os
out=os.environ['OUT']+'/r'
rows={}
for v in 'no':
    for r in json.load(open(f'{out}/order_{v}.json')): rows.setdefault(r['label'],{})[v]=r['ms']
for k,d in rows.items(): print(f"{k:60s} fine-first {d.get('n'):.4f}  block-first {d.get('o'):.4f}")
P
cd $OUT && tar czf r.tgz r && rm -rf r
