//! `attrs.json`: the user's TeSA for named tensors (`spartac propagate --tesa FILE`).
//!
//! ```json
//! {"tensors": {
//!   "fc1.weight": {"block_magnitude": {"block": [32, 32], "sparsity": 0.5}, "bits": 8},
//!   "fc2.weight": {"nm": [2, 4], "rows": [0, 5]},
//!   "fc3.weight": {"mask": {"npy": "fc3_mask.npy"}, "format": "int"},
//!   "encoder.*.weight": {"channel_magnitude": {"sparsity": 0.3}}
//! }}
//! ```
//! Every initializer is pruned where it is zero, listed or not (also when there is no
//! file). A tensor's spec may combine any of these keys ([`TENSOR_KEYS`]); each one only
//! adds pruning or lowers bit widths (it is joined into the TeSA):
//!
//! - `prune: "zeros"`: nothing beyond the zeros (the default).
//! - `block_magnitude {block, sparsity}`: the `sparsity` fraction of blocks with the
//!   smallest L1 norm. `channel_magnitude {sparsity}`: the same for output channels
//!   (axis 0); with `"coupled": true` a Conv's channels are ranked and pruned together
//!   with the channels they are coupled to (one residual stream, a Concat's parts), so
//!   that `shrink_channels` can cut them. `nm [n, m]`: keep the `n` largest of every `m` consecutive elements of
//!   the last axis. These need values, so they apply to initializers only.
//! - `mask`: an element mask of the tensor's shape, **1 = keep, 0 = pruned**: nested
//!   arrays of 0/1 (or booleans) or `{"npy": "file.npy"}` (any bool, int or float
//!   array; nonzero = keep). `.npy` paths are relative to the attrs file's folder.
//! - `block_mask {block: [bh, bw], mask}`: the same over the block grid.
//! - `rows`, `cols`, `channels`: index lists to prune.
//! - `bits`, `format`: the tensor's width and format. `block_bits {block, bits}`: a
//!   width per block (a 2-D array over the grid; 0 prunes the block).
//!   `element_bits [{index, bits, format?}]`: a width (0 prunes) per element.
//!
//! Blocks, rows and columns refer to the matrix view of [`super::masks::view_2d`]: `cols`
//! is the last axis and `rows` all leading axes flattened; the block grid is
//! `ceil(rows / bh) × ceil(cols / bw)`.
//!
//! A name with `*` is a glob (`*` matches any run of characters, dots included) over
//! initializer names; every glob must match something. An initializer takes one spec:
//! its exact name's, else the matching glob's with the most literal characters (ties:
//! the first in byte order of the keys). A key starting with `@` selects by role instead of
//! by name, below every glob and exact name: `@matmul_weights` (every 2-D constant weight of
//! a MatMul or Gemm), `@conv_weights` (every Conv weight) and `@mlp_out_weights` (the second
//! weight of every MLP: a transformer FFN's output projection, its rows the hidden units), so
//! one file fits a model whatever its exporter named the tensors. The JSON Schema is `models/tesa.schema.json`;
//! applying a parsed file to a graph is [`super::annotate`].

pub use super::annotate::{apply_attrs, zero_pruned_initializers};
pub use super::masks::{block_magnitude_mask, nm_mask};

use super::masks::Line;
use super::Format;
use crate::Error;
use serde_json::{Map, Value as Json};
use std::path::Path;

/// Every key a tensor spec accepts (the schema's `$defs.tensor.properties` lists the same).
pub const TENSOR_KEYS: &[&str] = &[
    "prune",
    "block_magnitude",
    "channel_magnitude",
    "nm",
    "mask",
    "block_mask",
    "rows",
    "cols",
    "channels",
    "bits",
    "format",
    "block_bits",
    "element_bits",
];

/// A dense boolean array with its shape (row-major), true = keep.
#[derive(Clone, Debug, PartialEq)]
pub struct KeepMask {
    pub shape: Vec<usize>,
    pub keep: Vec<bool>,
}

/// One pruning proposal of a tensor spec.
#[derive(Clone, Debug, PartialEq)]
pub enum PruneSpec {
    BlockMagnitude {
        block: Vec<usize>,
        sparsity: f64,
    },
    /// The `n` largest magnitudes of every `m` consecutive elements along `axis`; `None`: the
    /// reduction axis of a MatMul or Gemm weight (what 2:4 sparse tensor cores need: axis 0 of
    /// `MatMul(X, W)`'s `W`, 1 of a Gemm's `transB` weight), the last axis of other tensors.
    NM {
        n: usize,
        m: usize,
        axis: Option<usize>,
    },
    /// Output channels (axis-0 slices) with the smallest L1 norm, up to `sparsity`;
    /// with `bias`, the same channels of the bias of every Conv/Gemm reading the weight
    /// are pruned too, and the shift (`B`, `input_mean`) of a BatchNormalization right
    /// after such a Conv (removing a channel removes its bias and its normalization). With `coupled`, a Conv
    /// weight's channels are ranked with the channels they are coupled to (the same
    /// channel of every conv writing one residual stream, a Concat's parts): see
    /// [`super::annotate`].
    ChannelMagnitude {
        sparsity: f64,
        bias: bool,
        coupled: bool,
    },
    /// An element mask of the tensor's shape.
    Mask(KeepMask),
    /// A mask over the grid of `block` blocks.
    BlockMask {
        block: [usize; 2],
        grid: KeepMask,
    },
    /// Rows, columns or channels to prune.
    Lines {
        line: Line,
        indices: Vec<usize>,
    },
}

impl PruneSpec {
    /// Whether the proposal is computed from the initializer's values.
    pub fn needs_values(&self) -> bool {
        matches!(self, PruneSpec::BlockMagnitude { .. } | PruneSpec::NM { .. } | PruneSpec::ChannelMagnitude { .. })
    }
}

/// A bit width per block of the grid of `block` (row-major, shape `grid`).
#[derive(Clone, Debug, PartialEq)]
pub struct BlockBits {
    pub block: [usize; 2],
    pub grid: Vec<usize>,
    pub bits: Vec<u8>,
}

/// The width (0 = pruned) and optionally format of one element.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementBits {
    pub index: Vec<usize>,
    pub bits: u8,
    pub format: Option<Format>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorSpec {
    pub prune: Vec<PruneSpec>,
    pub bits: Option<u8>,
    pub format: Option<Format>,
    pub block_bits: Option<BlockBits>,
    pub element_bits: Vec<ElementBits>,
}

/// A parsed attrs file: specs by ONNX tensor name or glob, in byte order of the keys.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TesaAttrs {
    pub tensors: Vec<(String, TensorSpec)>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::TesaAttrs(msg.into())
}

const FORMATS: &str = "float, bfloat, int, uint, fp8e4m3, fp8e5m2";

impl TesaAttrs {
    /// Parses a file's text; `.npy` paths are relative to the current directory.
    pub fn parse(text: &str) -> Result<TesaAttrs, Error> {
        TesaAttrs::parse_in(text, Path::new("."))
    }

    /// Reads and parses `path`; `.npy` paths are relative to its folder.
    pub fn read(path: &Path) -> Result<TesaAttrs, Error> {
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        crate::contained::check_regular(path).map_err(io)?;
        let text = std::fs::read_to_string(path).map_err(io)?;
        TesaAttrs::parse_in(&text, path.parent().unwrap_or(Path::new(".")))
    }

    /// Parses a file's text; `.npy` paths are relative to `dir`.
    pub fn parse_in(text: &str, dir: &Path) -> Result<TesaAttrs, Error> {
        let root: Json = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let tensors =
            root.get("tensors").and_then(|t| t.as_object()).ok_or_else(|| bad("expects an object \"tensors\""))?;
        let mut out = TesaAttrs::default();
        for (name, spec) in tensors {
            let obj = spec.as_object().ok_or_else(|| bad(format!("{name:?}: expects an object")))?;
            let spec = parse_spec(obj, dir).map_err(|msg| bad(format!("{name:?}: {msg}")))?;
            out.tensors.push((name.clone(), spec));
        }
        Ok(out)
    }
}

fn parse_spec(obj: &Map<String, Json>, dir: &Path) -> Result<TensorSpec, String> {
    let mut spec = TensorSpec::default();
    for (key, v) in obj {
        match key.as_str() {
            "prune" if v.as_str() == Some("zeros") => {}
            "prune" => return Err("prune expects \"zeros\"".into()),
            "block_magnitude" => {
                let block = v.get("block").and_then(|b| uints(b).ok());
                match (block, v.get("sparsity").and_then(|s| s.as_f64())) {
                    (Some(block), Some(sparsity))
                        if (1..=2).contains(&block.len())
                            && block.iter().all(|b| *b > 0)
                            && (0.0..=1.0).contains(&sparsity) =>
                    {
                        spec.prune.push(PruneSpec::BlockMagnitude { block, sparsity })
                    }
                    _ => {
                        return Err(
                            "block_magnitude expects {\"block\": [1 or 2 positive ints], \"sparsity\": 0..1}".into()
                        )
                    }
                }
            }
            "channel_magnitude" => {
                let flag = |key: &str, default: bool| match v.get(key) {
                    None => Some(default),
                    Some(b) => b.as_bool(),
                };
                let known = v
                    .as_object()
                    .is_some_and(|o| o.keys().all(|k| matches!(k.as_str(), "sparsity" | "bias" | "coupled")));
                match (v.get("sparsity").and_then(|s| s.as_f64()), flag("bias", true), flag("coupled", false)) {
                    (Some(sparsity), Some(bias), Some(coupled)) if known && (0.0..=1.0).contains(&sparsity) => {
                        spec.prune.push(PruneSpec::ChannelMagnitude { sparsity, bias, coupled })
                    }
                    _ => return Err(
                        "channel_magnitude expects {\"sparsity\": 0..1, \"bias\": true|false, \"coupled\": true|false}"
                            .into(),
                    ),
                }
            }
            "nm" => {
                let (nm, axis) = match v.as_object() {
                    Some(o) if o.keys().all(|k| matches!(k.as_str(), "n" | "m" | "axis")) => {
                        let get = |k: &str| o.get(k).and_then(|x| x.as_u64()).map(|x| x as usize);
                        let axis = match o.get("axis") {
                            None => Ok(None),
                            Some(a) => a.as_u64().map(|a| Some(a as usize)).ok_or(()),
                        };
                        (get("n").zip(get("m")).map(|(n, m)| vec![n, m]).ok_or(()), axis)
                    }
                    Some(_) => (Err(()), Ok(None)),
                    None => (uints(v), Ok(None)),
                };
                match (nm, axis) {
                    (Ok(a), Ok(axis)) if a.len() == 2 && a[1] > 0 && a[0] <= a[1] => {
                        spec.prune.push(PruneSpec::NM { n: a[0], m: a[1], axis })
                    }
                    _ => {
                        return Err(
                            "nm expects [n, m] or {\"n\": n, \"m\": m, \"axis\": a} with n <= m (axis: default the reduction axis of a MatMul weight)"
                                .into(),
                        )
                    }
                }
            }
            "mask" => spec.prune.push(PruneSpec::Mask(keep_mask(v, dir).map_err(|e| format!("mask: {e}"))?)),
            "block_mask" => {
                let block = block_shape(v).map_err(|e| format!("block_mask: {e}"))?;
                let mask = v.get("mask").ok_or("block_mask: expects a key \"mask\"")?;
                let grid = keep_mask(mask, dir).map_err(|e| format!("block_mask: {e}"))?;
                spec.prune.push(PruneSpec::BlockMask { block, grid });
            }
            "rows" | "cols" | "channels" => {
                let line = [Line::Row, Line::Col, Line::Channel].into_iter().find(|l| l.key() == key).expect("listed");
                let indices = uints(v).map_err(|_| format!("{key} expects a list of non-negative integers"))?;
                spec.prune.push(PruneSpec::Lines { line, indices });
            }
            "bits" => match v.as_u64() {
                Some(b) if (1..=127).contains(&b) => spec.bits = Some(b as u8),
                _ => return Err("bits expects an integer in 1..=127".into()),
            },
            "format" => spec.format = Some(format(v)?),
            "block_bits" => {
                let block = block_shape(v).map_err(|e| format!("block_bits: {e}"))?;
                let bits = v.get("bits").ok_or("block_bits: expects a key \"bits\"")?;
                let width = |x: &Json| x.as_u64().filter(|b| *b <= 127).map(|b| b as u8);
                let (grid, bits) =
                    nested(bits, &width, "integers in 0..=127").map_err(|e| format!("block_bits: {e}"))?;
                if grid.len() != 2 {
                    return Err(format!(
                        "block_bits: bits must be a 2-D array over the block grid, found shape {grid:?}"
                    ));
                }
                spec.block_bits = Some(BlockBits { block, grid, bits });
            }
            "element_bits" => {
                let list = v.as_array().ok_or("element_bits expects a list of {\"index\", \"bits\", \"format\"?}")?;
                for e in list {
                    spec.element_bits.push(element_bits(e).map_err(|m| format!("element_bits: {m}"))?);
                }
            }
            other => return Err(format!("unknown key {other:?} (keys: {})", TENSOR_KEYS.join(", "))),
        }
    }
    Ok(spec)
}

fn format(v: &Json) -> Result<Format, String> {
    v.as_str().and_then(Format::parse).ok_or_else(|| format!("format expects one of {FORMATS}"))
}

fn element_bits(e: &Json) -> Result<ElementBits, String> {
    let obj = e.as_object().ok_or("expects objects {\"index\": [..], \"bits\": n, \"format\"?: ..}")?;
    if let Some(k) = obj.keys().find(|k| !["index", "bits", "format"].contains(&k.as_str())) {
        return Err(format!("unknown key {k:?} (keys: index, bits, format)"));
    }
    let index = obj.get("index").and_then(|i| uints(i).ok()).ok_or("index expects a list of non-negative integers")?;
    let bits = match obj.get("bits").and_then(|b| b.as_u64()) {
        Some(b) if b <= 127 => b as u8,
        _ => return Err("bits expects an integer in 0..=127".into()),
    };
    let format = obj.get("format").map(format).transpose()?;
    Ok(ElementBits { index, bits, format })
}

/// A list of non-negative integers.
fn uints(v: &Json) -> Result<Vec<usize>, ()> {
    v.as_array().ok_or(())?.iter().map(|x| x.as_u64().map(|x| x as usize).ok_or(())).collect()
}

fn block_shape(v: &Json) -> Result<[usize; 2], String> {
    match v.get("block").map(uints) {
        Some(Ok(b)) if b.len() == 2 && b.iter().all(|x| *x > 0) => Ok([b[0], b[1]]),
        _ => Err("expects \"block\": [bh, bw] of positive integers".into()),
    }
}

/// Nested arrays of leaves read by `leaf`, as (shape, row-major leaves). The shape is
/// taken from the first elements; every other array must agree with it.
fn nested<T>(v: &Json, leaf: &dyn Fn(&Json) -> Option<T>, what: &str) -> Result<(Vec<usize>, Vec<T>), String> {
    fn walk<T>(v: &Json, shape: &[usize], out: &mut Vec<T>, leaf: &dyn Fn(&Json) -> Option<T>) -> Option<()> {
        match shape.split_first() {
            None => out.push(leaf(v)?),
            Some((n, rest)) => {
                let items = v.as_array().filter(|a| a.len() == *n)?;
                items.iter().try_for_each(|x| walk(x, rest, out, leaf))?
            }
        }
        Some(())
    }
    if !v.is_array() {
        return Err(format!("expects nested arrays of {what}"));
    }
    let (mut shape, mut cur) = (vec![], v);
    while let Some(items) = cur.as_array() {
        shape.push(items.len());
        match items.first() {
            Some(first) => cur = first,
            None => break,
        }
    }
    let mut out = vec![];
    walk(v, &shape, &mut out, leaf).ok_or_else(|| format!("expects rectangular nested arrays of {what}"))?;
    Ok((shape, out))
}

/// `[[0, 1], ...]` (1 = keep) or `{"npy": "file.npy"}` (nonzero = keep).
fn keep_mask(v: &Json, dir: &Path) -> Result<KeepMask, String> {
    if let Some(path) = v.get("npy") {
        let path = path.as_str().ok_or("\"npy\" expects a file path")?;
        // Inside the attrs file's folder once links are resolved, and a regular file.
        let full = crate::contained::resolve(dir, path).map_err(|e| format!("mask {path:?}: {e}"))?;
        let bytes = crate::contained::read_range(&full, 0, None)?;
        let t = crate::npy::parse_npy(&bytes).map_err(|e| format!("{}: {e}", full.display()))?;
        let keep = t.to_f64_vec().iter().map(|x| *x != 0.0).collect();
        return Ok(KeepMask { shape: t.shape().to_vec(), keep });
    }
    let leaf = |x: &Json| match x {
        Json::Bool(b) => Some(*b),
        _ => match x.as_f64() {
            Some(f) if f == 0.0 || f == 1.0 => Some(f == 1.0),
            _ => None,
        },
    };
    let (shape, keep) = nested(v, &leaf, "0/1 (1 = keep) or {\"npy\": \"file.npy\"}")?;
    Ok(KeepMask { shape, keep })
}

#[cfg(test)]
#[path = "attrs_tests.rs"]
mod tests;
