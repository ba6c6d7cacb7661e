#!/usr/bin/env bash
# tc's device run: correctness of every family, then the 4096 block cases (f16, bf16), peers optional.
set -uo pipefail
out=${OUT:?}; here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$out/gpu.txt" 2>&1
"$here/spartac" kernels test --json "$out/test.json" > "$out/test.log" 2>&1
echo "test rc $?"; grep -E "FAIL|cases pass" "$out/test.log" | head -30
"$here/spartac" kernels bench --filter "${FILTER:-block32x32@}" --sizes "${SIZES:-4096}" --dtypes "${DTYPES:-f16,bf16}" --dump /tmp/dump --json "$out/ours.json" > "$out/bench.log" 2>&1
echo "bench rc $?"; grep -v "^$" "$out/bench.log" | tail -40
if [ "${PEERS:-0}" = 1 ]; then
  python3 "$here/spmm_peers.py" "$out/ours.json" /tmp/dump "$out/peers.json" "$out/spmm_table.md" > "$out/peers.log" 2>&1
  echo "peers rc $?"; tail -25 "$out/spmm_table.md"
fi
