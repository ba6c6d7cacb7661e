#!/usr/bin/env bash
# Regenerates the ONNX backend node tests (model.onnx + test_data_set_*/{input,output}_N.pb)
# from the generators the pinned `onnx` wheel ships. The data is not committed: ~56 MB,
# ~12 s. Output: $SPARTAC_NODE_TESTS (default: <repo>/.cache/onnx-node-tests).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="${SPARTAC_NODE_TESTS:-$repo/.cache/onnx-node-tests}"
pydir="$repo/.cache/py-onnx"
ONNX_VERSION=1.23.2
if [ -f "$out/.complete-$ONNX_VERSION" ]; then
  echo "node tests already generated in $out"
  exit 0
fi
if ! PYTHONPATH="$pydir" python3 -c "import onnx, sys; sys.exit(onnx.__version__ != '$ONNX_VERSION')" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$pydir" \
    "onnx==$ONNX_VERSION" "numpy==2.2.6" "protobuf==6.33.1" "ml_dtypes==0.5.4" "typing_extensions==4.15.0"
fi
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
PYTHONPATH="$pydir" python3 - "$out.tmp" <<'PY'
import argparse, sys, warnings
warnings.filterwarnings("ignore")
import onnx.backend.test.case.model as model_cases
import onnx.backend.test.case.node as node_cases
from onnx.backend.test import cmd_tools
model_cases.collect_testcases = lambda: node_cases.collect_testcases(None)
cmd_tools.generate_data(argparse.Namespace(output=sys.argv[1]))
PY
rm -rf "$out" && mv "$out.tmp" "$out"
touch "$out/.complete-$ONNX_VERSION"
echo "generated $(ls "$out/node" | wc -l) node tests in $out"
