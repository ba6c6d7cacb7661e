#!/usr/bin/env python3
"""Write an attrs.json (models/tesa.schema.json) that block-prunes every constant MatMul/Gemm
weight of a model by magnitude. The attrs format has no wildcard, so the weight names come
from the model's own plan (`spartac plan --json`).

usage: models/block_attrs.py PLAN.json BLOCK_H BLOCK_W SPARSITY > attrs.json
example:
  spartac plan minilm-l6.onnx --json /tmp/plan.json
  models/block_attrs.py /tmp/plan.json 32 32 0.9 > models/minilm-l6.block32-0.9.json
"""
import json
import sys

if len(sys.argv) != 5:
    sys.exit(__doc__)
plan = json.load(open(sys.argv[1]))
block = [int(sys.argv[2]), int(sys.argv[3])]
sparsity = float(sys.argv[4])
weights = sorted({op["weight"] for op in plan["operators"]})
tensors = {w: {"block_magnitude": {"block": block, "sparsity": sparsity}} for w in weights}
json.dump({"tensors": tensors}, sys.stdout, indent=1, sort_keys=True)
print()
