#!/usr/bin/env bash
# int8 run: correctness of the int8 cases, int8 bench (1024, 4096) + fp16 32x32@90% in the same
# run for comparison, then the peers (cuBLAS int8 _int_mm, cuBLAS fp16 ...) on the same matrices.
set -uo pipefail
out=${1:?out}
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
dump=/tmp/spmm_cases; mkdir -p "$out" "$dump"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv >"$out/gpu.txt" 2>&1
"$here/spartac" kernels test --filter " i8 " --json "$out/test.json" > "$out/test.log" 2>&1; echo "test rc $?" >> "$out/test.log"
"$here/spartac" kernels bench --sizes 1024,4096 --dtypes i8 --dump "$dump" --json /tmp/ours_i8.json > "$out/bench.log" 2>&1
"$here/spartac" kernels bench --sizes 1024,4096 --dtypes f16 --filter "block32x32@0.9 block32x32" --dump "$dump" --json /tmp/ours_f16.json >> "$out/bench.log" 2>&1
python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))+json.load(open(sys.argv[2])), open(sys.argv[3],'w'), indent=1)" /tmp/ours_i8.json /tmp/ours_f16.json "$out/ours.json"
timeout 150 python3 "$here/spmm_peers.py" "$out/ours.json" "$dump" "$out/peers.json" "$out/spmm_table.md" > "$out/peers.log" 2>&1
tail -3 "$out/test.log"; grep -c PASS "$out/test.log"; cat "$out/bench.log" | grep -v "^device"; tail -30 "$out/spmm_table.md"
