#!/usr/bin/env bash
# The GPU test + benchmark in one call (device machine, from a folder holding the `spartac`
# binary and spmm_peers.py): correctness of every kernel family, then our timings and the
# peers' (cuBLAS, cuSPARSE, Triton through torch) on the same matrices, then the table.
# usage: run_spmm_gpu.sh OUT_DIR [extra args for `spartac kernels bench`]
set -uo pipefail
out=${1:?out dir}; shift
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
dump=/tmp/spmm_cases
mkdir -p "$out" "$dump"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv >"$out/gpu.txt" 2>&1
"$here/spartac" kernels test --json "$out/test.json" 2>&1 | tee "$out/test.log"
"$here/spartac" kernels bench --dump "$dump" --json "$out/ours.json" "$@" 2>&1 | tee "$out/bench.log"
python3 "$here/spmm_peers.py" "$out/ours.json" "$dump" "$out/peers.json" "$out/spmm_table.md" 2>&1 | tee "$out/peers.log"
