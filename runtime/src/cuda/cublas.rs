//! The dense fallback on cuBLAS: `C = A·W (+ C)` in row-major storage, fp32 math.
//!
//! cuBLAS is column-major; a row-major `M × N` matrix is its `N × M` transpose, so the call
//! computes `Cᵀ = Wᵀ·Aᵀ` (right orientation) or `Cᵀ = Bᵀ·Wᵀ` (left) with no copies. fp32
//! runs with `CUBLAS_COMPUTE_32F` and the default math mode, i.e. true fp32 (no TF32), the
//! same as our kernels and the torch peer with TF32 off. A case that runs the dense fallback
//! (`super::spmm`) follows the call with the generated epilogue kernel (bias, activation) that
//! `codegen::library_gemm` describes. A compiled model's GEMM with a bias or a ReLU runs on
//! cuBLASLt instead, which applies them to the fp32 sum before the one rounding (its
//! `BIAS`/`RELU`/`RELU_BIAS` epilogues): the heuristic's algorithm for each shape, type,
//! epilogue and alignment is looked up once and kept.

use super::{CudaDevice, CudaError};
use cudarc::cublas::{result, sys, CudaBlas};
use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use spartac::codegen::{Dtype, LibraryGemm, Orientation};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

/// Whether libcublas can be opened.
pub fn cublas_present() -> Result<(), CudaError> {
    // SAFETY: only tries to open the shared library.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NoLibrary(
            "cuBLAS (libcublas.so) not on the library path; set LD_LIBRARY_PATH, e.g. /usr/local/cuda/lib64".into(),
        ))
    }
}

/// A cuBLAS handle bound to the device's stream.
pub struct Blas {
    handle: CudaBlas,
    stream: Arc<CudaStream>,
}

impl Blas {
    pub fn new(dev: &CudaDevice) -> Result<Arc<Blas>, CudaError> {
        cublas_present()?;
        let handle =
            CudaBlas::new(dev.stream().clone()).map_err(|e| CudaError::NoLibrary(format!("cublasCreate: {e}")))?;
        Ok(Arc::new(Blas { handle, stream: dev.stream().clone() }))
    }

    /// Runs `g`: `c = a·w` (right) or `c = w·a` (left, `a` is then the dense `K × N` input),
    /// adding into `c` when `g.accumulate`. Element type `T` must be the storage of `g.dtype`
    /// (f32, or u16 bits for f16/bf16).
    pub fn gemm<T: DeviceRepr>(
        &self,
        g: &LibraryGemm,
        a: &CudaSlice<T>,
        w: &CudaSlice<T>,
        c: &mut CudaSlice<T>,
    ) -> Result<(), CudaError> {
        let (m, k, n) = (g.m as i32, g.k as i32, g.n as i32);
        let need = [(a.len(), g.m * g.k, "A"), (w.len(), g.k * g.n, "W"), (c.len(), g.m * g.n, "C")];
        let need = match g.orientation {
            Orientation::Right => need,
            Orientation::Left => [(a.len(), g.k * g.n, "B"), (w.len(), g.m * g.k, "W"), (c.len(), g.m * g.n, "C")],
        };
        for (have, want, what) in need {
            if have < want {
                return Err(CudaError::Kernel(
                    "cublas gemm".into(),
                    format!("{what} holds {have} elements, needs {want}"),
                ));
            }
        }
        let ty = cuda_type(g.dtype).map_err(|e| CudaError::Kernel("cublas gemm".into(), e))?;
        let stream = &self.stream;
        let (a_ptr, _ra) = a.device_ptr(stream);
        let (w_ptr, _rw) = w.device_ptr(stream);
        let (c_ptr, _rc) = c.device_ptr_mut(stream);
        let (x, y) = match g.orientation {
            Orientation::Right => (w_ptr, a_ptr),
            Orientation::Left => (a_ptr, w_ptr),
        };
        // SAFETY: the pointers are live device buffers of at least the sizes checked above and
        // the handle is bound to the stream that owns them.
        unsafe { gemm_col_major(*self.handle.handle(), ty, (m, k, n), x, y, c_ptr, g.accumulate) }
            .map_err(|e| CudaError::Kernel("cublas gemm".into(), e.to_string()))
    }
}

/// Bytes of the workspace a [`ProgramBlas`] hands cuBLAS (what NVIDIA suggests for Hopper).
const WORKSPACE_BYTES: usize = 32 << 20;

/// The cuBLAS handle of a loaded program: its own workspace, so that a call captured into a
/// CUDA graph allocates nothing, and calls issued on whichever stream the caller names (the
/// capture stream while the graph is built, the device's stream for stream launches). The
/// calls share the workspace: the executor orders every library call after the previous one.
pub struct ProgramBlas {
    handle: CudaBlas,
    workspace: CudaSlice<u8>,
    lt: Option<Lt>,
}

/// A cuBLASLt handle and the algorithms its heuristic chose, per call shape.
struct Lt {
    handle: ltsys::cublasLtHandle_t,
    algos: Mutex<HashMap<LtKey, ltsys::cublasLtMatmulAlgo_t>>,
}

/// What the heuristic's choice depends on: type, `m, k, n`, epilogue, whether it adds into C,
/// and the alignment (bytes, up to 256) of A, W, C and the bias.
type LtKey = (&'static str, (usize, usize, usize), u32, bool, [u32; 4]);

// SAFETY: a cuBLASLt handle may be used from any thread (NVIDIA: the handle is thread safe);
// the algorithm cache is behind a mutex.
unsafe impl Send for Lt {}
unsafe impl Sync for Lt {}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: created by `create_handle`, destroyed once here.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

/// The largest power of two (up to 256) that divides `ptr`: the alignment cuBLASLt is told.
fn alignment(ptr: u64) -> u32 {
    if ptr == 0 {
        256
    } else {
        (1u64 << ptr.trailing_zeros().min(8)) as u32
    }
}

impl ProgramBlas {
    pub fn new(dev: &CudaDevice) -> Result<ProgramBlas, CudaError> {
        cublas_present()?;
        let handle =
            CudaBlas::new(dev.stream().clone()).map_err(|e| CudaError::NoLibrary(format!("cublasCreate: {e}")))?;
        let workspace = dev.zeros::<u8>(WORKSPACE_BYTES)?;
        // SAFETY: only tries to open the shared library.
        let lt = if unsafe { ltsys::is_culib_present() } {
            Some(Lt {
                handle: lt::create_handle().map_err(|e| CudaError::NoLibrary(format!("cublasLtCreate: {e}")))?,
                algos: Mutex::new(HashMap::new()),
            })
        } else {
            None
        };
        Ok(ProgramBlas { handle, workspace, lt })
    }

    /// Issues `d = relu?(a·w + c + bias)` (`c` added when `accumulate`; it may be `d` itself)
    /// on `stream` through cuBLASLt: row-major `a` (`m × k`), `w` (`k × n`), `c` and `d`
    /// (`m × n`) and `bias` (`n`, 0 for none), all of element type `dtype`, fp32 sums and
    /// epilogue.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_lt_on(
        &self,
        stream: cudarc::driver::sys::CUstream,
        dtype: Dtype,
        (m, k, n): (usize, usize, usize),
        (a, w, c, d, bias): (u64, u64, u64, u64, u64),
        relu: bool,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let fail =
            |what: &str, e: String| CudaError::Kernel(format!("cublasLt gemm {m}x{k}x{n}"), format!("{what}: {e}"));
        let Some(ltc) = &self.lt else {
            return Err(CudaError::NoLibrary(
                "cuBLASLt (libcublasLt.so) not on the library path; set LD_LIBRARY_PATH, e.g. /usr/local/cuda/lib64"
                    .into(),
            ));
        };
        let ty = lt_type(dtype).map_err(|e| fail("type", e))?;
        if [m, k, n].iter().any(|&d| d == 0 || d > i32::MAX as usize) {
            return Err(fail("dimensions", "outside the library's 32-bit range".into()));
        }
        use ltsys::cublasLtEpilogue_t as E;
        let epilogue = match (bias != 0, relu) {
            (true, true) => E::CUBLASLT_EPILOGUE_RELU_BIAS,
            (true, false) => E::CUBLASLT_EPILOGUE_BIAS,
            (false, true) => E::CUBLASLT_EPILOGUE_RELU,
            (false, false) => E::CUBLASLT_EPILOGUE_DEFAULT,
        };
        let aligns = [alignment(a), alignment(w), alignment(c).min(alignment(d)), alignment(bias)];
        let (ws, _guard) = self.workspace.device_ptr(self.workspace.stream());
        let lt_err = |what: &'static str| move |e: lt::CublasError| fail(what, e.to_string());
        // Column-major, as the library sees row-major storage: Cᵀ (n × m, ld n) = Wᵀ (n × k,
        // ld n) · Aᵀ (k × m, ld k); the bias runs along the n rows of Cᵀ.
        let layout = |rows: usize, cols: usize| lt::create_matrix_layout(ty, rows as u64, cols as u64, rows as i64);
        // SAFETY: every descriptor is created here and destroyed before returning; the device
        // pointers are live buffers of the sizes `Program::verify` checked; attribute values
        // outlive the calls that read them.
        unsafe {
            let desc = lt::create_matmul_desc(
                ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                ltsys::cudaDataType_t::CUDA_R_32F,
            )
            .map_err(lt_err("cublasLtMatmulDescCreate"))?;
            let layouts = [layout(n, k), layout(k, m), layout(n, m)];
            let made: Vec<ltsys::cublasLtMatrixLayout_t> =
                layouts.iter().filter_map(|l| l.as_ref().ok().copied()).collect();
            let result = (|| -> Result<(), CudaError> {
                let [la, lb, lc] = layouts.map(|l| l.map_err(lt_err("cublasLtMatrixLayoutCreate")));
                let (la, lb, lc) = (la?, lb?, lc?);
                let epi = epilogue as u32;
                lt::set_matmul_desc_attribute(
                    desc,
                    ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
                    &epi as *const u32 as *const _,
                    std::mem::size_of::<u32>(),
                )
                .map_err(lt_err("epilogue attribute"))?;
                if bias != 0 {
                    let ptr = bias as *const std::ffi::c_void;
                    lt::set_matmul_desc_attribute(
                        desc,
                        ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                        &ptr as *const *const std::ffi::c_void as *const _,
                        std::mem::size_of::<*const std::ffi::c_void>(),
                    )
                    .map_err(lt_err("bias attribute"))?;
                }
                let key: LtKey = (dtype.name(), (m, k, n), epi, accumulate, aligns);
                let cached =
                    ltc.algos.lock().map_err(|_| fail("algorithm cache", "poisoned".into()))?.get(&key).copied();
                let algo = match cached {
                    Some(algo) => algo,
                    None => {
                        let pref = lt::create_matmul_pref().map_err(lt_err("cublasLtMatmulPreferenceCreate"))?;
                        let chosen = (|| {
                            use ltsys::cublasLtMatmulPreferenceAttributes_t as P;
                            let ws_bytes = WORKSPACE_BYTES as u64;
                            lt::set_matmul_pref_attribute(
                                pref,
                                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                &ws_bytes as *const u64 as *const _,
                                8,
                            )?;
                            // A is the library's first operand (our W), B ours A, C and D ours C.
                            let (al_a, al_b, al_c, al_d) = (aligns[1], aligns[0], aligns[2], aligns[2]);
                            for (attr, v) in [
                                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a),
                                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b),
                                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c),
                                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d),
                            ] {
                                lt::set_matmul_pref_attribute(pref, attr, &v as *const u32 as *const _, 4)?;
                            }
                            lt::get_matmul_algo_heuristic(ltc.handle, desc, la, lb, lc, lc, pref)
                        })();
                        let _ = lt::destroy_matmul_pref(pref);
                        let algo = chosen.map_err(lt_err("cublasLtMatmulAlgoGetHeuristic"))?.algo;
                        ltc.algos.lock().map_err(|_| fail("algorithm cache", "poisoned".into()))?.insert(key, algo);
                        algo
                    }
                };
                let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0f32 });
                lt::matmul(
                    ltc.handle,
                    desc,
                    (&alpha) as *const f32 as *const _,
                    (&beta) as *const f32 as *const _,
                    w as *const _,
                    la,
                    a as *const _,
                    lb,
                    c as *const _,
                    lc,
                    d as *mut _,
                    lc,
                    &algo,
                    ws as *mut _,
                    WORKSPACE_BYTES,
                    stream as ltsys::cudaStream_t,
                )
                .map_err(lt_err("cublasLtMatmul"))
            })();
            for l in made {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(desc);
            result
        }
    }

    /// Issues `c = a·w` (`+ c` when `accumulate`) on `stream`: row-major `a` (`m × k`), `w`
    /// (`k × n`), `c` (`m × n`) at raw device addresses, all of element type `dtype`, fp32 sums.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_on(
        &self,
        stream: cudarc::driver::sys::CUstream,
        dtype: Dtype,
        (m, k, n): (usize, usize, usize),
        a: u64,
        w: u64,
        c: u64,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let fail =
            |what: &str, e: String| CudaError::Kernel(format!("cublas gemm {m}x{k}x{n}"), format!("{what}: {e}"));
        let ty = cuda_type(dtype).map_err(|e| fail("type", e))?;
        let dims: Vec<i32> = [m, k, n]
            .iter()
            .map(|&d| i32::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| fail("dimensions", "past the library's 32-bit range".into()))?;
        let (m, k, n) = (dims[0], dims[1], dims[2]);
        let h = *self.handle.handle();
        let (ws, _guard) = self.workspace.device_ptr(self.workspace.stream());
        // SAFETY: the handle is live; cublasSetStream resets the workspace to the library's own
        // pool, so ours is set again after it; the workspace outlives every call (it lives
        // with the handle, and the program drops both after its graph).
        unsafe {
            sys::cublasSetStream_v2(h, stream as sys::cudaStream_t)
                .result()
                .map_err(|e| fail("cublasSetStream", e.to_string()))?;
            sys::cublasSetWorkspace_v2(h, ws as *mut _, WORKSPACE_BYTES)
                .result()
                .map_err(|e| fail("cublasSetWorkspace", e.to_string()))?;
        }
        // SAFETY: the caller passes live device buffers of at least these sizes (checked by
        // `Program::verify`).
        unsafe { gemm_col_major(h, ty, (m, k, n), w, a, c, accumulate) }
            .map_err(|e| fail("cublasGemmEx", e.to_string()))
    }
}

/// The library's type for `dtype` (int8 is not routed to cuBLAS).
fn cuda_type(dtype: Dtype) -> Result<sys::cudaDataType, String> {
    match dtype {
        Dtype::F32 => Ok(sys::cudaDataType::CUDA_R_32F),
        Dtype::F16 => Ok(sys::cudaDataType::CUDA_R_16F),
        Dtype::Bf16 => Ok(sys::cudaDataType::CUDA_R_16BF),
        Dtype::I8 => Err("int8 is not routed to cuBLAS".into()),
    }
}

/// cuBLASLt's type for `dtype`.
fn lt_type(dtype: Dtype) -> Result<ltsys::cudaDataType_t, String> {
    match dtype {
        Dtype::F32 => Ok(ltsys::cudaDataType_t::CUDA_R_32F),
        Dtype::F16 => Ok(ltsys::cudaDataType_t::CUDA_R_16F),
        Dtype::Bf16 => Ok(ltsys::cudaDataType_t::CUDA_R_16BF),
        Dtype::I8 => Err("int8 is not routed to cuBLASLt".into()),
    }
}

/// Row-major `C (m × n) = Y · X` (`+ C` when `accumulate`) as cuBLAS's column-major
/// `Cᵀ (n × m, ld n) = X (n × k, ld n) · Y (k × m, ld k)`, fp32 sums, no copies.
///
/// # Safety
/// `x`, `y` and `c` are live device buffers of `n·k`, `k·m` and `m·n` elements of type `ty`
/// on the handle's stream.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_col_major(
    handle: sys::cublasHandle_t,
    ty: sys::cudaDataType,
    (m, k, n): (i32, i32, i32),
    x: u64,
    y: u64,
    c: u64,
    accumulate: bool,
) -> Result<(), cudarc::cublas::result::CublasError> {
    let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0f32 });
    let op = sys::cublasOperation_t::CUBLAS_OP_N;
    // SAFETY: the caller's contract; alpha and beta are f32 as CUBLAS_COMPUTE_32F requires.
    unsafe {
        result::gemm_ex(
            handle,
            op,
            op,
            n,
            m,
            k,
            (&alpha) as *const f32 as *const _,
            x as *const _,
            ty,
            n,
            y as *const _,
            ty,
            k,
            (&beta) as *const f32 as *const _,
            c as *mut _,
            ty,
            n,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
}
