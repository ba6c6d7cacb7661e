#!/bin/bash
# Session 12 call 11: consumers read the schedule themselves (spartac_x) against the step word in shared memory (spartac, 77074dd),
# f16 32x32 rows at 1024^3 and 4096^3, alternating the binaries twice.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
timeout 100 ./spartac_x kernels test --filter "wgmma-ws|f16 block" > $OUT/r/test_kr.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test_kr.log | head -3
F='f16 block32x32@0.5 block32x32$|f16 block32x32@0.9 block32x32$|f16 block32x32@0.95 block32x32$|f16 block32x32@0.99 block32x32$'
for rep in 1 2; do for b in spartac spartac_x; do
  timeout 100 ./$b kernels bench --sizes 1024,4096 --dtypes f16 --filter "$F" > $OUT/r/bench_${b}_$rep.log 2>&1
  echo "$b $rep: $(grep -E ' ms ' $OUT/r/bench_${b}_$rep.log | awk '{print $2"/"$4"="$6}' | sed 's/x1024x1024//; s/x4096x4096//' | tr '\n' ' ')"
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
