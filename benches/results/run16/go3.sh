#!/bin/bash
# Session 10 call 3: the cluster transpose (DenseCopy::Cluster): the column tiles of one row tile
# form a cluster and transpose each chunk of their A tile together into an At scratch, one chunk
# ahead, then copy At's rows 16 bytes at a time. Every GPU case; the three ways to A's columns
# (transposing, prepass, cluster) at 1024^3, 2048^3 and 4096^3; ncu kernel durations of the
# cluster kernel at 1024^3 95% (64 x 128) and 4096^3 99%.
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
for s in 1024 2048 4096; do
  S="${s}x${s}x${s} f32"
  F="transposing\$|prepass\$|cluster\$|$S unstructured@0.95 fine\$|$S unstructured@0.99 fine\$|$S unstructured@0.95 fine left\$|$S unstructured@0.99 fine left\$|$S mixed32x32@0.9+0.01 mixed32x32+fine\$"
  ./spartac kernels bench --sizes $s --dtypes f32 --filter "$F" --json $OUT/r/ours$s.json > $OUT/r/bench$s.log 2>&1; echo "b$s rc=$?"
  grep -E " ms |error" $OUT/r/bench$s.log | grep -E "cluster|error|fine\$|left\$|mixed32x32\+fine\$"
done
NCU=/usr/local/cuda/bin/ncu
for c in "1024 1024x1024x1024 f32 unstructured@0.95 fine tile64s4 cluster\$" "4096 4096x4096x4096 f32 unstructured@0.99 fine cluster\$"; do
  set -- $c; s=$1; shift; f="$*"
  o=$OUT/r/ncu_${s}_$(echo $f | tr ' @$' '___').txt
  $NCU --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum --launch-skip 1 --launch-count 2 ./spartac kernels bench --sizes $s --dtypes f32 --filter "$f" --reps 3 > $o 2>&1
  grep -E "spmm_fine|gpu__time|dram__bytes|lts__" $o | head -14
done
cd $OUT && tar czf r.tgz r && rm -rf r
