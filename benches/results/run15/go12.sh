#!/bin/bash
# Session 9 call 12: every raw Nsight Compute metric (full set) of the fine kernel, 1024^3 95% at
# 64 x 128 tiles, right and left, for a metric-by-metric comparison of where the right's copy costs.
cd "$(dirname "$0")"
for f in spartac.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
S="1024x1024x1024 f32 unstructured@0.95 fine tile64s4"
for x in "right $S\$" "left $S left\$"; do
  set -- $x; name=$1; shift; filt="$*"
  timeout 200 /usr/local/cuda/bin/ncu --set full -k regex:spmm_fine -c 1 -o $OUT/r/full_$name ./spartac kernels bench --sizes 1024 --dtypes f32 --filter "$filt" --reps 1 > $OUT/r/full_$name.log 2>&1; echo "$name rc=$?"
  /usr/local/cuda/bin/ncu -i $OUT/r/full_$name.ncu-rep --page raw --csv > $OUT/r/raw_$name.csv 2>&1
  rm -f $OUT/r/full_$name.ncu-rep
done
python3 - <<'P'
import csv,os
out=os.environ['OUT']+'/r'
def load(n):
    rows=list(csv.reader(open(f'{out}/raw_{n}.csv')))
    h=rows[0]; v=rows[2] if len(rows)>2 else rows[1]
    d={}
    for k,x in zip(h,v):
        try: d[k]=float(x.replace(',',''))
        except: pass
    return d
r,l=load('right'),load('left')
res=[]
for k in r:
    if k in l and (r[k] or l[k]) and ('l1tex' in k or 'lts' in k or 'smsp__inst' in k or 'sm__' in k):
        a,b=r[k],l[k]
        if max(abs(a),abs(b))<100: continue
        ratio=(a+1e-9)/(b+1e-9)
        res.append((abs(__import__('math').log(ratio)) if ratio>0 else 0,k,a,b,ratio))
res.sort(reverse=True)
for s,k,a,b,ratio in res[:80]: print(f"{k:90s} right {a:14.0f} left {b:14.0f} ratio {ratio:8.2f}")
P
cd $OUT && tar czf r.tgz r && rm -rf r
