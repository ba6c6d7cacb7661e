//! `attrs.json`: the user's TeSA for named tensors (`spartac propagate --tesa FILE`).
//!
//! ```json
//! {"tensors": {
//!   "fc1.weight": {"block_magnitude": {"block": [32, 32], "sparsity": 0.5}, "bits": 8},
//!   "fc2.weight": {"nm": [2, 4]},
//!   "fc3.weight": {"prune": "zeros", "format": "int"}
//! }}
//! ```
//! Every initializer is pruned where it is zero, listed or not (also when there is no
//! file). A listed tensor may add block magnitude pruning (L1 norm of each block over
//! the last two axes, smallest blocks pruned up to `sparsity`), output-channel pruning
//! by L1 norm (`channel_magnitude`), N:M pruning (keep the `n`
//! largest of every `m` consecutive elements along the last axis), a bit width and a
//! format. Pruning needs values, so it applies to initializers only. The JSON Schema is
//! `models/tesa.schema.json`.

use super::{ElemAttr, Format, Tesa};
use crate::ir::{Graph, ValueKind};
use crate::Error;
use serde_json::Value as Json;

/// How a listed tensor is pruned beyond its zeros.
#[derive(Clone, Debug, PartialEq)]
pub enum PruneSpec {
    Zeros,
    BlockMagnitude {
        block: Vec<usize>,
        sparsity: f64,
    },
    NM {
        n: usize,
        m: usize,
    },
    /// Output channels (axis-0 slices) with the smallest L1 norm, up to `sparsity`.
    ChannelMagnitude {
        sparsity: f64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub prune: PruneSpec,
    pub bits: Option<u8>,
    pub format: Option<Format>,
}

/// A parsed attrs file: specs by ONNX tensor name, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TesaAttrs {
    pub tensors: Vec<(String, TensorSpec)>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::TesaAttrs(msg.into())
}

impl TesaAttrs {
    pub fn parse(text: &str) -> Result<TesaAttrs, Error> {
        let root: Json = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let tensors =
            root.get("tensors").and_then(|t| t.as_object()).ok_or_else(|| bad("expects an object \"tensors\""))?;
        let mut out = TesaAttrs::default();
        for (name, spec) in tensors {
            let obj = spec.as_object().ok_or_else(|| bad(format!("{name:?}: expects an object")))?;
            let mut prune = PruneSpec::Zeros;
            let (mut bits, mut format) = (None, None);
            for (key, v) in obj {
                match key.as_str() {
                    "prune" if v.as_str() == Some("zeros") => {}
                    "block_magnitude" => {
                        let block: Option<Vec<usize>> = v
                            .get("block")
                            .and_then(|b| b.as_array())
                            .map(|b| b.iter().filter_map(|x| x.as_u64().map(|x| x as usize)).collect());
                        let sparsity = v.get("sparsity").and_then(|s| s.as_f64());
                        match (block, sparsity) {
                            (Some(block), Some(s)) if !block.is_empty() && block.iter().all(|b| *b > 0) && (0.0..=1.0).contains(&s) => {
                                prune = PruneSpec::BlockMagnitude { block, sparsity: s }
                            }
                            _ => return Err(bad(format!("{name:?}: block_magnitude expects {{\"block\": [positive ints], \"sparsity\": 0..1}}"))),
                        }
                    }
                    "channel_magnitude" => match v.get("sparsity").and_then(|s| s.as_f64()) {
                        Some(s) if (0.0..=1.0).contains(&s) => prune = PruneSpec::ChannelMagnitude { sparsity: s },
                        _ => return Err(bad(format!("{name:?}: channel_magnitude expects {{\"sparsity\": 0..1}}"))),
                    },
                    "nm" => match v.as_array().map(|a| a.iter().filter_map(|x| x.as_u64()).collect::<Vec<_>>()) {
                        Some(a) if a.len() == 2 && a[1] > 0 && a[0] <= a[1] => prune = PruneSpec::NM { n: a[0] as usize, m: a[1] as usize },
                        _ => return Err(bad(format!("{name:?}: nm expects [n, m] with n <= m"))),
                    },
                    "bits" => match v.as_u64() {
                        Some(b) if (1..=127).contains(&b) => bits = Some(b as u8),
                        _ => return Err(bad(format!("{name:?}: bits expects an integer in 1..=127"))),
                    },
                    "format" => {
                        format = Some(v.as_str().and_then(Format::parse).ok_or_else(|| {
                            bad(format!("{name:?}: format expects one of float, bfloat, int, uint, fp8e4m3, fp8e5m2"))
                        })?)
                    }
                    other => return Err(bad(format!("{name:?}: unknown key {other:?} (keys: prune, block_magnitude, channel_magnitude, nm, bits, format)"))),
                }
            }
            out.tensors.push((name.clone(), TensorSpec { prune, bits, format }));
        }
        Ok(out)
    }
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Up to three graph value names closest to `name`.
fn suggestions(graph: &Graph, name: &str) -> Vec<String> {
    let mut scored: Vec<(usize, &str)> =
        graph.values.iter().map(|v| (edit_distance(name, &v.name), v.name.as_str())).collect();
    scored.sort();
    let limit = (name.len() / 2).max(3);
    scored.into_iter().filter(|(d, _)| *d <= limit).take(3).map(|(_, n)| n.to_string()).collect()
}

/// Sets the TeSA of every initializer (zeros, plus the file's pruning and widths).
pub fn apply_attrs(graph: &mut Graph, attrs: Option<&TesaAttrs>) -> Result<(), Error> {
    for (id, init) in &graph.initializers {
        graph.values[id.index()].tesa = Some(Tesa::from_zeros(&init.to_dense()));
    }
    let Some(attrs) = attrs else { return Ok(()) };
    for (name, spec) in &attrs.tensors {
        let id = graph.find_value(name).ok_or_else(|| {
            let close = suggestions(graph, name);
            if close.is_empty() {
                bad(format!("no tensor named {name:?} in the model"))
            } else {
                bad(format!("no tensor named {name:?} in the model; did you mean {}?", close.join(", ")))
            }
        })?;
        let v = &graph.values[id.index()];
        let mut tesa = v.tesa.clone().unwrap_or_else(|| Tesa::for_dtype(&v.fact.shape, v.fact.dtype));
        if spec.prune != PruneSpec::Zeros {
            if v.kind != ValueKind::Initializer {
                return Err(bad(format!("{name:?}: pruning needs values, but it is not an initializer")));
            }
            let values = graph.initializers[&id].to_dense().to_f64_vec();
            let mask = match &spec.prune {
                PruneSpec::BlockMagnitude { block, sparsity } => {
                    block_magnitude_mask(&values, &v.fact.shape, block, *sparsity)
                }
                PruneSpec::NM { n, m } => nm_mask(&values, &v.fact.shape, *n, *m),
                PruneSpec::ChannelMagnitude { sparsity } => {
                    let rest: usize = v.fact.shape.iter().skip(1).product();
                    let flat = [v.fact.shape.first().copied().unwrap_or(1), rest];
                    block_magnitude_mask(&values, &flat, &[1, rest.max(1)], *sparsity)
                }
                PruneSpec::Zeros => unreachable!(),
            };
            tesa.join(&Tesa::from_mask(&v.fact.shape, &mask));
        }
        if spec.bits.is_some() || spec.format.is_some() {
            let u = tesa.uniform();
            let attr = ElemAttr::new(spec.bits.unwrap_or(u.bits()), spec.format.unwrap_or(u.format()));
            tesa.set_uniform(attr);
        }
        graph.values[id.index()].tesa = Some(tesa);
    }
    Ok(())
}

/// Prunes the `sparsity` fraction of blocks (over the last `block.len()` axes, at most
/// two; leading axes flattened) with the smallest L1 norms.
pub fn block_magnitude_mask(values: &[f64], shape: &[usize], block: &[usize], sparsity: f64) -> Vec<bool> {
    let (rows, cols) = match shape.len() {
        0 => (1, 1),
        1 => (1, shape[0]),
        r => (shape[..r - 1].iter().product(), shape[r - 1]),
    };
    let (br, bc) = match block.len() {
        1 => (1, block[0]),
        _ => (block[block.len() - 2], block[block.len() - 1]),
    };
    let (gr, gc) = (rows.div_ceil(br), cols.div_ceil(bc));
    let mut norms = vec![0.0f64; gr * gc];
    for r in 0..rows {
        for c in 0..cols {
            norms[(r / br) * gc + c / bc] += values[r * cols + c].abs();
        }
    }
    let mut order: Vec<usize> = (0..norms.len()).collect();
    order.sort_by(|a, b| norms[*a].total_cmp(&norms[*b]).then(a.cmp(b)));
    let n_prune = ((norms.len() as f64) * sparsity).round() as usize;
    let mut dead = vec![false; norms.len()];
    for &b in &order[..n_prune.min(order.len())] {
        dead[b] = true;
    }
    (0..values.len()).map(|i| dead[(i / cols / br) * gc + (i % cols) / bc]).collect()
}

/// Keeps the `n` largest magnitudes of every `m` consecutive elements of the last axis.
pub fn nm_mask(values: &[f64], shape: &[usize], n: usize, m: usize) -> Vec<bool> {
    let cols = shape.last().copied().unwrap_or(1).max(1);
    let mut mask = vec![false; values.len()];
    for row in 0..values.len() / cols {
        for start in (0..cols).step_by(m) {
            let end = (start + m).min(cols);
            let mut idx: Vec<usize> = (row * cols + start..row * cols + end).collect();
            idx.sort_by(|a, b| values[*b].abs().total_cmp(&values[*a].abs()).then(a.cmp(b)));
            for &i in idx.iter().skip(n) {
                mask[i] = true;
            }
        }
    }
    mask
}

/// Writes zeros into every initializer where its TeSA is pruned, so that the model
/// computes what the TeSA claims (the reference for the invariant after user pruning).
pub fn zero_pruned_initializers(graph: &mut Graph) {
    let ids: Vec<_> = graph.initializers.keys().copied().collect();
    for id in ids {
        if let Some(tesa) = graph.values[id.index()].tesa.clone() {
            let t = tesa.apply_to(&graph.initializers[&id].to_dense());
            graph.initializers.insert(id, crate::ir::Initializer::Dense(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_and_nm_masks() {
        let v: Vec<f64> = (0..16).map(|i| i as f64).collect();
        let m = block_magnitude_mask(&v, &[4, 4], &[2, 2], 0.5);
        assert_eq!(m.iter().filter(|x| **x).count(), 8);
        assert!(m[0] && m[1] && m[4] && m[5], "the smallest block goes first");
        assert!(!m[15]);
        let m = nm_mask(&[1.0, -4.0, 3.0, 2.0, 0.5, 0.1, 0.2, 0.3], &[8], 2, 4);
        assert_eq!(m, vec![true, false, false, true, false, true, true, false]);
    }

    #[test]
    fn parse_rejects_bad_specs() {
        let a = TesaAttrs::parse(r#"{"tensors": {"w": {"nm": [2, 4], "bits": 8}, "v": {"prune": "zeros"}}}"#).unwrap();
        assert_eq!(a.tensors.len(), 2);
        assert!(TesaAttrs::parse(r#"{"tensors": {"w": {"nm": [5, 4]}}}"#).is_err());
        assert!(TesaAttrs::parse(r#"{"tensors": {"w": {"bitz": 8}}}"#)
            .unwrap_err()
            .to_string()
            .contains("unknown key"));
        assert!(TesaAttrs::parse(r#"{"tensor": {}}"#).is_err());
    }

    #[test]
    fn unknown_names_suggest_close_ones() {
        let mut b = crate::propagate::tests::G::new();
        b.init("fc1.weight", crate::ir::Tensor::from_vec(vec![2], vec![0.0f32, 1.0]));
        let mut g = b.finish(&[]);
        let a = TesaAttrs::parse(r#"{"tensors": {"fc1.wieght": {"bits": 8}}}"#).unwrap();
        let err = apply_attrs(&mut g, Some(&a)).unwrap_err().to_string();
        assert!(err.contains("did you mean \"fc1.weight\"") || err.contains("did you mean fc1.weight"), "{err}");
        let a = TesaAttrs::parse(r#"{"tensors": {"fc1.weight": {"bits": 8, "format": "int"}}}"#).unwrap();
        apply_attrs(&mut g, Some(&a)).unwrap();
        assert_eq!(g.values[0].tesa.as_ref().unwrap().to_string(), "#tesa(density 0.5, bits 8 int)");
    }
}
