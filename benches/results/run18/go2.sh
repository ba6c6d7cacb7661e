#!/bin/bash
# Session 12 call 2: ablations of the warp-specialized wgmma kernel (4096^3 f16 32x32 90%, default tile),
# each a define prepended to the kernel by SPARTAC_ABLATE (experiment binary, results wrong on purpose):
# nocopy (the producer issues no copies, only its arrivals), nomma (the consumers issue no wgmma),
# noepi (no epilogue), and pairs. Which side sets the 0.078 ms?
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
F='f16 block32x32@0.9 block32x32$|f16 block32x32@0.95 block32x32$|f16 block32x32@0.5 block32x32$'
for a in none nocopy nomma noepi nocopy,nomma nomma,noepi nocopy,noepi; do
  SPARTAC_ABLATE=$([ $a = none ] && echo "" || echo $a) timeout 100 ./spartac kernels bench --sizes 4096 --dtypes f16 --filter "$F" > $OUT/r/bench_$a.log 2>&1
  echo "$a: $(grep -E ' ms ' $OUT/r/bench_$a.log | awk '{print $4"="$6}' | tr '\n' ' ')"
done
cd $OUT && tar czf r.tgz r && rm -rf r
