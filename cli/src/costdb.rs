//! `spartac costdb fit`: calibrate the planner's cost DB from GPU measurements.
//!
//! Reads the JSON that `spartac kernels bench --json` writes (one record per case, with the
//! kernels each case ran), fits per (block shape, dtype) rate and per-block overhead and the
//! dense (cuBLAS) rate per dtype (`spartac::plan::calibrate`), writes the new DB and a report
//! that predicts every measured case with the old and the new DB.

use crate::model_args::ModelArgs;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Deserialize;
use spartac::codegen::FineTf32Work;
use spartac::plan::calibrate::{fit, validate, Fitted, Part, PartKernel, Sample};
use spartac::plan::cost::{CostDb, CostModel};
use spartac::plan::cover::BlockShape;
use spartac::plan::hardware::HardwareProfile;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args)]
pub struct CostdbArgs {
    #[command(subcommand)]
    command: CostdbCommand,
}

#[derive(Subcommand)]
enum CostdbCommand {
    /// Fit the cost DB to measured kernel times.
    ///
    /// Example (after a GPU run of benches/spmm_gpu.sh; the inputs of the bundled fit are in
    /// benches/results/costdb_fit_logs.tar.xz):
    ///   spartac costdb fit --bench OUT/ours_f32.json --peers OUT/peers_f32.json \
    ///       --out costdb/sm_90.json --report benches/results/costdb_fit.md
    Fit {
        /// `spartac kernels bench --json` output; repeat to pool several runs.
        #[arg(long, required = true)]
        bench: Vec<PathBuf>,
        /// `benches/spmm_peers.py` output: its measured HBM bandwidth replaces `dram_tb_s`.
        #[arg(long)]
        peers: Option<PathBuf>,
        /// DB to start from (default: the bundled sm_90 DB).
        #[arg(long)]
        base: Option<PathBuf>,
        /// Where to write the fitted DB (JSON).
        #[arg(long)]
        out: PathBuf,
        /// Write the fit and validation tables (Markdown) here too.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Fit only the dense (library) rates and the bandwidth; keep the base DB's block
        /// entries. Use it when only a few block shapes were measured: fitted shapes next to
        /// analytic ones bias the cover toward the unmeasured shapes.
        #[arg(long)]
        dense_only: bool,
    },
    /// Join a model's candidates (as this build enumerates them, with their launch geometry)
    /// with the times a `spartac tune` cache holds for them; no GPU needed.
    ///
    /// Example (the H200 cache of benches/results/tune_warm_logs.tar.xz, extracted):
    ///   spartac costdb samples minilm-l6.onnx --tesa models/tesa/minilm-l6-block32-90.json \
    ///       --tune-cache t/tune --out samples.json
    Samples {
        #[command(flatten)]
        model: ModelArgs,
        /// TeSA attributes the model was tuned with.
        #[arg(long, value_name = "attrs.json")]
        tesa: Option<PathBuf>,
        /// Element type the model was tuned in.
        #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
        dtype: String,
        /// The tuning cache folder.
        #[arg(long, value_name = "DIR")]
        tune_cache: PathBuf,
        /// Where to write the samples (JSON).
        #[arg(long)]
        out: PathBuf,
    },
    /// Refit the cost DB to `costdb samples` output and report the median relative error
    /// before the refit, after it, and held out (half the operators fit, the other half scored).
    ///
    /// Example: spartac costdb refit --samples benches/results/tune_h200_samples.json
    Refit {
        /// `spartac costdb samples` output.
        #[arg(long)]
        samples: PathBuf,
        /// DB to start from (default: the bundled sm_90 DB).
        #[arg(long)]
        base: Option<PathBuf>,
        /// Write the fitted DB (JSON) here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Deserialize)]
struct KernelRec {
    family: String,
    live_instances: usize,
    #[serde(default)]
    block: Option<(usize, usize)>,
    #[serde(default)]
    grid: Option<(usize, usize, usize)>,
    /// The 3xTF32 fine kernel's k8 steps (records from before they carried them are skipped).
    #[serde(default)]
    steps: Option<usize>,
    /// Its n8 tiles per step (records without it: 1, the only width before it was recorded).
    #[serde(default)]
    n_tiles: Option<usize>,
}

#[derive(Deserialize)]
struct CaseRec {
    label: String,
    dtype: String,
    cover: String,
    kernels: Vec<KernelRec>,
    ms: Option<f64>,
    #[serde(default = "yes")]
    ok: bool,
}

fn yes() -> bool {
    true
}

/// `block32x32` / `mixed32x32+fine` → (32, 32).
fn cover_shape(cover: &str) -> Option<BlockShape> {
    let rest = cover.strip_prefix("block").or_else(|| cover.strip_prefix("mixed"))?;
    let dims: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == 'x').collect();
    let (h, w) = dims.split_once('x')?;
    Some(BlockShape::new(h.parse().ok()?, w.parse().ok()?))
}

/// A bench record as a calibration sample; `None` for cases the model does not describe
/// (our own generated dense kernel, failed or untimed cases).
fn sample(rec: &CaseRec) -> Result<Option<Sample>> {
    let (Some(ms), true) = (rec.ms, rec.ok) else { return Ok(None) };
    // The DB describes what `specialize` picks by default: leave out tile overrides, forced
    // tensor-core engines and folded (uniform-valued) weights, which are experiments.
    let words: Vec<&str> = rec.label.split_whitespace().collect();
    if words.iter().any(|w| {
        w.starts_with("tile") || w.starts_with("uniform") || *w == "wgmma" || *w == "wgmma-ws" || *w == "mmasync"
    }) {
        return Ok(None);
    }
    let dims = rec.label.split_whitespace().next().unwrap_or("");
    let d: Vec<usize> = dims.split('x').filter_map(|x| x.parse().ok()).collect();
    let [m, k, n] = d[..] else { bail!("case {:?}: no MxKxN at the start of its label", rec.label) };
    let product: Vec<&KernelRec> = rec.kernels.iter().filter(|k| k.family != "epilogue").collect();
    let dense = product.iter().any(|k| k.family == "cublas");
    if product.iter().any(|k| k.family == "dense") || (dense && product.len() > 1) {
        return Ok(None);
    }
    let mut parts = vec![];
    if !dense {
        for kr in &product {
            if kr.family == "fine_tf32" {
                // Its time follows its steps and column tiles (grid x), not its nonzeros.
                let (Some(steps), Some((col_tiles, _, _))) = (kr.steps, kr.grid) else { return Ok(None) };
                // The tile does not enter the model (the steps and column tiles carry it).
                let work = FineTf32Work { steps, nt: kr.n_tiles.unwrap_or(1), col_tiles, tile: (0, 0, 0), heaviest: 0 };
                let kernel = PartKernel::FineTf32(work);
                parts.push(Part { shape: BlockShape::new(1, 1), n_blocks: kr.live_instances, kernel, geometry: None });
                continue;
            }
            // Records from before kernels carried their block shape: take it from the cover.
            let shape = match (kr.block, cover_shape(&rec.cover)) {
                (Some((h, w)), _) if h > 0 => BlockShape::new(h, w),
                _ if kr.family == "fine" => BlockShape::new(1, 1),
                (None, Some(s)) => s,
                _ => return Ok(None),
            };
            // The 3xTF32 block kernel has its own entry, one for all the shapes it takes.
            let kernel = if kr.family == "block_tf32" { PartKernel::Tf32Blocks } else { PartKernel::Blocks };
            parts.push(Part { shape, n_blocks: kr.live_instances, kernel, geometry: None });
        }
    }
    Ok(Some(Sample { label: rec.label.clone(), dtype: rec.dtype.clone(), m, k, n, dense, parts, seconds: ms * 1e-3 }))
}

pub fn run(args: CostdbArgs) -> Result<()> {
    let (bench, peers, base, out, report, dense_only) = match args.command {
        CostdbCommand::Fit { bench, peers, base, out, report, dense_only } => {
            crate::outputs::check_outputs([("--out", Some(out.as_path())), ("--report", report.as_deref())])?;
            (bench, peers, base, out, report, dense_only)
        }
        CostdbCommand::Samples { model, tesa, dtype, tune_cache, out } => {
            crate::outputs::check_outputs([("--out", Some(out.as_path()))])?;
            let args = crate::costdb_tune::SamplesArgs {
                model: &model,
                tesa: tesa.as_deref(),
                dtype: &dtype,
                tune_cache: &tune_cache,
                out: &out,
            };
            return crate::costdb_tune::samples(args);
        }
        CostdbCommand::Refit { samples, base, out } => {
            crate::outputs::check_outputs([("--out", out.as_deref())])?;
            let base = crate::stages::cost_model(base.as_deref())?;
            return crate::costdb_tune::refit_samples(&samples, &base, out.as_ref());
        }
    };
    let mut db = match &base {
        Some(p) => CostDb::parse(
            &spartac::contained::read_regular_text(p).with_context(|| format!("reading {}", p.display()))?,
        )?,
        None => CostModel::sm_90().db,
    };
    if let Some(p) = &peers {
        let v: serde_json::Value = serde_json::from_str(
            &spartac::contained::read_regular_text(p).with_context(|| format!("reading {}", p.display()))?,
        )
        .with_context(|| format!("{}: not JSON", p.display()))?;
        let hbm = v.pointer("/ceilings/hbm_GBps").and_then(|x| x.as_f64());
        match hbm {
            Some(gbps) if gbps > 0.0 => db.dram_tb_s = gbps / 1000.0,
            _ => bail!("{}: no ceilings.hbm_GBps (is it spmm_peers.py output?)", p.display()),
        }
    }
    let mut samples = vec![];
    let mut skipped = 0;
    for p in &bench {
        let text = spartac::contained::read_regular_text(p).with_context(|| format!("reading {}", p.display()))?;
        let recs: Vec<CaseRec> = serde_json::from_str(&text)
            .with_context(|| format!("{}: not `spartac kernels bench --json` output", p.display()))?;
        for r in &recs {
            match sample(r)? {
                Some(s) => samples.push(s),
                None => skipped += 1,
            }
        }
    }
    if samples.is_empty() {
        bail!(
            "no usable timed cases in {}",
            bench.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let before = CostModel::new(HardwareProfile::sm_90(), db.clone())?;
    let sources: Vec<String> = bench.iter().map(|p| p.display().to_string()).collect();
    let Fitted { db: mut fitted, mut rows, mut fine, mut block_tf32 } =
        fit(&before, &samples, &format!("fitted by `spartac costdb fit` to {}", sources.join(", ")))?;
    if dense_only {
        fitted.blocks = before.db.blocks.clone();
        fitted.fine_tf32 = before.db.fine_tf32.clone();
        fitted.block_tf32 = before.db.block_tf32.clone();
        rows.clear();
        fine = None;
        block_tf32 = None;
    }
    let after = CostModel::new(HardwareProfile::sm_90(), fitted.clone())?;

    let mut md = String::new();
    writeln!(md, "## Fitted entries ({} timed cases used, {skipped} skipped)\n", samples.len())?;
    writeln!(md, "| dtype | block | TFLOP/s | overhead ns/block | samples | max fit error |")?;
    writeln!(md, "| --- | --- | --- | --- | --- | --- |")?;
    for r in &rows {
        writeln!(
            md,
            "| {} | {}x{} | {:.2} | {:.2} | {} | {:.1}% |",
            r.entry.dtype,
            r.entry.block[0],
            r.entry.block[1],
            r.entry.tflops,
            r.entry.overhead_ns.unwrap_or(f64::NAN),
            r.samples,
            100.0 * r.max_rel_err
        )?;
    }
    for d in &fitted.dense {
        if samples.iter().any(|s| s.dense && s.dtype == d.dtype) {
            writeln!(md, "| {} | dense (cuBLAS) | {:.1} | - | - | - |", d.dtype, d.tflops)?;
        }
    }
    if let Some(f) = &fine {
        writeln!(
            md,
            "\n3xTF32 fine kernel (`fine_tf32`): steps at {:.1} TFLOP/s (one product of 2·M·8·8 per step), \
             A re-read per column tile at {:.1} TB/s, {:.0} ns fixed; {} samples, max fit error {:.1}%.",
            f.entry.step_tflops,
            f.entry.a_tb_s,
            f.entry.fixed_ns,
            f.samples,
            100.0 * f.max_rel_err
        )?;
    }
    if let Some(f) = &block_tf32 {
        writeln!(
            md,
            "\n3xTF32 block kernel (`block_tf32`, every shape it takes): math at {:.1} TFLOP/s (one product \
             of three counted), each block's A slice (M·h·4 bytes) at {:.1} TB/s, {:.1} ns per block, {:.0} ns fixed; \
             {} samples, max fit error {:.1}%.",
            f.entry.tflops,
            f.entry.a_tb_s,
            f.entry.overhead_ns,
            f.entry.fixed_ns,
            f.samples,
            100.0 * f.max_rel_err
        )?;
    }
    writeln!(md, "\n## Every measured case, predicted by the old and the fitted DB\n")?;
    writeln!(md, "| case | measured µs | old DB µs (error) | fitted DB µs (error) |")?;
    writeln!(md, "| --- | --- | --- | --- |")?;
    let (old, new) = (validate(&before, &samples)?, validate(&after, &samples)?);
    let err = |p: f64, m: f64| 100.0 * (p - m) / m;
    for ((label, p0, meas), (_, p1, _)) in old.iter().zip(&new) {
        writeln!(
            md,
            "| {label} | {:.1} | {:.1} ({:+.0}%) | {:.1} ({:+.0}%) |",
            meas * 1e6,
            p0 * 1e6,
            err(*p0, *meas),
            p1 * 1e6,
            err(*p1, *meas)
        )?;
    }
    print!("{md}");
    // A fit that produced a non-positive or non-finite rate (say, from a 0 ms sample) is refused
    // before anything is written: the error names the field.
    fitted.validate().map_err(|e| anyhow::anyhow!("the fitted DB is not usable: {e}"))?;
    let json = serde_json::to_string_pretty(&fitted)? + "\n";
    crate::outputs::write_atomic(&out, json.as_bytes())?;
    if let Some(r) = &report {
        crate::outputs::write_atomic(r, md.as_bytes())?;
    }
    eprintln!("wrote {}", out.display());
    Ok(())
}
