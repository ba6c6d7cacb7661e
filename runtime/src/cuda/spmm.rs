//! Runs specialized sparse matmuls on the GPU: upload, poison the output, launch every
//! kernel of a cover, check against an f64 CPU reference, time with CUDA events. A kernel's
//! prepass runs before it on a poisoned scratch buffer too, so an element it misses shows.

use super::cases::{round_to, Case, Problem};
use super::tma::{encode_matrix, TensorMap};
use super::{median, CudaDevice, CudaError, DriverContext};
use cudarc::driver::{
    CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use spartac::codegen::{
    library_gemm_fused, specialize, Dtype, Kernel, LibraryEpilogue, LibraryGemm, Mode, Orientation, Prepass,
};
use spartac::kernel_choice::Family;
use spartac::rng::SplitMix64;
use std::path::Path;

/// What to check after the first run.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// Every output row.
    All,
    /// This many rows, spread over the output.
    Rows(usize),
}

/// Resources of one compiled kernel as the driver reports them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelInfo {
    pub name: String,
    pub family: String,
    pub mode: String,
    pub registers: i32,
    pub local_bytes: i32,
    pub smem_bytes: u32,
    pub grid: (u32, u32, u32),
    pub live_instances: usize,
    pub dead_instances: usize,
    /// Block shape `(h, w)` the kernel multiplies (`(1, 1)` fine-grained, `(0, 0)` library).
    pub block: (usize, usize),
    /// The 3xTF32 fine kernel's k8 steps (its work, for `spartac costdb fit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// Its n8 tiles per step (1 or 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_tiles: Option<usize>,
}

/// The outcome of one case.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CaseReport {
    pub label: String,
    pub seed: u64,
    pub kernels: Vec<KernelInfo>,
    /// ‖out − ref‖ / ‖ref‖ over the checked rows.
    pub rel_norm_err: f64,
    /// max |out − ref| / max |ref|.
    pub max_err: f64,
    pub rows_checked: usize,
    /// Every checked element whose reference is finite was overwritten (the poison is gone)
    /// and finite.
    pub all_written: bool,
    /// Checked elements whose reference is NaN or ±Inf (cases with non-finite inputs).
    pub nonfinite_expected: usize,
    /// Checked elements where output and reference differ in being NaN, +Inf, -Inf or finite.
    pub nonfinite_mismatches: usize,
    /// The first such element, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_mismatch: Option<String>,
    /// Median and minimum over the timed runs, milliseconds.
    pub ms: Option<f64>,
    pub ms_min: Option<f64>,
    /// 2 × M × (weight elements the kernels multiply).
    pub flops: f64,
    /// Nonzeros of the weight.
    pub nnz: usize,
}

/// One generated kernel with its packed weight and tables.
struct Part<T> {
    kernel: Kernel,
    func: CudaFunction,
    w: CudaSlice<T>,
    ptr: CudaSlice<i32>,
    idx: CudaSlice<i32>,
    /// The kernel's prepass and the scratch it writes (the kernel's dense operand, fp32).
    prepass: Option<(CudaFunction, CudaSlice<u8>)>,
    /// The tensor map of A, for a kernel that loads A by TMA ([`Kernel::tma_a`]).
    tma_a: Option<TensorMap>,
}

/// One step of a cover: a generated kernel, or a library GEMM (the dense fallback on
/// cuBLAS) followed by the generated epilogue kernel when there is one.
enum Stage<T> {
    Generated(Box<Part<T>>),
    /// The dense fallback as the models run it: cuBLASLt with the bias and a ReLU in the call
    /// where it takes them (`lt`), else cuBLAS after a bias prefill; then its epilogue pass.
    Library {
        gemm: Box<LibraryGemm>,
        blas: std::sync::Arc<super::cublas::Blas>,
        lt: Option<std::sync::Arc<super::cublas::ProgramBlas>>,
        w: CudaSlice<T>,
        prefill: Option<Box<Part<T>>>,
        epilogue: Option<Box<Part<T>>>,
    },
}

/// Runs `case` once with inputs drawn from `seed` on a poisoned output, checks it, then
/// times it when `timing` = (warm-up, repetitions) is given (the L2 is flushed before each
/// timed run, as `triton.testing.do_bench` does). With `dump = (dir, a_file, w_file)`, writes
/// the inputs as `.npy` (files that exist are kept: cases of one size share A).
pub fn run_case(
    dev: &CudaDevice,
    case: &Case,
    seed: u64,
    check: Check,
    timing: Option<(usize, usize)>,
    dump: Option<(&Path, &str, &str)>,
) -> Result<CaseReport, CudaError> {
    run_problem(dev, case, case.problem(seed), seed, check, timing, dump)
}

/// [`run_case`] on a given problem instead of the one `case` generates: `case` gives the
/// shape, dtype, orientation, label and whether dense specs run on cuBLAS; `problem` the
/// weight (zero where pruned), its mask and the specs (with each one's part of the weight)
/// that cover it. The tuner runs a planned operator's own kernels this way.
pub fn run_problem(
    dev: &CudaDevice,
    case: &Case,
    problem: Problem,
    seed: u64,
    check: Check,
    timing: Option<(usize, usize)>,
    dump: Option<(&Path, &str, &str)>,
) -> Result<CaseReport, CudaError> {
    match case.dtype {
        Dtype::F32 => run_typed::<f32>(dev, case, problem, seed, check, timing, dump, |x| x, |x| x, f32::NAN),
        Dtype::F16 => run_typed::<u16>(
            dev,
            case,
            problem,
            seed,
            check,
            timing,
            dump,
            |x| half::f16::from_f32(x).to_bits(),
            |x| half::f16::from_bits(x).to_f32(),
            0x7e00,
        ),
        Dtype::Bf16 => run_typed::<u16>(
            dev,
            case,
            problem,
            seed,
            check,
            timing,
            dump,
            |x| half::bf16::from_f32(x).to_bits(),
            |x| half::bf16::from_bits(x).to_f32(),
            0x7fc0,
        ),
        Dtype::I8 if case.nonfinite => {
            Err(CudaError::Kernel(case.label(), "non-finite inputs are not supported for int8 cases".into()))
        }
        Dtype::I8 => super::spmm_int8::run_problem_int8(dev, case, problem, seed, check, timing, dump),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_typed<T: DeviceRepr + ValidAsZeroBits + Copy + Default>(
    dev: &CudaDevice,
    case: &Case,
    problem: Problem,
    seed: u64,
    check: Check,
    timing: Option<(usize, usize)>,
    dump: Option<(&Path, &str, &str)>,
    enc: fn(f32) -> T,
    dec: fn(T) -> f32,
    poison: T,
) -> Result<CaseReport, CudaError> {
    let (m, k, n) = (case.m, case.k, case.n);
    let left = case.orientation == Orientation::Left;
    let Problem { w, specs, mask, part_weights } = problem;
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xa);
    // The dense operand: A (`M × K`), or B (`K × N`) when the weight is on the left.
    let (a_rows, a_cols) = case.dense_shape();
    let (w_rows, w_cols) = case.weight_shape();
    let mut a: Vec<f32> = (0..a_rows * a_cols).map(|_| round_to(case.dtype, rng.uniform(-1.0, 1.0) as f32)).collect();
    let bias: Vec<f32> = (0..n).map(|_| round_to(case.dtype, rng.uniform(-1.0, 1.0) as f32)).collect();
    for (i, v) in case.nonfinite_inputs(&mask, seed) {
        a[i] = v;
    }
    if let Some((dir, a_name, w_name)) = dump {
        dump_npy(&dir.join(a_name), vec![a_rows, a_cols], &a)?;
        dump_npy(&dir.join(w_name), vec![w_rows, w_cols], &w)?;
    }
    let enc_all = |v: &[f32]| v.iter().map(|x| enc(*x)).collect::<Vec<T>>();
    let a_dev = dev.upload(&enc_all(&a))?;
    let bias_dev = dev.upload(&enc_all(&bias))?;
    let mut c_dev = dev.upload(&vec![poison; m * n])?;
    let mut parts: Vec<Stage<T>> = vec![];
    let compile = |kernel: Kernel, w: &[f32]| -> Result<Part<T>, CudaError> {
        let func = load_function(dev, &kernel)?;
        let packed = if kernel.values_embedded { vec![0.0] } else { kernel.pack_weight(w) };
        let w_dev = dev.upload(&enc_all(if packed.is_empty() { &[0.0] } else { &packed }))?;
        let (ptr, idx) = upload_tables(dev, &kernel)?;
        let prepass = match &kernel.prepass {
            // Poisoned (all-ones bytes: fp32 NaN): an element the prepass misses shows in the check.
            Some(pre) => Some((load_prepass(dev, pre)?, dev.upload(&vec![0xffu8; pre.scratch_bytes])?)),
            None => None,
        };
        let tma_a = match kernel.tma_a {
            Some(b) => {
                let (addr, _sync) = a_dev.device_ptr(dev.stream());
                Some(encode_matrix(addr, a_rows, a_cols, case.dtype, b)?)
            }
            None => None,
        };
        Ok(Part { kernel, func, w: w_dev, ptr, idx, prepass, tma_a })
    };
    for (i, spec) in specs.iter().enumerate() {
        let part_w = part_weights.as_ref().map_or(&w, |p| &p[i]);
        if case.uses_library(spec) {
            // The dense fallback on the library: the weight as stored, then our epilogue.
            // The models' dense fallback (`program::model` lowers library parts so).
            let gemm = library_gemm_fused(spec).map_err(|e| CudaError::Kernel(case.label(), e.to_string()))?;
            let prefill = gemm.prefill.clone().map(|k| compile(k, part_w).map(Box::new)).transpose()?;
            let epilogue = gemm.epilogue.clone().map(|k| compile(k, part_w).map(Box::new)).transpose()?;
            let w_dev = dev.upload(&enc_all(part_w))?;
            let lt = if gemm.fused == LibraryEpilogue::None {
                None
            } else {
                Some(std::sync::Arc::new(super::cublas::ProgramBlas::new(dev)?))
            };
            parts.push(Stage::Library { gemm: Box::new(gemm), blas: dev.blas()?, lt, w: w_dev, prefill, epilogue });
        } else {
            let kernel = specialize(spec).map_err(|e| CudaError::Kernel(case.label(), e.to_string()))?;
            parts.push(Stage::Generated(Box::new(compile(kernel, part_w)?)));
        }
    }
    let launch = |p: &mut Part<T>, c: &mut CudaSlice<T>| -> Result<(), CudaError> {
        if let (Some(pre), Some((func, at))) = (&p.kernel.prepass, &mut p.prepass) {
            let l = pre.launch;
            let cfg = LaunchConfig { grid_dim: l.grid, block_dim: l.block, shared_mem_bytes: l.smem_bytes };
            let mut b = dev.stream().launch_builder(func);
            b.arg(&a_dev).arg(at);
            // SAFETY: `(const T* A, float* At)`, A holds M × K elements and At the
            // `scratch_bytes` the prepass writes (see `Prepass`).
            unsafe { b.launch(cfg) }.ctx("cuLaunchKernel (prepass)")?;
        }
        let l = p.kernel.launch;
        let cfg = LaunchConfig { grid_dim: l.grid, block_dim: l.block, shared_mem_bytes: l.smem_bytes };
        let mut b = dev.stream().launch_builder(&p.func);
        // The dense operand: A as given, or the At its prepass wrote.
        match &p.prepass {
            Some((_, at)) => b.arg(at),
            None => b.arg(&a_dev),
        };
        b.arg(&p.w).arg(&p.ptr).arg(&p.idx).arg(&bias_dev).arg(&mut *c);
        if let Some(map) = &p.tma_a {
            b.arg(map);
        }
        // SAFETY: the arguments match the signature every family shares (see `Kernel`), plus
        // A's tensor map where the kernel takes one, and the buffers hold the sizes the launch
        // geometry covers.
        unsafe { b.launch(cfg) }.ctx("cuLaunchKernel").map(|_| ())
    };
    // 3xTF32 sums big·big + big·small + small·big: an infinite operand meets a zero or
    // opposite-signed remainder of its partner (Inf·0, Inf − Inf), so its ±Inf comes out NaN.
    let tf32 = parts
        .iter()
        .any(|p| matches!(p, Stage::Generated(p) if matches!(p.kernel.family, Family::BlockTf32 | Family::FineTf32)));
    let mut launch_all = |c: &mut CudaSlice<T>| -> Result<(), CudaError> {
        for stage in &mut parts {
            match stage {
                Stage::Generated(p) => launch(p, c)?,
                Stage::Library { gemm, blas, lt, w, prefill, epilogue } => {
                    if let Some(p) = prefill {
                        launch(p.as_mut(), c)?;
                    }
                    match lt {
                        Some(lt) => {
                            let stream = dev.stream();
                            let (pa, _ra) = a_dev.device_ptr(stream);
                            let (pw, _rw) = w.device_ptr(stream);
                            let (pb, _rb) = bias_dev.device_ptr(stream);
                            let (pc, _rc) = c.device_ptr_mut(stream);
                            let pb = if gemm.fused.bias() { pb } else { 0 };
                            let relu = matches!(gemm.fused, LibraryEpilogue::Relu | LibraryEpilogue::BiasRelu);
                            lt.gemm_lt_on(
                                stream.cu_stream(),
                                gemm.dtype,
                                (gemm.m, gemm.k, gemm.n),
                                (pa, pw, pc, pc, pb),
                                relu,
                                gemm.accumulate,
                            )?;
                        }
                        None => blas.gemm(gemm, &a_dev, w, c)?,
                    }
                    if let Some(p) = epilogue {
                        launch(p.as_mut(), c)?;
                    }
                }
            }
        }
        Ok(())
    };
    launch_all(&mut c_dev)?;
    dev.synchronize().map_err(|e| CudaError::Kernel(case.label(), format!("kernel failed: {e}")))?;
    let out: Vec<f32> = dev.download(&c_dev)?.into_iter().map(dec).collect();

    // Reference on the checked rows: f64 over the weight's nonzeros.
    let rows = check.rows(m);
    let (nz, nnz) = nonzeros_by_row(&mask, &w, w_rows, w_cols);
    let mut err = ErrorStats { inf_as_nan: tf32, ..ErrorStats::default() };
    let epilogue = specs.last().map(|s| s.epilogue).unwrap_or(spartac::codegen::Epilogue::NONE);
    for &r in &rows {
        let acc = reference_row(left, r, (k, n), &a, &nz);
        for c in 0..n {
            err.observe(r, c, out[r * n + c] as f64, epilogue.apply(acc[c], bias[c] as f64));
        }
    }
    let (ms, ms_min) = time_launches(dev, timing, || launch_all(&mut c_dev))?;
    let info = |p: &Part<T>| KernelInfo::of(&p.kernel, &p.func);
    let mut kernels = vec![];
    let mut flops = 0.0;
    for stage in &parts {
        match stage {
            Stage::Generated(p) => {
                kernels.push(info(p));
                flops += p.kernel.flops();
            }
            Stage::Library { gemm, prefill, epilogue, .. } => {
                kernels.extend(prefill.iter().map(|p| info(p)));
                kernels.push(KernelInfo {
                    name: "cublasGemmEx".into(),
                    family: "cublas".into(),
                    mode: "library".into(),
                    registers: -1,
                    local_bytes: -1,
                    smem_bytes: 0,
                    grid: (0, 0, 0),
                    live_instances: 0,
                    dead_instances: 0,
                    block: (0, 0),
                    steps: None,
                    n_tiles: None,
                });
                kernels.extend(epilogue.iter().map(|p| info(p)));
                flops += 2.0 * (gemm.m * gemm.k * gemm.n) as f64;
            }
        }
    }
    let (rel_norm_err, max_err, all_written) = err.finish();
    Ok(CaseReport {
        label: case.label(),
        seed,
        kernels,
        rel_norm_err,
        max_err,
        rows_checked: rows.len(),
        all_written,
        nonfinite_expected: err.nonfinite_expected,
        nonfinite_mismatches: err.nonfinite_mismatches,
        first_mismatch: err.first_mismatch,
        ms,
        ms_min,
        flops,
        nnz,
    })
}

impl Check {
    /// The output rows to check among `m`.
    pub(super) fn rows(self, m: usize) -> Vec<usize> {
        match self {
            Check::All => (0..m).collect(),
            Check::Rows(r) => (0..r.min(m)).map(|i| i * m / r.min(m)).collect(),
        }
    }
}

impl KernelInfo {
    pub(super) fn of(kernel: &Kernel, func: &CudaFunction) -> KernelInfo {
        KernelInfo {
            name: kernel.name.clone(),
            family: kernel.family.name().into(),
            mode: format!("{:?}", kernel.mode),
            registers: func.num_regs().unwrap_or(-1),
            local_bytes: func.local_size_bytes().unwrap_or(-1),
            smem_bytes: kernel.launch.smem_bytes,
            grid: kernel.launch.grid,
            live_instances: kernel.live_instances,
            dead_instances: kernel.dead_instances,
            block: kernel.block,
            steps: kernel.tensor_steps(),
            n_tiles: kernel.tensor_n_tiles(),
        }
    }
}

/// The weight's kept elements per weight row, as (column, value), and how many there are.
/// Pruned elements are left out: the sparse kernels skip them, so a NaN or Inf of the dense
/// operand meets only kept weights (`0 · Inf` never happens on either side).
pub(super) fn nonzeros_by_row(
    mask: &[bool],
    w: &[f32],
    w_rows: usize,
    w_cols: usize,
) -> (Vec<Vec<(usize, f64)>>, usize) {
    let mut nz: Vec<Vec<(usize, f64)>> = vec![vec![]; w_rows];
    let mut nnz = 0;
    for r in 0..w_rows {
        for c in 0..w_cols {
            if !mask[r * w_cols + c] {
                nz[r].push((c, w[r * w_cols + c] as f64));
                nnz += 1;
            }
        }
    }
    (nz, nnz)
}

/// Output row `r` of the product before the epilogue, in f64 with IEEE semantics (a NaN or
/// ±Inf of the dense operand spreads to every output it meets through a kept weight; +Inf
/// and -Inf in one sum give NaN): `A[r, :]·W` on the right (`a` is A, `M × K`), `W[r, :]·B`
/// on the left (`a` is B, `K × N`). `nz` as [`nonzeros_by_row`] gives it.
pub(super) fn reference_row(
    left: bool,
    r: usize,
    (k, n): (usize, usize),
    a: &[f32],
    nz: &[Vec<(usize, f64)>],
) -> Vec<f64> {
    let mut acc = vec![0.0f64; n];
    if left {
        // C[r, :] = Σ_kk W[r, kk] · B[kk, :]
        for &(kk, v) in &nz[r] {
            for (c, x) in acc.iter_mut().enumerate() {
                *x += v * a[kk * n + c] as f64;
            }
        }
    } else {
        for kk in 0..k {
            let av = a[r * k + kk] as f64;
            for &(c, v) in &nz[kk] {
                acc[c] += av * v;
            }
        }
    }
    acc
}

/// Output against reference: relative-norm and max errors over the elements whose reference
/// is finite, whether each of those was overwritten (poison gone) and finite, and the
/// elements whose reference is NaN or ±Inf, which must match exactly: NaN for NaN, the same
/// signed Inf for Inf. (A NaN poison left where the reference is NaN cannot be told from a
/// NaN written; the finite elements of the same kernels still show unwritten ones.)
#[derive(Default)]
pub(super) struct ErrorStats {
    diff2: f64,
    ref2: f64,
    max_diff: f64,
    max_ref: f64,
    unwritten: bool,
    /// A NaN where the reference is ±Inf passes (the 3xTF32 kernels: non-finite stays
    /// non-finite, the Inf's sign is lost).
    pub(super) inf_as_nan: bool,
    pub(super) nonfinite_expected: usize,
    pub(super) nonfinite_mismatches: usize,
    pub(super) first_mismatch: Option<String>,
}

impl ErrorStats {
    /// One output element, at `(row, col)` of C.
    pub(super) fn observe(&mut self, row: usize, col: usize, got: f64, want: f64) {
        if !want.is_finite() {
            self.nonfinite_expected += 1;
        }
        if !got.is_finite() || !want.is_finite() {
            // A finite reference with a non-finite output: poison left, or a NaN or Inf made.
            self.unwritten |= want.is_finite();
            let same = (got.is_nan() && want.is_nan())
                || (got.is_infinite() && got == want)
                || (self.inf_as_nan && got.is_nan() && want.is_infinite());
            if !same {
                self.nonfinite_mismatches += 1;
                self.first_mismatch
                    .get_or_insert_with(|| format!("row {row} column {col}: got {got}, reference {want}"));
            }
            return;
        }
        let d = got - want;
        self.diff2 += d * d;
        self.ref2 += want * want;
        self.max_diff = self.max_diff.max(d.abs());
        self.max_ref = self.max_ref.max(want.abs());
    }

    /// `(‖out − ref‖ / ‖ref‖, max |out − ref| / max |ref|, all written)`.
    pub(super) fn finish(&self) -> (f64, f64, bool) {
        let rel = if self.ref2 > 0.0 { (self.diff2 / self.ref2).sqrt() } else { self.diff2.sqrt() };
        let max = if self.max_ref > 0.0 { self.max_diff / self.max_ref } else { self.max_diff };
        (rel, max, !self.unwritten)
    }
}

/// The kernel's function, with the dynamic shared-memory limit raised when it needs more
/// than the default 48 KB.
pub(super) fn load_function(dev: &CudaDevice, kernel: &Kernel) -> Result<CudaFunction, CudaError> {
    let func = dev.function(&kernel.name, &kernel.source, &kernel.name)?;
    if kernel.launch.smem_bytes > 48 * 1024 {
        func.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            kernel.launch.smem_bytes as i32,
        )
        .ctx("cuFuncSetAttribute")?;
    }
    Ok(func)
}

/// A kernel's prepass (it takes no dynamic shared memory).
fn load_prepass(dev: &CudaDevice, pre: &Prepass) -> Result<CudaFunction, CudaError> {
    dev.function(&pre.name, &pre.source, &pre.name)
}

/// The kernel's `ptr`/`idx` tables on the device. A kernel that embeds them still takes the
/// two pointer arguments: it gets a one-word buffer each, which it never reads.
pub(super) fn upload_tables(dev: &CudaDevice, kernel: &Kernel) -> Result<(CudaSlice<i32>, CudaSlice<i32>), CudaError> {
    let tables = kernel.mode == Mode::IndexStream;
    let nonempty = |v: &[i32]| if tables && !v.is_empty() { v.to_vec() } else { vec![0] };
    Ok((dev.upload(&nonempty(&kernel.ptr))?, dev.upload(&nonempty(&kernel.device_idx()))?))
}

/// Median and minimum milliseconds of `launch` over `timing = (warm-up, runs)`, the L2
/// flushed before each timed run; `(None, None)` without timing.
pub(super) fn time_launches(
    dev: &CudaDevice,
    timing: Option<(usize, usize)>,
    mut launch: impl FnMut() -> Result<(), CudaError>,
) -> Result<(Option<f64>, Option<f64>), CudaError> {
    let Some((warmup, reps)) = timing else { return Ok((None, None)) };
    let mut flush = dev.zeros::<u8>(256 << 20)?;
    let times = dev.time_ms(warmup, reps, Some(&mut flush), |_| launch())?;
    Ok((Some(median(&times)), times.iter().copied().reduce(f64::min)))
}

/// Writes `v` as an f32 `.npy` unless the file exists (inputs shared by several cases).
pub(super) fn dump_npy(path: &Path, shape: Vec<usize>, v: &[f32]) -> Result<(), CudaError> {
    use spartac::ir::{Data, Tensor};
    if path.exists() {
        return Ok(());
    }
    let fail = |e: String| CudaError::Kernel(path.display().to_string(), e);
    let t = Tensor::new(shape, Data::F32(v.to_vec())).ok_or_else(|| fail("shape does not match".into()))?;
    let bytes = crate::npz::write_npy(&t).map_err(|e| fail(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{nonzeros_by_row, reference_row, ErrorStats};
    use crate::cuda::cases::Case;
    use spartac::codegen::{Activation, Dtype, Epilogue};
    use spartac::tesa::patterns::Pattern;

    /// W (`K = 4 × N = 3`): column 0 keeps K indices 0 and 1, column 1 only 2, column 2
    /// nothing; the pruned elements are zeros the reference never multiplies.
    fn weight() -> (Vec<bool>, Vec<f32>) {
        #[rustfmt::skip]
        let kept = [
            true, false, false,
            true, false, false,
            false, true, false,
            false, false, false,
        ];
        let w = [0.5, 0.0, 0.0, -0.25, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0];
        (kept.iter().map(|k| !k).collect(), w.to_vec())
    }

    fn rows_of(a: &[f32]) -> Vec<Vec<f64>> {
        let (mask, w) = weight();
        let (nz, nnz) = nonzeros_by_row(&mask, &w, 4, 3);
        assert_eq!(nnz, 3);
        (0..a.len() / 4).map(|r| reference_row(false, r, (4, 3), a, &nz)).collect()
    }

    #[test]
    fn nan_and_inf_in_a_reach_only_the_columns_with_kept_weights() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        #[rustfmt::skip]
        let a = [
            nan, 1.0, 1.0, 1.0,   // column 0 NaN, column 1 finite
            1.0, inf, 1.0, 1.0,   // -0.25 · Inf: column 0 -Inf
            inf, inf, 1.0, 1.0,   // 0.5 · Inf - 0.25 · Inf: NaN
            1.0, 1.0, -inf, nan,  // K index 3 keeps nothing: the NaN goes nowhere
        ];
        let c = rows_of(&a);
        assert!(c[0][0].is_nan() && c[0][1] == 2.0 && c[0][2] == 0.0);
        assert!(c[1][0] == f64::NEG_INFINITY && c[1][1] == 2.0);
        assert!(c[2][0].is_nan());
        assert!(c[3][0] == 0.25 && c[3][1] == f64::NEG_INFINITY && c[3][2] == 0.0);
        // ReLU keeps NaN and clamps -Inf; Clip bounds ±Inf and keeps NaN.
        let relu = Epilogue { bias: true, activation: Activation::Relu };
        assert!(relu.apply(c[0][0], 1.0).is_nan());
        assert_eq!(relu.apply(c[1][0], 1.0), 0.0);
        let clip = Epilogue { bias: false, activation: Activation::Clip { lo: -0.5, hi: 0.5 } };
        assert_eq!((clip.apply(f64::INFINITY, 0.0), clip.apply(f64::NEG_INFINITY, 0.0)), (0.5, -0.5));
        assert!(clip.apply(f64::NAN, 0.0).is_nan());
    }

    #[test]
    fn nonfinite_elements_must_match_exactly_and_stay_out_of_the_norms() {
        let mut stats = ErrorStats::default();
        stats.observe(0, 0, f64::NAN, f64::NAN);
        stats.observe(0, 1, f64::INFINITY, f64::INFINITY);
        stats.observe(0, 2, f64::NEG_INFINITY, f64::NEG_INFINITY);
        stats.observe(0, 3, 1.0, 1.0);
        let (rel, max, written) = stats.finish();
        assert_eq!((rel, max, written), (0.0, 0.0, true));
        assert_eq!((stats.nonfinite_expected, stats.nonfinite_mismatches), (3, 0));
        // A finite output where the reference is NaN, and the wrong Inf.
        stats.observe(4, 7, 0.5, f64::NAN);
        stats.observe(4, 8, f64::INFINITY, f64::NEG_INFINITY);
        assert_eq!(stats.nonfinite_mismatches, 2);
        assert_eq!(stats.first_mismatch.as_deref(), Some("row 4 column 7: got 0.5, reference NaN"));
        // NaN for an Inf: a mismatch, unless the kernel is a 3xTF32 one; a finite value never passes.
        stats.observe(5, 0, f64::NAN, f64::INFINITY);
        assert_eq!(stats.nonfinite_mismatches, 3);
        let mut tf32 = ErrorStats { inf_as_nan: true, ..ErrorStats::default() };
        tf32.observe(0, 0, f64::NAN, f64::NEG_INFINITY);
        assert_eq!(tf32.nonfinite_mismatches, 0);
        tf32.observe(0, 1, 2.0, f64::INFINITY);
        assert_eq!(tf32.nonfinite_mismatches, 1);
        assert!(stats.finish().0.is_finite() && stats.finish().2);
        // A NaN where the reference is finite: poison left or a NaN made; either fails.
        stats.observe(5, 0, f64::NAN, 2.0);
        assert_eq!(stats.nonfinite_mismatches, 4);
        assert!(!stats.finish().2 && stats.finish().0 == 0.0);
    }

    #[test]
    fn nonfinite_inputs_land_on_kept_k_indices_of_four_rows() {
        let pattern = Pattern::Block { bh: 32, bw: 32, sparsity: 0.8 };
        let case = Case::new((256, 512, 512), Dtype::F32, pattern, crate::cuda::cases::Cover::Block(32, 32));
        let mask = case.problem(3).mask;
        assert!(case.nonfinite_inputs(&mask, 3).is_empty());
        let case = case.with_nonfinite();
        assert!(case.label().ends_with(" +nonfinite"));
        let inputs = case.nonfinite_inputs(&mask, 3);
        let bits = |v: &[(usize, f32)]| v.iter().map(|(i, x)| (*i, x.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(&inputs), bits(&case.nonfinite_inputs(&mask, 3)), "deterministic from the seed");
        let rows: Vec<usize> = inputs.iter().map(|(i, _)| i / 512).collect();
        assert_eq!(rows, [0, 85, 170, 255, 255]);
        assert!(inputs[0].1.is_nan());
        assert_eq!(
            inputs[1..].iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            [f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY, f32::NEG_INFINITY]
        );
        for (i, _) in &inputs {
            let kk = i % 512;
            assert!((0..512).any(|c| !mask[kk * 512 + c]), "K index {kk} keeps no weight");
        }
    }
}
