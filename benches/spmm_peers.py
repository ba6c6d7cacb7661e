#!/usr/bin/env python3
"""Times the peers (cuBLAS, cuSPARSE CSR, Triton BSR, through torch) on the matrices that
`spartac kernels bench --dump DIR --json ours.json` wrote, in the same device call, and
writes the combined table.

usage: spmm_peers.py ours.json DUMP_DIR peers.json table.md
Entries with "orientation": "left" are C = W @ B (W sparse M×K, a_file holds B); cuSPARSE
then runs W_csr @ B directly.
Timing: triton.testing.do_bench (CUDA events, L2 flushed before each run, median), the same
method as the spartac side. C = A @ W with A dense M×K, W sparse K×N; the sparse peers take
the transposed form C^T = W^T @ A^T (sparse on the left, as cuSPARSE SpMM and bsr_dense_mm
want), with W^T and A^T prepared outside the timed region.
"""
import json
import os
import sys

import numpy as np
import torch
from triton.testing import do_bench

ours_path, dump, peers_path, table_path = sys.argv[1:5]
ours = json.load(open(ours_path))
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False  # fp32 peers compute in fp32, as ours does
torch.backends.cudnn.allow_tf32 = False


def bench(fn):
    fn()
    torch.cuda.synchronize()
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def rel_err(x, ref):
    x, ref = x.float(), ref.float()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


# Ceilings measured here: HBM bandwidth by a 2 GiB device copy, dense matmul rate by cuBLAS.
src = torch.empty(1 << 29, dtype=torch.float32, device=dev)
dst = torch.empty_like(src)
t = bench(lambda: dst.copy_(src))
ceil = {"hbm_GBps": 2 * src.numel() * 4 / t / 1e6}
del src, dst
for name, dt in DT.items():
    a = torch.randn(8192, 8192, device=dev, dtype=dt)
    b = torch.randn(8192, 8192, device=dev, dtype=dt)
    ceil[f"cublas_{name}_TFLOPs"] = 2 * 8192**3 / bench(lambda: a @ b) / 1e9
    del a, b
print("ceilings", ceil, flush=True)

A_cache = {}
peers = {}
for e in ours:
    key = (e["w_file"], e["dtype"])
    if key in peers:
        continue
    dt = DT[e["dtype"]]
    if e["a_file"] not in A_cache:
        A_cache.clear()
        A_cache[e["a_file"]] = torch.from_numpy(np.load(os.path.join(dump, e["a_file"]))).to(dev, dt)
    A = A_cache[e["a_file"]]
    W = torch.from_numpy(np.load(os.path.join(dump, e["w_file"]))).to(dev, dt)
    res = {"nnz": int((W != 0).sum())}
    if e.get("orientation") == "left":
        # C = W @ B, W sparse M×K on the left: cuSPARSE CSR SpMM takes it as it is.
        B = A
        ref = W.float() @ B.float()
        res["cublas_ms"] = bench(lambda: W @ B)
        res["cublas_err"] = rel_err(W @ B, ref)
        try:
            Wcsr = W.to_sparse_csr()
            res["cusparse_ms"] = bench(lambda: Wcsr @ B)
            res["cusparse_err"] = rel_err(Wcsr @ B, ref)
            del Wcsr
        except Exception as ex:  # report, do not hide
            res["cusparse_error"] = str(ex).splitlines()[0]
        del W, ref
        torch.cuda.empty_cache()
        peers[key] = res
        print(e["size"], e["dtype"], "left", e["pattern"], {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}, flush=True)
        continue
    ref = A.float() @ W.float()
    res["cublas_ms"] = bench(lambda: A @ W)
    res["cublas_err"] = rel_err(A @ W, ref)
    dense = "@0" in e["pattern"] and e["pattern"].endswith("@0")
    if not dense:
        At = A.t().contiguous()
        Wt = W.t().contiguous()
        try:
            Wcsr = Wt.to_sparse_csr()
            res["cusparse_ms"] = bench(lambda: Wcsr @ At)
            res["cusparse_err"] = rel_err((Wcsr @ At).t(), ref)
            del Wcsr
        except Exception as ex:  # report, do not hide
            res["cusparse_error"] = str(ex).splitlines()[0]
        if e["pattern"].startswith(("block32x32", "mixed32x32")):
            try:
                from torch.sparse._triton_ops import bsr_dense_mm

                Wbsr = Wt.to_sparse_bsr((32, 32))
                res["triton_ms"] = bench(lambda: bsr_dense_mm(Wbsr, At))
                res["triton_err"] = rel_err(bsr_dense_mm(Wbsr, At).t(), ref)
                del Wbsr
            except Exception as ex:
                res["triton_error"] = str(ex).splitlines()[0]
        del At, Wt
    del W, ref
    torch.cuda.empty_cache()
    peers[key] = res
    print(e["size"], e["dtype"], e["pattern"], {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}, flush=True)

json.dump({"ceilings": ceil, "peers": {f"{k[0]}|{k[1]}": v for k, v in peers.items()}}, open(peers_path, "w"), indent=1)

# The table: ratio = peer ms / our ms (> 1: we are faster).
lines = [
    "| size | dtype | pattern | cover (our kernels) | ours ms | cuBLAS ms | x cuBLAS | cuSPARSE ms | x cuSPARSE | Triton BSR ms | x Triton | our TFLOP/s (executed) | floor ms | ours / floor | err |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def fmt(x, p=4):
    return "-" if x is None else f"{x:.{p}f}"


for e in ours:
    p = peers[(e["w_file"], e["dtype"])]
    ms = e["ms"]
    m = k = n = e["size"]
    es = 4 if e["dtype"] == "f32" else 2
    useful = 2.0 * m * e["nnz"]
    bytes_min = (m * k + e["nnz"] + m * n) * es
    floor = max(useful / (ceil[f"cublas_{e['dtype']}_TFLOPs"] * 1e9), bytes_min / (ceil["hbm_GBps"] * 1e6))
    ratio = lambda name: None if p.get(name) is None else p[name] / ms
    kinds = "+".join(f"{k['family']}:{k['mode'][:6]}" for k in e["kernels"])
    if e.get("orientation") == "left":
        kinds += ", left W·B"
    if " tile" in e["label"]:
        kinds += ", " + e["label"].rsplit(" ", 1)[-1]
    lines.append(
        f"| {e['size']} | {e['dtype']} | {e['pattern']} | {e['cover']} ({kinds}) | {fmt(ms)} | {fmt(p.get('cublas_ms'))} | "
        f"{fmt(ratio('cublas_ms'), 2)} | {fmt(p.get('cusparse_ms'))} | {fmt(ratio('cusparse_ms'), 2)} | "
        f"{fmt(p.get('triton_ms'))} | {fmt(ratio('triton_ms'), 2)} | {e['flops'] / ms / 1e9:.1f} | {fmt(floor)} | "
        f"{ms / floor:.1f} | {e['rel_norm_err']:.1e} |"
    )
header = (
    f"Ceilings measured in this run: HBM copy {ceil['hbm_GBps']:.0f} GB/s; cuBLAS dense 8192³ "
    + ", ".join(f"{d} {ceil[f'cublas_{d}_TFLOPs']:.0f} TFLOP/s" for d in DT)
    + ". Floor = max(useful flops / cuBLAS rate of the dtype, (A + nnz(W) + C) bytes / HBM rate).\n\n"
)
open(table_path, "w").write(header + "\n".join(lines) + "\n")
print(header + "\n".join(lines))
