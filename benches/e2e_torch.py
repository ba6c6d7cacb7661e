#!/usr/bin/env python3
"""PyTorch baselines for MiniLM-L6 (BERT: 6 layers, hidden 384, 12 heads, FFN 1536), batch 32 x
sequence 128, on one GPU: eager, CUDA-graph replay, torch.compile (default) and torch.compile
with CUDA graphs (mode="reduce-overhead"), in fp32 and fp16.

The model is transformers' BertModel with eager attention (plain MatMul + Softmax, as in the
ONNX export spartac compiles), built from MiniLM-L6's config. Its weights are drawn at random:
a dense model's time does not depend on the values. Prints one JSON line per case: median and
min milliseconds over --repeat timed runs (CUDA events, after warm-up), peak memory.
"""
import argparse, json, statistics, time
import torch


def timed(fn, repeat):
    for _ in range(10):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=1536, max_position_embeddings=512, attn_implementation="eager")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    ids = torch.randint(0, 30522, (32, 128), device=dev)
    mask = torch.ones(32, 128, dtype=torch.int64, device=dev)
    tt = torch.zeros(32, 128, dtype=torch.int64, device=dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for dname in args.dtypes.split(","):
        dtype = {"f32": torch.float32, "f16": torch.float16}[dname]
        model = BertModel(cfg).to(dev, dtype).eval()
        # The attention mask as the additive 4-D mask BERT builds from it (all tokens valid):
        # transformers then adds it to the scores as given, with no host-side tensor per call,
        # which CUDA-graph capture requires.
        ext = torch.zeros(32, 1, 128, 128, dtype=dtype, device=dev)
        ext.masked_fill_(mask[:, None, None, :] == 0, torch.finfo(dtype).min)

        def eager():
            with torch.no_grad():
                return model(input_ids=ids, attention_mask=ext, token_type_ids=tt).last_hidden_state

        cases = [("eager", eager)]
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
            for mode in ["default", "reduce-overhead"]:
                t0 = time.time()
                cm = torch.compile(model, mode=mode)

                def comp(cm=cm):
                    with torch.no_grad():
                        return cm(input_ids=ids, attention_mask=ext, token_type_ids=tt).last_hidden_state

                for _ in range(3):
                    comp()
                torch.cuda.synchronize()
                name = "compile" if mode == "default" else "compile_graph"
                cases.append((name, comp))
                print(json.dumps({"event": "compiled", "dtype": dname, "mode": mode, "s": round(time.time() - t0, 1)}),
                      flush=True)
        for name, fn in cases:
            torch.cuda.reset_peak_memory_stats()
            med, mn = timed(fn, args.repeat)
            print(json.dumps({"engine": f"torch_{name}", "dtype": dname, "median_ms": round(med, 4),
                              "min_ms": round(mn, 4), "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
                              "gpu": torch.cuda.get_device_name()}), flush=True)


if __name__ == "__main__":
    main()
