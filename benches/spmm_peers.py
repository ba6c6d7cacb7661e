#!/usr/bin/env python3
"""Times the peers (cuBLAS, cuSPARSE CSR, Triton BSR, through torch) on the matrices that
`spartac kernels bench --dump DIR --json ours.json` wrote, in the same device call, and
writes the combined table.

usage: spmm_peers.py ours.json DUMP_DIR peers.json table.md
       spmm_peers.py --table-only ours.json peers.json table.md   (rewrite the table from a
       finished run's files; needs neither a GPU nor torch)
Entries with "orientation": "left" are C = W @ B (W sparse M×K, a_file holds B); cuSPARSE
then runs W_csr @ B directly.
Timing: triton.testing.do_bench (CUDA events, L2 flushed before each run, median), the same
method as the spartac side. C = A @ W with A dense M×K, W sparse K×N; the sparse peers take
the transposed form C^T = W^T @ A^T (sparse on the left, as cuSPARSE SpMM and bsr_dense_mm
want), with W^T and A^T prepared outside the timed region.
int8 cases (dtype i8): the dump holds the quantized operands A_q, W_q (integers); the peer
is cuBLAS int8 through `torch._int_mm(A_q, W_q)` (int8 x int8 -> int32, no dequantization,
needs M > 16 and K, N multiples of 8), timed with W_q row-major (as stored) and column-major
(cuBLAS's int8 layout, the copy made outside the timing); the cuBLAS column shows the faster.
There is no int8 cuSPARSE or Triton BSR peer in torch. The int8 floor uses the larger of the
measured int8 rate and 2x the fp16 rate.
Left-orientation cases (entry "orientation": "left": C = W @ B, W sparse M×K, `a_file`
holding B K×N) are timed in their own form: cuBLAS W @ B, cuSPARSE W_csr @ B, Triton
bsr_dense_mm(W_bsr, B).
"""
import json
import os
import sys


def floor_rate(ceil, dtype):
    """TFLOP/s that bound a kernel of this dtype: cuBLAS's dense rate, and for fp32 also a third
    of cuBLAS's TF32 rate (3xTF32: three TF32 tensor-core products per fp32-accurate product,
    which our block kernels use and which runs faster than cuBLAS fp32). Tables of runs that did
    not measure the TF32 rate keep the fp32 rate."""
    rate = ceil[f"cublas_{dtype}_TFLOPs"]
    if dtype == "f32" and "cublas_tf32_TFLOPs" in ceil:
        rate = max(rate, ceil["cublas_tf32_TFLOPs"] / 3)
    return rate


def kernel_kind(k):
    """family:mode of one kernel; a fine kernel named *_at (A transposed) or *_wide (16-bit B
    widened) runs after its prepass kernel, whose time the case includes."""
    pre = "transpose+" if k["name"].endswith("_at") else "widen+" if k["name"].endswith("_wide") else ""
    return f"{pre}{k['family']}:{k['mode'][:6]}"


def write_table(ours, ceil, peers, table_path):
    """The table: ratio = peer ms / our ms (> 1: we are faster)."""
    lines = [
        "| size | dtype | pattern | cover (our kernels) | ours ms | cuBLAS ms | x cuBLAS | cuSPARSE ms | x cuSPARSE | Triton BSR ms | x Triton | our TFLOP/s (executed) | floor ms | ours / floor | err |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def fmt(x, p=4):
        return "-" if x is None else f"{x:.{p}f}"

    for e in ours:
        p = peers[(e["w_file"], e["dtype"])]
        ms = e["ms"]
        shape = e["label"].split()[0]
        m, k, n = (int(x) for x in shape.split("x"))
        es = {"f32": 4, "i8": 1}.get(e["dtype"], 2)
        out_es = 2 if e["dtype"] == "i8" else es  # int8 writes fp16
        if e.get("orientation") == "left":  # W (m x k) sparse, B (k x n) dense
            useful = 2.0 * n * e["nnz"]
            bytes_min = (k * n + e["nnz"]) * es + m * n * out_es
        else:
            useful = 2.0 * m * e["nnz"]
            bytes_min = (m * k + e["nnz"]) * es + m * n * out_es
        floor = max(useful / (floor_rate(ceil, e["dtype"]) * 1e9), bytes_min / (ceil["hbm_GBps"] * 1e6))
        ratio = lambda name: None if p.get(name) is None else p[name] / ms
        kinds = "+".join(kernel_kind(k) for k in e["kernels"])
        # Every qualifier of the case label after "MxKxN dtype pattern cover" (tile, values,
        # uniform, cublas, engine, epilogue), so rows that differ only in those stay apart.
        for q in e["label"].split()[4:]:
            kinds += ", " + ("left (C = W·B)" if q == "left" else q)
        lines.append(
            f"| {e['size'] if shape == '{0}x{0}x{0}'.format(e['size']) else shape} | {e['dtype']} | {e['pattern']} | {e['cover']} ({kinds}) | {fmt(ms)} | {fmt(p.get('cublas_ms'))} | "
            f"{fmt(ratio('cublas_ms'), 2)} | {fmt(p.get('cusparse_ms'))} | {fmt(ratio('cusparse_ms'), 2)} | "
            f"{fmt(p.get('triton_ms'))} | {fmt(ratio('triton_ms'), 2)} | {e['flops'] / ms / 1e9:.1f} | {fmt(floor)} | "
            f"{ms / floor:.1f} | {e['rel_norm_err']:.1e} |"
        )
    header = (
        f"Ceilings measured in this run: HBM copy {ceil['hbm_GBps']:.0f} GB/s; cuBLAS dense 8192³ "
        + ", ".join(f"{d} {ceil[f'cublas_{d}_TFLOPs']:.0f} TFLOP/s" for d in ("f32", "f16", "bf16"))
        + (
            f"; int8 (`torch._int_mm`) W row-major {ceil['cublas_i8_nn_TFLOPs']:.0f}, column-major "
            f"{ceil['cublas_i8_tn_TFLOPs']:.0f} TOP/s, int8 floor rate {ceil['cublas_i8_TFLOPs']:.0f} TOP/s"
            if "cublas_i8_TFLOPs" in ceil
            else ""
        )
        + (
            f"; TF32 {ceil['cublas_tf32_TFLOPs']:.0f} TFLOP/s, so the fp32 floor rate is "
            f"{floor_rate(ceil, 'f32'):.0f} TFLOP/s (3xTF32: a third of TF32)"
            if "cublas_tf32_TFLOPs" in ceil
            else ""
        )
        + ". Floor = max(useful flops / floor rate of the dtype, (A + nnz(W) + C) bytes / HBM rate).\n\n"
    )
    open(table_path, "w").write(header + "\n".join(lines) + "\n")
    print(header + "\n".join(lines))


if sys.argv[1:2] == ["--table-only"]:
    ours_path, peers_path, table_path = sys.argv[2:5]
    saved = json.load(open(peers_path))
    peers = {tuple(k.split("|", 1)): v for k, v in saved["peers"].items()}
    write_table(json.load(open(ours_path)), saved["ceilings"], peers, table_path)
    sys.exit(0)

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
    if name == "f32":  # the tensor-core TF32 rate, for the fp32 floor (see floor_rate)
        torch.backends.cuda.matmul.allow_tf32 = True
        ceil["cublas_tf32_TFLOPs"] = 2 * 8192**3 / bench(lambda: a @ b) / 1e9
        torch.backends.cuda.matmul.allow_tf32 = False
    del a, b
if any(e["dtype"] == "i8" for e in ours):
    # Both layouts of the second operand: row-major (NN, as W is stored) and column-major
    # (TN, cuBLAS's own int8 layout: b = bt.t() with bt contiguous).
    a = torch.randint(-127, 128, (8192, 8192), device=dev, dtype=torch.int8)
    b = torch.randint(-127, 128, (8192, 8192), device=dev, dtype=torch.int8)
    bt = b.t().contiguous().t()
    ceil["cublas_i8_nn_TFLOPs"] = 2 * 8192**3 / bench(lambda: torch._int_mm(a, b)) / 1e9
    ceil["cublas_i8_tn_TFLOPs"] = 2 * 8192**3 / bench(lambda: torch._int_mm(a, bt)) / 1e9
    # The int8 floor's rate: the faster cuBLAS layout, or 2x the fp16 rate (int8 tensor-core
    # peak is twice fp16's on Hopper), whichever is higher.
    ceil["cublas_i8_TFLOPs"] = max(ceil["cublas_i8_nn_TFLOPs"], ceil["cublas_i8_tn_TFLOPs"], 2 * ceil["cublas_f16_TFLOPs"])
    del a, b, bt
print("ceilings", ceil, flush=True)

A_cache = {}
peers = {}
for e in ours:
    key = (e["w_file"], e["dtype"])
    if key in peers:
        continue
    left = e.get("orientation") == "left"
    dt = DT.get(e["dtype"], torch.int8)
    if e["a_file"] not in A_cache:
        A_cache.clear()
        A_cache[e["a_file"]] = torch.from_numpy(np.load(os.path.join(dump, e["a_file"]))).to(dev, dt)
    A = A_cache[e["a_file"]]
    W = torch.from_numpy(np.load(os.path.join(dump, e["w_file"]))).to(dev, dt)
    res = {"nnz": int((W != 0).sum())}
    dense = "@0" in e["pattern"] and e["pattern"].endswith("@0")
    if left:
        # C = W @ B: the sparse operand is already on the left; A holds B.
        B = A
        ref = W.float() @ B.float()
        res["cublas_ms"] = bench(lambda: W @ B)
        res["cublas_err"] = rel_err(W @ B, ref)
        if not dense:
            try:
                Wcsr = W.to_sparse_csr()
                res["cusparse_ms"] = bench(lambda: Wcsr @ B)
                res["cusparse_err"] = rel_err(Wcsr @ B, ref)
                del Wcsr
            except Exception as ex:
                res["cusparse_error"] = str(ex).splitlines()[0]
            if e["pattern"].startswith(("block32x32", "mixed32x32")):
                try:
                    from torch.sparse._triton_ops import bsr_dense_mm

                    Wbsr = W.to_sparse_bsr((32, 32))
                    res["triton_ms"] = bench(lambda: bsr_dense_mm(Wbsr, B))
                    res["triton_err"] = rel_err(bsr_dense_mm(Wbsr, B), ref)
                    del Wbsr
                except Exception as ex:
                    res["triton_error"] = str(ex).splitlines()[0]
        del W, ref
        torch.cuda.empty_cache()
        peers[key] = res
        print(e["size"], e["dtype"], e["pattern"], "left", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}, flush=True)
        continue
    ref = A.float() @ W.float()
    if e["dtype"] == "i8":
        Wcm = W.t().contiguous().t()  # the same W, column-major (prepared outside the timing)
        res["cublas_nn_ms"] = bench(lambda: torch._int_mm(A, W))
        res["cublas_tn_ms"] = bench(lambda: torch._int_mm(A, Wcm))
        res["cublas_ms"] = min(res["cublas_nn_ms"], res["cublas_tn_ms"])
        res["cublas_err"] = max(rel_err(torch._int_mm(A, W), ref), rel_err(torch._int_mm(A, Wcm), ref))
        del Wcm
        del W, ref
        torch.cuda.empty_cache()
        peers[key] = res
        print(e["size"], e["dtype"], e["pattern"], {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}, flush=True)
        continue
    res["cublas_ms"] = bench(lambda: A @ W)
    res["cublas_err"] = rel_err(A @ W, ref)
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

write_table(ours, ceil, peers, table_path)
