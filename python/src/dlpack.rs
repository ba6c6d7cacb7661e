//! DLPack, the tensor exchange protocol of torch, CuPy, JAX and numpy: reading a producer's
//! capsule (legacy `dltensor` or versioned `dltensor_versioned`, left unconsumed so that the
//! capsule's own destructor releases the producer's tensor when Python drops it), and
//! [`DeviceArray`], an output in spartac's device memory that any DLPack consumer can take
//! without a copy (`torch.from_dlpack`, `cupy.from_dlpack`) or `numpy.asarray` copies home.

use crate::err;
use pyo3::ffi;
use pyo3::prelude::*;
use spartac::ir::DType;
use spartac_runtime::exec::external::{DeviceMemory, Event};
use std::ffi::{c_void, CStr};
use std::rc::Rc;
use std::sync::Arc;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// `kDLCUDA`.
const CUDA: i32 = 2;

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";

/// What a capsule describes.
pub struct Info {
    /// The first element's address (data + byte offset).
    pub ptr: u64,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// (DLPack device type, device index).
    pub device: (i32, i32),
    /// Dense row-major (no strides, or strides that equal row-major's).
    pub contiguous: bool,
}

/// Each spartac type with its DLPack type code (0 int, 1 uint, 2 float, 4 bfloat, 6 bool) and bits.
const TYPES: [(DType, u8, u8); 13] = [
    (DType::I8, 0, 8),
    (DType::I16, 0, 16),
    (DType::I32, 0, 32),
    (DType::I64, 0, 64),
    (DType::U8, 1, 8),
    (DType::U16, 1, 16),
    (DType::U32, 1, 32),
    (DType::U64, 1, 64),
    (DType::F16, 2, 16),
    (DType::F32, 2, 32),
    (DType::F64, 2, 64),
    (DType::BF16, 4, 16),
    (DType::Bool, 6, 8),
];

fn dtype_of(t: DLDataType) -> Result<DType, String> {
    if t.lanes != 1 {
        return Err(format!("vector elements ({} lanes) are not supported", t.lanes));
    }
    TYPES
        .iter()
        .find(|&&(_, code, bits)| (code, bits) == (t.code, t.bits))
        .map(|&(d, _, _)| d)
        .ok_or_else(|| format!("DLPack type code {} with {} bits has no spartac type", t.code, t.bits))
}

fn dl_dtype(d: DType) -> DLDataType {
    let &(_, code, bits) = TYPES.iter().find(|&&(t, _, _)| t == d).expect("every spartac type is in TYPES");
    DLDataType { code, bits, lanes: 1 }
}

/// Reads the tensor a DLPack capsule describes (the capsule stays the producer's).
pub fn read_capsule(capsule: &Bound<'_, PyAny>) -> PyResult<Info> {
    let cap = capsule.as_ptr();
    // SAFETY: PyCapsule_IsValid accepts any object and sets no error; a valid capsule of
    // either name points at the struct the DLPack standard names it for, alive as long as
    // the capsule (held by the caller).
    let t: &DLTensor = unsafe {
        if ffi::PyCapsule_IsValid(cap, LEGACY.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, LEGACY.as_ptr()) as *const DLManagedTensor;
            &(*m).dl_tensor
        } else if ffi::PyCapsule_IsValid(cap, VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, VERSIONED.as_ptr()) as *const DLManagedTensorVersioned;
            if (*m).version.major != 1 {
                return Err(err(format!(
                    "DLPack version {}.{} is not supported (1.x is)",
                    (*m).version.major,
                    (*m).version.minor
                )));
            }
            &(*m).dl_tensor
        } else {
            return Err(err("not an unconsumed DLPack capsule (\"dltensor\" or \"dltensor_versioned\")"));
        }
    };
    let dtype = dtype_of(t.dtype).map_err(err)?;
    let ndim = usize::try_from(t.ndim).map_err(|_| err(format!("a DLPack tensor with {} dimensions", t.ndim)))?;
    // SAFETY: shape (and strides when not null) hold ndim entries by the standard.
    let (shape, strides) = unsafe {
        let shape = if ndim == 0 { &[][..] } else { std::slice::from_raw_parts(t.shape, ndim) };
        let strides =
            if t.strides.is_null() || ndim == 0 { None } else { Some(std::slice::from_raw_parts(t.strides, ndim)) };
        (shape, strides)
    };
    let shape: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| err(format!("a DLPack dimension of {d}"))))
        .collect::<PyResult<_>>()?;
    let contiguous = match strides {
        None => true,
        Some(strides) => {
            let mut want = 1i64;
            let mut ok = true;
            for (&d, &s) in shape.iter().zip(strides).rev() {
                if d != 1 && s != want {
                    ok = false;
                }
                want = want.saturating_mul(d as i64);
            }
            ok
        }
    };
    Ok(Info {
        ptr: t.data as u64 + t.byte_offset,
        dtype,
        shape,
        device: (t.device.device_type, t.device.device_id),
        contiguous,
    })
}

/// An exported tensor: the managed struct first, so that its address is the allocation's.
#[repr(C)]
struct Exported {
    managed: DLManagedTensor,
    shape: Vec<i64>,
    _memory: Arc<DeviceMemory>,
}

unsafe extern "C" fn delete_exported(m: *mut DLManagedTensor) {
    // SAFETY: m is the Box<Exported> leaked by `export`, deleted once (by its consumer, or by
    // the capsule's destructor when nobody consumed it).
    unsafe { drop(Box::from_raw(m as *mut Exported)) }
}

unsafe extern "C" fn capsule_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: a capsule still named "dltensor" was not consumed: its tensor is ours to
    // delete. A consumer renames it ("used_dltensor") and calls the deleter itself.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, LEGACY.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, LEGACY.as_ptr()) as *mut DLManagedTensor;
            if let Some(d) = (*m).deleter {
                d(m);
            }
        }
    }
}

/// A model output in spartac's device memory (returned by `Session.run` when the inputs are
/// DLPack tensors from a framework other than torch). Hand it to any DLPack consumer
/// (`cupy.from_dlpack(a)`, `torch.from_dlpack(a)`: no copy) or copy it home with
/// `numpy.asarray(a)`.
#[pyclass(unsendable, module = "spartac")]
pub struct DeviceArray {
    memory: Arc<DeviceMemory>,
    dtype: DType,
    #[pyo3(get)]
    shape: Vec<usize>,
    device: i32,
    /// Recorded on the run's stream after the output was written.
    ready: Rc<Event>,
}

impl DeviceArray {
    pub fn new(memory: Arc<DeviceMemory>, dtype: DType, shape: Vec<usize>, device: i32, ready: Rc<Event>) -> Self {
        DeviceArray { memory, dtype, shape, device, ready }
    }
}

/// The CUstream a DLPack `stream` argument names (1: the legacy default stream, 2: the
/// per-thread one, anything else a stream handle).
fn dlpack_stream(s: isize) -> spartac_runtime::exec::external::Stream {
    match s {
        1 => std::ptr::null_mut(),
        other => other as usize as spartac_runtime::exec::external::Stream,
    }
}

#[pymethods]
impl DeviceArray {
    /// The element type's spartac name ("f16", "f32", "i64", ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (CUDA, self.device)
    }

    /// A DLPack capsule of this tensor (no copy). Work the consumer queues on `stream` runs
    /// after the output is written (None: the legacy default stream; -1: no ordering).
    #[pyo3(signature = (stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<isize>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = max_version;
        if let Some((t, id)) = dl_device {
            if (t, id) != (CUDA, self.device) {
                return Err(err(format!(
                    "a spartac output on GPU {} cannot be exported to device ({t}, {id})",
                    self.device
                )));
            }
        }
        if copy == Some(true) {
            return Err(err("a spartac output exports without a copy only (copy=True is not supported)"));
        }
        match stream {
            Some(-1) => {}
            Some(s) if s == 0 || s < -1 => {
                return Err(err(format!(
                    "DLPack stream {s} is not a CUDA stream (1: legacy default, 2: per-thread, or a handle)"
                )))
            }
            // SAFETY: the consumer names its stream on this GPU (the DLPack contract).
            Some(s) => unsafe { self.ready.wait_on(dlpack_stream(s)) }.map_err(err)?,
            // SAFETY: the legacy default stream.
            None => unsafe { self.ready.wait_on(std::ptr::null_mut()) }.map_err(err)?,
        }
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        let mut boxed = Box::new(Exported {
            managed: DLManagedTensor {
                dl_tensor: DLTensor {
                    data: self.memory.ptr() as *mut c_void,
                    device: DLDevice { device_type: CUDA, device_id: self.device },
                    ndim: shape.len() as i32,
                    dtype: dl_dtype(self.dtype),
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_exported),
            },
            shape,
            _memory: self.memory.clone(),
        });
        boxed.managed.dl_tensor.shape = boxed.shape.as_mut_ptr();
        let raw = Box::into_raw(boxed);
        // SAFETY: raw is a live Exported whose first field is the DLManagedTensor; the
        // capsule's destructor (or its consumer) deletes it once.
        unsafe {
            (*raw).managed.manager_ctx = raw as *mut c_void;
            let cap = ffi::PyCapsule_New(raw as *mut c_void, LEGACY.as_ptr(), Some(capsule_destructor));
            if cap.is_null() {
                delete_exported(raw as *mut DLManagedTensor);
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, cap))
        }
    }

    /// The raw little-endian bytes, copied to the host once the run that wrote them is done.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        self.ready.synchronize().map_err(err)?;
        let data = self.memory.to_host().map_err(err)?;
        let n = self.shape.iter().product::<usize>() * self.dtype.size_bytes();
        Ok(pyo3::types::PyBytes::new(py, &data[..n.min(data.len())]))
    }

    /// A numpy copy (`numpy.asarray(a)`), once the run that wrote it is done.
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy;
        let name = match self.dtype {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::U32 => "uint32",
            DType::I32 => "int32",
            DType::U64 => "uint64",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::BF16 => return Err(err("numpy has no bfloat16: take the output with torch.from_dlpack")),
        };
        let np = py.import("numpy")?;
        let a = np
            .call_method1("frombuffer", (self.to_bytes(py)?, name))?
            .call_method1("reshape", (self.shape.clone(),))?
            .call_method0("copy")?;
        match dtype {
            Some(d) => a.call_method1("astype", (d,)),
            None => Ok(a),
        }
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        format!("<spartac.DeviceArray {}[{}] on cuda:{}>", self.dtype.name(), dims.join(","), self.device)
    }
}

/// `(address, dtype, shape, device type, device index, contiguous)`.
type InfoTuple = (u64, &'static str, Vec<usize>, i32, i32, bool);

/// What a DLPack capsule describes: `(address, dtype, shape, device type, device index,
/// contiguous)` (the capsule is left unconsumed).
#[pyfunction]
pub fn dlpack_info(capsule: &Bound<'_, PyAny>) -> PyResult<InfoTuple> {
    let i = read_capsule(capsule)?;
    Ok((i.ptr, i.dtype.name(), i.shape, i.device.0, i.device.1, i.contiguous))
}
