//! A minimal CUDA runtime: device discovery, NVRTC compilation with a module cache (keyed by
//! source hash and arch), device buffers, kernel launches and CUDA-event timing (optionally
//! after overwriting a buffer larger than the L2). CUDA 13.
//!
//! Beside it: `tma.rs` (tensor maps), `cublas.rs` (the dense fallback), the kernel test
//! bench: `cases/` (the one case list, as tables), `spmm.rs` and `spmm_int8.rs` (run and check
//! a case), and `tune.rs`, the GPU timer of `spartac tune` (a planned operator's kernels run the
//! same way).
//!
//! Everything goes through cudarc with dynamic loading, so building needs no CUDA and a
//! machine without a driver gets [`CudaError::NoDriver`] instead of a panic: cudarc panics
//! when a library is missing, so every entry point checks `is_culib_present` first.
//! NVRTC needs no driver, which is how the tests compile every kernel on a CPU-only machine.

pub mod attention;
pub mod cases;
pub mod cublas;
mod nvrtc;
pub mod spmm;
pub mod spmm_int8;
pub(crate) mod tma;
pub mod tune;

pub use nvrtc::{compile_ptx, nvrtc_version, preload_nvrtc, Ptx};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Everything that can go wrong between a kernel source and its result.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver found (libcuda.so not loadable): {0}")]
    NoDriver(String),
    #[error("NVRTC not found (libnvrtc.so not loadable; set LD_LIBRARY_PATH to its folder, e.g. .cuda/nvidia/cu13/lib or /usr/local/cuda/lib64): {0}")]
    NoNvrtc(String),
    #[error("{0}")]
    NoLibrary(String),
    #[error("no CUDA device found")]
    NoDevice,
    #[error("NVRTC failed to compile kernel {name} for {arch}: {log}")]
    Compile { name: String, arch: String, log: String },
    #[error("CUDA driver error in {what}: {source}")]
    Driver {
        what: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },
    #[error("kernel {0}: {1}")]
    Kernel(String, String),
}

/// Attaches a short description of the failed call to a driver error.
pub(crate) trait DriverContext<T> {
    fn ctx(self, what: &'static str) -> Result<T, CudaError>;
}

impl<T> DriverContext<T> for Result<T, cudarc::driver::DriverError> {
    fn ctx(self, what: &'static str) -> Result<T, CudaError> {
        self.map_err(|source| CudaError::Driver { what, source })
    }
}

/// Whether libcuda can be opened; the reason when it cannot.
pub fn driver_present() -> Result<(), CudaError> {
    // SAFETY: only tries to open the shared library.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NoDriver("no libcuda.so.1 on the library path".into()))
    }
}

/// One GPU with its context, a stream and the modules compiled for it.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    arch: String,
    /// Loaded modules keyed by (hash of the source, arch).
    modules: Mutex<HashMap<(u64, String), Arc<CudaModule>>>,
    /// The cuBLAS handle, made on first use.
    blas: Mutex<Option<Arc<cublas::Blas>>>,
}

impl CudaDevice {
    /// Opens device `ordinal`, or explains why there is none.
    pub fn open(ordinal: usize) -> Result<CudaDevice, CudaError> {
        driver_present()?;
        let count = CudaContext::device_count().map_err(|e| CudaError::NoDriver(e.to_string()))?;
        if count <= ordinal as i32 {
            return Err(CudaError::NoDevice);
        }
        let ctx = CudaContext::new(ordinal).ctx("cuCtxCreate")?;
        let (major, minor) = ctx.compute_capability().ctx("compute capability")?;
        let name = ctx.name().ctx("device name")?;
        // sm_90 gets the arch-specific target so that wgmma/setmaxnreg are available.
        let arch = if (major, minor) == (9, 0) { "sm_90a".to_string() } else { format!("sm_{major}{minor}") };
        let stream = ctx.default_stream();
        Ok(CudaDevice { ctx, stream, name, arch, modules: Mutex::new(HashMap::new()), blas: Mutex::new(None) })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Streaming multiprocessors of the device.
    pub fn sm_count(&self) -> Result<usize, CudaError> {
        use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS;
        Ok(self.ctx.attribute(SMS).ctx("multiprocessor count")? as usize)
    }

    /// Free and total device memory, bytes.
    pub fn memory(&self) -> Result<(usize, usize), CudaError> {
        self.ctx.mem_get_info().ctx("cuMemGetInfo")
    }

    /// The NVRTC target of this device, e.g. `sm_90a`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Compiles `source` (or takes it from the cache) and returns its function `entry`.
    pub fn function(&self, name: &str, source: &str, entry: &str) -> Result<CudaFunction, CudaError> {
        let key = (spartac::codegen::source_hash(source), self.arch.clone());
        let cached = self.modules.lock().expect("module cache poisoned").get(&key).cloned();
        let module = match cached {
            Some(m) => m,
            None => {
                let ptx = compile_ptx(name, source, &self.arch)?;
                let m = self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx.ptx)).ctx("cuModuleLoadData")?;
                self.modules.lock().expect("module cache poisoned").insert(key, m.clone());
                m
            }
        };
        module.load_function(entry).ctx("cuModuleGetFunction")
    }

    /// Compiles the `(name, source)` pairs not loaded yet, in parallel (NVRTC runs on the host
    /// and is thread-safe), and loads their modules, so that later [`CudaDevice::function`]
    /// calls find them. Returns the first compile or load error; the others still load.
    pub fn precompile(&self, sources: &[(String, String)]) -> Result<(), CudaError> {
        use rayon::prelude::*;
        let mut todo: Vec<(u64, &str, &str)> = vec![];
        {
            let modules = self.modules.lock().expect("module cache poisoned");
            for (name, source) in sources {
                let hash = spartac::codegen::source_hash(source);
                if !modules.contains_key(&(hash, self.arch.clone())) && !todo.iter().any(|t| t.0 == hash) {
                    todo.push((hash, name, source));
                }
            }
        }
        let compiled: Vec<(u64, Result<Ptx, CudaError>)> =
            todo.par_iter().map(|(hash, name, source)| (*hash, compile_ptx(name, source, &self.arch))).collect();
        let mut first_err = None;
        for (hash, ptx) in compiled {
            let loaded = ptx.and_then(|p| self.load_ptx(p.ptx));
            match loaded {
                Ok(m) => {
                    self.modules.lock().expect("module cache poisoned").insert((hash, self.arch.clone()), m);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The cuBLAS handle on this device's stream (created once), or why there is none.
    pub fn blas(&self) -> Result<Arc<cublas::Blas>, CudaError> {
        let mut slot = self.blas.lock().expect("cublas handle poisoned");
        if let Some(b) = slot.as_ref() {
            return Ok(b.clone());
        }
        let b = cublas::Blas::new(self)?;
        *slot = Some(b.clone());
        Ok(b)
    }

    /// A new stream of this device's context (the default stream cannot be captured).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, CudaError> {
        self.ctx.new_stream().ctx("cuStreamCreate")
    }

    /// Makes this device's context current on the calling thread (raw driver calls need it).
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().ctx("cuCtxSetCurrent")
    }

    /// The raw context handle.
    pub fn cu_ctx(&self) -> cudarc::driver::sys::CUcontext {
        self.ctx.cu_ctx()
    }

    /// Loads compiled PTX as a module.
    pub fn load_ptx(&self, ptx: String) -> Result<Arc<CudaModule>, CudaError> {
        self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).ctx("cuModuleLoadData")
    }

    /// Number of modules compiled so far (the cache's size).
    pub fn cached_modules(&self) -> usize {
        self.modules.lock().expect("module cache poisoned").len()
    }

    /// Copies a host slice to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>, CudaError> {
        self.stream.clone_htod(data).ctx("memcpy host to device")
    }

    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>, CudaError> {
        self.stream.alloc_zeros(len).ctx("cuMemAlloc")
    }

    pub fn download<T: DeviceRepr + Default + Clone>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>, CudaError> {
        self.stream.clone_dtoh(buf).ctx("memcpy device to host")
    }

    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream.synchronize().ctx("stream synchronize")
    }

    /// Times `body` with CUDA events: `warmup` untimed calls, then `reps` timed ones, each
    /// between its own pair of events, after overwriting `flush` (a buffer larger than the L2). Returns every duration in milliseconds.
    pub fn time_ms(
        &self,
        warmup: usize,
        reps: usize,
        mut flush: Option<&mut CudaSlice<u8>>,
        mut body: impl FnMut(usize) -> Result<(), CudaError>,
    ) -> Result<Vec<f64>, CudaError> {
        for i in 0..warmup {
            body(i)?;
        }
        self.synchronize()?;
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::with_capacity(reps);
        for i in 0..reps {
            if let Some(buf) = flush.as_deref_mut() {
                self.stream.memset_zeros(buf).ctx("memset (L2 flush)")?;
            }
            let start = self.ctx.new_event(flags).ctx("cuEventCreate")?;
            let end = self.ctx.new_event(flags).ctx("cuEventCreate")?;
            start.record(&self.stream).ctx("cuEventRecord")?;
            body(warmup + i)?;
            end.record(&self.stream).ctx("cuEventRecord")?;
            times.push(start.elapsed_ms(&end).ctx("cuEventElapsedTime")? as f64);
        }
        Ok(times)
    }
}

/// The median of a list of times (sorted copy).
pub fn median(times: &[f64]) -> f64 {
    let mut t = times.to_vec();
    t.sort_by(|a, b| a.total_cmp(b));
    if t.is_empty() {
        f64::NAN
    } else {
        t[t.len() / 2]
    }
}
