"""Depthwise 7x7 convolutions (+ ReLU) as small ONNX models, for `spartac run --check` on the GPU:
shapes no zoo model has, which the shared-memory tile of `op_conv_depthwise_tile.cu.tera` must get
right: 4- and 8-channel slabs (12 and 40 channels), stride 2, dilation 2 and ragged tiles.

    PYTHONPATH=.cache/py-models python3 benches/dw_cases.py DIR
    spartac compile DIR/dw7_c40_s2.onnx --dtype f16 -o m.sparta && spartac run m.sparta --random 7 --backend cuda --check
"""
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
out = sys.argv[1]
rng = np.random.default_rng(0)
cases = [  # name, n, c, h, k, stride, dilation
    ("dw7_c40_s2", 4, 40, 29, 7, 2, 1),
    ("dw7_c12", 2, 12, 9, 7, 1, 1),
    ("dw7_c8_dil2", 2, 8, 17, 7, 1, 2),
    ("dw7_c64_odd", 3, 64, 23, 7, 1, 1),
]
for name, n, c, h, k, s, d in cases:
    pad = d * (k // 2)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32) * 0.2
    b = rng.standard_normal(c).astype(np.float32) * 0.1
    oh = (h + 2 * pad - d * (k - 1) - 1) // s + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, kernel_shape=[k, k], strides=[s, s],
                          dilations=[d, d], pads=[pad] * 4),
         helper.make_node("Relu", ["c"], ["y"])],
        name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, oh, oh])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(m, f"{out}/{name}.onnx")
    print(name, oh)
