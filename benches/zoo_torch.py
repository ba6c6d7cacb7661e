#!/usr/bin/env python3
"""PyTorch on one GPU for the model zoo: per model named on the command line, the module, inputs
and shapes of models/zoo.py's build(name) (exactly what zoo.py exports to ONNX), timed eagerly
and under torch.compile with CUDA graphs (mode="reduce-overhead"), in each requested dtype (f32
with TF32 off in cuBLAS and cuDNN, as spartac computes exact fp32; f16; bf16). Vision models and
their inputs are channels_last unless --layout nchw (spartac runs convolutions in NHWC).

usage: zoo_torch.py MODEL [MODEL ...] [--dtypes f32,f16] [--repeat 100] [--engines eager,compile_graph]
       zoo_torch.py --build-only MODEL ...   (no GPU: builds each model, one JSON line each)

Prints one JSON line per (model, engine, dtype): model, engine (torch_eager, torch_compile_graph),
dtype, median_ms and min_ms over --repeat timed runs (CUDA events, after warm-up), peak_mib,
gpu, layout, batch, and the torch / torchvision / transformers versions; a case that fails
prints the same keys with "error" (one line) instead of times, and the others still run. Lines
with "event" record torch.compile's time. benches/zoo.sh (TORCH=1) writes them to
OUT/<model>-torch.jsonl, benches/zoo_table.py reads them.

Weights are random (seed 0), as in the export: a dense model's time does not depend on their
values. On the GPU machine torchvision may be older than the export's pin (0.26 there, 0.29.2
here); build() uses only API that 0.26 has, and EfficientNet-Lite0, whose pinned package is
not installed there, falls back to benches/e2e_torch.py's replica of its exported structure
("source" says which ran).
"""
import argparse, json, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ("f32", "f16", "bf16")
ENGINES = ("eager", "compile_graph")


def fail(msg):
    """One clear line on stderr, exit status 1."""
    print(f"zoo_torch.py: {msg}", file=sys.stderr)
    raise SystemExit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Times the zoo models (models/zoo.py's build) in PyTorch on CUDA: eager and "
                    "torch.compile(mode='reduce-overhead'); one JSON line per (model, engine, dtype).")
    ap.add_argument("models", nargs="+", help="zoo model names (models/zoo.py --list)")
    ap.add_argument("--dtypes", default="f32,f16", help="comma-separated: f32, f16, bf16 (default f32,f16)")
    ap.add_argument("--engines", default="eager,compile_graph",
                    help="comma-separated: eager, compile_graph (default both)")
    ap.add_argument("--repeat", type=int, default=100, help="timed runs per case (default 100)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs before timing (default 10)")
    ap.add_argument("--layout", choices=["channels_last", "nchw"], default="channels_last",
                    help="vision models' memory format (default channels_last)")
    ap.add_argument("--build-only", action="store_true",
                    help="no GPU: build each model and print its parameters and inputs")
    args = ap.parse_args(argv)
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    args.engines = [e for e in args.engines.split(",") if e]
    bad = [d for d in args.dtypes if d not in DTYPES] + [e for e in args.engines if e not in ENGINES]
    if bad or not args.dtypes or not args.engines:
        fail(f"unknown dtype or engine {', '.join(bad) or '(none given)'} (dtypes: {', '.join(DTYPES)}; "
             f"engines: {', '.join(ENGINES)})")
    if args.repeat < 1 or args.warmup < 0:
        fail("--repeat must be at least 1 and --warmup at least 0")
    return args


def import_zoo():
    sys.path.insert(0, os.path.join(HERE, "..", "models"))
    import zoo

    return zoo


def build(zoo, name):
    """(module, inputs, source) of zoo model `name`: zoo.build's, or for EfficientNet-Lite0
    without its pinned package, e2e_torch.py's replica of the exported structure."""
    try:
        model, inputs, _, _ = zoo.build(name)
        return model, inputs, "models/zoo.py"
    except ImportError as e:
        if name != "efficientnet_lite0":
            raise
        import torch

        sys.path.insert(0, HERE)
        from e2e_torch import EfficientNetLite0

        print(f"zoo_torch.py: efficientnet_lite0: {e}; timing e2e_torch.py's replica of its structure",
              file=sys.stderr)
        return EfficientNetLite0(), (torch.randn(zoo.VISION_BATCH, 3, 224, 224),), "benches/e2e_torch.py replica"


def versions():
    import torch

    out = {"torch": torch.__version__}
    for mod in ("torchvision", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    return out


def timed(fn, repeat, warmup):
    """(median, min) milliseconds of fn over `repeat` runs on the GPU: e2e_torch.py's timer."""
    sys.path.insert(0, HERE)
    from e2e_torch import timed as e2e_timed

    return e2e_timed(fn, repeat, warmup=warmup)


def one_line(e):
    text = f"{type(e).__name__}: {e}".replace("\n", " ").strip()
    return text[:300]


def bench_model(zoo, name, args, base):
    import torch

    kind = zoo.MODELS[name][0]
    for dname in args.dtypes:
        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dname]
        torch.manual_seed(0)
        rec = {"model": name, "dtype": dname, **base}
        try:
            model, inputs, source = build(zoo, name)
            channels_last = kind == "vision" and args.layout == "channels_last"
            model = model.eval().to("cuda", dtype)
            if channels_last:
                model = model.to(memory_format=torch.channels_last)
            xs = []
            for x in inputs:
                x = x.to("cuda", dtype) if x.is_floating_point() else x.to("cuda")
                xs.append(x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 else x)
        except Exception as e:  # the model did not build: every engine of this dtype fails alike
            for engine in args.engines:
                print(json.dumps({**rec, "engine": f"torch_{engine}", "error": one_line(e)}), flush=True)
            continue
        rec.update({"source": source, "layout": "channels_last" if channels_last else "nchw",
                    "batch": int(inputs[0].shape[0])})
        for engine in args.engines:
            out = {**rec, "engine": f"torch_{engine}"}
            try:
                if engine == "eager":
                    fn_model = model
                else:
                    torch._dynamo.reset()
                    t0 = time.time()
                    fn_model = torch.compile(model, mode="reduce-overhead")

                def fn(m=fn_model):
                    with torch.no_grad():
                        return m(*xs)

                if engine != "eager":
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                    print(json.dumps({"event": "compiled", "model": name, "dtype": dname, "mode": "reduce-overhead",
                                      "s": round(time.time() - t0, 1)}), flush=True)
                torch.cuda.reset_peak_memory_stats()
                med, mn = timed(fn, args.repeat, args.warmup)
                out.update({"median_ms": round(med, 4), "min_ms": round(mn, 4),
                            "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1)})
            except Exception as e:
                out["error"] = one_line(e)
            print(json.dumps(out), flush=True)
        del model, xs
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def build_only(zoo, names):
    import torch

    for name in names:
        torch.manual_seed(0)
        try:
            model, inputs, source = build(zoo, name)
        except Exception as e:
            print(json.dumps({"model": name, "error": one_line(e)}), flush=True)
            continue
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"model": name, "source": source, "params": params,
                          "inputs": [[list(x.shape), str(x.dtype).replace("torch.", "")] for x in inputs]}), flush=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        fail(f"cannot import torch ({e}); on this machine set PYTHONPATH=.cache/py-torch")
    zoo = import_zoo()
    unknown = [n for n in args.models if n not in zoo.MODELS]
    if unknown:
        fail(f"unknown model(s) {', '.join(unknown)}; models/zoo.py --list names them")
    if args.build_only:
        return build_only(zoo, args.models)
    if not torch.cuda.is_available():
        fail(f"CUDA is not available (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
             "it times models on a GPU only (--build-only checks the models without one)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    base = {"gpu": torch.cuda.get_device_name(), **versions()}
    for name in args.models:
        bench_model(zoo, name, args, base)


if __name__ == "__main__":
    main()
