#!/bin/bash
# Session 13 call 2: the 3xTF32 fine kernel's tiles at 1024^3 / 4096^3 95% and Nsight Compute on its 1024^3 95% default.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
F='0.95 fine$|0.95 fine tf32x3$|r2 tf32x3$|r4 tf32x3$'
timeout 200 ./spartac kernels bench --sizes 1024,4096 --dtypes f32 --filter "$F" --json $OUT/r/ours_f32.json > $OUT/r/bench_f32.log 2>&1; echo "bench rc=$?"
grep -E "fine" $OUT/r/bench_f32.log | head -30
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --set full --import-source no -k regex:spmm_fine_tf32 -c 1 -o $OUT/r/ft ./spartac kernels bench --sizes 1024 --dtypes f32 --filter "0.95 fine tf32x3$" --reps 1 > $OUT/r/ncu_ft.log 2>&1; echo "ncu rc=$?"
$NCU -i $OUT/r/ft.ncu-rep --page details > $OUT/r/details_ft.txt 2>&1
$NCU -i $OUT/r/ft.ncu-rep --page raw --csv > $OUT/r/raw_ft.csv 2>&1
$NCU -i $OUT/r/ft.ncu-rep --page source --csv --print-source sass > $OUT/r/source_ft.csv 2>&1; echo "source rc=$?"
rm -f $OUT/r/ft.ncu-rep
grep -E "Duration|Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|No Eligible|Stall" $OUT/r/details_ft.txt | head -30
cd $OUT && tar czf r.tgz r && rm -rf r
