"""Shared fixtures' helper: a seeded synthetic MatMul (`spartac synth matmul`) as ONNX + TeSA."""

import spartac


def synth_matmul(directory, m, k, n, pattern, seed):
    """Writes `spartac synth matmul` into `directory`; returns (onnx path, TeSA path)."""
    onnx, tesa = str(directory / "mm.onnx"), str(directory / "mm.tesa.json")
    spartac.cli("synth", "matmul", "--m", str(m), "--k", str(k), "--n", str(n), "--pattern", pattern,
                "--seed", str(seed), "-o", onnx, "--tesa-out", tesa)
    return onnx, tesa
