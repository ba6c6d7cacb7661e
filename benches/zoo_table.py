#!/usr/bin/env python3
"""One markdown table of a benches/zoo.sh run: per model its ONNX nodes and op types, and per
dtype the compile time and the result: the run's check error and median time where it ran,
"compiles" where it only compiled, or the op types without a GPU kernel (from compile's
one-line error). Then the gaps over the whole zoo: each op type with the models and nodes that
need it.
usage: zoo_table.py ZOO_DIR OUT_DIR   (reads ZOO_DIR/<model>.onnx, OUT_DIR/<model>-<dtype>.*)
The op census needs the onnx package (protobuf parsing only); without it those columns are "?".
"""
import glob, json, os, re, sys
from collections import Counter, defaultdict


def op_census(path):
    try:
        import onnx
    except ImportError:
        return None
    g = onnx.load(path, load_external_data=False).graph
    return Counter(n.op_type for n in g.node)


def gaps_of(log):
    """{op type: nodes} from compile's 'has no GPU kernel yet: A (n nodes, ...), B (...)' line."""
    text = open(log).read() if os.path.exists(log) else ""
    m = re.search(r"no GPU kernel yet: (.*)", text)
    if not m:
        last = text.strip().splitlines()[-1:] or ["(no log)"]
        return None, last[0][-160:]
    return {op: int(n) for op, n in re.findall(r"(\w+) \((\d+) nodes?", m.group(1))}, None


def main():
    zoo, out = sys.argv[1], sys.argv[2]
    statuses = sorted(glob.glob(os.path.join(out, "*.status.json")))
    rows = defaultdict(dict)
    for s in statuses:
        st = json.load(open(s))
        rows[st["model"]][st["dtype"]] = st
    dtypes = sorted({d for r in rows.values() for d in r}, key=lambda d: (d != "f32", d))
    need = defaultdict(lambda: [0, set()])
    print("| model | nodes | op types | " + " | ".join(f"{d} compile s | {d} result" for d in dtypes) + " |")
    print("| --- | ---: | ---: | " + " | ".join("---: | ---" for _ in dtypes) + " |")
    for model in sorted(rows):
        ops = op_census(os.path.join(zoo, model + ".onnx"))
        cells = [model, str(sum(ops.values())) if ops else "?", str(len(ops)) if ops else "?"]
        for d in dtypes:
            st = rows[model].get(d)
            if st is None:
                cells += ["", ""]
                continue
            base = os.path.join(out, f"{model}-{d}")
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
                r = json.load(open(base + ".run.json"))
                errs = r.get("check_errors", {})
                worst = max(errs.values()) if errs else float("nan")
                result = f"{r.get('median_ms', float('nan')):.3f} ms, check {worst:.1e}"
            cells += [f"{st['compile_s']:.1f}", result]
        print("| " + " | ".join(cells) + " |")
    if need:
        print()
        print(f"Op types without a GPU kernel ({dtypes[0]}), by the nodes that need them:")
        print()
        print("| op type | nodes | models |")
        print("| --- | ---: | --- |")
        for op, (n, models) in sorted(need.items(), key=lambda kv: -kv[1][0]):
            print(f"| {op} | {n} | {', '.join(sorted(models))} |")


if __name__ == "__main__":
    main()
