#!/usr/bin/env python3
"""Runs an ONNX model with onnxruntime (CPU) and saves inputs and reference outputs.

usage: ort_reference.py MODEL.onnx OUT.npz [--seed S] [--threads T] [--repeat R]

Inputs are random and deterministic for a seed (numpy PCG64): floats uniform in [-1, 1),
int64 token ids uniform in [0, 30522) for inputs named *input_ids*, 0/1 masks ending in a
run of ones for *attention_mask*, zeros for *token_type_ids*, otherwise 0/1. The .npz
holds `in:NAME` and `out:NAME` arrays; the script prints onnxruntime's median time per run.
"""
import argparse, statistics, time
import numpy as np
import onnxruntime as ort

p = argparse.ArgumentParser()
p.add_argument("model"); p.add_argument("out")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeat", type=int, default=5)
a = p.parse_args()

opts = ort.SessionOptions()
opts.intra_op_num_threads = a.threads
opts.inter_op_num_threads = 1
sess = ort.InferenceSession(a.model, opts, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(a.seed)
feeds = {}
for i in sess.get_inputs():
    shape = i.shape
    if any(not isinstance(d, int) for d in shape):
        raise SystemExit(f"input {i.name} has symbolic dims {shape}; fix them first")
    if "float" in i.type:
        feeds[i.name] = rng.uniform(-1, 1, size=shape).astype(np.float32)
    elif "input_ids" in i.name:
        feeds[i.name] = rng.integers(0, 30522, size=shape, dtype=np.int64)
    elif "attention_mask" in i.name:
        m = np.ones(shape, dtype=np.int64)
        if len(shape) == 2:  # padding at the end of each sequence, random lengths
            for b in range(shape[0]):
                m[b, rng.integers(1, shape[1] + 1):] = 0
        feeds[i.name] = m
    elif "token_type_ids" in i.name:
        feeds[i.name] = np.zeros(shape, dtype=np.int64)
    else:
        feeds[i.name] = rng.integers(0, 2, size=shape).astype(np.int64)
outs = sess.run(None, feeds)
times = []
for _ in range(a.repeat):
    t0 = time.perf_counter(); sess.run(None, feeds); times.append(time.perf_counter() - t0)
arrays = {f"in:{k}": v for k, v in feeds.items()}
arrays.update({f"out:{o.name}": v for o, v in zip(sess.get_outputs(), outs)})
np.savez(a.out, **arrays)
print(f"onnxruntime {ort.__version__} ({a.threads} threads): median {statistics.median(times)*1e3:.1f} ms per run over {a.repeat}")
