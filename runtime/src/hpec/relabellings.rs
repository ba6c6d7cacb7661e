//! Row relabellings σ_b of the generator's blocks, and their small text file.
//!
//! σ_b maps each of the N input neurons (rows) of every layer in block b to one of the
//! M = N/16 rows of the base radix-2 layer, exactly 16 neurons per base row. Verified on the
//! real 1024 network: layer l ≥ M' + 1 (M' = log2 M layers per block) has a nonzero
//! `W_l[r, c] = 1/16` exactly when `c mod M ∈ {σ_b(r), (σ_b(r) - p) mod M}`.
//!
//! File format (text, `#` lines are comments):
//! ```text
//! spartac-hpec-relabellings v1 neurons=1024 blocks=19
//! <σ_1(1) .. σ_1(N): N space-separated 0-based base rows>
//! ...
//! ```

use super::error::{HpecError, HpecResult};

/// The relabellings of blocks 1, 2, … (block 0 is the fixed `r mod M` of the first layers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relabellings {
    pub neurons: usize,
    /// `blocks[b - 1][r]` = σ_b(r), in `0..N/16`.
    pub blocks: Vec<Vec<u32>>,
}

impl Relabellings {
    /// Checks that every block is a 16-to-1 map of N rows onto N/16 base rows.
    pub fn validate(&self, file: &str) -> HpecResult<()> {
        let base = self.neurons / 16;
        for (idx, block) in self.blocks.iter().enumerate() {
            let problem = if block.len() != self.neurons {
                Some(format!("block {} has {} entries, expected {}", idx + 1, block.len(), self.neurons))
            } else {
                let mut counts = vec![0usize; base];
                let mut bad = None;
                for &value in block {
                    match counts.get_mut(value as usize) {
                        Some(count) => *count += 1,
                        None => bad = Some(format!("block {} maps to {value}, beyond {} base rows", idx + 1, base)),
                    }
                }
                bad.or_else(|| {
                    counts.iter().position(|&c| c != 16).map(|row| {
                        format!("block {} maps {} rows onto base row {row}, expected 16", idx + 1, counts[row])
                    })
                })
            };
            if let Some(message) = problem {
                return Err(HpecError::Relabellings { file: file.to_string(), message });
            }
        }
        Ok(())
    }

    /// The text form described in the module documentation.
    pub fn to_text(&self) -> String {
        let mut out = format!("spartac-hpec-relabellings v1 neurons={} blocks={}\n", self.neurons, self.blocks.len());
        for block in &self.blocks {
            let line: Vec<String> = block.iter().map(|v| v.to_string()).collect();
            out.push_str(&line.join(" "));
            out.push('\n');
        }
        out
    }

    /// Parses the text form and validates it.
    pub fn from_text(file: &str, text: &str) -> HpecResult<Relabellings> {
        let bad = |message: String| HpecError::Relabellings { file: file.to_string(), message };
        let mut lines = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
        let header = lines.next().ok_or_else(|| bad("empty file".to_string()))?;
        let mut words = header.split_whitespace();
        if words.next() != Some("spartac-hpec-relabellings") || words.next() != Some("v1") {
            return Err(bad(format!("unknown header `{header}`")));
        }
        let mut neurons = None;
        let mut n_blocks = None;
        for word in words {
            let (name, value) = word.split_once('=').ok_or_else(|| bad(format!("bad header field `{word}`")))?;
            let value: usize = value.parse().map_err(|_| bad(format!("bad header field `{word}`")))?;
            match name {
                "neurons" => neurons = Some(value),
                "blocks" => n_blocks = Some(value),
                _ => return Err(bad(format!("unknown header field `{name}`"))),
            }
        }
        let neurons = neurons.ok_or_else(|| bad("header lacks neurons=".to_string()))?;
        let n_blocks = n_blocks.ok_or_else(|| bad("header lacks blocks=".to_string()))?;
        let mut blocks = Vec::with_capacity(n_blocks);
        for (idx, line) in lines.enumerate() {
            let block: Result<Vec<u32>, _> = line.split_whitespace().map(|w| w.parse::<u32>()).collect();
            blocks.push(block.map_err(|_| bad(format!("block {} holds a bad number", idx + 1)))?);
        }
        if blocks.len() != n_blocks {
            return Err(bad(format!("header says {n_blocks} blocks, found {}", blocks.len())));
        }
        let relabellings = Relabellings { neurons, blocks };
        relabellings.validate(file)?;
        Ok(relabellings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip_and_validation() {
        let block: Vec<u32> = (0..32).map(|r| (r * 7 % 32) / 16).collect();
        let relabellings = Relabellings { neurons: 32, blocks: vec![block] };
        let text = relabellings.to_text();
        assert_eq!(Relabellings::from_text("r.txt", &text).unwrap(), relabellings);
        let broken = text.replace("neurons=32", "neurons=48");
        assert!(Relabellings::from_text("r.txt", &broken).unwrap_err().to_string().starts_with("r.txt: invalid"));
    }
}
