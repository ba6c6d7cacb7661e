#!/bin/bash
# Session 10 call 7 (final): every GPU case on the committed code, then the full tables with the
# peers in the same call: f16, f32 and int8 main rows at 1024^3 and 4096^3 (as call 5).
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
mkdir -p $OUT/t
./spartac kernels test --json $OUT/t/test.json > $OUT/t/test.log 2>&1; echo "test rc=$?"; grep -E "FAIL|of .* cases" $OUT/t/test.log | head
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/t/gpu.txt 2>&1
for d in f16 f32 i8; do bash go5.sh $d > /dev/null 2>&1; mv $OUT/r.tgz $OUT/r_$d.tgz; done
cd $OUT && tar czf t.tgz t && rm -rf t
