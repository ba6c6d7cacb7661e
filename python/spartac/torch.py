"""spartac.torch: compile a torch module with spartac without touching ONNX files.

    import torch, spartac.torch
    fast = spartac.torch.compile(model, (ids, mask), tesa="attrs.json")
    y = fast(ids, mask)          # same signature as model(ids, mask)

`compile` exports the module with torch's ONNX exporter (opset 18, static shapes: the example
inputs' shapes; torch's exporter needs the `onnxscript` package), compiles it with
`spartac.compile` and returns a callable. The precision follows the module's parameters
(float16 -> "f16", bfloat16 -> "bf16", else "f32") unless `dtype` says otherwise; the export
itself runs on a float32 copy on the CPU (spartac lowers to the precision). The callable runs on
the GPU of the example inputs (torch tensors in and out, on torch's current stream, no host
copy) or on the CPU executor when they are on the CPU. Inputs are cast to the compiled model's
input types and outputs back to the module's (a model compiled to f16 keeps f32 inputs and
outputs at its boundary).
"""

import copy
import os
import tempfile
from typing import Iterable, Optional, Sequence, Union

try:
    import torch
except ImportError as e:  # the package itself does not need torch
    raise ImportError("spartac.torch needs PyTorch installed (pip install torch)") from e

from . import Error, Session, _torch_types
from . import compile as _compile

__all__ = ["compile", "Compiled"]


class Compiled:
    """A compiled torch module: call it as the module (positional tensors, the example
    inputs' shapes); returns a tensor, or a tuple when the module returns several."""

    def __init__(self, artifact, names: Sequence[str], session: Session, out_dtypes: Sequence = ()):
        self.artifact = artifact
        self.session = session
        self._names = list(names)
        # The module's output types (an f16 model keeps an f32 interface: cast back).
        self._out_dtypes = list(out_dtypes)
        self._to, self._from = _torch_types(torch)
        self._device = torch.device("cuda", session.device) if session.backend == "cuda" else torch.device("cpu")

    def __call__(self, *args):
        if len(args) != len(self._names):
            raise TypeError(f"the compiled module takes {len(self._names)} tensors, {len(args)} given")
        feed = {}
        for name, x in zip(self._names, args):
            spec = self.artifact.inputs.get(name)
            if spec is None:  # an input the exported graph does not use
                continue
            if not isinstance(x, torch.Tensor):
                x = torch.as_tensor(x)
            want = self._from[spec[0]]
            if x.dtype != want or x.device != self._device:
                x = x.to(device=self._device, dtype=want)
            feed[name] = x
        if self.session.backend == "cuda":
            out = self.session.run(feed)
        else:
            out = {k: torch.from_numpy(v) for k, v in self.session.run({k: v.detach() for k, v in feed.items()}).items()}
        values = [out[name] for name in self.artifact.outputs]
        if len(self._out_dtypes) == len(values):
            values = [v if v.dtype == d else v.to(d) for v, d in zip(values, self._out_dtypes)]
        return values[0] if len(values) == 1 else tuple(values)

    def __repr__(self) -> str:
        return f"<spartac.torch.Compiled on {self._device} inputs={self._names}>"


def compile(
    module: torch.nn.Module,
    example_inputs: Union[torch.Tensor, Sequence[torch.Tensor]],
    tesa: Optional[Union[str, "os.PathLike[str]"]] = None,
    dtype: Optional[str] = None,
    backend: Optional[str] = None,
    flags: Iterable[str] = (),
) -> Compiled:
    """Exports `module` called on `example_inputs`, compiles it with the TeSA file `tesa`
    (sparsity of its weights: `spartac compile --tesa`), and returns the callable. `dtype`
    ("f32", "f16", "bf16") defaults to the parameters' precision; `backend` ("cuda", "cpu")
    to where the example inputs are; `flags` are more `spartac compile` options."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("example_inputs must be torch tensors")
    params = [p for p in module.parameters()]
    if dtype is None:
        first = params[0].dtype if params else torch.float32
        dtype = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(first, "f32")
    cuda = [x.device for x in example_inputs if x.is_cuda] + [p.device for p in params if p.is_cuda]
    if backend is None:
        backend = "cuda" if cuda else "cpu"
    device = cuda[0].index if cuda else 0
    names = [f"input_{i}" for i in range(len(example_inputs))]
    with torch.no_grad():
        reference = module(*example_inputs)
    flat = [reference] if isinstance(reference, torch.Tensor) else list(reference)
    out_dtypes = [t.dtype for t in flat if isinstance(t, torch.Tensor)]
    exported = copy.deepcopy(module).to("cpu").float().eval()
    xs = tuple(x.detach().to("cpu").float() if x.is_floating_point() else x.detach().to("cpu") for x in example_inputs)
    with tempfile.TemporaryDirectory(prefix="spartac-torch-") as d:
        path = os.path.join(d, "model.onnx")
        try:
            with torch.no_grad():
                program = torch.onnx.export(exported, xs, dynamo=True, opset_version=18, input_names=names)
            program.save(path)
        except Exception as e:  # the exporter's many failure types
            raise Error(f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        artifact = _compile(path, tesa=tesa, dtype=dtype, flags=flags)
    return Compiled(artifact, names, Session(artifact, backend=backend, device=device), out_dtypes)
