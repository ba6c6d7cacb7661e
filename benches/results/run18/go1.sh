#!/bin/bash
# Session 12 call 1: Nsight Compute on the warp-specialized wgmma kernel (4096^3 f16 32x32 90%, the
# default 256 x 2 tile) and on cuBLAS dense f16 4096^3 through our runtime: is the kernel at the L2's
# ceiling, or limited elsewhere? Full set, raw page; the script prints the chosen metrics side by side.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --set full -k regex:spmm_block_wgmma_ws -c 1 -o $OUT/r/ws ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "f16 block32x32@0.9 block32x32$" --reps 1 > $OUT/r/ws.log 2>&1; echo "ws rc=$?"
timeout 200 $NCU --set full -k regex:"nvjet|gemm|xmma|cutlass" -c 1 -o $OUT/r/cublas ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "cublas$" --reps 1 > $OUT/r/cublas.log 2>&1; echo "cublas rc=$?"
for n in ws cublas; do
  $NCU -i $OUT/r/$n.ncu-rep --page raw --csv > $OUT/r/raw_$n.csv 2>&1
  $NCU -i $OUT/r/$n.ncu-rep --page details > $OUT/r/details_$n.txt 2>&1
  rm -f $OUT/r/$n.ncu-rep
done
python3 - <<'P'
import csv,os,re
out=os.environ['OUT']+'/r'
def load(n):
    rows=list(csv.reader(open(f'{out}/raw_{n}.csv')))
    h=rows[0]; v=rows[2] if len(rows)>2 else rows[1]
    d={}
    for k,x in zip(h,v):
        try: d[k]=float(x.replace(',',''))
        except: d[k]=x
    return d
a,b=load('ws'),load('cublas')
print('kernel', a.get('Kernel Name'), '|', b.get('Kernel Name'))
pat=re.compile(r'(throughput.*pct|pct_of_peak_sustained_elapsed|gpu__time_duration.sum|lts__t_sectors_op_read.sum$|lts__t_sectors_srcunit_ltcfabric|lrc__average|lrc__lts2lrc_sectors_op_read.sum$|dram__bytes_read.sum$|pipe_tensor.*pct|smsp__average_warp|warps_issue_stalled.*ratio|l1tex__m_xbar2l1tex_read_bytes.sum$)')
for k in a:
    if pat.search(k):
        print(f"{k:95s} ws {a[k]!s:>16s} cublas {b.get(k)!s:>16s}")
P
cd $OUT && tar czf r.tgz r && rm -rf r
