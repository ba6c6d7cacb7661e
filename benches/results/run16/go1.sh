#!/bin/bash
# Session 10 call 1: the transpose prepass of the right-orientation fine kernel (At = Aᵀ once,
# then 16-byte copies of At's rows, as the left orientation copies B). Every GPU case (the new
# prepass cases included), then both ways to A's columns forced, at 1024^3 and 4096^3 fp32:
# unstructured 50/90/95/99%, 95% tilings, the mixed cover; the defaults and the left orientation
# for reference. Peers not run (run 15's same-call numbers stand for this comparison).
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
./spartac kernels test --json $OUT/r/test.json > $OUT/r/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/r/test.log | head
for s in 1024 4096; do
  S="${s}x${s}x${s} f32"
  F="transposing\$|prepass\$|$S unstructured@0.95 fine\$|$S unstructured@0.99 fine\$|$S unstructured@0.95 fine left\$|$S unstructured@0.99 fine left\$|$S mixed32x32@0.9+0.01 mixed32x32+fine\$"
  ./spartac kernels bench --sizes $s --dtypes f32 --filter "$F" --json $OUT/r/ours$s.json > $OUT/r/bench$s.log 2>&1; echo "b$s rc=$?"
  grep -E " ms " $OUT/r/bench$s.log
done
cd $OUT && tar czf r.tgz r && rm -rf r
