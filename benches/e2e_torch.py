#!/usr/bin/env python3
"""PyTorch baselines on one GPU: eager, CUDA-graph replay, torch.compile (default) and
torch.compile with CUDA graphs (mode="reduce-overhead"), in fp32 (TF32 off in cuBLAS and cuDNN:
spartac computes exact fp32) and fp16.

--model minilm (default), bert512, bertbase: transformers' BertModel with eager attention (plain
MatMul + Softmax, as in the ONNX export spartac compiles), built from models/export_bert.py's
configs: MiniLM-L6 at batch 32 x 128, a hidden-512 8-layer encoder at 16 x 256, BERT-base at 8 x 384.

--model efficientnet: EfficientNet-Lite0, batch 32 x 3 x 224 x 224, in plain torch with the
structure of .cache/models/efficientnet-lite0.onnx (BatchNorm folded into conv biases, ReLU6,
TF "same" asymmetric padding on the stride-2 convs, no squeeze-excite), channels_last model and
input. --weights-from MODEL.onnx loads that model's weights (needs the onnx package), checking
every conv's shape, stride, pads and groups against the table; --ref REF.npz (inputs "in:*",
outputs "out:*") then compares the fp32 eager output with it and exits.

Weights are otherwise drawn at random: a dense model's time does not depend on the values.
Prints one JSON line per case: median and min milliseconds over --repeat timed runs (CUDA events,
after warm-up; wall clock with --device cpu), peak memory.
"""
import argparse, json, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, repeat, dev=torch.device("cuda"), warmup=10):
    """(median, min) milliseconds of fn over `repeat` runs after `warmup` untimed ones: CUDA
    events around each run on a GPU, wall clock on the CPU. benches/zoo_torch.py uses it too."""
    if dev.type != "cuda":
        fn()
        ms = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ms), min(ms)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(ms), min(ms)


def run_cases(model, call, dname, dev, args, extra=None):
    """Times call(model) eagerly, as a CUDA graph replay, and under torch.compile (default and
    reduce-overhead); the last two only without --no-compile, the CUDA graphs only on CUDA."""
    def eager():
        with torch.no_grad():
            return call(model)

    cases = [("eager", eager)]
    cuda = dev.type == "cuda"
    if cuda:
        # CUDA graph replay of the eager model.
        static = {}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                eager()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static["out"] = eager()
        cases.append(("cuda_graph", g.replay))
    if not args.no_compile:
        for mode in ["default", "reduce-overhead"] if cuda else ["default"]:
            t0 = time.time()
            cm = torch.compile(model, mode=mode)

            def comp(cm=cm):
                with torch.no_grad():
                    return call(cm)

            for _ in range(3):
                comp()
            if cuda:
                torch.cuda.synchronize()
            name = "compile" if mode == "default" else "compile_graph"
            cases.append((name, comp))
            print(json.dumps({"event": "compiled", "dtype": dname, "mode": mode, "s": round(time.time() - t0, 1)}),
                  flush=True)
    for name, fn in cases:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        med, mn = timed(fn, args.repeat, dev)
        rec = {"engine": f"torch_{name}", "dtype": dname, "median_ms": round(med, 4), "min_ms": round(mn, 4),
               "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
               "gpu": torch.cuda.get_device_name() if cuda else "cpu"}
        print(json.dumps({**rec, **(extra or {})}), flush=True)


def bench_bert(args, dev):
    """One of models/export_bert.py's configs (--model minilm, bert512 or bertbase)."""
    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
    from export_bert import CONFIGS, bert_config
    from transformers import BertModel

    cfg = bert_config(args.model)
    _, _, _, _, batch, seq = CONFIGS[args.model]
    ids = torch.randint(0, 30522, (batch, seq), device=dev)
    mask = torch.ones(batch, seq, dtype=torch.int64, device=dev)
    tt = torch.zeros(batch, seq, dtype=torch.int64, device=dev)
    extra = {"model": args.model, "batch": batch, "sequence": seq}
    for dname in args.dtypes.split(","):
        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dname]
        model = BertModel(cfg).to(dev, dtype).eval()
        # The attention mask as the additive 4-D mask BERT builds from it (all tokens valid):
        # transformers then adds it to the scores as given, with no host-side tensor per call,
        # which CUDA-graph capture requires.
        ext = torch.zeros(batch, 1, seq, seq, dtype=dtype, device=dev)
        ext.masked_fill_(mask[:, None, None, :] == 0, torch.finfo(dtype).min)
        run_cases(model, lambda m: m(input_ids=ids, attention_mask=ext, token_type_ids=tt).last_hidden_state,
                  dname, dev, args, extra)


# EfficientNet-Lite0 as in efficientnet-lite0.onnx. Stem: 3x3 stride-2 conv 3 -> 32, pads
# (0, 0, 1, 1). One row per MBConv block: (in, expand or None, out, kernel, stride, depthwise
# pads as ONNX's (top, left, bottom, right)); expand 1x1 -> ReLU6 -> depthwise kxk -> ReLU6 ->
# project 1x1 (no activation), + input when in == out and stride 1. Head: 1x1 conv 320 -> 1280,
# ReLU6, mean over H and W, Linear 1280 -> 1000. Every conv has a bias (BatchNorm folded).
EFFNET_LITE0_STEM = (3, 32, 3, 2, (0, 0, 1, 1))
EFFNET_LITE0_BLOCKS = [
    (32, None, 16, 3, 1, (1, 1, 1, 1)),
    (16, 96, 24, 3, 2, (0, 0, 1, 1)),
    (24, 144, 24, 3, 1, (1, 1, 1, 1)),
    (24, 144, 40, 5, 2, (1, 1, 2, 2)),
    (40, 240, 40, 5, 1, (2, 2, 2, 2)),
    (40, 240, 80, 3, 2, (0, 0, 1, 1)),
    (80, 480, 80, 3, 1, (1, 1, 1, 1)),
    (80, 480, 80, 3, 1, (1, 1, 1, 1)),
    (80, 480, 112, 5, 1, (2, 2, 2, 2)),
    (112, 672, 112, 5, 1, (2, 2, 2, 2)),
    (112, 672, 112, 5, 1, (2, 2, 2, 2)),
    (112, 672, 192, 5, 2, (1, 1, 2, 2)),
    (192, 1152, 192, 5, 1, (2, 2, 2, 2)),
    (192, 1152, 192, 5, 1, (2, 2, 2, 2)),
    (192, 1152, 192, 5, 1, (2, 2, 2, 2)),
    (192, 1152, 320, 3, 1, (1, 1, 1, 1)),
]
EFFNET_LITE0_HEAD = (320, 1280, 1000)


class PadConv(nn.Conv2d):
    """Conv2d with ONNX pads (top, left, bottom, right): an explicit F.pad when asymmetric."""

    def __init__(self, cin, cout, k, stride=1, pads=(0, 0, 0, 0), groups=1):
        sym = pads[0] == pads[2] and pads[1] == pads[3]
        super().__init__(cin, cout, k, stride, padding=(pads[0], pads[1]) if sym else 0, groups=groups, bias=True)
        self.onnx_pads = tuple(pads)
        self.fpad = None if sym else (pads[1], pads[3], pads[0], pads[2])

    def forward(self, x):
        return super().forward(x if self.fpad is None else F.pad(x, self.fpad))


class MBConv(nn.Module):
    def __init__(self, cin, exp, cout, k, stride, pads):
        super().__init__()
        mid = exp or cin
        self.expand = PadConv(cin, exp, 1) if exp else None
        self.dw = PadConv(mid, mid, k, stride, pads, groups=mid)
        self.project = PadConv(mid, cout, 1)
        self.residual = cin == cout and stride == 1

    def forward(self, x):
        y = F.relu6(self.expand(x)) if self.expand is not None else x
        y = self.project(F.relu6(self.dw(y)))
        return y + x if self.residual else y


class EfficientNetLite0(nn.Module):
    def __init__(self):
        super().__init__()
        cin, cout, k, s, pads = EFFNET_LITE0_STEM
        self.stem = PadConv(cin, cout, k, s, pads)
        self.blocks = nn.Sequential(*[MBConv(*b) for b in EFFNET_LITE0_BLOCKS])
        hin, hout, classes = EFFNET_LITE0_HEAD
        self.head = PadConv(hin, hout, 1)
        self.fc = nn.Linear(hout, classes)

    def forward(self, x):
        x = self.blocks(F.relu6(self.stem(x)))
        return self.fc(F.relu6(self.head(x)).mean((2, 3)))

    def load_onnx(self, path):
        """Copies the weights of an ONNX export of EfficientNet-Lite0, conv by conv in graph order,
        checking each conv's weight shape, strides, pads and groups against the table above."""
        import onnx
        from onnx import numpy_helper

        g = onnx.load(path).graph
        inits = {t.name: t for t in g.initializer}
        arr = lambda name: torch.from_numpy(numpy_helper.to_array(inits[name]).copy())
        convs = [m for m in self.modules() if isinstance(m, PadConv)]
        nodes = [n for n in g.node if n.op_type == "Conv"]
        assert len(nodes) == len(convs), (len(nodes), len(convs))
        for n, m in zip(nodes, convs):
            a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            w, b = arr(n.input[1]), arr(n.input[2])
            got = (tuple(w.shape), tuple(a.get("strides", [1, 1])), tuple(a.get("pads", [0] * 4)), a.get("group", 1))
            want = (tuple(m.weight.shape), m.stride, m.onnx_pads, m.groups)
            assert got == want, (n.output[0], got, want)
            m.weight.data.copy_(w)
            m.bias.data.copy_(b)
        (gemm,) = [n for n in g.node if n.op_type == "Gemm"]
        w, b = arr(gemm.input[1]), arr(gemm.input[2])
        assert tuple(w.shape) == tuple(self.fc.weight.shape), w.shape
        self.fc.weight.data.copy_(w)
        self.fc.bias.data.copy_(b)


def bench_efficientnet(args, dev):
    base = EfficientNetLite0().eval()
    if args.weights_from:
        base.load_onnx(args.weights_from)
    if args.ref:
        import numpy as np

        ref = np.load(args.ref)
        x = torch.from_numpy(ref[next(k for k in ref.files if k.startswith("in:"))])
        want = torch.from_numpy(ref[next(k for k in ref.files if k.startswith("out:"))])
        model = base.to(dev).to(memory_format=torch.channels_last)
        with torch.no_grad():
            got = model(x.to(dev).contiguous(memory_format=torch.channels_last)).cpu()
        diff = (got - want).abs().max().item()
        ok = diff <= 1e-4 * max(1.0, want.abs().max().item())
        print(json.dumps({"check": "efficientnet-lite0", "weights": args.weights_from, "ref": args.ref,
                          "max_abs_diff": diff, "max_abs_ref": want.abs().max().item(), "ok": ok}), flush=True)
        raise SystemExit(0 if ok else 1)
    x32 = torch.randn(32, 3, 224, 224, device=dev)
    extra = {"model": "efficientnet-lite0", "batch": 32, "layout": "channels_last", "tf32": False}
    for dname in args.dtypes.split(","):
        dtype = {"f32": torch.float32, "f16": torch.float16}[dname]
        model = EfficientNetLite0()
        model.load_state_dict(base.state_dict())
        model = model.to(dev, dtype).to(memory_format=torch.channels_last).eval()
        x = x32.to(dtype).contiguous(memory_format=torch.channels_last)
        run_cases(model, lambda m: m(x), dname, dev, args, extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["minilm", "bert512", "bertbase", "efficientnet"], default="minilm")
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (no CUDA graph cases)")
    ap.add_argument("--weights-from", help="efficientnet: load the weights of this ONNX model (needs onnx)")
    ap.add_argument("--ref", help="efficientnet: compare fp32 eager output with this .npz (in:*, out:*) and exit")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    (bench_efficientnet if args.model == "efficientnet" else bench_bert)(args, dev)


if __name__ == "__main__":
    main()
