//! The execution plan (SparTA §3.3, Algorithm 3): for every operator with a sparse
//! constant weight, turn its complex TeSA into a few simple ones and split the operator
//! into sub-operators that specialized kernels run fast.
//!
//! Per operator ([`site`]): BitRounding ([`round_bits`]) splits the weight's elements by
//! supported width; WeightedBlockCover ([`cover`]) covers each width's elements with
//! blocks of one or more shapes, weighted by the cost model ([`cost`]); each cover part
//! becomes a sub-operator `X·Wₖ` ([`suboperator`]). The alternatives (dense, split by
//! block shape, by bit width, one shape only, 2:4 + rest) form an e-graph ([`egraph`]) from
//! which the cheapest is extracted. The one-shape alternatives are every square shape of 8 or
//! more and 1×1 (every element on the fine kernels). The result serializes to a versioned
//! artifact ([`artifact`]); [`explain`] says why each choice was made. [`calibrate`] fits the
//! cost DB to GPU timings; [`ilp`] is the exact cover the tests measure the greedy one against.
//!
//! [`crate::tune`] replaces the model's choice by measured ones: it times every alternative
//! (crossed with the kernel choices that matter, [`KernelChoice`]) on the GPU through a
//! [`crate::tune::Timer`] the runtime implements, caches the winners, and refits the cost DB to
//! the measurements. It specializes kernels, so it lives above this module and the specializer.
//!
//! Layering: the plan never imports the specializer. What it must know about kernels (which
//! family runs a part, how much work that is, the engine and tile names a [`KernelChoice`]
//! carries) comes from [`crate::kernel_choice`], which the specializer uses for the same
//! decisions.
//!
//! Entry point: [`plan()`], `plan(graph, &PlanOptions)`, which plans every site of the graph;
//! [`plan_site_with`] forces an alternative of one site, [`plan_site_alternatives`] gives them all.

pub mod artifact;
pub mod calibrate;
pub mod cost;
pub mod cover;
pub mod cover_sparse;
pub mod egraph;
pub mod explain;
pub mod hardware;
pub mod ilp;
pub mod round_bits;
pub mod site;
pub mod suboperator;

use cost::CostModel;
use cover::{cover_blocks_fewer_parts, single_shape_cover, BlockShape, Cover, DEFAULT_SHAPES};
use cover_sparse::{cover_blocks_fewer_parts_sparse, single_shape_cover_sparse};
use egraph::{choose, Alternative, SplitKind};
use round_bits::{round_bits, RoundingPolicy};
use site::{find_sites, Site};
use std::time::Instant;
use suboperator::{from_cover, split_two_four, Epilogue, Orientation, SubOpKind, SubOperator};

use crate::ir::Graph;
use crate::kernel_choice::{Engine, Tile};
use crate::sparse::Csr;
use crate::Error;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Planner settings.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub cost: CostModel,
    /// Candidate block shapes of the cover.
    pub shapes: Vec<BlockShape>,
    /// Try the 2:4 + rest split where the format has sparse tensor cores.
    pub two_four: bool,
    /// Consider running the whole weight dense; without it only covers of the unpruned
    /// elements are (a weight with none pruned still runs dense).
    pub dense: bool,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions { cost: CostModel::sm_90(), shapes: DEFAULT_SHAPES.to_vec(), two_four: true, dense: true }
    }
}

/// One alternative that was considered, for `explain`.
#[derive(Clone, Debug, PartialEq)]
pub struct Considered {
    pub split: SplitKind,
    /// E.g. `32x32 f32 ×100 + 1x1 f32 ×900`.
    pub label: String,
    pub predicted_s: f64,
}

/// The kernels an operator's sub-operators run on, where the specializer has several (the
/// tuner measures them; `codegen::from_plan` applies the choice to the specs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelChoice {
    /// The specializer's own choice for every part (`Engine::Auto`).
    #[default]
    Auto,
    /// Every part on this engine (`Simt`: fp32 on the FMA pipe, no 3xTF32; `MmaSync`: 16-bit
    /// blocks on mma.sync instead of wgmma).
    Engine(Engine),
    /// The fp32 element-sparse part on the 3xTF32 fine kernel with this tile; block parts as
    /// the specializer chooses.
    FineTf32(Tile),
}

impl KernelChoice {
    /// Short name for tables: `auto`, `simt`, `tf32x3 64,16,6,1` (rows, groups, k rows, n tiles).
    pub fn label(&self) -> String {
        match self {
            KernelChoice::Auto => "auto".into(),
            KernelChoice::Engine(e) => format!("{e:?}").to_lowercase(),
            KernelChoice::FineTf32(t) => format!("tf32x3 {},{},{},{}", t.rows, t.group, t.k_rows, t.n_tiles),
        }
    }
}

/// The plan of one operator.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorPlan {
    pub node: String,
    pub op_type: String,
    pub weight: String,
    pub orientation: Orientation,
    pub transposed: bool,
    /// Logical weight shape and the other GEMM dimension.
    pub rows: usize,
    pub cols: usize,
    pub m: usize,
    pub density: f64,
    /// Kernel dtype of the widest elements.
    pub dtype: String,
    pub considered: Vec<Considered>,
    /// Index into `considered`; `None` when every weight element is pruned.
    pub chosen: Option<usize>,
    /// The extracted e-graph expression.
    pub expr: String,
    pub suboperators: Vec<SubOperator>,
    pub epilogue: Epilogue,
    pub dense_s: f64,
    pub planned_s: f64,
    /// One line: why this plan.
    pub reason: String,
    /// Wall time of the covers, seconds (not serialized: it varies run to run).
    pub cover_s: f64,
    /// The kernels the sub-operators run on (`Auto` unless a tuning cache says otherwise).
    pub kernel: KernelChoice,
}

impl OperatorPlan {
    pub fn is_sparse(&self) -> bool {
        self.density < 1.0
    }

    pub fn speedup(&self) -> f64 {
        self.dense_s / self.planned_s.max(1e-15)
    }
}

/// The execution plan of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub arch: String,
    pub operators: Vec<OperatorPlan>,
}

/// One candidate with its sub-operators.
struct Candidate {
    split: SplitKind,
    subops: Vec<SubOperator>,
}

impl Candidate {
    fn label(&self) -> String {
        let s: Vec<String> = self.subops.iter().map(SubOperator::label).collect();
        s.join(" + ")
    }
}

/// Plans every operator of `graph` with a constant rank-2 weight (MatMul, Gemm). The TeSA
/// of each weight is read from the graph (run `apply_attrs`/`propagate` first); a weight
/// without one is pruned where it is zero. Deterministic.
pub fn plan(graph: &Graph, opts: &PlanOptions) -> Result<Plan, Error> {
    let mut operators = vec![];
    for site in find_sites(graph) {
        operators.push(plan_site(graph, &site, opts)?);
    }
    Ok(Plan { arch: opts.cost.hw.arch.to_string(), operators })
}

/// Plans one site.
pub fn plan_site(graph: &Graph, site: &Site, opts: &PlanOptions) -> Result<OperatorPlan, Error> {
    plan_site_with(graph, site, opts, &|_| None)
}

/// Plans one site, the alternative that `pick` returns (an index into the considered
/// alternatives it is shown) instead of the extracted one; `None` from `pick`: the
/// extracted one. A tuning cache picks the measured winner this way.
pub fn plan_site_with(
    graph: &Graph,
    site: &Site,
    opts: &PlanOptions,
    pick: &dyn Fn(&[Considered]) -> Option<usize>,
) -> Result<OperatorPlan, Error> {
    let mut plans = plan_site_choices(graph, site, opts, Choices::Pick(pick))?;
    Ok(plans.swap_remove(0))
}

/// Every alternative of one site as a plan of its own (`chosen` = its index, the epilogue
/// fused where there is one), in the order of `considered`, after the plan the e-graph
/// extracts; an operator with every weight element pruned gives that plan alone.
pub fn plan_site_alternatives(graph: &Graph, site: &Site, opts: &PlanOptions) -> Result<Vec<OperatorPlan>, Error> {
    plan_site_choices(graph, site, opts, Choices::Every)
}

/// Which plans [`plan_site_choices`] returns.
enum Choices<'a> {
    /// One: the picked alternative, else the extracted one.
    Pick(&'a dyn Fn(&[Considered]) -> Option<usize>),
    /// The extracted plan, then one per alternative.
    Every,
}

fn plan_site_choices(
    graph: &Graph,
    site: &Site,
    opts: &PlanOptions,
    which: Choices,
) -> Result<Vec<OperatorPlan>, Error> {
    let node = graph.node(site.node);
    let cm = &opts.cost;
    let hw = &cm.hw;
    let (rows, cols, m) = (site.rows, site.cols, site.m);
    let tesa = site.tesa(graph);
    let density = tesa.density();
    let groups = round_bits(&tesa, hw, RoundingPolicy::EachUp);
    let widest = groups.first().map(|g| hw.number_format(g.bits, g.format).clone());
    let nf = widest.clone().unwrap_or_else(|| hw.number_format(tesa.uniform().bits(), tesa.uniform().format()).clone());
    let dense_s = cm.dense_time(&nf, m, rows, cols);
    let started = Instant::now();
    let mut candidates: Vec<Candidate> = vec![];
    let all_owned = |pruned: &[bool]| (0..pruned.len() as u32).filter(|i| !pruned[*i as usize]).collect::<Vec<_>>();
    let pruned = site.pruned(graph);
    if !groups.is_empty() && (opts.dense || density >= 1.0) {
        candidates.push(Candidate {
            split: SplitKind::Dense,
            subops: vec![SubOperator::dense(rows, cols, all_owned(&pruned), &nf, site.orientation, dense_s)],
        });
    }
    if density < 1.0 && !groups.is_empty() {
        let cover_with = |mask: &[bool], nf: &hardware::NumberFormat| -> Cover {
            let part_fixed = cm.suboperator_fixed(nf, m, cols);
            cover_blocks_fewer_parts(
                mask,
                rows,
                cols,
                &cm.shape_weights(nf, &opts.shapes, m, site.orientation),
                part_fixed,
            )
        };
        // The greedy covers and the one-shape covers are independent: they run side by side
        // (in a fixed order of results, so the plan does not depend on the threads).
        let by_shape = || {
            // Split by block shape, per rounded width (by bit width when there are several).
            let mut out = vec![];
            let mut per_width = vec![];
            for g in &groups {
                let gnf = hw.number_format(g.bits, g.format).clone();
                per_width.extend(from_cover(&cover_with(&g.pruned, &gnf), &gnf, site.orientation, cm, m));
            }
            let split = if groups.len() > 1 { SplitKind::ByBits } else { SplitKind::ByShape };
            out.push(Candidate { split, subops: per_width });
            if groups.len() > 1 {
                let one = round_bits(&tesa, hw, RoundingPolicy::AllToOne);
                let cover = cover_with(&one[0].pruned, &nf);
                out.push(Candidate {
                    split: SplitKind::ByShape,
                    subops: from_cover(&cover, &nf, site.orientation, cm, m),
                });
            }
            out
        };
        // One block shape only (what SparTA's own code supports), for each square shape, and
        // every element on its own (the fine kernels; on fp32 tensor cores a gathering kernel
        // that covers blocks and scattered elements alike, see `suboperator::from_cover`).
        let one_shape = || {
            let shapes: Vec<&BlockShape> =
                opts.shapes.iter().filter(|s| s.h == s.w && (s.h >= 8 || s.h == 1)).collect();
            shapes
                .into_par_iter()
                .map(|shape| {
                    let weight = cm.block_time(&nf, *shape, m, site.orientation);
                    let cover = single_shape_cover(&pruned, rows, cols, *shape, weight);
                    Candidate { split: SplitKind::OneShape, subops: from_cover(&cover, &nf, site.orientation, cm, m) }
                })
                .collect::<Vec<_>>()
        };
        let (greedy, single) = rayon::join(by_shape, one_shape);
        candidates.extend(greedy);
        candidates.extend(single);
        // 2:4 for sparse tensor cores plus the rest.
        if opts.two_four && nf.sparse_2_4 && site.orientation == Orientation::WeightRight && groups.len() == 1 {
            if let (Some((tf, rest)), Some(t)) =
                (split_two_four(&pruned, rows, cols), cm.two_four_time(&nf, m, rows, cols))
            {
                let mut subops = vec![SubOperator::two_four(tf, &nf, site.orientation, t)];
                subops.extend(from_cover(&cover_with(&rest, &nf), &nf, site.orientation, cm, m));
                candidates.push(Candidate { split: SplitKind::TwoFourRest, subops });
            }
        }
    }
    add_stream_floor(&mut candidates, cm, &nf, site.orientation, m, rows, cols);
    drop_dense_sparse_plans(&mut candidates, &nf, rows * cols);
    let cover_s = started.elapsed().as_secs_f64();
    let at = Placement {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        weight: graph.value(site.weight).name.clone(),
        orientation: site.orientation,
        transposed: site.transposed,
        rows,
        cols,
        m,
        epilogue: site.epilogue.clone(),
    };
    Ok(finish_choices(&at, cm, candidates, density, &nf, dense_s, cover_s, which))
}

/// Plans `Y = X·W` for one fp32 weight held as CSR (`k × n`, `m` rows of `X`) without its
/// dense form: the alternatives of a graph site whose weight is uniformly fp32 and pruned
/// where nothing is stored (dense, split by block shape, one shape per square shape and 1×1;
/// fp32 has no 2:4 path), each cover computed on the sparse mask
/// ([`cover_sparse`]). The plan equals [`plan_site`]'s on that graph. The HPEC layers
/// take this path: a 65,536-neuron layer's dense form would be 16 GiB.
pub fn plan_sparse_weight(
    name: &str,
    weight: &Csr,
    m: usize,
    epilogue: Epilogue,
    opts: &PlanOptions,
) -> Result<OperatorPlan, Error> {
    weight.validate(false).map_err(|e| Error::Tensor { name: name.into(), message: e })?;
    let cm = &opts.cost;
    let (rows, cols) = (weight.rows, weight.cols);
    let orientation = Orientation::WeightRight;
    let nf = cm.hw.number_format(32, crate::tesa::Format::Float).clone();
    let dense_s = cm.dense_time(&nf, m, rows, cols);
    let unpruned = weight.flat_indices();
    let density = unpruned.len() as f64 / (rows * cols) as f64;
    let started = Instant::now();
    let mut candidates: Vec<Candidate> = vec![];
    if !unpruned.is_empty() && (opts.dense || density >= 1.0) {
        candidates.push(Candidate {
            split: SplitKind::Dense,
            subops: vec![SubOperator::dense(rows, cols, unpruned.clone(), &nf, orientation, dense_s)],
        });
    }
    if density < 1.0 && !unpruned.is_empty() {
        let shapes = cm.shape_weights(&nf, &opts.shapes, m, orientation);
        let cover = cover_blocks_fewer_parts_sparse(&unpruned, rows, cols, &shapes, cm.suboperator_fixed(&nf, m, cols));
        candidates.push(Candidate { split: SplitKind::ByShape, subops: from_cover(&cover, &nf, orientation, cm, m) });
        for shape in opts.shapes.iter().filter(|s| s.h == s.w && (s.h >= 8 || s.h == 1)) {
            let cover =
                single_shape_cover_sparse(&unpruned, rows, cols, *shape, cm.block_time(&nf, *shape, m, orientation));
            candidates
                .push(Candidate { split: SplitKind::OneShape, subops: from_cover(&cover, &nf, orientation, cm, m) });
        }
    }
    let at = Placement {
        node: name.into(),
        op_type: "MatMul".into(),
        weight: name.into(),
        orientation,
        transposed: false,
        rows,
        cols,
        m,
        epilogue,
    };
    let cover_s = started.elapsed().as_secs_f64();
    let mut plans = finish_choices(&at, cm, candidates, density, &nf, dense_s, cover_s, Choices::Pick(&|_| None));
    Ok(plans.swap_remove(0))
}

/// Most of a 16-bit weight that a sparse alternative may compute (its parts' elements and the
/// zeros inside their blocks) before the dense one (the library's tensor-core GEMM, which
/// multiplies the zeros) is the plan.
pub const MAX_SPARSE_DENSITY_16: f64 = 0.4;

/// In 16 bits, drops the sparse alternatives whose block parts compute more than
/// [`MAX_SPARSE_DENSITY_16`] of the weight, when the dense one is there. At that density cuBLAS's dense GEMM beats our
/// sparse kernels, which the cost model (its rates fitted at 4,096 rows and high sparsity)
/// prices too cheap. Measured on an H200: MiniLM-L6 fp16 with 50% of its 32×32 blocks ran in
/// 0.469 ms against 0.429 dense; ResNet-50 with half its conv channels pruned kept half-dense
/// 1×1 weights in its residual channel classes, planned them sparse (486 µs predicted) and
/// ran its matmuls in 3.1 ms against 0.58 ms for the dense model's (session 8, call c22).
fn drop_dense_sparse_plans(candidates: &mut Vec<Candidate>, nf: &hardware::NumberFormat, elements: usize) {
    let half = matches!(nf.dtype, "f16" | "bf16");
    if !half || elements == 0 || !candidates.iter().any(|c| c.split == SplitKind::Dense) {
        return;
    }
    candidates.retain(|c| {
        // 2:4 parts run on the sparse tensor cores at twice the dense rate: priced as measured.
        let parts = c.subops.iter().filter(|s| s.kind == SubOpKind::BlockSparse);
        let computed: usize = parts.map(|s| s.owned.len() + s.covered_zeros).sum();
        c.split == SplitKind::Dense || computed as f64 <= MAX_SPARSE_DENSITY_16 * elements as f64
    });
}

/// At a site whose dense form runs on the streaming kernel (a skinny 16-bit product,
/// [`crate::kernel_choice::stream::auto_takes`]: memory bound), every sparse alternative is
/// charged one read of the activation. Any kernel reads A once; the per-block rates, fitted
/// on shapes where the math dominates (4096 rows, K ≥ 1024), leave that read out, and at
/// K = 16..256 it is most of a kernel's time, so without it the fine kernels look cheaper
/// than the memory floor that the dense kernel, which pays it, runs at.
fn add_stream_floor(
    candidates: &mut [Candidate],
    cm: &CostModel,
    nf: &hardware::NumberFormat,
    orientation: Orientation,
    m: usize,
    k: usize,
    n: usize,
) {
    let Ok(dtype) = nf.dtype.parse::<crate::kernel_choice::Dtype>() else { return };
    let right = crate::kernel_choice::Orientation::Right;
    if orientation != Orientation::WeightRight || !crate::kernel_choice::stream::auto_takes(dtype, right, k, n) {
        return;
    }
    let read = cm.activation_read_time(nf, m, k);
    for c in candidates.iter_mut().filter(|c| c.split != SplitKind::Dense) {
        if let Some(first) = c.subops.first_mut() {
            first.predicted_s += read;
        }
    }
}

/// Where a planned operator sits: names, logical weight shape, the other GEMM dimension and
/// the epilogue that follows it.
struct Placement {
    node: String,
    op_type: String,
    weight: String,
    orientation: Orientation,
    transposed: bool,
    rows: usize,
    cols: usize,
    m: usize,
    epilogue: Epilogue,
}

/// The e-graph choice among `candidates` and the plans `which` asks for.
#[allow(clippy::too_many_arguments)]
fn finish_choices(
    at: &Placement,
    cm: &CostModel,
    candidates: Vec<Candidate>,
    density: f64,
    nf: &hardware::NumberFormat,
    dense_s: f64,
    cover_s: f64,
    which: Choices,
) -> Vec<OperatorPlan> {
    let (cols, m) = (at.cols, at.m);
    let alternatives: Vec<Alternative> = candidates
        .iter()
        .map(|c| Alternative { split: c.split, term_times: c.subops.iter().map(|s| s.predicted_s).collect() })
        .collect();
    let epilogue_s = (!at.epilogue.is_empty()).then(|| cm.epilogue_time(m, cols));
    let choice = choose(&alternatives, epilogue_s);
    let considered: Vec<Considered> = candidates
        .iter()
        .zip(&alternatives)
        .map(|(c, a)| Considered { split: c.split, label: c.label(), predicted_s: a.term_times.iter().sum() })
        .collect();
    // (alternative, fused epilogue, expression, predicted time with the epilogue) of each plan.
    let forced = |a: usize| {
        let fused = !at.epilogue.is_empty();
        let kind = considered[a].split.name();
        let terms: Vec<String> = (0..candidates[a].subops.len()).map(|j| format!("a{a}.{j}")).collect();
        let body = format!("({kind} {})", terms.join(" "));
        let expr = if fused { format!("(fused {body})") } else { body };
        (a, fused, expr, considered[a].predicted_s)
    };
    let extracted = choice.as_ref().map(|ch| (ch.alternative, ch.fused_epilogue, ch.expr.clone(), ch.time_s));
    let picks: Vec<Option<(usize, bool, String, f64)>> = match which {
        Choices::Pick(pick) => {
            vec![pick(&considered).filter(|a| *a < candidates.len()).map(forced).or(extracted)]
        }
        Choices::Every => std::iter::once(extracted).chain((0..candidates.len()).map(|a| Some(forced(a)))).collect(),
    };
    let best_sparse =
        considered.iter().filter(|c| c.split != SplitKind::Dense).map(|c| c.predicted_s).fold(f64::INFINITY, f64::min);
    let fixed_s = cm.suboperator_fixed(nf, m, cols);
    let mut plans = Vec::with_capacity(picks.len());
    for pick in picks {
        let mut epilogue = at.epilogue.clone();
        let (chosen, expr, suboperators, planned_s) = match pick {
            Some((a, fused, expr, time_s)) => {
                epilogue.fused = fused && !epilogue.is_empty();
                (Some(a), expr, candidates[a].subops.clone(), time_s)
            }
            None => (None, String::new(), vec![], 0.0),
        };
        let dense_total = dense_s + if epilogue.fused { 0.0 } else { epilogue_s.unwrap_or(0.0) };
        let reason = reason(density, dense_s, best_sparse, fixed_s, chosen.map(|c| considered[c].split));
        plans.push(OperatorPlan {
            node: at.node.clone(),
            op_type: at.op_type.clone(),
            weight: at.weight.clone(),
            orientation: at.orientation,
            transposed: at.transposed,
            rows: at.rows,
            cols,
            m,
            density,
            dtype: nf.dtype.to_string(),
            considered: considered.clone(),
            chosen,
            expr,
            suboperators,
            epilogue,
            dense_s: dense_total,
            planned_s,
            reason,
            cover_s,
            kernel: KernelChoice::Auto,
        });
    }
    plans
}

/// The density at which the best sparse plan would cost as much as dense (`dense_s`),
/// assuming its time is a fixed part (`fixed_s`: launch, output traffic) plus a part that
/// grows in proportion to density. 0 when even an empty sparse kernel is slower than dense.
pub fn crossover(density: f64, dense_s: f64, best_sparse_s: f64, fixed_s: f64) -> f64 {
    let variable = best_sparse_s - fixed_s;
    if !best_sparse_s.is_finite() || dense_s <= fixed_s {
        0.0
    } else if variable <= 0.0 {
        1.0
    } else {
        (density * (dense_s - fixed_s) / variable).min(1.0)
    }
}

fn reason(density: f64, dense_s: f64, best_sparse_s: f64, fixed_s: f64, chosen: Option<SplitKind>) -> String {
    let x = crossover(density, dense_s, best_sparse_s, fixed_s);
    match chosen {
        None => "all pruned: the output is the epilogue of zero".into(),
        Some(SplitKind::Dense) if density >= 1.0 => "dense: no pruned elements".into(),
        Some(SplitKind::Dense) => format!("dense: density {density:.2} above crossover {x:.2}"),
        Some(kind) => format!("sparse ({}): density {density:.2} below crossover {x:.2}", kind.name()),
    }
}

/// Sum over the plan's sub-operators of the elements each owns, by kind (for checks).
pub fn owned_by_kind(op: &OperatorPlan, kind: SubOpKind) -> usize {
    op.suboperators.iter().filter(|s| s.kind == kind).map(|s| s.owned.len()).sum()
}
