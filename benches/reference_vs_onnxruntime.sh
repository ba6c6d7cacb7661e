#!/usr/bin/env bash
# The CPU reference executor against onnxruntime (CPU provider, 2 threads) on the real
# models: error per output and median time per batch, both measured in the same run,
# alternating, on the same inputs. Needs the prepared models (models/setup_minilm_l3.sh,
# models/setup_torch_models.sh) and a release build of the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p spartac-tests
models=${*:-minilm-l3 minilm-l6 efficientnet-lite0}
for round in 1 2; do
  for m in $models; do
    f=.cache/models/$m
    [ -f "$f.onnx" ] || { echo "$m: not prepared, skipped"; continue; }
    echo "## $m (round $round)"
    PYTHONPATH=.cache/py-models python3 models/ort_reference.py "$f.onnx" "/tmp/$m.check.npz" --seed 0 --repeat 5
    ./target/release/compare_ort "$f.onnx" "$f.ref.npz" 3
  done
done
