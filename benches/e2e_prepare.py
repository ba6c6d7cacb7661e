#!/usr/bin/env python3
"""Moves MiniLM-L6 to the GPU machine within its 64 MiB transfer limit.

usage: e2e_prepare.py strip IN.onnx OUT.onnx     (here)
       e2e_prepare.py restore IN.onnx OUT.onnx   (on the GPU machine)

`strip` removes the word-embedding table (30522 x 384 f32, 47 MB of the model's 91 MB) and
records its name and shape in the model's metadata; `restore` puts back a table of the same
shape drawn from N(0, 0.05) with seed 0. Every other weight (the encoder's, which the
compiler plans and prunes) is the real one. The table is only gathered from, so the timing
of every engine is the same as with the real table; correctness on the GPU is checked against
the CPU executor on the same restored model.
"""
import sys
import numpy as np
import onnx
from onnx import numpy_helper

KEY = "spartac.synthetic_initializer"
NAME = "m.embeddings.word_embeddings.weight"


def strip(src, dst):
    m = onnx.load(src)
    init = next(i for i in m.graph.initializer if i.name == NAME)
    shape = "x".join(str(d) for d in init.dims)
    m.graph.initializer.remove(init)
    p = m.metadata_props.add()
    p.key, p.value = KEY, f"{NAME}:{shape}"
    onnx.save(m, dst)


def restore(src, dst):
    m = onnx.load(src)
    prop = next(p for p in m.metadata_props if p.key == KEY)
    name, shape = prop.value.rsplit(":", 1)
    dims = [int(d) for d in shape.split("x")]
    table = np.random.default_rng(0).normal(0.0, 0.05, dims).astype(np.float32)
    m.graph.initializer.append(numpy_helper.from_array(table, name))
    m.metadata_props.remove(prop)
    onnx.save(m, dst)


if __name__ == "__main__":
    {"strip": strip, "restore": restore}[sys.argv[1]](sys.argv[2], sys.argv[3])
