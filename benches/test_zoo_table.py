#!/usr/bin/env python3
"""benches/zoo_table.py on fabricated zoo.sh outputs (no GPU, no onnx package needed):
python3 benches/test_zoo_table.py"""
import json, os, sys, tempfile, unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_table


def write(path, obj):
    with open(path, "w") as f:
        if isinstance(obj, list):
            f.write("".join(json.dumps(o) + "\n" if not isinstance(o, str) else o + "\n" for o in obj))
        else:
            json.dump(obj, f)


class ZooTableTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        out = self.out = self.dir.name
        for m, d, status, ms in [("resnet50", "f32", "compiled", 4.0), ("resnet50", "f16", "compiled", 1.0),
                                 ("gpt2", "f32", "compiled", 8.0), ("gpt2", "f16", "compiled", None),
                                 ("swin_t", "f32", "failed", None)]:
            write(f"{out}/{m}-{d}.status.json", {"model": m, "dtype": d, "status": status, "compile_s": 2.5})
            if ms is not None:
                write(f"{out}/{m}-{d}.run.json", {"median_ms": ms, "check_errors": {"logits": 1e-6}})
        with open(f"{out}/swin_t-f32.compile.log", "w") as f:
            f.write("error: model has no GPU kernel yet: Roll (4 nodes), Foo (1 node)\n")
        gpu = {"gpu": "NVIDIA H200", "torch": "2.11.0"}
        write(f"{out}/resnet50-torch.jsonl", [
            {"event": "compiled", "model": "resnet50", "dtype": "f32", "s": 30.0},
            {"model": "resnet50", "dtype": "f32", "engine": "torch_eager", "median_ms": 9.0, **gpu},
            {"model": "resnet50", "dtype": "f32", "engine": "torch_compile_graph", "median_ms": 8.0, **gpu},
            {"model": "resnet50", "dtype": "f16", "engine": "torch_compile_graph", "median_ms": 0.5, **gpu},
            "not json: a warning torch printed",
        ])
        write(f"{out}/gpt2-torch.jsonl", [
            {"model": "gpt2", "dtype": "f32", "engine": "torch_compile_graph", "median_ms": 2.0, **gpu},
            {"model": "gpt2", "dtype": "f16", "engine": "torch_compile_graph", "error": "RuntimeError: boom"},
        ])

    def tearDown(self):
        self.dir.cleanup()

    def rows(self):
        lines = zoo_table.table(self.out, self.out)
        cells = [[c.strip() for c in l[1:-1].split("|")] for l in lines if l.startswith("|")]
        return {c[0]: c for c in cells}

    def test_torch_columns_and_ratios(self):
        rows = self.rows()
        header = rows["model"]
        self.assertEqual(header[3:7], ["f32 compile s", "f32 result", "f32 torch ms", "f32 ×torch"])
        self.assertEqual(header[7:11], ["f16 compile s", "f16 result", "f16 torch ms", "f16 ×torch"])
        r = rows["resnet50"]
        self.assertEqual(r[4], "4.000 ms, check 1.0e-06")
        self.assertEqual((r[5], r[6]), ("8.000", "2.00"))  # torch 8 ms / spartac 4 ms
        self.assertEqual((r[9], r[10]), ("0.500", "0.50"))
        g = rows["gpt2"]
        self.assertEqual((g[5], g[6]), ("2.000", "0.25"))
        self.assertEqual(g[8], "compiles")  # no run: no ratio
        self.assertTrue(g[9].startswith("failed: RuntimeError: boom"), g[9])
        self.assertEqual(g[10], "")
        self.assertIn("no GPU kernel: Foo ×1, Roll ×4", rows["swin_t"][4])

    def test_geometric_mean_over_models_with_both_times(self):
        mean = self.rows()["geometric mean"]
        self.assertEqual(mean[6], "0.71 (2 models)")  # sqrt(2.0 * 0.25)
        self.assertEqual(mean[10], "0.50 (1 models)")

    def test_without_torch_files_the_table_is_unchanged(self):
        for f in os.listdir(self.out):
            if f.endswith("-torch.jsonl"):
                os.remove(os.path.join(self.out, f))
        rows = self.rows()
        self.assertEqual(len(rows["model"]), 7)
        self.assertNotIn("geometric mean", rows)


if __name__ == "__main__":
    unittest.main()
