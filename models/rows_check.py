#!/usr/bin/env python3
"""Writes small ONNX models that exercise the row kernels' walks (LayerNorm with a residual Add,
Softmax) on row lengths whose walk takes a group of lanes narrower than a warp and row counts
that leave the last warp ragged: 15x384, 1001x96, 37x192, 5x768, 9x100, 33x64.

usage: rows_check.py OUT_DIR     (needs the onnx package)
then, on the GPU machine, per model and dtype:
  spartac compile OUT_DIR/rows_15x384.onnx --dtype f16 -o r.sparta
  spartac run r.sparta --random 5 --backend cuda --check
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(3)
    for rows, cols in [(15, 384), (1001, 96), (37, 192), (5, 768), (9, 100), (33, 64)]:
        io = {n: h.make_tensor_value_info(n, T.FLOAT, [rows, cols]) for n in "xryz"}
        g = nh.from_array(rng.uniform(0.5, 1.5, cols).astype(np.float32), "g")
        b = nh.from_array(rng.uniform(-0.2, 0.2, cols).astype(np.float32), "b")
        nodes = [
            h.make_node("Add", ["x", "r"], ["s"], name="add"),
            h.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5),
            h.make_node("Softmax", ["x"], ["z"], name="sm", axis=-1),
        ]
        graph = h.make_graph(nodes, "rows", [io["x"], io["r"]], [io["y"], io["z"]], [g, b])
        onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 18)]), f"{out}/rows_{rows}x{cols}.onnx")


if __name__ == "__main__":
    main()
