//! Seeded sparsity patterns for a 2-D weight: the inputs of the plan, kernel and
//! benchmark tests (SparTA Fig. 16 and the PEERS.md cases). A mask is one bool per
//! element in row-major order, `true` = pruned, the same convention as [`super::Tesa::from_mask`].

use crate::rng::SplitMix64;

/// A pattern family with its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// Every element pruned independently so that exactly `round(sparsity × numel)` are.
    Unstructured { sparsity: f64 },
    /// `bh × bw` blocks, exactly `round(sparsity × blocks)` of them pruned.
    Block { bh: usize, bw: usize, sparsity: f64 },
    /// Block pattern plus `scattered` (fraction of all elements) kept at random
    /// positions inside pruned blocks: SparTA's mixed pattern.
    Mixed { bh: usize, bw: usize, block_sparsity: f64, scattered: f64 },
    /// `n` of every `m` consecutive elements of a row kept.
    NM { n: usize, m: usize },
}

impl Pattern {
    /// Short name used in reports, e.g. `block32x32@0.9`.
    pub fn label(&self) -> String {
        match self {
            Pattern::Unstructured { sparsity } => format!("unstructured@{sparsity}"),
            Pattern::Block { bh, bw, sparsity } => format!("block{bh}x{bw}@{sparsity}"),
            Pattern::Mixed { bh, bw, block_sparsity, scattered } => {
                format!("mixed{bh}x{bw}@{block_sparsity}+{scattered}")
            }
            Pattern::NM { n, m } => format!("{n}:{m}"),
        }
    }

    /// The pattern of a [`Pattern::label`]: `unstructured@0.95`, `block32x32@0.9`,
    /// `mixed32x32@0.9+0.01`, `2:4`. Sparsities are fractions in [0, 1].
    pub fn parse(label: &str) -> Result<Pattern, String> {
        let bad = |why: &str| {
            format!("pattern {label:?}: {why} (e.g. unstructured@0.95, block32x32@0.9, mixed32x32@0.9+0.01, 2:4)")
        };
        let fraction = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|f| (0.0..=1.0).contains(f))
                .ok_or_else(|| bad(&format!("{v:?} is not a fraction in [0, 1]")))
        };
        let block = |v: &str| -> Result<(usize, usize), String> {
            let (h, w) = v.split_once('x').ok_or_else(|| bad("the block is HxW"))?;
            match (h.parse::<usize>(), w.parse::<usize>()) {
                (Ok(h), Ok(w)) if h > 0 && w > 0 => Ok((h, w)),
                _ => Err(bad(&format!("{v:?} is not a block HxW of positive sizes"))),
            }
        };
        if let Some((n, m)) = label.split_once(':') {
            return match (n.parse::<usize>(), m.parse::<usize>()) {
                (Ok(n), Ok(m)) if n > 0 && n <= m => Ok(Pattern::NM { n, m }),
                _ => Err(bad("N:M needs 0 < N <= M")),
            };
        }
        let (kind, sparsity) = label.split_once('@').ok_or_else(|| bad("no @sparsity"))?;
        if kind == "unstructured" {
            return Ok(Pattern::Unstructured { sparsity: fraction(sparsity)? });
        }
        if let Some(b) = kind.strip_prefix("block") {
            let (bh, bw) = block(b)?;
            return Ok(Pattern::Block { bh, bw, sparsity: fraction(sparsity)? });
        }
        if let Some(b) = kind.strip_prefix("mixed") {
            let (bh, bw) = block(b)?;
            let (blocks, scattered) = sparsity.split_once('+').ok_or_else(|| bad("mixed needs @BLOCKS+SCATTERED"))?;
            return Ok(Pattern::Mixed { bh, bw, block_sparsity: fraction(blocks)?, scattered: fraction(scattered)? });
        }
        Err(bad(&format!("unknown kind {kind:?}")))
    }

    /// The pruned mask of a `rows × cols` weight; the same seed gives the same mask.
    pub fn mask(&self, rows: usize, cols: usize, seed: u64) -> Vec<bool> {
        let mut rng = SplitMix64::new(seed);
        match *self {
            Pattern::Unstructured { sparsity } => {
                let n = rows * cols;
                choose(&mut rng, n, (sparsity * n as f64).round() as usize)
            }
            Pattern::Block { bh, bw, sparsity } => block_mask(&mut rng, rows, cols, bh, bw, sparsity),
            Pattern::Mixed { bh, bw, block_sparsity, scattered } => {
                let mut mask = block_mask(&mut rng, rows, cols, bh, bw, block_sparsity);
                let dead: Vec<usize> = (0..mask.len()).filter(|i| mask[*i]).collect();
                let want = ((scattered * (rows * cols) as f64).round() as usize).min(dead.len());
                let keep = choose(&mut rng, dead.len(), want);
                for (j, k) in keep.iter().enumerate() {
                    if *k {
                        mask[dead[j]] = false;
                    }
                }
                mask
            }
            Pattern::NM { n, m } => {
                let mut mask = vec![true; rows * cols];
                for r in 0..rows {
                    for start in (0..cols).step_by(m.max(1)) {
                        let width = (start + m).min(cols) - start;
                        let keep = choose(&mut rng, width, n.min(width));
                        for (j, k) in keep.iter().enumerate() {
                            if *k {
                                mask[r * cols + start + j] = false;
                            }
                        }
                    }
                }
                mask
            }
        }
    }
}

/// A mask of `n` entries with exactly `k` true, uniformly (partial Fisher-Yates).
fn choose(rng: &mut SplitMix64, n: usize, k: usize) -> Vec<bool> {
    let k = k.min(n);
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..k {
        let j = i + rng.below((n - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut out = vec![false; n];
    for &i in &idx[..k] {
        out[i] = true;
    }
    out
}

fn block_mask(rng: &mut SplitMix64, rows: usize, cols: usize, bh: usize, bw: usize, sparsity: f64) -> Vec<bool> {
    let (gr, gc) = (rows.div_ceil(bh.max(1)), cols.div_ceil(bw.max(1)));
    let dead = choose(rng, gr * gc, (sparsity * (gr * gc) as f64).round() as usize);
    (0..rows * cols).map(|i| dead[(i / cols / bh.max(1)) * gc + (i % cols) / bw.max(1)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pruned(mask: &[bool]) -> usize {
        mask.iter().filter(|m| **m).count()
    }

    #[test]
    fn exact_counts_and_determinism() {
        let m = Pattern::Unstructured { sparsity: 0.9 }.mask(64, 32, 1);
        assert_eq!(pruned(&m), 1843);
        assert_eq!(m, Pattern::Unstructured { sparsity: 0.9 }.mask(64, 32, 1));
        assert_ne!(m, Pattern::Unstructured { sparsity: 0.9 }.mask(64, 32, 2));
        let b = Pattern::Block { bh: 32, bw: 32, sparsity: 0.75 }.mask(128, 128, 3);
        assert_eq!(pruned(&b), 12 * 1024);
        let nm = Pattern::NM { n: 2, m: 4 }.mask(8, 16, 4);
        assert_eq!(pruned(&nm), 64);
        for chunk in nm.chunks(4) {
            assert_eq!(pruned(chunk), 2);
        }
    }

    #[test]
    fn labels_parse_back_and_bad_ones_say_why() {
        for p in [
            Pattern::Unstructured { sparsity: 0.95 },
            Pattern::Block { bh: 32, bw: 16, sparsity: 0.9 },
            Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.9, scattered: 0.01 },
            Pattern::NM { n: 2, m: 4 },
        ] {
            assert_eq!(Pattern::parse(&p.label()), Ok(p.clone()), "{}", p.label());
        }
        for (bad, why) in [
            ("block32@0.9", "HxW"),
            ("mixed32x32@0.9", "BLOCKS+SCATTERED"),
            ("block32x32@1.5", "not a fraction"),
            ("dots@0.5", "unknown kind"),
            ("4:2", "N:M"),
            ("block0x32@0.5", "positive"),
        ] {
            let err = Pattern::parse(bad).unwrap_err();
            assert!(err.contains(why) && !err.contains('\n'), "{bad}: {err}");
        }
    }

    #[test]
    fn mixed_adds_scattered_elements_inside_dead_blocks() {
        let p = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.9, scattered: 0.01 };
        let m = p.mask(1024, 1024, 5);
        let blocks = Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 }.mask(1024, 1024, 5);
        let extra = m.iter().zip(&blocks).filter(|(a, b)| !**a && **b).count();
        assert_eq!(extra, 10486);
        assert!(blocks.iter().zip(&m).all(|(b, a)| *b || !*a), "kept blocks stay whole");
    }
}
