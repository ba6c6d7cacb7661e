#!/usr/bin/env python3
"""One markdown table of a benches/zoo.sh run: per model its ONNX nodes and op types, and per
dtype the compile time and the result: the run's check error and median time where it ran,
"compiles" where it only compiled, or the op types without a GPU kernel (from compile's
one-line error). With torch timings (zoo.sh TORCH=1: OUT_DIR/<model>-torch.jsonl, lines of
benches/zoo_torch.py) two more columns per dtype: torch.compile + CUDA graph median ms, and
spartac's speed against it (torch ms / spartac ms: above 1 spartac is faster), then a row with
the geometric mean of that ratio over the models that have both times. Then the gaps over the
whole zoo: each op type with the models and nodes that need it.
usage: zoo_table.py ZOO_DIR OUT_DIR   (reads ZOO_DIR/<model>.onnx, OUT_DIR/<model>-<dtype>.*,
                                       OUT_DIR/<model>-torch.jsonl)
The op census needs the onnx package (protobuf parsing only); without it those columns are "?".
Tested by benches/test_zoo_table.py (fabricated inputs, no GPU).
"""
import glob, json, math, os, re, sys
from collections import Counter, defaultdict


def read(path):
    with open(path) as f:
        return f.read()


def op_census(path):
    try:
        import onnx
    except ImportError:
        return None
    g = onnx.load(path, load_external_data=False).graph
    return Counter(n.op_type for n in g.node)


def gaps_of(log):
    """{op type: nodes} from compile's 'has no GPU kernel yet: A (n nodes, ...), B (...)' line."""
    text = read(log) if os.path.exists(log) else ""
    m = re.search(r"no GPU kernel yet: (.*)", text)
    if not m:
        last = text.strip().splitlines()[-1:] or ["(no log)"]
        return None, last[0][-160:]
    return {op: int(n) for op, n in re.findall(r"(\w+) \((\d+) nodes?", m.group(1))}, None


def torch_times(out):
    """{(model, dtype): torch.compile + CUDA graph record} from OUT/<model>-torch.jsonl (lines
    without an engine, such as compile events, and unreadable lines are skipped)."""
    times = {}
    for path in sorted(glob.glob(os.path.join(out, "*-torch.jsonl"))):
        for line in read(path).splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("engine") == "torch_compile_graph" and "model" in rec:
                times[(rec["model"], rec.get("dtype"))] = rec
    return times


def spartac_ms(base):
    """The median ms of a run (OUT/<model>-<dtype>.run.json), or None."""
    if not os.path.exists(base + ".run.json"):
        return None
    ms = json.loads(read(base + ".run.json")).get("median_ms")
    return ms if isinstance(ms, (int, float)) and ms > 0 else None


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(zoo, out):
    """The table's lines."""
    lines = []
    rows = defaultdict(dict)
    for s in sorted(glob.glob(os.path.join(out, "*.status.json"))):
        st = json.loads(read(s))
        rows[st["model"]][st["dtype"]] = st
    torch = torch_times(out)
    for model, dtype in torch:
        rows[model].setdefault(dtype, None)
    dtypes = sorted({d for r in rows.values() for d in r}, key=lambda d: (d != "f32", d))
    with_torch = bool(torch)
    per_dtype = "{d} compile s | {d} result" + (" | {d} torch ms | {d} ×torch" if with_torch else "")
    lines.append("| model | nodes | op types | " + " | ".join(per_dtype.format(d=d) for d in dtypes) + " |")
    align = "---: | ---" + (" | ---: | ---:" if with_torch else "")
    lines.append("| --- | ---: | ---: | " + " | ".join(align for _ in dtypes) + " |")
    need = defaultdict(lambda: [0, set()])
    ratios = defaultdict(list)
    for model in sorted(rows):
        ops = op_census(os.path.join(zoo, model + ".onnx"))
        cells = [model, str(sum(ops.values())) if ops else "?", str(len(ops)) if ops else "?"]
        for d in dtypes:
            st = rows[model].get(d)
            base = os.path.join(out, f"{model}-{d}")
            if st is None:
                cells += ["", ""]
            else:
                result = "compiles"
                if st["status"] != "compiled":
                    gaps, other = gaps_of(base + ".compile.log")
                    if gaps is None:
                        result = f"error: {other}"
                    else:
                        result = "no GPU kernel: " + ", ".join(f"{op} ×{n}" for op, n in sorted(gaps.items()))
                        if d == dtypes[0]:
                            for op, n in gaps.items():
                                need[op][0] += n
                                need[op][1].add(model)
                elif os.path.exists(base + ".run.json"):
                    r = json.loads(read(base + ".run.json"))
                    errs = r.get("check_errors", {})
                    worst = max(errs.values()) if errs else float("nan")
                    result = f"{r.get('median_ms', float('nan')):.3f} ms, check {worst:.1e}"
                cells += [f"{st['compile_s']:.1f}", result]
            if with_torch:
                t = torch.get((model, d))
                if t is None:
                    cells += ["", ""]
                    continue
                t_ms = t.get("median_ms")
                if not isinstance(t_ms, (int, float)) or t_ms <= 0:
                    cells += [f"failed: {str(t.get('error', '?'))[:80]}", ""]
                    continue
                ours = spartac_ms(base) if st is not None and st["status"] == "compiled" else None
                ratio = t_ms / ours if ours else None
                if ratio is not None:
                    ratios[d].append(ratio)
                cells += [f"{t_ms:.3f}", f"{ratio:.2f}" if ratio is not None else ""]
        lines.append("| " + " | ".join(cells) + " |")
    if with_torch:
        cells = ["geometric mean", "", ""]
        for d in dtypes:
            g = geomean(ratios[d])
            cells += ["", "", "", f"{g:.2f} ({len(ratios[d])} models)" if g is not None else ""]
        lines.append("| " + " | ".join(cells) + " |")
    if need:
        lines.append("")
        lines.append(f"Op types without a GPU kernel ({dtypes[0]}), by the nodes that need them:")
        lines.append("")
        lines.append("| op type | nodes | models |")
        lines.append("| --- | ---: | --- |")
        for op, (n, models) in sorted(need.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"| {op} | {n} | {', '.join(sorted(models))} |")
    return lines


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print("\n".join(table(sys.argv[1], sys.argv[2])))


if __name__ == "__main__":
    main()
