//! The candidates of one operator: every alternative the planner considered (covers by shape,
//! one-shape covers, 1×1, 2:4 + rest, dense; `plan_site_alternatives`) crossed with the kernel
//! choices that matter for its dtype ([`kernel_variants`]), each specialized on the CPU.
//!
//! Two candidates whose kernels come out identical (the same sources and grids) are one; a
//! kernel choice the specializer refuses for an alternative is inapplicable. Each candidate's
//! kernels become a calibration [`Sample`] ([`sample_of`]: the terms of the cost model that
//! price them), which the cost model predicts; candidates predicted slower than the pruning
//! factor times the best prediction are not measured, except the model's own choice (the
//! extracted alternative on its default kernels), the baseline a tuned choice is measured against.

use crate::codegen::from_plan::{
    activation_format, kernels_for_operator_with, planned_specs, ActivationFormat, PlannedKernel,
};
use crate::codegen::{specialize, CodegenError, Engine, Family, FineTf32Work, Kernel, Tile};
use crate::ir::Graph;
use crate::kernel_choice::fine_tf32::heaviest_cta;
use crate::plan::calibrate::{predict, Geometry, Part, PartKernel, Sample};
use crate::plan::cover::BlockShape;
use crate::plan::egraph::SplitKind;
use crate::plan::site::Site;
use crate::plan::suboperator::Orientation;
use crate::plan::{plan_site_alternatives, KernelChoice, OperatorPlan, PlanOptions};
use crate::Error;
use rayon::prelude::*;

/// The 3xTF32 fine tiles tried besides the specializer's own: 64 rows × 16 groups of 8
/// columns, k in chunks of 192 (the HPEC layers' tile: fewer serial k-steps per warp, for few
/// rows), and 128 rows × 8 groups of 16 columns, chunks of 64 (more rows per CTA, for many).
pub fn fine_tiles() -> [Tile; 2] {
    [
        Tile { group: 16, k_rows: 6, n_tiles: 1, ..Tile::new(64, 0) },
        Tile { group: 8, k_rows: 2, n_tiles: 2, ..Tile::new(128, 0) },
    ]
}

/// The kernel choices worth measuring for `op`: fp32 the specializer's, all on SIMT, and (on
/// the right) the 3xTF32 fine kernel on each of [`fine_tiles`]; fp16/bf16 the specializer's
/// and mma.sync; other dtypes the specializer's only.
pub fn kernel_variants(op: &OperatorPlan) -> Vec<KernelChoice> {
    match op.dtype.as_str() {
        "f32" => {
            let mut v = vec![KernelChoice::Auto, KernelChoice::Engine(Engine::Simt)];
            if op.orientation == Orientation::WeightRight {
                v.extend(fine_tiles().map(KernelChoice::FineTf32));
            }
            v
        }
        "f16" | "bf16" => vec![KernelChoice::Auto, KernelChoice::Engine(Engine::MmaSync)],
        _ => vec![KernelChoice::Auto],
    }
}

/// One way to run an operator: an alternative on a kernel choice.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Index into the operator's `considered` (and into [`Candidates::plans`]).
    pub alternative: usize,
    pub split: SplitKind,
    pub label: String,
    pub kernel: KernelChoice,
    /// Its kernels as a calibration sample (`seconds` 0).
    pub sample: Sample,
    /// The cost model's time for the sample.
    pub predicted_s: f64,
    /// The model's own choice: the extracted alternative on `KernelChoice::Auto` (or the
    /// candidate whose kernels are the same).
    pub is_model_choice: bool,
}

impl Candidate {
    /// `by-shape 32x32 f32 ×12 + 1x1 f32 ×80 [auto]`.
    pub fn name(&self) -> String {
        format!("{} {} [{}]", self.split.name(), self.label, self.kernel.label())
    }
}

/// Everything enumerated for one operator.
#[derive(Clone, Debug)]
pub struct Candidates {
    /// The plan the cost model extracts.
    pub extracted: OperatorPlan,
    /// One plan per alternative, in the order of `considered`.
    pub plans: Vec<OperatorPlan>,
    /// To measure, in enumeration order.
    pub survivors: Vec<Candidate>,
    /// Predicted slower than the pruning factor times the best prediction.
    pub pruned: Vec<Candidate>,
    /// `(candidate, why)` for kernel choices the specializer refuses.
    pub inapplicable: Vec<(String, String)>,
    /// Candidates whose kernels equal an earlier one's.
    pub duplicates: usize,
    /// The logical weight's values.
    pub weight: Vec<f32>,
    pub activation: ActivationFormat,
}

impl Candidates {
    /// The plan of `c`: its alternative, on its kernel choice.
    pub fn plan_of(&self, c: &Candidate) -> OperatorPlan {
        let mut op = self.plans[c.alternative].clone();
        op.kernel = c.kernel;
        op
    }

    /// The kernels of `c` with the weights they multiply (what the model lowering launches).
    pub fn kernels(&self, c: &Candidate) -> Result<Vec<PlannedKernel>, CodegenError> {
        kernels_for_operator_with(&self.plan_of(c), &self.weight, self.activation)
    }
}

/// The identity of a candidate's kernels: one [`kernel_identity`] each.
type KernelsKey = Vec<(u64, (u32, u32, u32))>;

/// A kernel's source, its prepass's and its tables, hashed (a kernel that streams its tables
/// has one source for many patterns), and its grid.
fn kernel_identity(k: &Kernel) -> (u64, (u32, u32, u32)) {
    let mut h = crate::hash::Fnv64::new();
    h.add(k.source.as_bytes());
    if let Some(p) = &k.prepass {
        h.add(p.source.as_bytes());
    }
    for table in [&k.ptr, &k.idx, &k.steps] {
        h.add(&(table.len() as u64).to_le_bytes());
        table.iter().for_each(|v| h.add(&v.to_le_bytes()));
    }
    h.add(&(k.live_instances as u64).to_le_bytes());
    (h.finish(), k.launch.grid)
}

/// Enumerates, specializes (in parallel), predicts and prunes the candidates of `site`.
pub fn enumerate(graph: &Graph, site: &Site, opts: &PlanOptions, prune_factor: f64) -> Result<Candidates, Error> {
    let mut plans = plan_site_alternatives(graph, site, opts)?;
    let extracted = plans.remove(0);
    let weight = site.weight_values(graph);
    let activation = activation_format(graph, &extracted);
    let mut out = Candidates {
        extracted,
        plans,
        survivors: vec![],
        pruned: vec![],
        inapplicable: vec![],
        duplicates: 0,
        weight,
        activation,
    };
    let Some(model_alt) = out.extracted.chosen else { return Ok(out) };
    let variants = kernel_variants(&out.extracted);
    let pairs: Vec<(usize, KernelChoice)> =
        (0..out.plans.len()).flat_map(|a| variants.iter().map(move |k| (a, *k))).collect();
    let specialized: Vec<Result<(KernelsKey, Sample), String>> = pairs
        .par_iter()
        .map(|&(a, kernel)| {
            let mut op = out.plans[a].clone();
            op.kernel = kernel;
            let planned = planned_specs(&op, out.activation).map_err(|e| e.to_string())?;
            let kernels: Vec<Kernel> =
                planned.iter().map(|pk| specialize(&pk.spec)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
            let key = kernels.iter().map(kernel_identity).collect();
            Ok((key, sample_of(&op, &planned, &kernels)))
        })
        .collect();
    let mut seen: Vec<(KernelsKey, usize)> = vec![];
    let mut all: Vec<Candidate> = vec![];
    for (&(a, kernel), result) in pairs.iter().zip(specialized) {
        let considered = &out.plans[a].considered[a];
        let is_model = a == model_alt && kernel == KernelChoice::Auto;
        let (key, sample) = match result {
            Ok(ks) => ks,
            Err(why) => {
                let name = format!("{} {} [{}]", considered.split.name(), considered.label, kernel.label());
                out.inapplicable.push((name, why));
                continue;
            }
        };
        if let Some((_, i)) = seen.iter().find(|(k, _)| *k == key) {
            all[*i].is_model_choice |= is_model;
            out.duplicates += 1;
            continue;
        }
        let predicted_s = predict(&opts.cost, &sample)?;
        seen.push((key, all.len()));
        all.push(Candidate {
            alternative: a,
            split: considered.split,
            label: considered.label.clone(),
            kernel,
            sample,
            predicted_s,
            is_model_choice: is_model,
        });
    }
    let best = all.iter().map(|c| c.predicted_s).fold(f64::INFINITY, f64::min);
    for c in all {
        if c.predicted_s <= prune_factor * best || c.is_model_choice {
            out.survivors.push(c);
        } else {
            out.pruned.push(c);
        }
    }
    Ok(out)
}

/// The calibration sample of `op`'s kernels: one part per kernel, priced by the model's term for
/// its family (the 3xTF32 fine kernel by its steps and column tiles, the 3xTF32 block kernel by
/// its own entry, the 2:4 kernels by the 2:4 rate, every other by the per-shape table,
/// element-sparse kernels as 1×1 blocks),
/// with its launch [`Geometry`]. The dense alternative is a dense sample whose parts say which
/// dense kernel ran it (the 3xTF32 or the SIMT one: each has its own dense rate). `m`, `k`, `n`
/// are the planner's (`op.m` and the logical weight's shape).
pub fn sample_of<W>(op: &OperatorPlan, planned: &[PlannedKernel<W>], kernels: &[Kernel]) -> Sample {
    let split = op.chosen.map(|c| op.considered[c].split);
    let label = op.chosen.map(|c| op.considered[c].label.clone()).unwrap_or_default();
    let dense = split == Some(SplitKind::Dense);
    let parts = planned
        .iter()
        .zip(kernels)
        .filter(|(_, k)| k.family != Family::Epilogue)
        .map(|(pk, k)| {
            let (h, w) = pk.spec.block;
            let kernel = match k.family {
                Family::FineTf32 => PartKernel::FineTf32(FineTf32Work {
                    steps: k.tensor_steps().unwrap_or(0),
                    nt: k.tensor_n_tiles().unwrap_or(1),
                    col_tiles: k.launch.grid.0 as usize,
                    tile: (0, 0, 0),
                    heaviest: geometry(k).heaviest,
                }),
                Family::BlockTf32 => PartKernel::Tf32Blocks,
                Family::TwoFour | Family::TwoFourWgmma => PartKernel::TwoFour,
                _ => PartKernel::Blocks,
            };
            Part { shape: BlockShape::new(h, w), n_blocks: k.live_instances, kernel, geometry: Some(geometry(k)) }
        })
        .collect();
    Sample {
        label: format!("{} {label} [{}]", op.node, op.kernel.label()),
        dtype: op.dtype.clone(),
        m: op.m,
        k: op.rows,
        n: op.cols,
        dense,
        parts,
        seconds: 0.0,
    }
}

/// Shared memory of one SM on sm_90 (228 KiB, 1 KiB of it reserved per resident CTA) and the
/// threads and CTAs it holds at most.
const SMEM_PER_SM: usize = 228 * 1024;
const THREADS_PER_SM: usize = 2048;
const CTAS_PER_SM: usize = 32;

/// The launch of `k` as the cost model's wave terms see it: its CTAs, how many fit on one SM
/// (by threads and shared memory; registers are not known before compilation), and the
/// heaviest CTA's sequential work (see [`Geometry`]).
pub fn geometry(k: &Kernel) -> Geometry {
    let (gx, gy, gz) = k.launch.grid;
    let (bx, by, bz) = k.launch.block;
    let threads = (bx * by * bz).max(1) as usize;
    let by_smem = SMEM_PER_SM / (k.launch.smem_bytes as usize + 1024);
    let per_sm = (THREADS_PER_SM / threads).min(by_smem).clamp(1, CTAS_PER_SM);
    let (m, depth, _) = k.spec_shape;
    let tile_rows = m.div_ceil(gy.max(1) as usize);
    let run = |i: usize| (k.ptr[i + 1] - k.ptr[i]).max(0) as usize;
    let (heaviest, unit_fmas) = match k.family {
        Family::BlockSimt | Family::BlockMma | Family::BlockTf32 | Family::BlockInt8 | Family::Dense => {
            ((0..k.ptr.len().saturating_sub(1)).map(run).max().unwrap_or(0), tile_rows * k.block.0 * k.block.1)
        }
        // Runs per (k-chunk, column group), one group per consumer warp.
        Family::FineTf32 => match k.fine {
            Some(t) if k.ptr.len() > 1 => {
                let chunks = depth.div_ceil(t.chunk.max(1)).max(1);
                let heaviest = heaviest_cta(run, chunks, (k.ptr.len() - 1) / chunks, t.warps);
                (heaviest, tile_rows * 64 * k.tensor_n_tiles().unwrap_or(1))
            }
            _ => (0, 0),
        },
        _ => (0, 0),
    };
    Geometry { ctas: (gx * gy * gz) as usize, per_sm, heaviest, unit_fmas }
}

/// Relative-norm tolerance of a checked candidate: fp32 at the 3xTF32 kernels' accuracy,
/// 16-bit and int8 at their output's rounding.
pub fn tolerance(dtype: &str) -> f64 {
    match dtype {
        "f32" => 1e-4,
        "f16" => 2e-3,
        "i8" => 1e-3,
        _ => 1e-2,
    }
}
