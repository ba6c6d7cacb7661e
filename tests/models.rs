//! Comparing the reference executor with onnxruntime on real models: the reference
//! files are written by `models/ort_reference.py` (`in:NAME` / `out:NAME` arrays).

use anyhow::{anyhow, Context, Result};
use spartac::frontend::{load_model, LoadOptions};
use spartac::ir::Tensor;
use spartac_runtime::npz::read_npz;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where prepared models live: `<repo>/.cache/models`.
pub fn models_dir() -> PathBuf {
    crate::repo_root().join(".cache/models")
}

/// Error of one output against the reference.
#[derive(Clone, Debug)]
pub struct OutputError {
    pub name: String,
    /// max |ours - ref| / max |ref| (normwise relative error).
    pub max_rel: f64,
    pub max_abs: f64,
}

pub struct Comparison {
    pub outputs: Vec<OutputError>,
    pub times: Vec<Duration>,
}

impl Comparison {
    pub fn worst_rel(&self) -> f64 {
        self.outputs.iter().map(|o| o.max_rel).fold(0.0, f64::max)
    }

    pub fn median_time(&self) -> Duration {
        let mut t = self.times.clone();
        t.sort();
        t[t.len() / 2]
    }
}

/// Normwise relative error of `got` against `want` (same shape required).
pub fn rel_error(name: &str, got: &Tensor, want: &Tensor) -> Result<OutputError> {
    if got.shape() != want.shape() {
        return Err(anyhow!("{name}: shape {:?} but onnxruntime gives {:?}", got.shape(), want.shape()));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let max_abs = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let scale = w.iter().map(|b| b.abs()).fold(0.0, f64::max);
    let max_rel = if scale == 0.0 { max_abs } else { max_abs / scale };
    Ok(OutputError { name: name.to_string(), max_rel, max_abs })
}

/// Loads `model`, runs it `runs` times on the reference inputs, compares the outputs.
pub fn compare_with_ort(model: &Path, reference: &Path, runs: usize) -> Result<Comparison> {
    let graph = load_model(model, &LoadOptions::default()).with_context(|| format!("loading {}", model.display()))?;
    let arrays = read_npz(reference)?;
    let mut inputs = BTreeMap::new();
    let mut expected = BTreeMap::new();
    for (k, v) in arrays {
        if let Some(n) = k.strip_prefix("in:") {
            inputs.insert(n.to_string(), v);
        } else if let Some(n) = k.strip_prefix("out:") {
            expected.insert(n.to_string(), v);
        }
    }
    let mut times = vec![];
    let mut outs = vec![];
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        outs = spartac::reference::execute(&graph, &inputs)?;
        times.push(t0.elapsed());
    }
    let mut outputs = vec![];
    for (name, t) in &outs {
        let want = expected.get(name).ok_or_else(|| anyhow!("no reference for output {name:?}"))?;
        outputs.push(rel_error(name, t, want)?);
    }
    Ok(Comparison { outputs, times })
}
