#!/usr/bin/env python3
"""PyTorch baselines for the HPEC Sparse DNN Challenge on one GPU, fp32.

Reads a network written by `spartac hpec generate --images` (n{N}-l{k}.tsv layers,
sparse-images-{N}.tsv, the truth file), repeats the images up to --count (image i is image
i mod n, as `spartac hpec run --repeat-images` does), and times inference from images on the
device to categories: every layer Y = clip(Y W + b, 0, 32) with the rows that turned all-zero
dropped after each layer, W dense (torch.mm) or CSR (cuSPARSE through torch.sparse.mm).
Prints one JSON line per engine: median ms over --repeat runs, categories, PASS/FAIL.
"""
import argparse, glob, json, os, re, statistics, time
import numpy as np
import torch


def read_tsv(path):
    a = np.loadtxt(path, dtype=np.float64, ndmin=2)
    return a[:, 0].astype(np.int64) - 1, a[:, 1].astype(np.int64) - 1, a[:, 2].astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--neurons", type=int, default=1024)
    ap.add_argument("--count", type=int, default=60000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.neurons
    files = sorted(glob.glob(os.path.join(args.dir, f"n{n}-l*.tsv")), key=lambda p: int(re.findall(r"-l(\d+)", p)[0]))
    bias = {1024: -0.3, 4096: -0.35, 16384: -0.4, 65536: -0.45}[n]
    dev = torch.device("cuda")
    dense, csr = [], []
    for f in files:
        r, c, v = read_tsv(f)
        w = torch.zeros(n, n, dtype=torch.float32)
        w[r, c] = torch.from_numpy(v)
        dense.append(w.to(dev))
        csr.append(w.t().contiguous().to_sparse_csr().to(dev))  # (W^T) for W^T Y^T
    r, c, v = read_tsv(os.path.join(args.dir, f"sparse-images-{n}.tsv"))
    base = int(r.max()) + 1
    x = torch.zeros(base, n, dtype=torch.float32)
    x[r, c] = torch.from_numpy(v)
    x = x.repeat((args.count + base - 1) // base, 1)[: args.count].to(dev)
    truth_file = glob.glob(os.path.join(args.dir, f"neuron{n}-l*-categories.tsv"))[0]
    base_truth = np.atleast_1d(np.loadtxt(truth_file, dtype=np.int64)) - 1
    truth = sorted(int(t) + k * base for k in range((args.count + base - 1) // base) for t in base_truth if t + k * base < args.count)

    def run(engine):
        y, ids = x, torch.arange(args.count, device=dev)
        for l in range(len(files)):
            if engine == "dense":
                z = y @ dense[l]
            else:
                z = torch.sparse.mm(csr[l], y.t().contiguous()).t()
            y = torch.clamp(z + bias, 0.0, 32.0)
            live = y.abs().sum(1) > 0
            y, ids = y[live], ids[live]
        return ids

    for engine in ["dense", "csr"]:
        ids = run(engine)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeat):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ids = run(engine)
            cats = ids.cpu()
            times.append(time.perf_counter() - t0)
        got = sorted(cats.tolist())
        print(json.dumps({"engine": f"torch {engine} fp32, dead rows dropped", "neurons": n, "layers": len(files),
                          "images": args.count, "ms": statistics.median(times) * 1e3, "categories": len(got),
                          "verdict": "PASS" if got == truth else "FAIL"}), flush=True)


if __name__ == "__main__":
    main()
