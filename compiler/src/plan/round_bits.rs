//! BitRounding (SparTA Algorithm 3, first step): split a TeSA whose elements have
//! different bit widths into one element set per width the hardware supports.
//!
//! Two policies, as in the paper: round every element up to the nearest supported width
//! (several sets, each computed in its own width), or round all elements to one width
//! (one set, the widest needed). The planner tries both and lets the cost model choose.

use super::hardware::HardwareProfile;
use crate::tesa::{Format, Tesa};

/// How widths are rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundingPolicy {
    /// Each element up to the nearest supported width: one set per width.
    EachUp,
    /// Every element to the widest supported width any element needs: one set.
    AllToOne,
}

/// The elements of one width: a mask with `true` = not in this set (pruned, or another
/// width), the same convention as [`Tesa::mask`].
#[derive(Clone, Debug, PartialEq)]
pub struct BitGroup {
    pub bits: u8,
    pub format: Format,
    pub pruned: Vec<bool>,
    pub n_kept: usize,
}

/// The smallest supported width at least `bits` (the widest one when none is).
pub fn round_up(hw: &HardwareProfile, bits: u8) -> u8 {
    let widths = hw.widths();
    widths.iter().copied().find(|w| *w >= bits).unwrap_or(*widths.last().unwrap_or(&32))
}

/// Splits the unpruned elements of `tesa` by rounded width, widest first. A fully pruned
/// tensor gives no group. The format of a group is the format of its first element.
pub fn round_bits(tesa: &Tesa, hw: &HardwareProfile, policy: RoundingPolicy) -> Vec<BitGroup> {
    let n = tesa.numel();
    // Fast path: one uniform width, no overrides (every real model today).
    let mut widths: Vec<(u8, Format)> = Vec::with_capacity(n);
    let mut seen: Vec<(u8, Format)> = vec![];
    for i in 0..n {
        let a = tesa.attr(i);
        let w = if a.is_pruned() { (0, Format::Float) } else { (round_up(hw, a.bits()), a.format()) };
        if w.0 > 0 && !seen.iter().any(|s| s.0 == w.0) {
            seen.push(w);
        }
        widths.push(w);
    }
    seen.sort_by_key(|s| std::cmp::Reverse(s.0));
    match policy {
        RoundingPolicy::AllToOne => match seen.first() {
            Some(&(bits, format)) => {
                let pruned: Vec<bool> = widths.iter().map(|w| w.0 == 0).collect();
                let n_kept = pruned.iter().filter(|p| !**p).count();
                vec![BitGroup { bits, format, pruned, n_kept }]
            }
            None => vec![],
        },
        RoundingPolicy::EachUp => seen
            .iter()
            .map(|&(bits, format)| {
                let pruned: Vec<bool> = widths.iter().map(|w| w.0 != bits).collect();
                let n_kept = pruned.iter().filter(|p| !**p).count();
                BitGroup { bits, format, pruned, n_kept }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tesa::ElemAttr;

    #[test]
    fn each_up_splits_by_rounded_width_and_all_to_one_keeps_one() {
        let hw = HardwareProfile::sm_90();
        let mut t = Tesa::dense(&[2, 4], 32, Format::Float);
        t.prune(0);
        t.set_attr(1, ElemAttr::new(5, Format::Int)); // -> 8
        t.set_attr(2, ElemAttr::new(3, Format::Int)); // -> 4
        t.set_attr(3, ElemAttr::new(12, Format::Float)); // -> 16
        let groups = round_bits(&t, &hw, RoundingPolicy::EachUp);
        let widths: Vec<u8> = groups.iter().map(|g| g.bits).collect();
        assert_eq!(widths, vec![32, 16, 8, 4]);
        assert_eq!(groups.iter().map(|g| g.n_kept).sum::<usize>(), 7);
        // Every unpruned element is in exactly one group.
        for i in 0..8 {
            let owners = groups.iter().filter(|g| !g.pruned[i]).count();
            assert_eq!(owners, usize::from(i != 0));
        }
        let one = round_bits(&t, &hw, RoundingPolicy::AllToOne);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].bits, one[0].n_kept), (32, 7));
        assert_eq!(round_up(&hw, 127), 32);
    }
}
