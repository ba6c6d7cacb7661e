//! `spartac synth matmul`: a one-MatMul ONNX model whose weight is pruned by a seeded pattern
//! (`tesa::patterns`), and the TeSA attrs file that marks it, so a benchmark shape (the 4096²
//! mixed pattern of SparTA's Fig. 16) is written where it runs instead of carried.
//!
//! The model is `y = x · w`, `x` an `m × k` input and `w` a `k × n` initializer: pruned elements
//! are exactly 0, the others uniform in [-1, 1) from SplitMix64 (the same seed, the same bytes).
//! The attrs file prunes `w` where it is zero (`prune: "zeros"`), which is its whole pattern.
//! Both files are written atomically.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use spartac::codegen::from_plan::single_weight_graph;
use spartac::codegen::{Dtype, Orientation};
use spartac::rng::SplitMix64;
use spartac::tesa::patterns::Pattern;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct SynthArgs {
    #[command(subcommand)]
    command: SynthCommand,
}

#[derive(Subcommand)]
enum SynthCommand {
    /// One MatMul `y = x · w` with a `k × n` weight pruned by a seeded pattern.
    ///
    /// Example (the 4096² mixed pattern: 90% of 32x32 blocks pruned, 1% of the elements kept
    /// in the pruned blocks):
    ///   spartac synth matmul --m 4096 --k 4096 --n 4096 --pattern mixed32x32@0.9+0.01 \
    ///       --seed 1 -o mixed.onnx --tesa-out mixed.tesa.json
    Matmul {
        /// Activation rows.
        #[arg(long)]
        m: usize,
        /// Weight rows (the activation's columns).
        #[arg(long)]
        k: usize,
        /// Weight columns.
        #[arg(long)]
        n: usize,
        /// unstructured@S, blockHxW@S, mixedHxW@S+KEPT or N:M (S the pruned fraction).
        #[arg(long)]
        pattern: String,
        /// Seed of the pattern and the values.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The ONNX model to write.
        #[arg(short, long)]
        out: PathBuf,
        /// The TeSA attrs file to write (for `--tesa`).
        #[arg(long, value_name = "attrs.json")]
        tesa_out: PathBuf,
    },
}

/// Most elements of a synthesized weight (a 16384² fp32 weight is 1 GiB).
const MAX_WEIGHT: usize = 1 << 28;

pub fn run(args: SynthArgs) -> Result<()> {
    let SynthCommand::Matmul { m, k, n, pattern, seed, out, tesa_out } = args.command;
    crate::outputs::check_outputs([("--out", Some(out.as_path())), ("--tesa-out", Some(tesa_out.as_path()))])?;
    let pattern = Pattern::parse(&pattern).map_err(anyhow::Error::msg)?;
    let kept = write_matmul(m, k, n, &pattern, seed, &out, &tesa_out)?;
    println!(
        "wrote {} ({m}x{k} · {k}x{n}, {}, seed {seed}: {kept} of {} weights kept, density {:.4}) and {}",
        out.display(),
        pattern.label(),
        k * n,
        kept as f64 / (k * n) as f64,
        tesa_out.display()
    );
    Ok(())
}

/// Writes the model and its attrs file; returns the weight's kept elements.
fn write_matmul(
    m: usize,
    k: usize,
    n: usize,
    pattern: &Pattern,
    seed: u64,
    out: &Path,
    tesa_out: &Path,
) -> Result<usize> {
    if m == 0 || k == 0 || n == 0 {
        bail!("--m, --k and --n must be positive (got {m}, {k}, {n})");
    }
    if k.checked_mul(n).is_none_or(|e| e > MAX_WEIGHT) || m.checked_mul(k).is_none_or(|e| e > MAX_WEIGHT) {
        bail!("{m}x{k} · {k}x{n} is too large: at most {MAX_WEIGHT} elements per tensor");
    }
    let mask = pattern.mask(k, n, seed);
    let mut rng = SplitMix64::new(seed.wrapping_add(0x5eed));
    let weight: Vec<f32> = mask
        .iter()
        .map(|&pruned| {
            let v = rng.uniform(-1.0, 1.0) as f32;
            match (pruned, v) {
                (true, _) => 0.0,
                // A kept weight is never zero: zero means pruned.
                (false, 0.0) => 0.5,
                (false, v) => v,
            }
        })
        .collect();
    let kept = mask.iter().filter(|p| !**p).count();
    let mut graph = single_weight_graph(m, k, n, &weight, Dtype::F32, Orientation::Right)?;
    graph.name = format!("synth_matmul_{m}x{k}x{n}");
    spartac::frontend::save_model(&graph, out).with_context(|| format!("writing {}", out.display()))?;
    let attrs = serde_json::json!({ "tensors": { "w": { "prune": "zeros" } } });
    let text = serde_json::to_string_pretty(&attrs)? + "\n";
    spartac::output::write_atomic(tesa_out, text.as_bytes())
        .with_context(|| format!("writing {}", tesa_out.display()))?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spartac::frontend::{load_model, LoadOptions};
    use spartac::tesa::attrs::{apply_attrs, TesaAttrs};

    /// The written model loads, its attrs apply, and the weight's TeSA is the pattern's mask:
    /// the same density, pruned exactly where the mask says; the same seed writes the same bytes.
    #[test]
    fn a_synthesized_matmul_loads_with_its_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let (model, attrs) = (dir.path().join("mixed.onnx"), dir.path().join("mixed.tesa.json"));
        let pattern = Pattern::parse("mixed32x32@0.9+0.01").unwrap();
        let kept = write_matmul(64, 256, 512, &pattern, 3, &model, &attrs).unwrap();
        let mask = pattern.mask(256, 512, 3);
        assert_eq!(kept, mask.iter().filter(|p| !**p).count());
        let mut g = load_model(&model, &LoadOptions::default()).unwrap();
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.nodes[0].op_type, "MatMul");
        let parsed = TesaAttrs::read(&attrs).unwrap();
        apply_attrs(&mut g, Some(&parsed)).unwrap();
        let (&wid, _) = g.initializers.iter().next().unwrap();
        let tesa = g.values[wid.index()].tesa.as_ref().unwrap();
        assert_eq!(tesa.n_pruned(), 256 * 512 - kept);
        let density = tesa.density();
        // 13 of the 128 blocks kept (90% of them pruned, rounded) plus 1% of all elements
        // scattered in the others.
        let want = (13 * 1024 + 1311) as f64 / (256 * 512) as f64;
        assert!((density - want).abs() < 1e-12, "density {density}, want {want}");
        let w = g.initializers[&wid].to_dense();
        let values = w.as_slice::<f32>().unwrap();
        for (i, pruned) in mask.iter().enumerate() {
            assert_eq!(values[i] == 0.0, *pruned, "element {i}");
        }
        let first = std::fs::read(&model).unwrap();
        write_matmul(64, 256, 512, &pattern, 3, &model, &attrs).unwrap();
        assert_eq!(std::fs::read(&model).unwrap(), first);
        // Bad sizes and patterns are one-line errors.
        let err = write_matmul(0, 256, 512, &pattern, 3, &model, &attrs).unwrap_err().to_string();
        assert!(err.contains("positive"), "{err}");
        let err = write_matmul(1 << 20, 1 << 20, 8, &pattern, 3, &model, &attrs).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }
}
