//! `spartac._spartac`: the Rust side of the `spartac` Python package.
//!
//! Everything the CLI does runs in this process through [`spartac_cli::execute`] (the same
//! code, the same one-line errors, raised as `spartac.Error`); artifacts are decoded with the
//! compiler's checks; a [`Session`] keeps a decoded artifact (and, on the GPU, its loaded
//! program and CUDA graph) between runs. Arrays cross as `.npy` bytes, parsed and written by
//! the same code as the CLI's `.npz` files, so a Python run and a CLI run see identical inputs.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use spartac::ir::DType;
use spartac::program::artifact::{decode, Artifact};
use spartac::program::model::ModelProgram;
use spartac_runtime::exec::external::{DeviceMemory, DeviceTensor, Event};
use spartac_runtime::exec::model::{run_cpu, GpuModel};
use std::collections::BTreeMap;

mod dlpack;

create_exception!(_spartac, Error, PyException, "A spartac failure: the CLI's one-line message.");

pub(crate) fn err(message: impl std::fmt::Display) -> PyErr {
    let m = message.to_string();
    Error::new_err(m.strip_prefix("error: ").map(str::to_string).unwrap_or(m))
}

/// Runs one `spartac` command line (without the program name) in this process, the GIL
/// released; raises `spartac.Error` with its one-line message when it fails.
#[pyfunction]
fn execute(py: Python<'_>, argv: Vec<String>) -> PyResult<()> {
    let result = py.detach(move || spartac_cli::execute(std::iter::once("spartac".to_string()).chain(argv)));
    result.map(|_| ()).map_err(|f| err(f.message))
}

/// [`execute`], returning what the command printed to standard output (for `--json`).
#[pyfunction]
fn execute_captured(py: Python<'_>, argv: Vec<String>) -> PyResult<String> {
    let (result, out) = py
        .detach(move || capture_stdout(|| spartac_cli::execute(std::iter::once("spartac".to_string()).chain(argv))))
        .map_err(err)?;
    result.map_err(|f| err(f.message))?;
    Ok(out)
}

/// Runs `f` with file descriptor 1 pointed at a temporary file; returns its result and what
/// was written there. The descriptor is restored whatever `f` returns.
fn capture_stdout<T>(f: impl FnOnce() -> T) -> Result<(T, String), String> {
    use std::io::{Read, Seek, Write};
    let mut file = tempfile_in_tmp().map_err(|e| format!("capturing the output: {e}"))?;
    std::io::stdout().flush().ok();
    // SAFETY: plain descriptor calls; 1 is restored from the saved copy below.
    let saved = unsafe { libc::dup(1) };
    if saved < 0 {
        return Err("capturing the output: dup failed".into());
    }
    // SAFETY: the file's descriptor is open for writing for the whole call.
    unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 1) };
    let value = f();
    std::io::stdout().flush().ok();
    // SAFETY: saved is the original descriptor 1, duplicated above.
    unsafe {
        libc::dup2(saved, 1);
        libc::close(saved);
    }
    let mut out = String::new();
    file.rewind().and_then(|_| file.read_to_string(&mut out)).map_err(|e| format!("reading the output: {e}"))?;
    Ok((value, out))
}

/// An anonymous temporary file (unlinked at once).
fn tempfile_in_tmp() -> std::io::Result<std::fs::File> {
    let dir = std::env::temp_dir();
    for i in 0..100u32 {
        let path = dir.join(format!("spartac-py-{}-{i}", std::process::id()));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
            Ok(f) => {
                std::fs::remove_file(&path)?;
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary file name"))
}

fn decode_bytes(data: &[u8]) -> PyResult<Artifact> {
    decode(data).map_err(|e| err(format!("not a valid spartac artifact: {e}")))
}

/// An artifact's inputs or outputs as `(name, dtype, shape)`.
type SignatureList = Vec<(String, String, Vec<usize>)>;

fn signature_of(art: &Artifact) -> (SignatureList, SignatureList) {
    let list = |s: &[spartac::program::model::Signature]| {
        s.iter().map(|x| (x.name.clone(), x.dtype.name().to_string(), x.shape.clone())).collect()
    };
    (list(&art.model.inputs), list(&art.model.outputs))
}

/// Reads and checks an artifact file (decoded once); returns its bytes, inputs and outputs.
#[pyfunction]
fn load<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
) -> PyResult<(Bound<'py, PyBytes>, SignatureList, SignatureList)> {
    spartac::contained::check_regular(&path).map_err(|e| err(format!("reading {}: {e}", path.display())))?;
    let data = std::fs::read(&path).map_err(|e| err(format!("reading {}: {e}", path.display())))?;
    let art = decode(&data).map_err(|e| err(format!("{}: {e}", path.display())))?;
    let (inputs, outputs) = signature_of(&art);
    Ok((PyBytes::new(py, &data), inputs, outputs))
}

/// Writes artifact bytes to `path` atomically (never a partial file).
#[pyfunction]
fn save(data: &[u8], path: std::path::PathBuf) -> PyResult<()> {
    decode_bytes(data)?;
    spartac::output::write_atomic(&path, data).map_err(|e| err(format!("writing {}: {e}", path.display())))
}

fn dims(shape: &[usize]) -> String {
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

/// The inputs and outputs of an artifact: `(inputs, outputs)`, each a list of
/// `(name, dtype, shape)`.
#[pyfunction]
fn signature(data: &[u8]) -> PyResult<(SignatureList, SignatureList)> {
    Ok(signature_of(&decode_bytes(data)?))
}

/// A short description of an artifact (what `spartac inspect` opens with).
#[pyfunction]
fn summary(data: &[u8]) -> PyResult<String> {
    let art = decode_bytes(data)?;
    let p = &art.model.program;
    let mut s = format!("spartac artifact (program {})\ninputs:\n", p.name);
    for i in &art.model.inputs {
        s += &format!("  {:<32} {}[{}]\n", i.name, i.dtype.name(), dims(&i.shape));
    }
    s += "outputs:\n";
    for o in &art.model.outputs {
        s += &format!("  {:<32} {}[{}]\n", o.name, o.dtype.name(), dims(&o.shape));
    }
    s += &format!(
        "steps: {} ({} distinct kernels; PTX for {} of them); device memory {:.1} MiB",
        p.steps.len(),
        p.kernels.len(),
        art.ptx.len(),
        p.device_bytes() as f64 / (1 << 20) as f64
    );
    Ok(s)
}

/// A compiled model ready to run: on the CPU executor, or loaded on a GPU (its CUDA graph
/// built once and replayed by every run).
#[pyclass(unsendable)]
struct Session {
    model: ModelProgram,
    gpu: Option<GpuModel>,
    device: usize,
}

/// A dtype by its spartac name.
fn dtype_named(name: &str) -> PyResult<DType> {
    use DType::*;
    [Bool, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64]
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| err(format!("unknown element type {name:?}")))
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (data, backend, device=0))]
    fn new(data: &[u8], backend: &str, device: usize) -> PyResult<Session> {
        let Artifact { model, ptx } = decode_bytes(data)?;
        let gpu = match backend {
            "cpu" => None,
            "cuda" => {
                let dev = spartac_runtime::cuda::CudaDevice::open(device)
                    .map_err(|e| err(format!("backend \"cuda\": GPU {device} did not answer: {e}")))?;
                let dev = std::sync::Arc::new(dev);
                let arch = dev.arch().to_string();
                spartac_runtime::exec::cuda::seed_artifact_ptx(&model.program, &ptx, &arch);
                Some(GpuModel::load(dev, model.clone()).map_err(err)?)
            }
            other => return Err(err(format!("unknown backend {other:?} (choose \"cpu\" or \"cuda\")"))),
        };
        Ok(Session { model, gpu, device })
    }

    /// The GPU index (for "cuda").
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// Times `runs` back-to-back launches of the program's own graph (no copies; what
    /// `spartac run --repeat` reports): the median milliseconds.
    fn _time_graph(&mut self, runs: usize) -> PyResult<f64> {
        let Some(gm) = &mut self.gpu else {
            return Err(err("timing the graph needs a session on backend \"cuda\""));
        };
        let t = gm.time_graph(runs.max(1)).map_err(err)?;
        Ok(spartac_runtime::cuda::median(&t))
    }

    /// One run on device tensors, queued on `stream` (a CUstream handle of this GPU; 0 the
    /// legacy default stream) and not waited for. `inputs` are `(name, address, dtype,
    /// shape)` of dense tensors on this session's GPU. With `outputs` (`(name, address)`,
    /// each sized as the artifact's signature says) the results are written there and
    /// nothing is returned; without, they go to new device memory returned as
    /// `(name, DeviceArray)`. The addresses must stay valid until the stream has run the work.
    #[pyo3(signature = (inputs, outputs, stream))]
    #[allow(clippy::type_complexity)]
    fn run_device(
        &mut self,
        py: Python<'_>,
        inputs: Vec<(String, u64, String, Vec<usize>)>,
        outputs: Option<Vec<(String, u64)>>,
        stream: usize,
    ) -> PyResult<Vec<(String, Py<dlpack::DeviceArray>)>> {
        let Some(gm) = &mut self.gpu else {
            return Err(err("device tensors need a session on backend \"cuda\""));
        };
        let mut given = BTreeMap::new();
        for (name, ptr, dtype, shape) in inputs {
            given.insert(name, DeviceTensor { ptr, dtype: dtype_named(&dtype)?, shape });
        }
        let sig = |name: &str| self.model.outputs.iter().find(|s| s.name == name);
        let mut outs = BTreeMap::new();
        let mut owned = vec![];
        match outputs {
            Some(list) => {
                for (name, ptr) in list {
                    let s = sig(&name).ok_or_else(|| err(format!("unknown output {name:?}")))?;
                    outs.insert(name, DeviceTensor { ptr, dtype: s.dtype, shape: s.shape.clone() });
                }
            }
            None => {
                let dev = gm.program.device().clone();
                for s in &self.model.outputs {
                    let bytes = s.shape.iter().product::<usize>() * s.dtype.size_bytes();
                    let mem = std::sync::Arc::new(DeviceMemory::alloc(&dev, bytes).map_err(err)?);
                    outs.insert(
                        s.name.clone(),
                        DeviceTensor { ptr: mem.ptr(), dtype: s.dtype, shape: s.shape.clone() },
                    );
                    owned.push((s, mem));
                }
            }
        }
        let stream = stream as spartac_runtime::exec::external::Stream;
        // SAFETY: `spartac.Session.run` passes torch's current stream of this GPU (or the
        // caller's, or the legacy default) and the addresses of tensors on this GPU that it
        // holds until the call returns; their frameworks' stream-ordered allocators keep the
        // memory until the stream has run the work (as for a torch op).
        unsafe { gm.run_on_stream(&given, &outs, stream) }.map_err(|e| err(format!("inputs: {e}")))?;
        if owned.is_empty() {
            return Ok(vec![]);
        }
        let ready = std::rc::Rc::new(Event::new(gm.program.device()).map_err(err)?);
        // SAFETY: the stream the run was queued on, above.
        unsafe { ready.record(stream) }.map_err(err)?;
        owned
            .into_iter()
            .map(|(s, mem)| {
                let a = dlpack::DeviceArray::new(mem, s.dtype, s.shape.clone(), self.device as i32, ready.clone());
                Ok((s.name.clone(), Py::new(py, a)?))
            })
            .collect()
    }

    /// "cpu" or "cuda".
    #[getter]
    fn backend(&self) -> &'static str {
        if self.gpu.is_some() {
            "cuda"
        } else {
            "cpu"
        }
    }

    /// Runs on `inputs` (`(name, .npy bytes)` pairs, read where Python holds them); returns
    /// `(name, dtype, shape, raw little-endian bytes)` per output. On the GPU each input's data
    /// goes from the Python bytes straight into its device buffer and each output comes back
    /// with one device-to-host copy (no host tensors in between).
    #[allow(clippy::type_complexity)]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        inputs: Vec<(String, Bound<'py, PyBytes>)>,
    ) -> PyResult<Vec<(String, String, Vec<usize>, Bound<'py, PyBytes>)>> {
        let mut given = BTreeMap::new();
        for (name, bytes) in &inputs {
            let h = spartac::npy::parse_npy_header(bytes.as_bytes())
                .map_err(|e| err(format!("input {name:?}: {e}")))?
                .ok_or_else(|| err(format!("input {name:?}: truncated .npy header")))?;
            if bytes.as_bytes().len() != h.file_bytes() {
                return Err(err(format!(
                    "input {name:?}: {} bytes for its header's {}",
                    bytes.as_bytes().len(),
                    h.file_bytes()
                )));
            }
            given.insert(name.clone(), (h, bytes));
        }
        let Some(gm) = &mut self.gpu else {
            // The CPU executor takes host tensors.
            let mut tensors = BTreeMap::new();
            for (name, (_, bytes)) in &given {
                let t = spartac::npy::parse_npy(bytes.as_bytes()).map_err(|e| err(format!("input {name:?}: {e}")))?;
                tensors.insert(name.clone(), t);
            }
            spartac::program::model::check_model_inputs(&self.model.inputs, &tensors)
                .map_err(|e| err(format!("inputs: {e}")))?;
            let outputs = run_cpu(&self.model, &tensors).map_err(err)?;
            return outputs
                .into_iter()
                .map(|(name, t)| {
                    let raw = spartac_runtime::exec::cpu::bytes_of_tensor(&t);
                    Ok((name, t.dtype().name().to_string(), t.shape().to_vec(), PyBytes::new(py, &raw)))
                })
                .collect();
        };
        // The same checks as the host path (names, types, shapes), on the headers alone.
        spartac::program::model::check_signature("input", &self.model.inputs, &given, |(h, _)| {
            (h.dtype, h.shape.as_slice())
        })
        .map_err(|e| err(format!("inputs: {e}")))?;
        for s in &self.model.inputs {
            let (h, bytes) = &given[&s.name];
            gm.wait_stream_runs().map_err(err)?;
            gm.program.write(s.buf, &bytes.as_bytes()[h.data_offset..]).map_err(err)?;
        }
        gm.run().map_err(err)?;
        self.model
            .outputs
            .iter()
            .map(|s| {
                let raw = gm.program.read(s.buf).map_err(err)?;
                let n = s.shape.iter().product::<usize>() * s.dtype.size_bytes();
                let data = raw.get(..n).ok_or_else(|| err(format!("output {:?}: short buffer", s.name)))?;
                Ok((s.name.clone(), s.dtype.name().to_string(), s.shape.clone(), PyBytes::new(py, data)))
            })
            .collect()
    }
}

#[pymodule]
fn _spartac(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_function(wrap_pyfunction!(execute, m)?)?;
    m.add_function(wrap_pyfunction!(execute_captured, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(signature, m)?)?;
    m.add_function(wrap_pyfunction!(summary, m)?)?;
    m.add_class::<Session>()?;
    m.add_class::<dlpack::DeviceArray>()?;
    m.add_function(wrap_pyfunction!(dlpack::dlpack_info, m)?)?;
    Ok(())
}
