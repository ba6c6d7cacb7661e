//! A loop-nest description and SparTA's `dismantle` primitive (Fig. 7).
//!
//! A kernel's iteration space is a list of loop levels, outermost first. `dismantle(level)`
//! unrolls that level and every level outside it: each instance (one coordinate per unrolled
//! level) is specialized to the TeSA by asking whether the part of the tensor it touches holds
//! any nonzero; dead instances are deleted (a dead prefix deletes its whole subtree), and the
//! coordinates of the live ones become literals in the generated code. The levels inside
//! `level` stay loops.

use super::CodegenError;
use serde::Serialize;

/// One loop: its name, trip count and the number of elements one iteration covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Level {
    pub name: String,
    pub extent: usize,
    pub tile: usize,
}

impl Level {
    pub fn new(name: &str, extent: usize, tile: usize) -> Level {
        Level { name: name.to_string(), extent, tile }
    }
}

/// Loop levels, outermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoopNest {
    pub levels: Vec<Level>,
}

/// The result of `dismantle`: the live instances of the unrolled levels, in lexicographic
/// order, and the levels that remain loops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dismantled {
    pub unrolled: Vec<Level>,
    pub instances: Vec<Vec<usize>>,
    pub inner: Vec<Level>,
    /// Instances the unrolled levels would have without the TeSA.
    pub total_instances: usize,
}

impl Dismantled {
    /// Instances deleted because the TeSA says they only touch pruned elements.
    pub fn dead_instances(&self) -> usize {
        self.total_instances - self.instances.len()
    }
}

impl LoopNest {
    pub fn new(levels: Vec<Level>) -> LoopNest {
        LoopNest { levels }
    }

    /// Index of the level called `name`.
    pub fn level(&self, name: &str) -> Result<usize, CodegenError> {
        self.levels
            .iter()
            .position(|l| l.name == name)
            .ok_or_else(|| CodegenError::Spec(format!("loop nest has no level {name:?}")))
    }

    /// Unrolls `level` and all outer levels. `live(prefix)` says whether the instances whose
    /// first coordinates are `prefix` can touch a nonzero; it is asked for every prefix
    /// length from 1 to `level + 1`, so a dead outer instance prunes its subtree.
    pub fn dismantle(&self, level: usize, live: impl Fn(&[usize]) -> bool) -> Result<Dismantled, CodegenError> {
        if level >= self.levels.len() {
            return Err(CodegenError::Spec(format!(
                "cannot dismantle level {level} of a {}-level loop nest",
                self.levels.len()
            )));
        }
        let unrolled = self.levels[..=level].to_vec();
        let total_instances = unrolled.iter().map(|l| l.extent).product();
        let mut instances = vec![];
        let mut prefix = Vec::with_capacity(level + 1);
        walk(&unrolled, &live, &mut prefix, &mut instances);
        Ok(Dismantled { unrolled, instances, inner: self.levels[level + 1..].to_vec(), total_instances })
    }
}

fn walk(levels: &[Level], live: &impl Fn(&[usize]) -> bool, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    let depth = prefix.len();
    if depth == levels.len() {
        out.push(prefix.clone());
        return;
    }
    for i in 0..levels[depth].extent {
        prefix.push(i);
        if live(prefix) {
            walk(levels, live, prefix, out);
        }
        prefix.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dismantle_deletes_dead_instances_and_prunes_dead_prefixes() {
        let nest = LoopNest::new(vec![Level::new("n_block", 3, 4), Level::new("k_block", 4, 4), Level::new("k", 4, 1)]);
        // Column block 1 is empty; column block 0 holds k-blocks 0 and 3, block 2 holds 2.
        let alive = [(0, 0), (0, 3), (2, 2)];
        let asked = std::cell::RefCell::new(vec![]);
        let d = nest
            .dismantle(1, |p| {
                asked.borrow_mut().push(p.to_vec());
                match p {
                    [j] => alive.iter().any(|(c, _)| c == j),
                    [j, kb] => alive.contains(&(*j, *kb)),
                    _ => unreachable!(),
                }
            })
            .unwrap();
        assert_eq!(d.instances, vec![vec![0, 0], vec![0, 3], vec![2, 2]]);
        assert_eq!(d.total_instances, 12);
        assert_eq!(d.dead_instances(), 9);
        assert_eq!(d.inner, vec![Level::new("k", 4, 1)]);
        // The dead column block was never expanded.
        assert!(!asked.borrow().contains(&vec![1, 0]));
        assert!(nest.dismantle(3, |_| true).is_err());
    }
}
