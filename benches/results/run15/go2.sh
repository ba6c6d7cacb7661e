#!/bin/bash
# Session 9 call 2: why the right orientation costs more than the left at the same tile (1024^3,
# 64 x 128 tiles, no split): timings of 95% and 99% on both binaries, then Nsight Compute (full set,
# SASS source counters) of right old / right new / left at 99% and right new / left at 95%.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
S="1024x1024x1024 f32 unstructured"
F="$S@0.95 fine tile64s4\$|$S@0.99 fine tile64s4\$|$S@0.95 fine tile64s4 left\$|$S@0.99 fine tile64s4 left\$|$S@0.99 fine tile64s8k2\$|$S@0.99 fine tile32s16k2\$"
for v in old n; do ./spartac_$v kernels bench --sizes 1024 --dtypes f32 --filter "$F" --reps 100 --json $OUT/r/t_$v.json > $OUT/r/t_$v.log 2>&1; echo "$v rc=$?"; grep " ms " $OUT/r/t_$v.log; done
prof() { # name binary filter
  timeout 120 /usr/local/cuda/bin/ncu --set full -k regex:spmm_fine -c 1 -o $OUT/r/ncu_$1 ./spartac_$2 kernels bench --sizes 1024 --dtypes f32 --filter "$3" --reps 1 > $OUT/r/ncu_$1.log 2>&1; echo "ncu $1 rc=$?"
  /usr/local/cuda/bin/ncu -i $OUT/r/ncu_$1.ncu-rep --page details > $OUT/r/ncu_$1.txt 2>&1
  /usr/local/cuda/bin/ncu -i $OUT/r/ncu_$1.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/r/ncu_$1_source.csv.gz
  rm -f $OUT/r/ncu_$1.ncu-rep
  grep -E "^    Duration|Elapsed Cycles|Executed Ipc Active|Issue Slots Busy|L1/TEX Hit|Mem Busy|Max Bandwidth|DRAM Throughput" $OUT/r/ncu_$1.txt | head -8
}
prof r99old old "$S@0.99 fine tile64s4\$"
prof r99new n "$S@0.99 fine tile64s4\$"
prof l99 n "$S@0.99 fine tile64s4 left\$"
prof r95new n "$S@0.95 fine tile64s4\$"
prof l95 n "$S@0.95 fine tile64s4 left\$"
cd $OUT && tar czf r.tgz r && rm -rf r
