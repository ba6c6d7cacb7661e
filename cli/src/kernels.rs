//! `spartac kernels`: the specialized sparse-matmul kernels on the GPU: correctness against
//! the CPU reference (`test`) and timings for the benchmark table (`bench`); the fused
//! attention kernel against its f64 reference (`attention`).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use spartac::codegen::graph_ops::AttentionEngine;
use spartac::codegen::Dtype;
use spartac_runtime::cuda::attention::{
    attention_cases, attention_flops, attention_model_cases, attention_tolerance, run_attention_case,
    time_attention_case, AttentionCase, AttentionReport,
};
use spartac_runtime::cuda::cases::{bench_cases, correctness_cases, transformer_cases, two_four_cases, Case, Cover};
use spartac_runtime::cuda::spmm::{run_case, CaseReport, Check};
use spartac_runtime::cuda::CudaDevice;
use std::path::PathBuf;

#[derive(Args)]
pub struct KernelsArgs {
    #[command(subcommand)]
    command: KernelsCommand,
}

#[derive(Subcommand)]
enum KernelsCommand {
    /// Run every kernel family on fresh random inputs and compare with the f64 CPU reference.
    Test {
        /// Input seed (default: drawn from the clock, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Write the reports as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Only cases whose label contains this (e.g. ` i8 `); `a|b` either, a trailing `$`
        /// anchors at the label's end.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Run the fused attention kernel (f32, f16, bf16; 1 to 4096 keys; with and without an
    /// additive mask) on seeded inputs and compare with the f64 reference.
    Attention {
        /// Input seed.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Write the reports as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Only cases whose label contains this (e.g. `f16` or `k384`); `a|b` either, a trailing
        /// `$` anchors at the label's end.
        #[arg(long)]
        filter: Option<String>,
        /// Time the attention layers of real transformers instead (MiniLM-L6, BERT-512,
        /// BERT-base, BERT-large, 1024 and 4096 keys; fp16 with the padding mask), each checked
        /// first: milliseconds a launch and TFLOP/s.
        #[arg(long)]
        bench: bool,
        /// Timed samples per bench case (ten launches each).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        reps: u64,
    },
    /// Time the benchmark cases (CUDA events, L2 flushed before each run, median).
    Bench {
        #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
        sizes: Vec<usize>,
        /// Operand types: f32, f16, bf16, i8 (int8 operands, fp16 output).
        #[arg(long, value_delimiter = ',', default_value = "f32,f16")]
        dtypes: Vec<String>,
        /// Timed runs per case.
        #[arg(long, default_value_t = 100)]
        reps: usize,
        /// Only cases whose label contains this; `a|b` either, a trailing `$` anchors at the
        /// label's end (`"0.95 fine$"`: the default fine cover only, no tile variants).
        #[arg(long)]
        filter: Option<String>,
        /// Write A and W of every case as `.npy` here, for benches/spmm_peers.py.
        #[arg(long)]
        dump: Option<PathBuf>,
        /// Write the reports as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Instead of the square sizes: the linear layers of MiniLM-L6, a hidden-512 BERT
        /// encoder and BERT-base (Q, K, V merged too), 32×32 blocks at 50% and 90% under each
        /// 16-bit engine and the planner's choice, against cuBLAS dense with the bias.
        #[arg(long)]
        transformer: bool,
        /// Instead of the square sizes: 2:4 weights (along K) on the sparse tensor cores (the
        /// Hopper kernel's automatic tile and six forced ones, then the mma.sp kernel),
        /// against cuBLAS dense in the same call, at 4096³ and on MiniLM-L6 / BERT-base linear
        /// shapes (4096 rows); prints × cuBLAS. With `--dtypes i8`: int8 2:4 against our dense
        /// int8 kernel (benches/two_four_torch.py times cuBLAS's int8 GEMM).
        #[arg(long, conflicts_with = "transformer")]
        two_four: bool,
    },
}

pub fn run(args: KernelsArgs) -> Result<()> {
    let json = match &args.command {
        KernelsCommand::Test { json, .. }
        | KernelsCommand::Attention { json, .. }
        | KernelsCommand::Bench { json, .. } => json.as_deref(),
    };
    crate::outputs::check_outputs([("--json", json)])?;
    let dev = CudaDevice::open(0)?;
    println!("device: {} ({})", dev.name(), dev.arch());
    match args.command {
        KernelsCommand::Test { seed, json, filter } => test(&dev, seed, json, filter.as_deref()),
        KernelsCommand::Attention { seed, json, filter, bench: false, .. } => {
            test_attention(&dev, seed, json, filter.as_deref())
        }
        KernelsCommand::Attention { seed, json, filter, bench: true, reps } => {
            bench_attention(&dev, seed, reps as usize, json, filter.as_deref())
        }
        KernelsCommand::Bench { sizes, dtypes, reps, filter, dump, json, transformer, two_four } => {
            let dtypes: Vec<Dtype> =
                dtypes.iter().map(|d| d.parse::<Dtype>().map_err(anyhow::Error::msg)).collect::<Result<_>>()?;
            let mut cases: Vec<(usize, String, Case)> = vec![];
            for &dtype in &dtypes {
                if two_four {
                    for (i, (name, case)) in two_four_cases(dtype).into_iter().enumerate() {
                        cases.push((0, format!("24_{}_{}_{i:02}", name.replace(' ', "_"), dtype.name()), case));
                    }
                } else if transformer {
                    for (i, (name, case)) in transformer_cases(dtype).into_iter().enumerate() {
                        cases.push((0, format!("{}_{}_{i:02}", name.replace(' ', "_"), dtype.name()), case));
                    }
                } else {
                    for &size in &sizes {
                        for (i, case) in bench_cases(size, dtype).into_iter().enumerate() {
                            cases.push((size, format!("s{size}_{}_{i:02}", dtype.name()), case));
                        }
                    }
                }
            }
            bench(&dev, cases, reps, filter.as_deref(), dump, json)
        }
    }
}

/// Relative-norm tolerance of a dtype (fp32 math everywhere; half outputs are rounded).
fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F32 => 1e-5,
        Dtype::F16 => 2e-3,
        Dtype::Bf16 => 1e-2,
        // Exact int32 sums: only the fp16 rounding of the output (2^-11 relative; twice
        // when a second launch accumulates) remains.
        Dtype::I8 => 1e-3,
    }
}

/// Within tolerance on the finite elements, every one written, and NaN and ±Inf exactly where
/// the reference has them (a case with non-finite inputs must also have met some).
fn passes(case: &Case, r: &CaseReport) -> bool {
    r.all_written
        && r.rel_norm_err.is_finite()
        && r.rel_norm_err <= tolerance(case.dtype)
        && r.nonfinite_mismatches == 0
        && (!case.nonfinite || r.nonfinite_expected > 0)
}

fn test(dev: &CudaDevice, seed: Option<u64>, json: Option<PathBuf>, filter: Option<&str>) -> Result<()> {
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7)
    });
    println!("seed {seed}");
    let mut reports = vec![];
    let mut failed = 0;
    for (i, case) in correctness_cases().iter().enumerate() {
        if filter.is_some_and(|f| !label_matches(&case.label(), f)) {
            continue;
        }
        let r =
            run_case(dev, case, seed.wrapping_add(i as u64), Check::All, None, None).with_context(|| case.label())?;
        let ok = passes(case, &r);
        failed += usize::from(!ok);
        let kernels: Vec<String> = r.kernels.iter().map(|k| format!("{}({})", k.family, k.mode)).collect();
        println!(
            "{} {:<70} rel-norm {:.2e} max {:.2e} rows {} written {} [{}]",
            if ok { "PASS" } else { "FAIL" },
            r.label,
            r.rel_norm_err,
            r.max_err,
            r.rows_checked,
            r.all_written,
            kernels.join(" + ")
        );
        if r.nonfinite_mismatches > 0 || case.nonfinite {
            println!(
                "     non-finite: {} expected, {} mismatched{}",
                r.nonfinite_expected,
                r.nonfinite_mismatches,
                r.first_mismatch.as_deref().map(|m| format!(", first at {m}")).unwrap_or_default()
            );
        }
        reports.push(r);
    }
    if let Some(path) = json {
        spartac::output::write_atomic(&path, serde_json::to_string_pretty(&reports)?.as_bytes())?;
    }
    println!("{} of {} cases pass, {} modules compiled", reports.len() - failed, reports.len(), dev.cached_modules());
    if failed > 0 {
        bail!("{failed} kernel cases do not match the CPU reference");
    }
    Ok(())
}

fn test_attention(dev: &CudaDevice, seed: u64, json: Option<PathBuf>, filter: Option<&str>) -> Result<()> {
    println!("seed {seed}");
    let mut reports = vec![];
    let mut failed = 0;
    for (i, case) in attention_cases().iter().enumerate() {
        if filter.is_some_and(|f| !label_matches(&case.label(), f)) {
            continue;
        }
        let r = run_attention_case(dev, case, seed.wrapping_add(i as u64)).with_context(|| case.label())?;
        let ok = r.passes(case.dtype);
        failed += usize::from(!ok);
        println!(
            "{} {:<58} rel-norm {:.2e} (limit {:.0e}) max-abs {:.2e} NaN mismatches {} NaN in both {}",
            if ok { "PASS" } else { "FAIL" },
            r.label,
            r.rel_norm_err,
            attention_tolerance(case.dtype),
            r.max_abs_err,
            r.nan_mismatches,
            r.nan_rows_elements
        );
        reports.push(r);
    }
    if let Some(path) = json {
        spartac::output::write_atomic(&path, serde_json::to_string_pretty(&reports)?.as_bytes())?;
    }
    println!("{} of {} attention cases pass", reports.len() - failed, reports.len());
    if failed > 0 {
        bail!("{failed} attention cases do not match the f64 reference");
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct AttentionBenchEntry {
    model: &'static str,
    ms: f64,
    tflops: f64,
    passes: bool,
    #[serde(flatten)]
    report: AttentionReport,
}

fn bench_attention(
    dev: &CudaDevice,
    seed: u64,
    reps: usize,
    json: Option<PathBuf>,
    filter: Option<&str>,
) -> Result<()> {
    let mut entries = vec![];
    println!("{:<22} {:<44} {:>9} {:>8} {:>9}", "model", "case", "ms", "TFLOP/s", "rel-norm");
    // Each layer on the kernel a compiled model runs (`Auto`), then on each 16-bit kernel and
    // wgmma key tile (the occupancy variants, `ctas` > 1, were measured and not kept).
    let engines = [
        AttentionEngine::Auto,
        AttentionEngine::MmaSync,
        AttentionEngine::Wgmma { bk: 64, ctas: 1 },
        AttentionEngine::Wgmma { bk: 128, ctas: 1 },
    ];
    let runs = attention_model_cases()
        .into_iter()
        .flat_map(|(model, case)| engines.map(|engine| (model, AttentionCase { engine, ..case.clone() })));
    for (i, (model, case)) in runs.enumerate() {
        let label = format!("{model} {}", case.label());
        if filter.is_some_and(|f| !label_matches(&label, f)) {
            continue;
        }
        let (report, ms) =
            time_attention_case(dev, &case, seed.wrapping_add(i as u64), reps).with_context(|| label.clone())?;
        let passes = report.passes(case.dtype);
        let tflops = attention_flops(&case) / (ms * 1e-3) / 1e12;
        println!(
            "{model:<22} {:<44} {ms:>9.4} {tflops:>8.1} {:>9.2e}{}",
            case.label(),
            report.rel_norm_err,
            if passes { "" } else { "  FAIL" }
        );
        entries.push(AttentionBenchEntry { model, ms, tflops, passes, report });
    }
    if let Some(path) = json {
        spartac::output::write_atomic(&path, serde_json::to_string_pretty(&entries)?.as_bytes())?;
    }
    let failed = entries.iter().filter(|e| !e.passes).count();
    if failed > 0 {
        bail!("{failed} timed attention cases do not match the f64 reference");
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct BenchEntry {
    id: String,
    size: usize,
    dtype: String,
    pattern: String,
    cover: String,
    /// `right` (C = A·W) or `left` (C = W·B; `a_file` then holds B).
    orientation: String,
    a_file: String,
    w_file: String,
    ok: bool,
    #[serde(flatten)]
    report: CaseReport,
}

/// Times `cases` (each with its size, 0 for other shapes, and its id).
fn bench(
    dev: &CudaDevice,
    cases: Vec<(usize, String, Case)>,
    reps: usize,
    filter: Option<&str>,
    dump: Option<PathBuf>,
    json: Option<PathBuf>,
) -> Result<()> {
    if let Some(d) = &dump {
        std::fs::create_dir_all(d).with_context(|| d.display().to_string())?;
    }
    let mut entries = vec![];
    let seed = 2026;
    // The dense reference's time per (shape, dtype), for the 2:4 cases' ratio: cuBLAS on 16
    // bits, our dense int8 kernel on int8 (cuBLAS is not routed for int8).
    let mut library_ms = std::collections::HashMap::new();
    for (size, id, case) in &cases {
        let (size, case) = (*size, case);
        let dtype = case.dtype;
        if filter.is_some_and(|f| !label_matches(&case.label(), f)) {
            continue;
        }
        let id = id.clone();
        let left = case.orientation == spartac::codegen::Orientation::Left;
        let side = if left { "_left" } else { "" };
        // Cases of one size share their dumped operands by name; other shapes name theirs.
        let tag = if (case.m, case.k, case.n) == (size, size, size) {
            size.to_string()
        } else {
            format!("{}x{}x{}", case.m, case.k, case.n)
        };
        let a_file = format!("{}_{tag}_{}.npy", if left { "B" } else { "A" }, dtype.name());
        let w_file = format!("W_{tag}_{}_{}{side}.npy", dtype.name(), case.pattern.label().replace(['@', '+'], "_"));
        let d = dump.as_deref().map(|dir| (dir, a_file.as_str(), w_file.as_str()));
        let r = run_case(dev, case, seed, Check::Rows(64), Some((10, reps)), d).with_context(|| case.label())?;
        let ok = passes(case, &r);
        let key = (case.m, case.k, case.n, dtype.name());
        let int8 = dtype == Dtype::I8;
        if (case.cublas_dense || int8) && matches!(case.cover, Cover::Dense(..)) {
            library_ms.insert(key, r.ms.unwrap_or(f64::NAN));
        }
        let ratio = match (case.cover, library_ms.get(&key), r.ms) {
            (Cover::TwoFour | Cover::Block(..) | Cover::Planned, Some(lib), Some(ms)) => {
                format!(" {:.2}x {}", lib / ms, if int8 { "our int8 dense" } else { "cuBLAS" })
            }
            _ => String::new(),
        };
        println!(
            "{id} {:<58} {:>9.4} ms {:>7.1} TFLOP/s err {:.1e} {}{ratio}",
            r.label,
            r.ms.unwrap_or(f64::NAN),
            r.flops / r.ms.unwrap_or(f64::NAN) / 1e9,
            r.rel_norm_err,
            if ok { "ok" } else { "WRONG" }
        );
        entries.push(BenchEntry {
            id,
            size,
            dtype: dtype.name().into(),
            pattern: case.pattern.label(),
            cover: case.cover.label(),
            orientation: if left { "left" } else { "right" }.into(),
            a_file,
            w_file,
            ok,
            report: r,
        });
    }
    if let Some(path) = json {
        spartac::output::write_atomic(&path, serde_json::to_string_pretty(&entries)?.as_bytes())?;
    }
    if entries.iter().any(|e| !e.ok) {
        bail!("some benchmark cases do not match the CPU reference");
    }
    Ok(())
}

/// Whether a case label matches `--filter`: any of its `|`-separated alternatives occurs in
/// the label (one ending in `$` at the label's end).
fn label_matches(label: &str, filter: &str) -> bool {
    filter.split('|').any(|alt| match alt.strip_suffix('$') {
        Some(end) => label.ends_with(end),
        None => label.contains(alt),
    })
}

#[cfg(test)]
mod filter_tests {
    use super::label_matches;

    #[test]
    fn filters_match_substrings_alternatives_and_label_ends() {
        let l = "1024x1024x1024 f32 unstructured@0.95 fine";
        assert!(label_matches(l, "0.95 fine") && label_matches(l, "0.95 fine$"));
        assert!(!label_matches(&format!("{l} stream"), "0.95 fine$"));
        assert!(label_matches(&format!("{l} stream"), "x|fine stream$"));
        assert!(!label_matches(l, "0.99|block"));
    }
}
