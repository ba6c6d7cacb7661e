#!/usr/bin/env python3
"""The 2:4 peers through torch, on the shapes of `spartac kernels bench --two-four`, in the same
device call: cuBLAS dense (`F.linear`, the bias fused) and cuSPARSELt called as torch calls it
(`torch._cslt_compress` + `torch._cslt_sparse_mm`, its best algorithm found by
`torch._cslt_sparse_mm_search`, the bias fused), both on C = A·W + bias with A `M × K` and W
`K × N` 2:4 along K. cuSPARSELt's sparse operand is the left one, so it runs Cᵀ = Wᵀ·Aᵀ with Wᵀ
(`N × K`, 2:4 along its rows) compressed outside the timing, and returns C itself
(`transpose_result`) where this torch has it. Each result is checked against the dense product.
The JSON is written after each shape, so a process that a CUDA fault ends keeps what it measured.

`i8`: symmetric int8 operands (what `kernels bench --two-four --dtypes i8` multiplies, ±127),
exact int32 sums. cuBLAS dense is cuBLASLt's int8 GEMM as `torch._int_mm` calls it (A row-major,
W column-major: the TN layout its int8 kernels take), int32 out, no bias and no dequantization:
less work than ours, which scales, adds the bias and writes fp16 (half the bytes of int32).
cuSPARSELt is asked for int32 out the same way.

usage: two_four_torch.py OUT.json VARIANT [f16|bf16|i8 ...]
VARIANT: `search` (the best algorithm, bias fused, C returned transposed back), `plain`
(algorithm 0, no bias, Cᵀ as computed) or `wrapper` (`to_sparse_semi_structured` with
cuSPARSELt forced, then `F.linear`). A failing cuSPARSELt can leave the CUDA context unusable,
so run each variant in its own process.
Timing: CUDA events around each launch, after warm-up, L2 flushed before each (a 256 MiB write),
the median of 50; the method of `kernels bench`.
"""
import json
import sys

import torch
import torch.nn.functional as F

SHAPES = [
    ("cube", (4096, 4096, 4096)),
    ("minilm qkv", (4096, 384, 1152)),
    ("minilm ffn1", (4096, 384, 1536)),
    ("minilm ffn2", (4096, 1536, 384)),
    ("bertbase ffn1", (4096, 768, 3072)),
    ("bertbase ffn2", (4096, 3072, 768)),
]


def operand(rows, cols, dtype, gen, scale=1.0):
    """A random `rows × cols` matrix: normal × `scale` in a float dtype, uniform in ±127 on int8."""
    if dtype == torch.int8:
        return torch.randint(-127, 128, (rows, cols), generator=gen, device="cuda", dtype=torch.int8)
    return (torch.randn(rows, cols, generator=gen, device="cuda") * scale).to(dtype)


def two_four_rows(rows, cols, dtype, gen):
    """A `rows × cols` matrix keeping 2 of every 4 consecutive elements of each row."""
    w = operand(rows, cols, dtype, gen)
    scores = torch.rand(rows, cols // 4, 4, generator=gen, device="cuda")
    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep.scatter_(2, scores.topk(2, dim=2).indices, True)
    return w * keep.reshape(rows, cols).to(dtype)


def median_ms(fn, runs=50):
    """Median of `runs` launches, each timed alone by CUDA events after a 256 MiB write that
    flushes L2 (what `kernels bench` does)."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def cusparselt(variant, wt, a, bias):
    """A closure computing A·W (+ bias) on cuSPARSELt the way `variant` asks (module docs)."""
    if variant == "wrapper":
        from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

        SparseSemiStructuredTensor._FORCE_CUTLASS = False
        ws = to_sparse_semi_structured(wt)
        return lambda: F.linear(a, ws, bias)
    compressed = torch._cslt_compress(wt)
    at = a.t()
    if wt.dtype == torch.int8:
        return lambda: torch._cslt_sparse_mm(compressed, at, out_dtype=torch.int32)
    if variant == "plain":
        return lambda: torch._cslt_sparse_mm(compressed, at)
    alg = torch._cslt_sparse_mm_search(compressed, at, bias=bias, transpose_result=True)
    kwargs = {"bias": bias, "transpose_result": True}
    if isinstance(alg, int):
        kwargs["alg_id"] = alg
    return lambda: torch._cslt_sparse_mm(compressed, at, **kwargs)


def main():
    out_path, variant = sys.argv[1], sys.argv[2]
    dtypes = sys.argv[3:] or ["f16"]
    gen = torch.Generator(device="cuda").manual_seed(46)
    rows = []
    for name in dtypes:
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "i8": torch.int8}[name]
        int8 = dtype == torch.int8
        for label, (m, k, n) in SHAPES:
            a = operand(m, k, dtype, gen, 0.25)
            wt = two_four_rows(n, k, dtype, gen)  # Wᵀ: N × K, 2:4 along K
            # int8: no bias (int32 out); f64 keeps the integer sums exact.
            bias = None if int8 else torch.randn(n, generator=gen, device="cuda").to(dtype)
            want = a.double() @ wt.double().t()
            if bias is not None:
                want = want + bias.double()
            row = {"shape": label, "m": m, "k": k, "n": n, "dtype": name}
            if int8:
                w_cm = wt.t()  # K × N, column-major
                got = torch._int_mm(a, w_cm)
                row["cublas_rel_err"] = ((got.double() - want).norm() / want.norm()).item()
                row["cublas_ms"] = median_ms(lambda: torch._int_mm(a, w_cm))
            else:
                row["cublas_ms"] = median_ms(lambda: F.linear(a, wt, bias))
            try:
                run = cusparselt(variant, wt, a, bias)
                got = run()
                if got.shape != (m, n):
                    got = got.t()
                if variant == "plain" and bias is not None:
                    got = got.double() + bias.double()
                row["cusparselt_rel_err"] = ((got.double() - want).norm() / want.norm()).item()
                row["cusparselt_ms"] = median_ms(run)
            except Exception as e:  # noqa: BLE001 - the table says why the peer is missing
                row["cusparselt_error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            with open(out_path, "w") as f:
                json.dump({"torch": torch.__version__, "variant": variant, "rows": rows}, f, indent=1)
            cs = row.get("cusparselt_ms")
            print(
                f"{name} {label:14s} {m}x{k}x{n}: cuBLAS {row['cublas_ms']:.4f} ms, cuSPARSELt "
                + (f"{cs:.4f} ms (err {row['cusparselt_rel_err']:.1e}, {row['cublas_ms'] / cs:.2f}x cuBLAS)" if cs else row.get("cusparselt_error", "-")),
                flush=True,
            )
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "variant": variant, "rows": rows}
    with open(out_path, "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
