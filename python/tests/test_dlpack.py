"""DLPack and torch on the CPU: the capsule reader on numpy's own capsules (legacy and
versioned, every dtype, strided views), DLPack and torch CPU tensors as Session inputs, the
errors that keep GPU tensors off a CPU session, and spartac.torch.compile against the module
(torch is optional: its tests need torch installed). The GPU paths (torch CUDA tensors in and
out, streams, DeviceArray) are python/tests/test_gpu.py, run in the GPU call."""

import numpy as np
import pytest

import spartac
from conftest import synth_matmul
from spartac import _spartac


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    onnx, tesa = synth_matmul(tmp_path_factory.mktemp("dl"), 8, 32, 16, "block8x8@0.5", 4)
    return spartac.compile(onnx, tesa=tesa, flags=["--no-ptx"])


@pytest.mark.parametrize("dtype,name", [(np.float32, "f32"), (np.float16, "f16"), (np.float64, "f64"),
                                        (np.int64, "i64"), (np.int32, "i32"), (np.int8, "i8"),
                                        (np.uint8, "u8"), (np.uint16, "u16"), (np.bool_, "bool")])
def test_the_capsule_reader_sees_what_numpy_exports(dtype, name):
    a = (np.arange(24) % 3).astype(dtype).reshape(2, 3, 4)
    for capsule in (a.__dlpack__(), a.__dlpack__(max_version=(1, 0))):
        ptr, got, shape, device_type, device_id, dense = _spartac.dlpack_info(capsule)
        assert (ptr, got, shape, device_type, device_id, dense) == (a.ctypes.data, name, [2, 3, 4], 1, 0, True)


def test_strided_views_and_offsets_are_told_apart():
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    ptr, _, shape, _, _, dense = _spartac.dlpack_info(a[:, ::2].__dlpack__())
    assert shape == [6, 4] and not dense and ptr == a.ctypes.data
    ptr, _, shape, _, _, dense = _spartac.dlpack_info(a[2:4].__dlpack__())
    assert shape == [2, 8] and dense and ptr == a.ctypes.data + 2 * 8 * 4
    ptr, _, shape, _, _, dense = _spartac.dlpack_info(a.T.__dlpack__())
    assert shape == [8, 6] and not dense
    # Size-1 dimensions may carry any stride.
    _, _, shape, _, _, dense = _spartac.dlpack_info(a[3:4, :].__dlpack__())
    assert shape == [1, 8] and dense
    _, _, shape, _, _, dense = _spartac.dlpack_info(np.array(1.5, np.float32).__dlpack__())
    assert shape == [] and dense


def test_not_a_capsule_is_a_clear_error():
    with pytest.raises(spartac.Error, match="DLPack capsule"):
        _spartac.dlpack_info(object())
    with pytest.raises(spartac.Error, match="DLPack capsule"):
        _spartac.dlpack_info(b"dltensor")


class OnlyDlpack:
    """A tensor known only through the DLPack protocol (as a CuPy or JAX array is)."""

    def __init__(self, a, device=(1, 0)):
        self.a, self.device = a, device

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.device


def test_a_cpu_session_takes_dlpack_tensors_and_refuses_gpu_ones(artifact):
    (name, (_, shape)), = artifact.inputs.items()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    sess = spartac.Session(artifact)
    want = sess.run({name: x})
    got = sess.run({name: OnlyDlpack(x)})
    assert [v.tobytes() for v in got.values()] == [v.tobytes() for v in want.values()]
    with pytest.raises(spartac.Error, match="GPU memory but this session runs on the CPU"):
        sess.run({name: OnlyDlpack(x, device=(2, 0))})
    with pytest.raises(spartac.Error, match="backend"):
        sess._session.run_device([(name, 0, "f32", list(shape))], None, 0)


def test_torch_cpu_tensors_run_and_spartac_torch_compile_matches_the_module(artifact):
    torch = pytest.importorskip("torch")
    import spartac.torch as st
    (name, (_, shape)), = artifact.inputs.items()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    sess = spartac.Session(artifact)
    (y_t,), (y_n,) = sess.run({name: x}).values(), sess.run({name: x.numpy()}).values()
    assert y_t.tobytes() == y_n.tobytes()

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).eval()
    inp = torch.randn(8, 32)
    fast = st.compile(mlp, (inp,), flags=["--no-ptx"])
    assert fast.session.backend == "cpu"
    for seed in range(3):
        z = torch.randn(8, 32, generator=torch.Generator().manual_seed(10 + seed))
        got, want = fast(z), mlp(z).detach()
        assert isinstance(got, torch.Tensor) and got.shape == want.shape
        assert float((got - want).abs().max() / want.abs().max()) < 1e-5
    with pytest.raises(TypeError, match="takes 1 tensors"):
        fast(z, z)
