#!/usr/bin/env python3
"""PyTorch's fused attention on the shapes `spartac kernels attention --bench` times: the same
layouts (q, k, v and the output [batch, s, heads, d] in memory, viewed [batch, heads, s, d]), the
same additive padding mask ([batch, 1, 1, keys]: entry b keeps its first keys - keys // (b + 2)
keys, entry 0 all of them), fp16 or bf16.

Per case and backend (torch.nn.attention.SDPBackend: FLASH_ATTENTION, EFFICIENT_ATTENTION,
CUDNN_ATTENTION, and torch's own choice): the median milliseconds of one launch over --repeat
CUDA-event pairs of ten launches each, after warm-up, and TFLOP/s (4 * b * h * sq * sk * d).
Flash attention takes no mask: its row is the unmasked time (a lower bound for the masked
case). A backend that refuses a case is reported as such. One JSON line per case and backend.
"""
import argparse, json, statistics
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# model: (batch, heads, sequence, head width, dtype), as runtime/src/cuda/attention.rs lists them
CASES = [
    ("MiniLM-L6 b32x128", 32, 12, 128, 32, "f16"),
    ("BERT-512 b16x256", 16, 8, 256, 64, "f16"),
    ("BERT-base b8x384", 8, 12, 384, 64, "f16"),
    ("BERT-base b8x384 bf16", 8, 12, 384, 64, "bf16"),
    ("BERT-large b8x512", 8, 16, 512, 64, "f16"),
    ("d128 b4x1024", 4, 16, 1024, 128, "f16"),
    ("long b1x4096", 1, 16, 4096, 64, "f16"),
]
BACKENDS = {
    "flash (no mask)": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "auto": None,
}


def time_ms(fn, repeat, per_pair=10):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(per_pair):
            fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) / per_pair)
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(7)
    for model, b, h, s, d, dt in CASES:
        dtype = torch.float16 if dt == "f16" else torch.bfloat16
        q, k, v = (torch.rand(b, s, h, d, device="cuda", generator=g, dtype=dtype).sub_(0.5).mul_(3)
                   .transpose(1, 2) for _ in range(3))
        keep = torch.tensor([s if i == 0 else max(s - s // (i + 2), 1) for i in range(b)], device="cuda")
        mask = torch.where(torch.arange(s, device="cuda")[None, :] < keep[:, None], 0.0, float("-inf"))
        mask = mask.to(dtype)[:, None, None, :]
        flops = 4.0 * b * h * s * s * d
        for name, backend in BACKENDS.items():
            m = None if name.startswith("flash") else mask
            fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            row = {"model": model, "dtype": dt, "backend": name}
            try:
                if backend is None:
                    ms = time_ms(fn, args.repeat)
                else:
                    with sdpa_kernel([backend]):
                        ms = time_ms(fn, args.repeat)
                row.update(ms=round(ms, 5), tflops=round(flops / (ms * 1e-3) / 1e12, 1))
            except RuntimeError as e:
                row.update(refused=str(e).splitlines()[0][:120])
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
