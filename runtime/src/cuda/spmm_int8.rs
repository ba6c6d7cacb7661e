//! Runs int8 cases on the GPU: the activation is quantized per tensor and the weight per
//! output column (`codegen::quant`), the int8 kernels get the quantized operands and the
//! scales, and the reference is the exact integer sum (i64) of the same quantized operands
//! followed by the same dequantization and epilogue in f64. The integer sum is exact on
//! both sides, so the only error left is the fp16 rounding of the output.

use super::cases::{round_to, Case, Problem};
use super::spmm::{dump_npy, load_function, time_launches, upload_tables, CaseReport, Check, ErrorStats, KernelInfo};
use super::tma::{encode_matrix, TensorMap};
use super::{CudaDevice, CudaError, DriverContext};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use spartac::codegen::quant::{quantize_per_column, quantize_per_tensor, quantize_with_column_scales};
use spartac::codegen::{specialize, Dtype, Epilogue, Kernel};
use spartac::rng::SplitMix64;
use std::path::Path;

struct Part {
    kernel: Kernel,
    func: CudaFunction,
    w: CudaSlice<i8>,
    ptr: CudaSlice<i32>,
    idx: CudaSlice<i32>,
    /// A's tensor map, for a kernel that loads A by TMA (the Hopper 2:4 kernel).
    tma_a: Option<TensorMap>,
}

/// fp16 quiet NaN: the poison of the output.
const POISON: u16 = 0x7e00;

/// [`super::spmm::run_case`] for [`Dtype::I8`] cases. With `dump`, writes the quantized
/// operands (integers, as f32 `.npy`) for the peers, which multiply the same int8 matrices.
pub fn run_case_int8(
    dev: &CudaDevice,
    case: &Case,
    seed: u64,
    check: Check,
    timing: Option<(usize, usize)>,
    dump: Option<(&Path, &str, &str)>,
) -> Result<CaseReport, CudaError> {
    run_problem_int8(dev, case, case.problem(seed), seed, check, timing, dump)
}

/// [`run_case_int8`] on a given problem (see [`super::spmm::run_problem`]).
pub fn run_problem_int8(
    dev: &CudaDevice,
    case: &Case,
    problem: Problem,
    seed: u64,
    check: Check,
    timing: Option<(usize, usize)>,
    dump: Option<(&Path, &str, &str)>,
) -> Result<CaseReport, CudaError> {
    let (m, k, n) = (case.m, case.k, case.n);
    let Problem { w, specs, mask, part_weights } = problem;
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xa);
    let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let bias: Vec<f32> = (0..n).map(|_| round_to(Dtype::F16, rng.uniform(-1.0, 1.0) as f32)).collect();
    let (a_q, scale_a) = quantize_per_tensor(&a);
    let (w_q, scale_w) = quantize_per_column(&w, k, n);
    if let Some((dir, a_name, w_name)) = dump {
        dump_npy(&dir.join(a_name), vec![m, k], &a_q.iter().map(|v| *v as f32).collect::<Vec<_>>())?;
        dump_npy(&dir.join(w_name), vec![k, n], &w_q.iter().map(|v| *v as f32).collect::<Vec<_>>())?;
    }
    let f16 = |v: &[f32]| v.iter().map(|x| half::f16::from_f32(*x).to_bits()).collect::<Vec<u16>>();
    let a_dev = dev.upload(&a_q)?;
    let bias_dev = dev.upload(&f16(&bias))?;
    let scale_dev = dev.upload(&scale_w)?;
    let mut c_dev = dev.upload(&vec![POISON; m * n])?;
    let mut parts = vec![];
    for (i, spec) in specs.iter().enumerate() {
        if spec.dtype != Dtype::I8 {
            return Err(CudaError::Kernel(case.label(), format!("spec {i} is {}, not i8", spec.dtype.name())));
        }
        let kernel = specialize(spec).map_err(|e| CudaError::Kernel(case.label(), e.to_string()))?;
        let func = load_function(dev, &kernel)?;
        // Parts of one weight share the scales of the whole weight.
        let part_q = match &part_weights {
            Some(p) => quantize_with_column_scales(&p[i], n, &scale_w),
            None => w_q.clone(),
        };
        let packed = kernel.pack_weight_i8(&part_q);
        let w_dev = dev.upload(if packed.is_empty() { &[0i8][..] } else { &packed })?;
        let (ptr, idx) = upload_tables(dev, &kernel)?;
        let tma_a = match kernel.tma_a {
            Some(b) => {
                let (addr, _sync) = a_dev.device_ptr(dev.stream());
                Some(encode_matrix(addr, m, k, Dtype::I8, b)?)
            }
            None => None,
        };
        parts.push(Part { kernel, func, w: w_dev, ptr, idx, tma_a });
    }
    let launch_all = |c: &mut CudaSlice<u16>| -> Result<(), CudaError> {
        for p in &parts {
            let l = p.kernel.launch;
            let cfg = LaunchConfig { grid_dim: l.grid, block_dim: l.block, shared_mem_bytes: l.smem_bytes };
            let mut b = dev.stream().launch_builder(&p.func);
            b.arg(&a_dev).arg(&p.w).arg(&p.ptr).arg(&p.idx).arg(&bias_dev).arg(&mut *c).arg(&scale_dev).arg(&scale_a);
            if let Some(map) = &p.tma_a {
                b.arg(map);
            }
            // SAFETY: the arguments match the int8 signature (see `Kernel`), plus A's tensor
            // map where the kernel takes one, and the buffers hold the sizes the launch
            // geometry covers.
            unsafe { b.launch(cfg) }.ctx("cuLaunchKernel")?;
        }
        Ok(())
    };
    launch_all(&mut c_dev)?;
    dev.synchronize().map_err(|e| CudaError::Kernel(case.label(), format!("kernel failed: {e}")))?;
    let out: Vec<f32> = dev.download(&c_dev)?.into_iter().map(|x| half::f16::from_bits(x).to_f32()).collect();

    // Reference: exact integer sums over the weight's nonzeros, then dequant + epilogue in f64.
    let rows = check.rows(m);
    let mut nz: Vec<Vec<(usize, i64)>> = vec![vec![]; k];
    let mut nnz = 0;
    for r in 0..k {
        for c in 0..n {
            if !mask[r * n + c] {
                nz[r].push((c, w_q[r * n + c] as i64));
                nnz += 1;
            }
        }
    }
    let epilogue = specs.last().map(|s| s.epilogue).unwrap_or(Epilogue::NONE);
    let mut err = ErrorStats::default();
    for &r in &rows {
        let mut acc = vec![0i64; n];
        for kk in 0..k {
            let av = a_q[r * k + kk] as i64;
            for &(c, v) in &nz[kk] {
                acc[c] += av * v;
            }
        }
        for c in 0..n {
            let x = scale_a as f64 * scale_w[c] as f64 * acc[c] as f64;
            err.observe(r, c, out[r * n + c] as f64, epilogue.apply(x, bias[c] as f64));
        }
    }
    let (rel_norm_err, max_err, all_written) = err.finish();
    let (ms, ms_min) = time_launches(dev, timing, || launch_all(&mut c_dev))?;
    let kernels = parts.iter().map(|p| KernelInfo::of(&p.kernel, &p.func)).collect();
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
        flops: parts.iter().map(|p| p.kernel.flops()).sum(),
        nnz,
    })
}
