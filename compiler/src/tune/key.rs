//! What a tuning measurement is valid for: the operator's [`Signature`] (GEMM shape, dtype,
//! orientation, epilogue and a hash of its weight's TeSA: the pruned pattern and the bit
//! widths, not the values, which do not change a kernel's time), the GPU ([`Target`]) and the
//! spartac version. [`cache_key`] hashes the three into the name of the cache entry.

use crate::hash::Fnv64;
use crate::ir::Graph;
use crate::plan::site::Site;
use crate::plan::suboperator::Orientation;
use crate::plan::OperatorPlan;
use serde::{Deserialize, Serialize};

/// Bumped when the meaning of an entry changes: old entries then miss.
const KEY_FORMAT: &str = "spartac-tune-1";

/// The GPU a measurement was taken on: its NVRTC target (`sm_90a`) and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Target {
    pub arch: String,
    pub device: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.device, self.arch)
    }
}

/// One operator, as far as its kernels' time is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The other GEMM dimension (activation rows for a weight on the right).
    pub m: usize,
    /// Logical weight shape.
    pub rows: usize,
    pub cols: usize,
    /// Kernel dtype of the widest elements (`f32`, `f16`, ...).
    pub dtype: String,
    /// `right` (`X·W`) or `left` (`W·X`).
    pub orientation: String,
    /// Gemm with `transB`: the stored weight is the transpose of the logical one.
    pub transposed: bool,
    /// `bias`, `bias+Gelu`, `Relu`, or empty: what the last kernel applies.
    pub epilogue: String,
    /// FNV-1a 64 (hex) of every element's TeSA attribute (bits, 0 = pruned, and format) in the
    /// logical weight's row-major order.
    pub pattern: String,
}

/// The signature of the operator `op` planned from `site` of `graph`.
pub fn signature(graph: &Graph, site: &Site, op: &OperatorPlan) -> Signature {
    let tesa = site.tesa(graph);
    let mut h = Fnv64::new();
    for i in 0..tesa.numel() {
        h.add(&tesa.attr(i).to_u16().to_le_bytes());
    }
    let epi = &site.epilogue;
    let epilogue: Vec<&str> = epi.bias.iter().map(|_| "bias").chain(epi.activation.as_deref()).collect();
    Signature {
        m: op.m,
        rows: op.rows,
        cols: op.cols,
        dtype: op.dtype.clone(),
        orientation: match op.orientation {
            Orientation::WeightRight => "right".into(),
            Orientation::WeightLeft => "left".into(),
        },
        transposed: op.transposed,
        epilogue: epilogue.join("+"),
        pattern: format!("{:016x}", h.finish()),
    }
}

/// The cache key of `signature` measured on `target` by spartac `version`: 16 hex digits.
pub fn cache_key(signature: &Signature, target: &Target, version: &str) -> String {
    let text = serde_json::to_string(&(KEY_FORMAT, signature, target, version)).expect("plain data serializes");
    format!("{:016x}", crate::hash::checksum(text.as_bytes()))
}

/// The version of this build, part of every key: a new spartac re-measures.
pub fn spartac_version() -> &'static str {
    crate::VERSION
}
