//! Calibration of the cost DB from GPU measurements (SparTA's profiling-fed cost model).
//!
//! The planner weighs block shapes and the dense fallback with [`CostModel`]; its bundled
//! numbers start as analytic leads. Given measured run times of single-shape covers (one
//! kernel multiplying `n_blocks` blocks of one shape against `m` rows) this module fits, per
//! (shape, dtype), the effective rate and per-block overhead of the model's block term by
//! least squares on relative error (the fitted rate absorbs the activation re-reads the
//! analytic model charges to L2), a per-shape activation-streaming cost where a kernel pays
//! one regardless of density, the dense (library) rate per dtype from measured dense GEMMs, and
//! the entries of the 3xTF32 block and fine kernels from the cases that ran them.
//! [`validate`] then predicts every measured case (mixed and planned covers included, which
//! the fit never saw) so the report shows how far the model is from the GPU.

pub use super::cost::Geometry;
use super::cost::{
    BlockEntry, BlockKernel, BlockTf32Entry, CostDb, CostModel, DenseEntry, DenseKernel, FineTf32Entry, TwoFourEntry,
    WaveTerms,
};
use super::cover::BlockShape;
use super::hardware::NumberFormat;
use crate::kernel_choice::FineTf32Work;
use crate::Error;
use serde::{Deserialize, Serialize};

/// One kernel of a measured case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub shape: BlockShape,
    /// Live blocks (elements for 1×1) the kernel multiplies.
    pub n_blocks: usize,
    pub kernel: PartKernel,
    /// How the kernel was launched (the tune records it from the specialized kernel); `None`
    /// in `kernels bench` samples and in tune cache entries written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometry: Option<Geometry>,
}

/// The kernel a part ran on, which picks the model's term that prices it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKernel {
    /// A kernel of the per-(shape, dtype) table (SIMT, mma.sync/wgmma, int8, the fine kernels).
    Blocks,
    /// The 3xTF32 block kernel (`BlockTf32Entry`).
    Tf32Blocks,
    /// The 3xTF32 fine kernel, with its work (its time follows the work, not `n_blocks`).
    FineTf32(FineTf32Work),
    /// A 2:4 kernel (`mma.sp` or the Hopper `wgmma.mma_async.sp`): its time follows the dense
    /// product at the 2:4 rate (`CostModel::two_four_time`), not its kept elements.
    TwoFour,
}

/// What [`fit`] returns: the calibrated DB and the quality of each fitted entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    pub db: CostDb,
    pub rows: Vec<FitRow>,
    pub fine: Option<FineTf32Fit>,
    pub block_tf32: Option<BlockTf32Fit>,
}

/// One measured case: `m × k` activations times a `k × n` weight covered by `parts`
/// (empty parts and `dense = true`: a dense GEMM).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub label: String,
    pub dtype: String,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub dense: bool,
    pub parts: Vec<Part>,
    pub seconds: f64,
}

/// The fitted numbers of one (shape, dtype): what goes into the DB, and how well it fits.
#[derive(Clone, Debug, PartialEq)]
pub struct FitRow {
    pub entry: BlockEntry,
    pub samples: usize,
    /// Largest |predicted − measured| / measured over the samples of this entry.
    pub max_rel_err: f64,
}

fn format_of<'a>(model: &'a CostModel, dtype: &str) -> Result<&'a NumberFormat, Error> {
    model.hw.by_dtype(dtype).ok_or_else(|| Error::Unsupported(format!("cost db fit: unknown dtype {dtype}")))
}

/// Predicted time of `s` under `model`.
pub fn predict(model: &CostModel, s: &Sample) -> Result<f64, Error> {
    let nf = format_of(model, &s.dtype)?;
    if s.dense {
        return Ok(model.dense_time_on(dense_kernel(s), nf, s.m, s.k, s.n));
    }
    Ok(s.parts
        .iter()
        .map(|p| {
            let g = p.geometry.as_ref();
            match &p.kernel {
                PartKernel::FineTf32(work) => {
                    model.fine_tf32_time(nf, s.m, s.k, s.n, work) + model.wave_time(model.fine_tf32_entry().waves, g)
                }
                PartKernel::Tf32Blocks => {
                    model.sparse_time_on(BlockKernel::Tf32x3, nf, p.shape, p.n_blocks, s.m, s.k, s.n)
                        + model.wave_time(model.block_tf32_entry().waves, g)
                }
                PartKernel::Blocks => {
                    model.sparse_time_on(BlockKernel::Table, nf, p.shape, p.n_blocks, s.m, s.k, s.n)
                        + model.wave_time(model.table_waves(nf, p.shape), g)
                }
                // A format without sparse tensor cores never ran one: priced as its 1×1 blocks.
                PartKernel::TwoFour => model.two_four_time(nf, s.m, s.k, s.n).unwrap_or_else(|| {
                    model.sparse_time_on(BlockKernel::Table, nf, p.shape, p.n_blocks, s.m, s.k, s.n)
                }),
            }
        })
        .sum())
}

/// Which of our dense kernels ran a dense sample (its part says; a sample without parts ran
/// the library's): the 3xTF32 block kernel, or on fp32 the SIMT one.
pub fn dense_kernel(s: &Sample) -> Option<DenseKernel> {
    match s.parts.first().map(|p| p.kernel) {
        Some(PartKernel::Tf32Blocks) => Some(DenseKernel::Tf32x3),
        Some(PartKernel::Blocks) if s.dtype == "f32" => Some(DenseKernel::Simt),
        _ => None,
    }
}

/// Fits every (shape, dtype) that has single-kernel samples, and the dense rate of every
/// dtype with dense samples; returns the calibrated DB (a copy of `model.db` with those
/// entries replaced) and the per-entry fit quality. Shapes need samples at two or more
/// different `m · area` per block to separate rate from overhead; with one, the overhead
/// stays at the DB default and only the rate is fitted. Dense entries likewise: their rate and
/// fixed overhead together from three or more sizes spanning 4× in flops, else the rate alone
/// from the largest GEMM.
pub fn fit(model: &CostModel, samples: &[Sample], source: &str) -> Result<Fitted, Error> {
    let mut db = model.db.clone();
    db.source = source.to_string();
    let mut rows = vec![];
    // Dense: rate from the measured time minus the bytes and launch terms, per dtype and
    // kernel (the library's, or one of our own dense kernels).
    let mut dense_keys: Vec<(&str, Option<DenseKernel>)> =
        samples.iter().filter(|s| s.dense).map(|s| (s.dtype.as_str(), dense_kernel(s))).collect();
    dense_keys.sort_by_key(|(dt, k)| (*dt, k.map(DenseKernel::name)));
    dense_keys.dedup();
    for &(dt, kernel) in &dense_keys {
        let nf = format_of(model, dt)?;
        let bytes = nf.bits as f64 / 8.0;
        let name = kernel.map(|k| k.name().to_string());
        let prior = db.dense.iter().find(|d| d.dtype == dt && d.kernel == name).cloned();
        let mut overhead_us = prior.as_ref().and_then(|d| d.overhead_us);
        let group: Vec<&Sample> =
            samples.iter().filter(|s| s.dense && s.dtype == dt && dense_kernel(s) == kernel).collect();
        let flops = |s: &Sample| 2.0 * s.m as f64 * s.k as f64 * s.n as f64;
        // What the measured time leaves once the bytes and the launch are taken out.
        let left = |s: &Sample| {
            let (m, k, n) = (s.m as f64, s.k as f64, s.n as f64);
            s.seconds - (k * n + m * k + m * n) * bytes / (db.dram_tb_s * 1e12) - db.launch_us * 1e-6
        };
        let pays = |s: &Sample| !CostModel::streamed(kernel, nf, s.k, s.n);
        // One size class cannot separate the overhead from the rate: the entry's overhead
        // stays and the rate is fitted to what is left of the largest GEMM (least launch and
        // tail effect).
        let over = overhead_us.unwrap_or(0.0) * 1e-6;
        let largest = group.iter().max_by(|a, b| flops(a).total_cmp(&flops(b)));
        let mut tflops = largest.map_or(nf.tflops, |s| {
            let compute = (left(s) - if pays(s) { over } else { 0.0 }).max(s.seconds * 0.05);
            flops(s) / compute / 1e12
        });
        // A model's GEMMs (L2-warm operands, a few microseconds each) cannot measure a rate
        // above the DB's own, fitted on large ones: what looks faster is the bytes term
        // over-charged. So no rate is taken above it (without an entry: above twice the
        // format's prior or the estimate above), so that a partial tune does not price the
        // library under the block kernels for the operators it did not time (c99: BERT-base's
        // refit said 1,078 TFLOP/s fp16, above the H200's dense peak).
        let ceiling = prior.as_ref().map_or(2.0 * nf.tflops.max(tflops), |p| p.tflops);
        tflops = tflops.min(ceiling);
        // Where the sizes separate them (three samples or more whose flops span 4× or more,
        // one that pays the overhead), rate and overhead together: least squares on relative
        // residuals of `left = flops / rate + overhead`, the overhead where the cost model
        // charges it; taken when the rate is positive and under the ceiling (else the two
        // belong together and neither is kept).
        let (lo, hi) = group.iter().map(|s| flops(s)).fold((f64::INFINITY, 0.0f64), |(a, b), f| (a.min(f), b.max(f)));
        if group.len() >= 3 && hi >= 4.0 * lo && group.iter().any(|s| pays(s)) {
            let eqs: Vec<([f64; 2], f64)> = group
                .iter()
                .map(|s| ([flops(s) / s.seconds, if pays(s) { 1.0 / s.seconds } else { 0.0 }], left(s) / s.seconds))
                .collect();
            let [inv_rate, over] = nonneg_least_squares(&eqs);
            if inv_rate > 0.0 && 1.0 / inv_rate / 1e12 <= ceiling {
                tflops = 1.0 / inv_rate / 1e12;
                overhead_us = Some(over * 1e6);
            }
        }
        db.dense.retain(|d| !(d.dtype == dt && d.kernel == name));
        db.dense.push(DenseEntry { dtype: dt.to_string(), tflops, kernel: name, overhead_us });
        // Without library samples, the dtype's own rate (the planner's dense alternative) is
        // the kernel the tune's dense candidates run by default: the 3xTF32 one on fp32.
        let library = dense_keys.iter().any(|&(d, k)| d == dt && k.is_none());
        let default_kernel = dense_keys.iter().any(|&(d, k)| d == dt && k == Some(DenseKernel::Tf32x3));
        if !library && (kernel == Some(DenseKernel::Tf32x3) || !default_kernel) {
            db.dense.retain(|d| !(d.dtype == dt && d.kernel.is_none()));
            db.dense.push(DenseEntry { dtype: dt.to_string(), tflops, kernel: None, overhead_us });
        }
    }
    db.dense.sort_by(|a, b| (a.dtype.as_str(), a.kernel.as_deref()).cmp(&(b.dtype.as_str(), b.kernel.as_deref())));

    // Blocks: t = fixed + nb·bytes_terms + nb·(2·m·area/rate + overhead), linear in
    // (1/rate, overhead); least squares on relative residuals.
    let mut keys: Vec<(String, BlockShape)> =
        samples.iter().filter(|s| single_block(s)).map(|s| (s.dtype.clone(), s.parts[0].shape)).collect();
    keys.sort_by(|a, b| (a.0.as_str(), a.1.h, a.1.w).cmp(&(b.0.as_str(), b.1.h, b.1.w)));
    keys.dedup();
    for (dt, shape) in keys {
        let nf = format_of(model, &dt)?;
        let bytes = nf.bits as f64 / 8.0;
        let area = shape.area() as f64;
        // Rows: [flops, blocks, activation elements / 1024, the heaviest CTA's blocks] ·
        // [1/rate, overhead, per-k, critical] ≈ y, each divided by the measured time (relative
        // residuals); the last column is 0 for samples without a geometry. One shape has one
        // tile, so the critical path's multiply-adds add nothing to its blocks; the per-wave
        // term is left out as the planner cannot count waves of a kernel not yet specialized.
        let mut eqs: Vec<([f64; 4], f64)> = vec![];
        for s in samples.iter().filter(|s| single_block(s) && s.dtype == dt && s.parts[0].shape == shape) {
            let nb = s.parts[0].n_blocks as f64;
            let m = s.m as f64;
            let fixed = model.suboperator_fixed(nf, s.m, s.n);
            // With an entry, the model drops its L2 term: the fitted rate absorbs it.
            let moved = nb * area * bytes / (db.dram_tb_s * 1e12);
            let y = s.seconds - fixed - moved;
            let t = s.seconds;
            let [_, w1, _] = wave_columns(model, s.parts[0].geometry.as_ref());
            let row = [nb * 2.0 * m * area, nb, (s.m * s.k) as f64 / 1024.0, w1];
            eqs.push((row.map(|v| v / t), y / t));
        }
        let [inv_rate, overhead, per_k, w1] = nonneg_least_squares(&eqs);
        let has_geometry = samples
            .iter()
            .any(|s| single_block(s) && s.dtype == dt && s.parts[0].shape == shape && s.parts[0].geometry.is_some());
        // A rate the samples put at zero: without a critical path, the lead's; with one, the
        // time is on the critical path and the rate is taken as unlimited.
        let tflops = if inv_rate > 0.0 {
            1.0 / inv_rate / 1e12
        } else if has_geometry {
            UNLIMITED
        } else {
            nf.tflops
        };
        let entry = BlockEntry {
            block: [shape.h, shape.w],
            dtype: dt.clone(),
            tflops,
            overhead_ns: Some(overhead * 1e9),
            activation_ns_per_k: Some(per_k * 1e9),
            waves: has_geometry.then(|| wave_terms([0.0, w1, 0.0])),
        };
        db.blocks.retain(|e| !(e.block == entry.block && e.dtype == entry.dtype));
        db.blocks.push(entry.clone());
        rows.push(FitRow { entry, samples: eqs.len(), max_rel_err: 0.0 });
    }
    db.blocks.sort_by(|a, b| (a.dtype.as_str(), a.block).cmp(&(b.dtype.as_str(), b.block)));
    let fitted = CostModel::new(model.hw.clone(), db.clone())?;
    for row in &mut rows {
        let shape = BlockShape::new(row.entry.block[0], row.entry.block[1]);
        let of_row =
            samples.iter().filter(|s| single_block(s) && s.dtype == row.entry.dtype && s.parts[0].shape == shape);
        row.max_rel_err = worst_rel_err(&fitted, of_row)?;
    }
    let fine = fit_fine_tf32(model, &mut db, samples)?;
    let block_tf32 = fit_block_tf32(model, &mut db, samples)?;
    fit_two_four(model, &mut db, samples)?;
    Ok(Fitted { db, rows, fine, block_tf32 })
}

/// The Hopper 2:4 kernel's rate per dtype from the single-part 2:4 samples on it (K whole
/// 64-deep stages): each sample's dense-product flops over its time less the model's bytes
/// and fixed terms; the median of the samples.
fn fit_two_four(model: &CostModel, db: &mut CostDb, samples: &[Sample]) -> Result<(), Error> {
    let hopper =
        |s: &Sample| crate::kernel_choice::two_four::takes_wgmma(crate::kernel_choice::Engine::Auto, s.k, false);
    let of_two_four: Vec<&Sample> =
        samples.iter().filter(|s| only_kernel(s) == Some(PartKernel::TwoFour) && hopper(s)).collect();
    let mut dtypes: Vec<&str> = of_two_four.iter().map(|s| s.dtype.as_str()).collect();
    dtypes.sort_unstable();
    dtypes.dedup();
    // Dense rates and fixed terms as the DB fitted so far has them.
    let fitted = CostModel::new(model.hw.clone(), db.clone())?;
    for dt in dtypes {
        let nf = format_of(model, dt)?;
        if !nf.sparse_2_4 {
            continue;
        }
        let mut rates: Vec<f64> = of_two_four
            .iter()
            .filter(|s| s.dtype == dt)
            .map(|s| {
                let flops = 2.0 * (s.m * s.k * s.n) as f64;
                let rest = fitted.two_four_time(nf, s.m, s.k, s.n).unwrap_or(s.seconds)
                    - flops / fitted.two_four_rate(nf, s.k);
                let compute = (s.seconds - rest).max(s.seconds * 0.05);
                flops / compute
            })
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        db.two_four.retain(|e| e.dtype != dt);
        db.two_four.push(TwoFourEntry { dtype: dt.to_string(), tflops: median / 1e12 });
    }
    db.two_four.sort_by(|a, b| a.dtype.cmp(&b.dtype));
    Ok(())
}

/// The rate of a term the samples put at zero (its time hides under other terms), TFLOP/s or TB/s.
const UNLIMITED: f64 = 1e6;

/// The wave columns of a part launched as `g`: waves, and per wave the heaviest CTA's units and
/// their multiply-adds (the terms of `WaveTerms`); 0 without a geometry.
fn wave_columns(model: &CostModel, g: Option<&Geometry>) -> [f64; 3] {
    g.map_or([0.0; 3], |g| {
        let units = g.heaviest as f64;
        [g.waves(model.hw.sms) as f64, units, units * g.unit_fmas as f64]
    })
}

/// Wave terms from the fitted coefficients of [`wave_columns`] (seconds per column unit).
fn wave_terms(x: [f64; 3]) -> WaveTerms {
    WaveTerms { wave_ns: x[0] * 1e9, critical_ns: x[1] * 1e9, critical_ps_per_fma: x[2] * 1e12 }
}

/// The kernel of a sample that ran one sparse kernel alone.
fn only_kernel(s: &Sample) -> Option<PartKernel> {
    (!s.dense && s.parts.len() == 1).then(|| s.parts[0].kernel)
}

/// One sparse kernel of the per-shape table (not a 3xTF32 kernel).
fn single_block(s: &Sample) -> bool {
    only_kernel(s) == Some(PartKernel::Blocks)
}

/// Largest |predicted − measured| / measured over `samples` under `model`.
fn worst_rel_err<'a>(model: &CostModel, samples: impl IntoIterator<Item = &'a Sample>) -> Result<f64, Error> {
    samples.into_iter().try_fold(0.0f64, |w, s| Ok(w.max((predict(model, s)? - s.seconds).abs() / s.seconds)))
}

/// The fit of the 3xTF32 block kernel's entry: its samples and worst error.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockTf32Fit {
    pub entry: BlockTf32Entry,
    pub samples: usize,
    pub max_rel_err: f64,
}

/// Fits `db.block_tf32` to the samples that ran the 3xTF32 block kernel alone: the time beyond
/// the launch, the output and the weight's bytes is linear in (flops, A slice bytes, blocks, 1),
/// least squares on relative residuals. The flops and A columns separate only across block
/// heights against widths (one shape makes them proportional; the fit then puts the time on
/// one of them). `None` (and the DB unchanged) without such samples.
fn fit_block_tf32(model: &CostModel, db: &mut CostDb, samples: &[Sample]) -> Result<Option<BlockTf32Fit>, Error> {
    let tf: Vec<&Sample> = samples.iter().filter(|s| only_kernel(s) == Some(PartKernel::Tf32Blocks)).collect();
    if tf.is_empty() {
        return Ok(None);
    }
    let mut eqs = vec![];
    for s in &tf {
        let nf = format_of(model, &s.dtype)?;
        let p = &s.parts[0];
        let (nb, m, t) = (p.n_blocks as f64, s.m as f64, s.seconds);
        let (area, h) = (p.shape.area() as f64, p.shape.h as f64);
        let y = t - model.suboperator_fixed(nf, s.m, s.n) - nb * area * 4.0 / (db.dram_tb_s * 1e12);
        // The per-wave term is left out, as in the table's fit.
        let [_, w1, w2] = wave_columns(model, p.geometry.as_ref());
        let row = [nb * 2.0 * m * area, nb * m * h * 4.0, nb, 1.0, w1, w2];
        eqs.push((row.map(|v| v / t), y / t));
    }
    let [inv_rate, inv_a, overhead, fixed, w1, w2] = nonneg_least_squares(&eqs);
    let has_geometry = tf.iter().any(|s| s.parts[0].geometry.is_some());
    let lead = model.block_tf32_entry();
    // A term the samples put at zero hides under the other (its rate is taken as unlimited);
    // when both are zero the samples say nothing of either, and the lead's rates stay, unless
    // the critical path carries the time.
    let degenerate = inv_rate == 0.0 && inv_a == 0.0 && !has_geometry;
    let rate = |inv: f64, lead: f64| {
        if inv > 0.0 {
            1.0 / inv / 1e12
        } else if degenerate {
            lead
        } else {
            UNLIMITED
        }
    };
    let entry = BlockTf32Entry {
        tflops: rate(inv_rate, lead.tflops),
        a_tb_s: rate(inv_a, lead.a_tb_s),
        overhead_ns: overhead * 1e9,
        fixed_ns: fixed * 1e9,
        waves: has_geometry.then(|| wave_terms([0.0, w1, w2])),
    };
    db.block_tf32 = Some(entry.clone());
    let max_rel_err = worst_rel_err(&CostModel::new(model.hw.clone(), db.clone())?, tf.iter().copied())?;
    Ok(Some(BlockTf32Fit { entry, samples: tf.len(), max_rel_err }))
}

/// The fit of the 3xTF32 fine kernel's entry: its samples and worst error.
#[derive(Clone, Debug, PartialEq)]
pub struct FineTf32Fit {
    pub entry: FineTf32Entry,
    pub samples: usize,
    pub max_rel_err: f64,
}

/// Fits `db.fine_tf32` to the samples that ran the 3xTF32 fine kernel alone: the time beyond
/// the launch and output is linear in (step flops, A bytes, 1), least squares on relative
/// residuals. `None` (and the DB unchanged) without such samples.
fn fit_fine_tf32(model: &CostModel, db: &mut CostDb, samples: &[Sample]) -> Result<Option<FineTf32Fit>, Error> {
    let fine: Vec<(&Sample, FineTf32Work)> = samples
        .iter()
        .filter_map(|s| match only_kernel(s) {
            Some(PartKernel::FineTf32(w)) => Some((s, w)),
            _ => None,
        })
        .collect();
    if fine.is_empty() {
        return Ok(None);
    }
    let mut eqs = vec![];
    for (s, w) in &fine {
        let nf = format_of(model, &s.dtype)?;
        let (m, k, t) = (s.m as f64, s.k as f64, s.seconds);
        let y = t - model.suboperator_fixed(nf, s.m, s.n);
        let [w0, w1, w2] = wave_columns(model, s.parts[0].geometry.as_ref());
        let row = [w.step_units() * m * 128.0, w.col_tiles as f64 * m * k * 4.0, 1.0, w0, w1, w2];
        eqs.push((row.map(|v| v / t), y / t));
    }
    let [inv_step, inv_a, fixed, w0, w1, w2] = nonneg_least_squares(&eqs);
    let has_geometry = fine.iter().any(|(s, _)| s.parts[0].geometry.is_some());
    let lead = model.fine_tf32_entry();
    let entry = FineTf32Entry {
        step_tflops: if inv_step > 0.0 {
            1.0 / inv_step / 1e12
        } else if has_geometry {
            UNLIMITED
        } else {
            lead.step_tflops
        },
        // A term the samples put at zero: the A reads hide under the steps.
        a_tb_s: if inv_a > 0.0 { 1.0 / inv_a / 1e12 } else { UNLIMITED },
        fixed_ns: fixed * 1e9,
        waves: has_geometry.then(|| wave_terms([w0, w1, w2])),
    };
    db.fine_tf32 = Some(entry.clone());
    let max_rel_err = worst_rel_err(&CostModel::new(model.hw.clone(), db.clone())?, fine.iter().map(|(s, _)| *s))?;
    Ok(Some(FineTf32Fit { entry, samples: fine.len(), max_rel_err }))
}

/// Least squares `A·x ≈ y` with `x ≥ 0` over `N` unknowns: the best of the unconstrained
/// solutions on every subset of the unknowns (the others held at 0) that comes out
/// non-negative. Exact for the few unknowns the fits have (2^N subsets); columns the samples
/// cannot tell apart make a subset singular, and it is skipped.
fn nonneg_least_squares<const N: usize>(eqs: &[([f64; N], f64)]) -> [f64; N] {
    let mut best = ([0.0; N], f64::INFINITY);
    for subset in 1u32..(1 << N) {
        let cols: Vec<usize> = (0..N).filter(|c| subset & (1 << c) != 0).collect();
        let Some(sol) = solve_normal(eqs, &cols) else { continue };
        // Round-off around an exact zero is not a negative weight.
        let scale = sol.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        if sol.iter().any(|v| *v < -1e-9 * scale) {
            continue;
        }
        let sol: Vec<f64> = sol.iter().map(|v| v.max(0.0)).collect();
        let mut x = [0.0; N];
        for (c, v) in cols.iter().zip(&sol) {
            x[*c] = *v;
        }
        let resid: f64 = eqs.iter().map(|(a, y)| (a.iter().zip(&x).map(|(a, x)| a * x).sum::<f64>() - y).powi(2)).sum();
        if resid < best.1 * (1.0 - 1e-9) {
            best = (x, resid);
        }
    }
    best.0
}

/// Normal equations on the columns `cols`, by Gaussian elimination with partial pivoting;
/// `None` when singular.
fn solve_normal<const N: usize>(eqs: &[([f64; N], f64)], cols: &[usize]) -> Option<Vec<f64>> {
    let n = cols.len();
    // Columns differ by many orders of magnitude (flops vs block counts): scale each to
    // unit norm first, and the solution back after.
    let norms: Vec<f64> = cols.iter().map(|&c| eqs.iter().map(|(a, _)| a[c] * a[c]).sum::<f64>().sqrt()).collect();
    if norms.contains(&0.0) {
        return None;
    }
    let mut m = vec![vec![0.0f64; n + 1]; n];
    for (a, y) in eqs {
        for i in 0..n {
            for j in 0..n {
                m[i][j] += a[cols[i]] / norms[i] * a[cols[j]] / norms[j];
            }
            m[i][n] += a[cols[i]] / norms[i] * y;
        }
    }
    let scale = (0..n).map(|i| m[i][i]).fold(0.0f64, f64::max);
    for col in 0..n {
        let piv = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[piv][col].abs() <= 1e-12 * scale {
            return None;
        }
        m.swap(col, piv);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i] / norms[i]).collect())
}

/// Predicted vs measured for every sample: `(label, predicted s, measured s)`.
pub fn validate(model: &CostModel, samples: &[Sample]) -> Result<Vec<(String, f64, f64)>, Error> {
    samples.iter().map(|s| Ok((s.label.clone(), predict(model, s)?, s.seconds))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2:4 parts timed by `tune` fit the 2:4 rate (the median over the samples) and leave the
    /// 1×1 block entry alone: they are not element-sparse kernels.
    #[test]
    fn two_four_samples_fit_the_two_four_rate_not_the_fine_table() {
        let base = CostModel::sm_90();
        let mut truth_db = base.db.clone();
        truth_db.two_four = vec![TwoFourEntry { dtype: "f16".into(), tflops: 1234.5 }];
        let truth = CostModel::new(base.hw.clone(), truth_db).unwrap();
        let nf = base.hw.by_dtype("f16").unwrap();
        let samples: Vec<Sample> = [(4096, 4096, 4096), (4096, 384, 1536), (4096, 1536, 384), (3072, 768, 3072)]
            .iter()
            .map(|&(m, k, n)| Sample {
                label: format!("2:4 {m}x{k}x{n}"),
                dtype: "f16".into(),
                m,
                k,
                n,
                dense: false,
                parts: vec![Part {
                    shape: BlockShape::new(1, 1),
                    n_blocks: k * n / 2,
                    kernel: PartKernel::TwoFour,
                    geometry: None,
                }],
                seconds: truth.two_four_time(nf, m, k, n).unwrap(),
            })
            .collect();
        let fitted = fit(&base, &samples, "test").unwrap();
        let e = &fitted.db.two_four;
        assert_eq!(e.len(), 1);
        assert!((e[0].tflops - 1234.5).abs() < 1e-6, "{e:?}");
        assert_eq!(fitted.db.blocks, base.db.blocks, "no block entry fitted from 2:4 parts");
        let model = CostModel::new(base.hw.clone(), fitted.db).unwrap();
        for s in &samples {
            let p = predict(&model, s).unwrap();
            assert!((p - s.seconds).abs() < 1e-9 * s.seconds, "{}: {p} vs {}", s.label, s.seconds);
        }
        // K not whole 64-deep stages runs mma.sp: the constant, not the Hopper kernel's fit.
        assert!((model.two_four_rate(nf, 96) - 0.5 * model.dense_rate(nf)).abs() < 1.0, "mma.sp: half the dense rate");
    }

    /// Samples generated from a known DB must give that DB back.
    #[test]
    fn fit_recovers_the_rates_that_generated_the_samples() {
        let base = CostModel::sm_90();
        let mut truth_db = base.db.clone();
        truth_db.blocks = vec![
            BlockEntry {
                block: [32, 32],
                dtype: "f32".into(),
                tflops: 31.0,
                overhead_ns: Some(4.0),
                activation_ns_per_k: Some(0.0),
                waves: None,
            },
            BlockEntry {
                block: [1, 1],
                dtype: "f32".into(),
                tflops: 2.5,
                overhead_ns: Some(0.05),
                activation_ns_per_k: Some(30.0),
                waves: None,
            },
        ];
        // The fit keeps the DB's fixed overhead of the library call and recovers the rate.
        let overhead_us =
            base.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).and_then(|d| d.overhead_us);
        truth_db.dense = vec![DenseEntry { dtype: "f16".into(), tflops: 700.0, kernel: None, overhead_us }];
        let truth = CostModel::new(base.hw.clone(), truth_db).unwrap();
        let mut samples = vec![];
        for (size, nb32, nb1) in [(1024, 102, 52_429), (1024, 10, 10_486), (4096, 1638, 838_861), (4096, 164, 167_772)]
        {
            for (shape, nb) in [(BlockShape::new(32, 32), nb32), (BlockShape::new(1, 1), nb1)] {
                let mut s = Sample {
                    label: format!("{size} {shape:?}"),
                    dtype: "f32".into(),
                    m: size,
                    k: size,
                    n: size,
                    dense: false,
                    parts: vec![Part { shape, n_blocks: nb, kernel: PartKernel::Blocks, geometry: None }],
                    seconds: 0.0,
                };
                s.seconds = predict(&truth, &s).unwrap();
                samples.push(s);
            }
        }
        let mut dense = Sample {
            label: "dense".into(),
            dtype: "f16".into(),
            m: 4096,
            k: 4096,
            n: 4096,
            dense: true,
            parts: vec![],
            seconds: 0.0,
        };
        dense.seconds = predict(&truth, &dense).unwrap();
        samples.push(dense);
        let Fitted { db, rows, fine, block_tf32 } = fit(&base, &samples, "test").unwrap();
        assert!(fine.is_none() && db.fine_tf32 == base.db.fine_tf32);
        assert!(block_tf32.is_none() && db.block_tf32 == base.db.block_tf32);
        let get = |b: [usize; 2]| db.blocks.iter().find(|e| e.block == b && e.dtype == "f32").unwrap();
        assert!((get([32, 32]).tflops - 31.0).abs() < 0.01, "{:?}", get([32, 32]));
        assert!((get([32, 32]).overhead_ns.unwrap() - 4.0).abs() < 0.01);
        assert!((get([1, 1]).tflops - 2.5).abs() < 0.001);
        assert!((get([1, 1]).activation_ns_per_k.unwrap() - 30.0).abs() < 0.01, "{:?}", get([1, 1]));
        assert!(get([32, 32]).activation_ns_per_k.unwrap().abs() < 0.01);
        let f16 = db.dense.iter().find(|d| d.dtype == "f16").unwrap();
        assert!((f16.tflops - 700.0).abs() < 0.5, "{f16:?}");
        assert!(rows.iter().all(|r| r.max_rel_err < 1e-6 && r.samples == 4), "{rows:?}");
        // A mixed case (two parts) is predicted as the sum of its parts.
        let mixed =
            Sample { parts: vec![samples[0].parts[0].clone(), samples[1].parts[0].clone()], ..samples[0].clone() };
        let fitted = CostModel::new(base.hw.clone(), db).unwrap();
        let sum = predict(&fitted, &samples[0]).unwrap() + predict(&fitted, &samples[1]).unwrap();
        assert!((predict(&fitted, &mixed).unwrap() - sum).abs() < 1e-12);
    }

    /// The 3xTF32 fine kernel's entry comes back from samples it generated, and its samples
    /// do not touch the 1×1 block entry (a different kernel).
    #[test]
    fn fit_recovers_the_fine_tf32_entry() {
        let base = CostModel::sm_90();
        let mut truth_db = base.db.clone();
        truth_db.fine_tf32 = Some(FineTf32Entry { step_tflops: 55.0, a_tb_s: 14.0, fixed_ns: 2500.0, waves: None });
        let truth = CostModel::new(base.hw.clone(), truth_db).unwrap();
        let mut samples = vec![];
        for (size, steps, col_tiles) in
            [(1024, 1570, 8), (1024, 8150, 8), (4096, 26_000, 32), (4096, 262_000, 32), (2048, 30_000, 16)]
        {
            let mut s = Sample {
                label: format!("{size} {steps}"),
                dtype: "f32".into(),
                m: size,
                k: size,
                n: size,
                dense: false,
                parts: vec![Part {
                    shape: BlockShape::new(1, 1),
                    n_blocks: steps * 10,
                    kernel: PartKernel::FineTf32(FineTf32Work {
                        steps,
                        nt: 1,
                        col_tiles,
                        tile: (64, 128, 192),
                        heaviest: 0,
                    }),
                    geometry: None,
                }],
                seconds: 0.0,
            };
            s.seconds = predict(&truth, &s).unwrap();
            samples.push(s);
        }
        let Fitted { db, rows, fine, .. } = fit(&base, &samples, "test").unwrap();
        let fine = fine.unwrap();
        assert!(rows.is_empty() && db.blocks == base.db.blocks, "{rows:?}");
        assert_eq!(fine.samples, 5);
        assert!(fine.max_rel_err < 1e-6, "{fine:?}");
        let e = db.fine_tf32.unwrap();
        assert!((e.step_tflops - 55.0).abs() < 0.01 && (e.a_tb_s - 14.0).abs() < 0.01, "{e:?}");
        assert!((e.fixed_ns - 2500.0).abs() < 1.0, "{e:?}");
    }

    /// The 3xTF32 block kernel's entry comes back from samples of several shapes it generated
    /// (heights against widths separate the math from the A slices), apart from the table.
    #[test]
    fn fit_recovers_the_block_tf32_entry() {
        let base = CostModel::sm_90();
        let mut truth_db = base.db.clone();
        truth_db.block_tf32 =
            Some(BlockTf32Entry { tflops: 70.0, a_tb_s: 6.0, overhead_ns: 9.0, fixed_ns: 4000.0, waves: None });
        let truth = CostModel::new(base.hw.clone(), truth_db).unwrap();
        let mut samples = vec![];
        for (size, h, w, nb) in [
            (1024, 32, 32, 102),
            (4096, 32, 32, 1638),
            (4096, 16, 16, 6554),
            (4096, 64, 32, 819),
            (1024, 8, 32, 410),
            (2048, 8, 8, 6000),
        ] {
            let mut s = Sample {
                label: format!("{size} {h}x{w}"),
                dtype: "f32".into(),
                m: size,
                k: size,
                n: size,
                dense: false,
                parts: vec![Part {
                    shape: BlockShape::new(h, w),
                    n_blocks: nb,
                    kernel: PartKernel::Tf32Blocks,
                    geometry: None,
                }],
                seconds: 0.0,
            };
            s.seconds = predict(&truth, &s).unwrap();
            samples.push(s);
        }
        let Fitted { db, rows, block_tf32, .. } = fit(&base, &samples, "test").unwrap();
        assert!(rows.is_empty() && db.blocks == base.db.blocks, "{rows:?}");
        let f = block_tf32.unwrap();
        assert_eq!(f.samples, 6);
        assert!(f.max_rel_err < 1e-6, "{f:?}");
        let e = db.block_tf32.unwrap();
        assert!((e.tflops - 70.0).abs() < 0.01 && (e.a_tb_s - 6.0).abs() < 0.001, "{e:?}");
        assert!((e.overhead_ns - 9.0).abs() < 0.01 && (e.fixed_ns - 4000.0).abs() < 1.0, "{e:?}");
    }

    /// A single-kernel sample of `parts[0]`, its time from `truth`.
    fn generated(truth: &CostModel, m: usize, k: usize, n: usize, part: Part, label: &str) -> Sample {
        let mut s =
            Sample { label: label.into(), dtype: "f32".into(), m, k, n, dense: false, parts: vec![part], seconds: 0.0 };
        s.seconds = predict(truth, &s).unwrap();
        s
    }

    /// The critical-path terms come back from samples generated with them: the table's per
    /// block of the heaviest column, the 3xTF32 block kernel's per block and per multiply-add
    /// (several shapes, several tiles), the fine kernel's per wave, step and multiply-add; and
    /// the dense rate of each of our dense kernels, apart from the library's.
    #[test]
    fn fit_recovers_the_critical_path_and_per_engine_dense_terms() {
        let base = CostModel::sm_90();
        let mut truth_db = base.db.clone();
        let table = WaveTerms { wave_ns: 0.0, critical_ns: 1700.0, critical_ps_per_fma: 0.0 };
        truth_db.blocks = vec![BlockEntry {
            block: [32, 32],
            dtype: "f32".into(),
            tflops: 40.0,
            overhead_ns: Some(20.0),
            activation_ns_per_k: Some(1.0),
            waves: Some(table),
        }];
        let tf32 = WaveTerms { wave_ns: 0.0, critical_ns: 400.0, critical_ps_per_fma: 9.0 };
        truth_db.block_tf32 =
            Some(BlockTf32Entry { tflops: 120.0, a_tb_s: 8.0, overhead_ns: 15.0, fixed_ns: 900.0, waves: Some(tf32) });
        let fine = WaveTerms { wave_ns: 60.0, critical_ns: 50.0, critical_ps_per_fma: 12.0 };
        truth_db.fine_tf32 =
            Some(FineTf32Entry { step_tflops: 60.0, a_tb_s: 9.0, fixed_ns: 2800.0, waves: Some(fine) });
        truth_db.dense.push(DenseEntry {
            dtype: "f32".into(),
            tflops: 54.0,
            kernel: Some("tf32x3".into()),
            overhead_us: None,
        });
        truth_db.dense.push(DenseEntry {
            dtype: "f32".into(),
            tflops: 26.0,
            kernel: Some("simt".into()),
            overhead_us: None,
        });
        let truth = CostModel::new(base.hw.clone(), truth_db).unwrap();
        let launch = |ctas, per_sm, heaviest, unit_fmas| Some(Geometry { ctas, per_sm, heaviest, unit_fmas });
        let mut samples = vec![];
        // The table's 32×32 on 256-row tiles: operators of several sizes, columns of 2 to 25 blocks.
        for (i, (m, k, n, nb, heaviest)) in [
            (4096, 384, 384, 14, 2),
            (1024, 384, 384, 14, 12),
            (2048, 384, 1536, 40, 7),
            (4096, 1536, 384, 58, 25),
            (512, 384, 384, 9, 6),
        ]
        .into_iter()
        .enumerate()
        {
            let g = launch(n / 32 * m / 256, 2, heaviest, 256 * 1024);
            let part = Part { shape: BlockShape::new(32, 32), n_blocks: nb, kernel: PartKernel::Blocks, geometry: g };
            samples.push(generated(&truth, m, k, n, part, &format!("table {i}")));
        }
        // The 3xTF32 block kernel: three shapes, 128- and 64-row tiles.
        for (i, (h, nb, heaviest, rows)) in [
            (8, 224, 8, 128),
            (8, 224, 48, 128),
            (16, 56, 4, 128),
            (16, 56, 24, 64),
            (32, 14, 2, 128),
            (32, 14, 12, 128),
            (32, 58, 25, 64),
            (16, 232, 50, 128),
        ]
        .into_iter()
        .enumerate()
        {
            let g = launch(384 / h * 4096 / rows, 4, heaviest, rows * h * h);
            let part = Part { shape: BlockShape::new(h, h), n_blocks: nb, kernel: PartKernel::Tf32Blocks, geometry: g };
            samples.push(generated(&truth, 4096, 384, 384, part, &format!("tf32 {i}")));
        }
        // The fine kernel: two tiles, several patterns; waves from 1 to 6.
        for (i, (steps, nt, col_tiles, heaviest, rows)) in [
            (112, 2, 3, 60, 64),
            (112, 2, 3, 90, 64),
            (64, 2, 3, 30, 64),
            (300, 1, 12, 80, 64),
            (900, 1, 12, 150, 128),
            (900, 2, 6, 260, 128),
            (500, 1, 24, 40, 64),
        ]
        .into_iter()
        .enumerate()
        {
            let work = FineTf32Work { steps, nt, col_tiles, tile: (rows, 0, 0), heaviest };
            let g = launch(col_tiles * 4096 / rows, 1, heaviest, rows * 64 * nt);
            let part = Part {
                shape: BlockShape::new(1, 1),
                n_blocks: steps * 8,
                kernel: PartKernel::FineTf32(work),
                geometry: g,
            };
            samples.push(generated(&truth, 4096, 384, 384 * col_tiles / 3, part, &format!("fine {i}")));
        }
        // Dense on each of our kernels.
        for (kernel, label) in [(PartKernel::Tf32Blocks, "dense tf32"), (PartKernel::Blocks, "dense simt")] {
            let part = Part { shape: BlockShape::new(32, 32), n_blocks: 144, kernel, geometry: None };
            let mut s = generated(&truth, 4096, 384, 384, part, label);
            s.dense = true;
            s.seconds = predict(&truth, &s).unwrap();
            samples.push(s);
        }
        let Fitted { db, rows, fine: fine_fit, block_tf32 } = fit(&base, &samples, "test").unwrap();
        let close = |got: f64, want: f64, what: &str| {
            assert!((got - want).abs() <= 1e-3 * want.abs().max(1.0), "{what}: {got} against {want}");
        };
        let e = db.blocks.iter().find(|e| e.block == [32, 32] && e.dtype == "f32").unwrap();
        close(e.tflops, 40.0, "table rate");
        close(e.overhead_ns.unwrap(), 20.0, "table overhead");
        close(e.activation_ns_per_k.unwrap(), 1.0, "table activation");
        close(e.waves.unwrap().critical_ns, 1700.0, "table critical");
        let e = db.block_tf32.unwrap();
        close(e.tflops, 120.0, "tf32 rate");
        close(e.a_tb_s, 8.0, "tf32 A");
        close(e.overhead_ns, 15.0, "tf32 overhead");
        close(e.fixed_ns, 900.0, "tf32 fixed");
        close(e.waves.unwrap().critical_ns, 400.0, "tf32 critical");
        close(e.waves.unwrap().critical_ps_per_fma, 9.0, "tf32 critical per fma");
        let e = db.fine_tf32.unwrap();
        close(e.step_tflops, 60.0, "fine steps");
        close(e.a_tb_s, 9.0, "fine A");
        close(e.fixed_ns, 2800.0, "fine fixed");
        let w = e.waves.unwrap();
        close(w.wave_ns, 60.0, "fine wave");
        close(w.critical_ns, 50.0, "fine critical");
        close(w.critical_ps_per_fma, 12.0, "fine critical per fma");
        let dense = |k: Option<&str>| db.dense.iter().find(|d| d.dtype == "f32" && d.kernel.as_deref() == k).unwrap();
        close(dense(Some("tf32x3")).tflops, 54.0, "dense tf32x3");
        close(dense(Some("simt")).tflops, 26.0, "dense simt");
        // Without library samples the planner's fp32 dense rate is the 3xTF32 kernel's.
        close(dense(None).tflops, 54.0, "dense default");
        assert!(rows.iter().all(|r| r.max_rel_err < 1e-6), "{rows:?}");
        assert!(block_tf32.unwrap().max_rel_err < 1e-6 && fine_fit.unwrap().max_rel_err < 1e-6);
    }

    /// Samples and DBs written before the wave terms existed still load and price as before.
    #[test]
    fn samples_and_dbs_without_wave_terms_still_load() {
        let old = r#"{"label":"n 32x32 [auto]","dtype":"f32","m":4096,"k":384,"n":384,"dense":false,
            "parts":[{"shape":{"h":32,"w":32},"n_blocks":14,"kernel":"tf32_blocks"}],"seconds":1.8e-5}"#;
        let s: Sample = serde_json::from_str(old).unwrap();
        assert_eq!(s.parts[0].geometry, None);
        let fine = r#"{"fine_tf32":{"steps":64,"nt":2,"col_tiles":3,"tile":[0,0,0]}}"#;
        let k: PartKernel = serde_json::from_str(fine).unwrap();
        assert!(matches!(k, PartKernel::FineTf32(FineTf32Work { heaviest: 0, .. })));
        let base = CostModel::sm_90();
        assert!(
            base.db.blocks.iter().all(|b| b.waves.is_none()) && base.db.block_tf32.as_ref().unwrap().waves.is_none()
        );
        let with = Sample {
            parts: vec![Part {
                geometry: Some(Geometry { ctas: 384, per_sm: 4, heaviest: 12, unit_fmas: 1 << 17 }),
                ..s.parts[0].clone()
            }],
            ..s.clone()
        };
        assert_eq!(predict(&base, &s).unwrap(), predict(&base, &with).unwrap(), "no terms, no change");
    }

    #[test]
    fn nonneg_fit_clamps_and_bad_dtypes_are_errors() {
        // y = 2·a0 exactly, with a third column that would take a negative weight if free.
        let eqs: Vec<([f64; 3], f64)> =
            (1..6).map(|i| ([i as f64, 1.0, (i * i) as f64], 2.0 * i as f64 - 0.1 * (i * i) as f64)).collect();
        let x = nonneg_least_squares(&eqs);
        assert!(x.iter().all(|v| *v >= 0.0), "{x:?}");
        assert_eq!(x[2], 0.0);
        let exact: Vec<([f64; 3], f64)> = (1..6).map(|i| ([i as f64, 1.0, 0.0], 3.0 * i as f64 + 0.5)).collect();
        let x = nonneg_least_squares(&exact);
        assert!((x[0] - 3.0).abs() < 1e-9 && (x[1] - 0.5).abs() < 1e-9, "{x:?}");
        let base = CostModel::sm_90();
        let s = Sample {
            label: "x".into(),
            dtype: "f7".into(),
            m: 1024,
            k: 1024,
            n: 1024,
            dense: false,
            parts: vec![Part {
                shape: BlockShape::new(32, 32),
                n_blocks: 102,
                kernel: PartKernel::Blocks,
                geometry: None,
            }],
            seconds: 20e-6,
        };
        assert!(fit(&base, &[s], "bad").unwrap_err().to_string().contains("f7"));
    }

    /// Dense library samples of several sizes give the rate and the fixed overhead back
    /// together (a skinny product that our streaming kernel runs charged no overhead); samples
    /// of one size keep the DB's overhead and fit the rate alone.
    #[test]
    fn dense_samples_of_several_sizes_fit_rate_and_overhead_together() {
        let base = CostModel::sm_90();
        let mut truth_db = base.db.clone();
        truth_db.dense.retain(|d| d.dtype != "f16");
        truth_db.dense.push(DenseEntry { dtype: "f16".into(), tflops: 640.0, kernel: None, overhead_us: Some(3.1) });
        let truth = CostModel::new(base.hw.clone(), truth_db).unwrap();
        let sample = |m: usize, k: usize, n: usize| {
            let mut s = Sample {
                label: format!("{m}x{k}x{n}"),
                dtype: "f16".into(),
                m,
                k,
                n,
                dense: true,
                parts: vec![],
                seconds: 0.0,
            };
            s.seconds = predict(&truth, &s).unwrap();
            s
        };
        let shapes = [(4096, 384, 384), (4096, 384, 1536), (4096, 1536, 384), (4096, 4096, 4096), (6000, 43, 11)];
        let samples: Vec<Sample> = shapes.iter().map(|&(m, k, n)| sample(m, k, n)).collect();
        assert!(CostModel::streamed(None, base.hw.by_dtype("f16").unwrap(), 43, 11), "the skinny one is streamed");
        let fitted = fit(&base, &samples, "test").unwrap();
        let e = fitted.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).unwrap();
        assert!((e.tflops - 640.0).abs() < 0.5, "rate {}", e.tflops);
        assert!((e.overhead_us.unwrap() - 3.1).abs() < 0.01, "overhead {:?}", e.overhead_us);
        let model = CostModel::new(base.hw.clone(), fitted.db).unwrap();
        for s in &samples {
            assert!((predict(&model, s).unwrap() - s.seconds).abs() < 1e-3 * s.seconds, "{}", s.label);
        }
        // One size class: the DB's overhead stays, the rate absorbs the rest.
        let small: Vec<Sample> = (0..3).map(|_| sample(4096, 384, 384)).collect();
        let fitted = fit(&base, &small, "test").unwrap();
        let e = fitted.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).unwrap();
        let db_overhead =
            base.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).and_then(|d| d.overhead_us);
        assert_eq!(e.overhead_us, db_overhead);
        assert!(e.tflops < 640.0, "the rate takes what the smaller overhead leaves: {}", e.tflops);
        // Nor above the DB's own rate, whatever the samples say.
        let prior = base.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).unwrap().tflops;
        let fast: Vec<Sample> = samples.iter().map(|s| Sample { seconds: s.seconds * 0.3, ..s.clone() }).collect();
        let fitted = fit(&base, &fast, "test").unwrap();
        let e = fitted.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).unwrap();
        assert_eq!(e.tflops, prior, "capped at the DB's rate");
    }
}
