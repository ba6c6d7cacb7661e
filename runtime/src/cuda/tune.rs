//! The GPU side of `spartac tune`: [`GpuTimer`] implements the compiler's
//! `spartac::tune::Timer` with the kernel bench's machinery ([`super::spmm::run_problem`]): the
//! candidate's kernels run on a poisoned output, are checked against an f64 CPU reference of
//! `X·W` on a spread of rows, then timed with CUDA events, the L2 flushed before each timed
//! run, and the median kept.

use super::cases::{round_to, Case, Cover, Problem};
use super::spmm::{run_problem, Check};
use super::CudaDevice;
use rayon::prelude::*;
use spartac::codegen::from_plan::PlannedKernel;
use spartac::codegen::{specialize, Dtype, Orientation, SpmmSpec};
use spartac::plan::suboperator::Orientation as PlanOrientation;
use spartac::plan::OperatorPlan;
use spartac::tesa::patterns::Pattern;
use spartac::tune::{Measurement, Target, Timer};

/// Times candidates on one GPU.
pub struct GpuTimer {
    dev: CudaDevice,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
    /// Timed runs; the median is kept.
    pub reps: usize,
    /// Output rows checked against the CPU reference.
    pub check_rows: usize,
    /// Seed of the random activations (and bias).
    pub seed: u64,
}

impl GpuTimer {
    pub fn new(dev: CudaDevice, warmup: usize, reps: usize) -> GpuTimer {
        GpuTimer { dev, warmup, reps, check_rows: 64, seed: 2026 }
    }

    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }
}

impl Timer for GpuTimer {
    fn target(&self) -> Target {
        Target { arch: self.dev.arch().to_string(), device: self.dev.name().to_string() }
    }

    fn prepare(&mut self, specs: &[SpmmSpec]) {
        let sources: Vec<(String, String)> = specs
            .par_iter()
            .filter_map(|s| specialize(s).ok())
            .flat_map_iter(|k| {
                let pre = k.prepass.map(|p| (p.name, p.source));
                std::iter::once((k.name, k.source)).chain(pre)
            })
            .collect();
        // A kernel that does not compile fails again when measured, with its reason.
        let _ = self.dev.precompile(&sources);
    }

    fn measure(&mut self, op: &OperatorPlan, kernels: &[PlannedKernel]) -> Result<Measurement, String> {
        let Some(first) = kernels.first() else { return Err("no kernels".into()) };
        let dtype = first.spec.dtype;
        let left = op.orientation == PlanOrientation::WeightLeft;
        let mkn = if left { (op.rows, op.cols, op.m) } else { (op.m, op.rows, op.cols) };
        let mut case = Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 1.0 - op.density }, Cover::Planned)
            .with_orientation(if left { Orientation::Left } else { Orientation::Right });
        // What the model lowering runs (`codegen::library_takes`): a dense 16-bit part on
        // cuBLAS, fp32 on our own 3xTF32 kernel.
        case.cublas_dense = matches!(dtype, Dtype::F16 | Dtype::Bf16);
        case.epilogue = kernels.last().map_or(case.epilogue, |pk| pk.spec.epilogue);
        let parts: Vec<Vec<f32>> =
            kernels.iter().map(|pk| pk.weight.iter().map(|v| round_to(dtype, *v)).collect()).collect();
        let mut w = vec![0.0f32; op.rows * op.cols];
        for p in &parts {
            w.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        }
        let mask = w.iter().map(|v| *v == 0.0).collect();
        let specs = kernels.iter().map(|pk| pk.spec.clone()).collect();
        let problem = Problem { mask, w, specs, part_weights: Some(parts) };
        let timing = Some((self.warmup, self.reps.max(1)));
        let r = run_problem(&self.dev, &case, problem, self.seed, Check::Rows(self.check_rows), timing, None)
            .map_err(|e| e.to_string())?;
        let rel_err = if r.all_written { r.rel_norm_err } else { f64::INFINITY };
        let ms = r.ms.ok_or("not timed")?;
        Ok(Measurement { seconds: ms * 1e-3, rel_err })
    }
}
