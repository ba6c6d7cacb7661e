"""The GPU paths of the package (skipped where no GPU answers: CI has none; the GPU call runs
them, benches/results/e2e_gpu.md): torch CUDA tensors in and torch tensors out on torch's
current stream, runs from several streams kept in order, DLPack tensors from a producer other
than torch (outputs as spartac.DeviceArray), every result against the numpy path's bits, and
spartac.torch.compile on the GPU."""

import numpy as np
import pytest

import spartac
from conftest import synth_matmul

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    onnx, tesa = synth_matmul(tmp_path_factory.mktemp("gpu"), 256, 512, 384, "block32x32@0.75", 9)
    return spartac.compile(onnx, tesa=tesa, dtype="f16")


@pytest.fixture(scope="module")
def sess(art):
    return spartac.Session(art, backend="cuda")


def inputs(art, seed):
    """The model's input (an f16 model keeps an f32 interface) with seeded values."""
    (name, (dtype, shape)), = art.inputs.items()
    assert dtype == "f32"
    g = torch.Generator().manual_seed(seed)
    return name, torch.randn(*shape, generator=g)


def test_torch_tensors_in_and_out_equal_the_numpy_path(art, sess):
    name, x = inputs(art, 1)
    want = sess.run({name: x.numpy()})
    got = sess.run({name: x.cuda()})
    assert list(got) == list(want)
    for k, t in got.items():
        assert isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.float32
        assert t.cpu().numpy().tobytes() == want[k].tobytes()


def test_runs_from_several_streams_stay_in_order(art, sess):
    xs = [inputs(art, 10 + i)[1].cuda() for i in range(8)]
    name = next(iter(art.inputs))
    want = [next(iter(sess.run({name: x.cpu().numpy()}).values())) for x in xs]
    streams = [torch.cuda.Stream() for _ in range(3)]
    outs = []
    for i, x in enumerate(xs):
        s = streams[i % 3]
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            outs.append(next(iter(sess.run({name: x}).values())))
    torch.cuda.synchronize()
    for got, w in zip(outs, want):
        assert got.cpu().numpy().tobytes() == w.tobytes()
    # A host run right after stream runs sees them finished.
    y = next(iter(sess.run({name: xs[0]}).values()))
    again = next(iter(sess.run({name: xs[1].cpu().numpy()}).values()))
    assert again.tobytes() == want[1].tobytes()
    torch.cuda.synchronize()
    assert y.cpu().numpy().tobytes() == want[0].tobytes()


class OnlyDlpack:
    """A GPU tensor known only through DLPack (as a CuPy or JAX array is)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, **kw):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_dlpack_tensors_give_device_arrays(art, sess):
    name, x = inputs(art, 3)
    want = next(iter(sess.run({name: x.numpy()}).values()))
    out = sess.run({name: OnlyDlpack(x.cuda())})
    (a,) = out.values()
    assert isinstance(a, spartac.DeviceArray) and a.dtype == "f32" and tuple(a.shape) == want.shape
    assert np.asarray(a).tobytes() == want.tobytes()
    t = torch.from_dlpack(a)
    assert t.is_cuda and t.cpu().numpy().tobytes() == want.tobytes()
    del a, out
    torch.cuda.synchronize()
    assert t.cpu().numpy().tobytes() == want.tobytes(), "the exported memory outlives the DeviceArray"


def test_strided_wrong_device_and_mixed_inputs_are_handled(art, sess):
    name, x = inputs(art, 4)
    want = next(iter(sess.run({name: x.numpy()}).values()))
    wide = torch.zeros(x.shape[0], 2 * x.shape[1], device="cuda")
    wide[:, ::2] = x.cuda()
    got = next(iter(sess.run({name: wide[:, ::2]}).values()))
    assert got.cpu().numpy().tobytes() == want.tobytes(), "a strided torch tensor is made contiguous"
    with pytest.raises(spartac.Error, match="strided"):
        sess.run({name: OnlyDlpack(wide[:, ::2])})
    with pytest.raises(spartac.Error, match="expects f32"):
        sess.run({name: x.half().cuda()})
    with pytest.raises(spartac.Error, match="unknown input"):
        sess.run({name: x.cuda(), "other": x.cuda()})


def test_spartac_torch_compile_on_the_gpu():
    import spartac.torch as st
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).half().cuda().eval()
    x = torch.randn(64, 256, device="cuda").half()
    fast = st.compile(mlp, (x,))
    assert fast.session.backend == "cuda"
    got, want = fast(x), mlp(x)
    assert got.is_cuda and got.dtype == torch.float16 and got.shape == want.shape
    assert float((got.float() - want.float()).abs().max() / want.float().abs().max()) < 1e-2
