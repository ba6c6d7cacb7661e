"""spartac from Python: compile an ONNX model with TeSA sparsity, run it on the CPU or the GPU.

    import spartac
    art = spartac.compile("model.onnx", tesa="attrs.json", dtype="f16",
                          shapes={"input_ids": [32, 128]})
    art.save("model.sparta"); art = spartac.load("model.sparta")
    print(art)
    sess = spartac.Session(art, backend="cuda")          # or "cpu"
    out = sess.run({"input_ids": ids, "attention_mask": mask})
    spartac.hpec.run(neurons=1024, layers=120)           # dict, as `hpec run --json`

Everything runs in this process through the same code as the `spartac` command line (its
progress and summaries print the same way); a failure raises `spartac.Error` with the
command line's one-line message.

Inputs are numpy arrays (anything `numpy.asarray` takes; outputs come back as numpy) or, on a
"cuda" session, tensors on its GPU: torch CUDA tensors (outputs come back as torch tensors on
the same device) or any DLPack tensor (CuPy, JAX; outputs come back as `spartac.DeviceArray`,
itself a DLPack tensor). Device tensors never cross to the host: each run is device-to-device
copies around one CUDA-graph launch, queued on the caller's current torch stream (or the
`stream` given) and not waited for, as a torch operation is. `spartac.torch.compile` compiles a
torch module directly.
"""

import ast
import os
import json
import sys
import tempfile
from typing import Dict, Iterable, Optional, Union

import numpy as np

from . import _spartac

Error = _spartac.Error
DeviceArray = _spartac.DeviceArray

__all__ = ["Error", "Artifact", "Session", "DeviceArray", "compile", "load", "hpec", "cli"]

PathLike = Union[str, "os.PathLike[str]"]


def cli(*argv: str) -> None:
    """Runs one `spartac` command line in this process, e.g. `cli("inspect", "m.onnx")`."""
    _spartac.execute([os.fspath(a) for a in argv])


class Artifact:
    """A compiled model: the bytes of a `.sparta` file, checked."""

    def __init__(self, data: bytes, _signature=None):
        self._data = bytes(data)
        inputs, outputs = _signature if _signature is not None else _spartac.signature(self._data)
        self.inputs = {name: (dtype, tuple(shape)) for name, dtype, shape in inputs}
        self.outputs = {name: (dtype, tuple(shape)) for name, dtype, shape in outputs}

    def save(self, path: PathLike) -> None:
        """Writes the artifact to `path` (atomically: never a partial file)."""
        _spartac.save(self._data, os.fspath(path))

    def to_bytes(self) -> bytes:
        return self._data

    def __str__(self) -> str:
        return _spartac.summary(self._data)

    def __repr__(self) -> str:
        return f"<spartac.Artifact inputs={list(self.inputs)} outputs={list(self.outputs)}>"


def load(path: PathLike) -> Artifact:
    """Reads a `.sparta` file written by `spartac compile` or `Artifact.save`."""
    data, inputs, outputs = _spartac.load(os.fspath(path))
    return Artifact(data, (inputs, outputs))


def compile(
    model: PathLike,
    tesa: Optional[PathLike] = None,
    dtype: str = "f32",
    shapes: Optional[Dict[str, Iterable[int]]] = None,
    flags: Iterable[str] = (),
) -> Artifact:
    """`spartac compile` in this process: `model` (ONNX) with the TeSA file `tesa`, in
    `dtype` ("f32", "f16" or "bf16"), input shapes fixed by `shapes` (name -> dims), plus any
    other command-line `flags` (e.g. ["--no-ptx"])."""
    argv = ["compile", os.fspath(model), "--dtype", dtype]
    if tesa is not None:
        argv += ["--tesa", os.fspath(tesa)]
    for name, dims in (shapes or {}).items():
        argv += ["--input-shape", f"{name}={','.join(str(int(d)) for d in dims)}"]
    with tempfile.TemporaryDirectory(prefix="spartac-") as d:
        out = os.path.join(d, "model.sparta")
        _spartac.execute(argv + ["-o", out] + list(flags))
        return load(out)


def _npy(a) -> bytes:
    """`a` as `.npy` (version 1.0) bytes: the header, then the data in one copy (np.save into a
    BytesIO took 21 ms for 16 MB; this takes the one memcpy)."""
    a = np.asarray(a, order="C")
    if a.dtype.hasobject:
        raise TypeError("object arrays cannot be model inputs")
    header = repr({"descr": np.lib.format.dtype_to_descr(a.dtype), "fortran_order": False, "shape": a.shape})
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    head = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")
    return b"".join((head, memoryview(a).cast("B")))


_DTYPES = {"bool": np.bool_, "u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
           "u32": np.uint32, "i32": np.int32, "u64": np.uint64, "i64": np.int64, "f16": np.float16,
           "f32": np.float32, "f64": np.float64}


def _from_raw(dtype: str, shape, b: bytes) -> np.ndarray:
    """An output's raw little-endian bytes as a writable numpy array."""
    if dtype not in _DTYPES:
        raise Error(f"an output of type {dtype} has no numpy type")
    return np.frombuffer(b, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<")).reshape(shape).copy()


def _from_npy(b: bytes) -> np.ndarray:
    """The array of `.npy` bytes written by the extension (version 1.0, C order), as a
    writable numpy array."""
    if b[:6] != b"\x93NUMPY" or b[6] != 1:
        raise Error("an output is not .npy 1.0 data")
    end = 10 + int.from_bytes(b[8:10], "little")
    header = ast.literal_eval(b[10:end].decode("latin1"))
    dtype = np.lib.format.descr_to_dtype(header["descr"])
    return np.frombuffer(b, dtype=dtype, offset=end).reshape(header["shape"]).copy()


_TORCH_NAMES = ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16",
                "bfloat16", "float32", "float64")
_SPARTAC_NAMES = ("bool", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "bf16", "f32", "f64")


def _torch_types(torch):
    """torch dtype -> spartac dtype name and back (the types this torch has)."""
    to = {getattr(torch, t): s for t, s in zip(_TORCH_NAMES, _SPARTAC_NAMES) if hasattr(torch, t)}
    return to, {s: t for t, s in to.items()}


def _torch_stream(torch, device: int) -> int:
    """The handle of torch's current stream on `device`."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return int(raw(device)) if raw is not None else int(torch.cuda.current_stream(device).cuda_stream)


def _device_kind(a) -> Optional[str]:
    """"torch" for a torch CUDA tensor, "dlpack" for another tensor in GPU memory, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return "torch" if a.is_cuda else None
    if isinstance(a, np.ndarray):
        return None
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None and dev()[0] in (2, 13):  # kDLCUDA, kDLCUDAManaged
        return "dlpack"
    return None


def _host_array(name: str, a) -> np.ndarray:
    """A host input as a numpy array (torch CPU tensors and DLPack CPU tensors without a copy)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return a.detach().numpy()
    if not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__"):
        return np.from_dlpack(a)
    return np.asarray(a)


class Session:
    """An artifact ready to run on `backend` "cpu" (the CPU executor) or "cuda" (GPU `device`,
    its CUDA graph built once and replayed by every `run`)."""

    def __init__(self, artifact: Artifact, backend: str = "cpu", device: int = 0):
        if not isinstance(artifact, Artifact):
            raise TypeError("Session takes a spartac.Artifact (spartac.compile or spartac.load)")
        self.artifact = artifact
        self._session = _spartac.Session(artifact.to_bytes(), backend, int(device))
        self.device = int(device)
        self._torch = None  # (dtype maps, torch.device), made on the first torch run

    @property
    def backend(self) -> str:
        return self._session.backend

    def run(self, inputs: Dict[str, object], stream: Optional[int] = None) -> Dict[str, object]:
        """Runs on `inputs` (name -> array or tensor, dtype and shape as the artifact's inputs
        say); returns name -> output. Host arrays give numpy outputs (the run is waited for).
        On a "cuda" session, GPU tensors give device outputs: torch tensors for torch inputs,
        `DeviceArray`s otherwise; the run is queued on `stream` (a CUDA stream handle;
        default torch's current stream for torch inputs, else the legacy default stream)
        and not waited for."""
        kinds = [_device_kind(a) for a in inputs.values()]
        if any(kinds):
            if self.backend != "cuda":
                name = next(n for n, k in zip(inputs, kinds) if k)
                raise Error(f"input {name!r} is in GPU memory but this session runs on the CPU "
                            f"(make it with backend=\"cuda\", or pass host arrays)")
            return self._run_device(inputs, kinds, stream)
        pairs = [(str(name), _npy(_host_array(name, a))) for name, a in inputs.items()]
        return {name: _from_raw(dtype, shape, b) for name, dtype, shape, b in self._session.run(pairs)}

    def _run_device(self, inputs, kinds, stream):
        torch = sys.modules.get("torch")
        use_torch = "torch" in kinds
        if stream is None:
            stream = _torch_stream(torch, self.device) if use_torch else 0
        if use_torch and self._torch is None:
            self._torch = (*_torch_types(torch), torch.device("cuda", self.device))
        specs, keep = [], []
        for (name, a), kind in zip(inputs.items(), kinds):
            if kind == "torch":
                if a.device.index != self.device:
                    raise Error(f"input {name!r} is on cuda:{a.device.index}, the session on cuda:{self.device}")
                if not a.is_contiguous():
                    a = a.contiguous()
                    keep.append(a)
                dtype = self._torch[0].get(a.dtype)
                if dtype is None:
                    raise Error(f"input {name!r}: torch type {a.dtype} has no spartac type")
                specs.append((name, a.data_ptr(), dtype, list(a.shape)))
            elif kind == "dlpack":
                capsule = a.__dlpack__(stream=stream if stream else 1)  # 1: the legacy stream
                keep.append(capsule)
                ptr, dtype, shape, _, index, dense = _spartac.dlpack_info(capsule)
                if index != self.device:
                    raise Error(f"input {name!r} is on GPU {index}, the session on GPU {self.device}")
                if not dense:
                    raise Error(f"input {name!r} is strided: pass a contiguous (row-major) tensor")
                specs.append((name, ptr, dtype, shape))
            else:
                raise Error(f"input {name!r} is a host array but other inputs are in GPU memory: "
                            f"pass every input on the GPU, or every input on the host")
        if use_torch:
            _, from_spartac, device = self._torch
            outs = {name: torch.empty(shape, dtype=from_spartac[dtype], device=device)
                    for name, (dtype, shape) in self.artifact.outputs.items()}
            self._session.run_device(specs, [(n, t.data_ptr()) for n, t in outs.items()], stream)
            return outs
        return dict(self._session.run_device(specs, None, stream))


class hpec:
    """The HPEC Sparse DNN Challenge."""

    @staticmethod
    def run(neurons: int = 1024, layers: int = 120, backend: str = "auto", flags: Iterable[str] = ()) -> dict:
        """`spartac hpec run --json` in this process: the result as a dict (raises
        `spartac.Error` when the categories do not match the truth)."""
        argv = ["hpec", "run", "--json", "--backend", backend, "--layers", str(layers)]
        if neurons != 1024:
            argv += ["--neurons", str(neurons)]
        return json.loads(_spartac.execute_captured(argv + list(flags)))
