//! TeSA, the Tensor-with-Sparsity-Attribute of SparTA (§3.1): for every element of a tensor
//! a bit width (0 = pruned) and a data format. It exists only at compile time.
//!
//! Storage is compact: a pruned bitset (one bit per element) plus one uniform bit width
//! and format for the tensor, and a sparse override map only for elements whose width or
//! format differ. A 65536×65536 layer costs 512 MiB of bits in the worst case, but no
//! per-element `ElemAttr` array is ever built.
//!
//! The lattice order is "more pruned, fewer bits": [`Tesa::join`] moves towards it and
//! reports whether anything changed, which is what the propagation worklist needs.
//!
//! An [`ElemAttr`] is 2 bytes: a 7-bit width (0 = pruned) and a 4-bit [`Format`]. A `Tesa` also
//! answers density and block summaries ([`Tesa::nonzero_blocks`]), and prints inside the IR
//! type as `#tesa(density 0.25, bits 8)`. `codec.rs` is its compact binary form (run lengths or
//! bits for the pruned set), which the propagation cache stores.
//!
//! The type lives in the IR (a value's `tesa` slot, printed inside its type); `crate::tesa`
//! annotates graphs with it and re-exports it.

pub mod bitmask;
pub mod codec;

use super::format_float;
pub use bitmask::BitMask;
use std::collections::BTreeMap;
use std::fmt;

/// Number format of an element, the 4-bit field of [`ElemAttr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Format {
    Float = 0,
    BFloat = 1,
    Int = 2,
    UInt = 3,
    Fp8E4M3 = 4,
    Fp8E5M2 = 5,
}

impl Format {
    pub fn from_code(code: u8) -> Option<Format> {
        Some(match code {
            0 => Format::Float,
            1 => Format::BFloat,
            2 => Format::Int,
            3 => Format::UInt,
            4 => Format::Fp8E4M3,
            5 => Format::Fp8E5M2,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Float => "float",
            Format::BFloat => "bfloat",
            Format::Int => "int",
            Format::UInt => "uint",
            Format::Fp8E4M3 => "fp8e4m3",
            Format::Fp8E5M2 => "fp8e5m2",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        [Format::Float, Format::BFloat, Format::Int, Format::UInt, Format::Fp8E4M3, Format::Fp8E5M2]
            .into_iter()
            .find(|f| f.name() == s)
    }
}

/// SparTA's 2-byte per-element attribute: bits 0..7 the bit width (0 = pruned, at most
/// 127), bits 7..11 the [`Format`], bits 11..16 reserved (zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ElemAttr(u16);

impl ElemAttr {
    pub const PRUNED: ElemAttr = ElemAttr(0);

    /// `bits` is clamped to 127.
    pub fn new(bits: u8, format: Format) -> ElemAttr {
        ElemAttr((bits.min(127) as u16) | ((format as u16) << 7))
    }

    pub fn bits(self) -> u8 {
        (self.0 & 0x7f) as u8
    }

    pub fn format(self) -> Format {
        Format::from_code(((self.0 >> 7) & 0xf) as u8).unwrap_or(Format::Float)
    }

    pub fn is_pruned(self) -> bool {
        self.bits() == 0
    }

    pub fn to_u16(self) -> u16 {
        self.0
    }
}

/// The TeSA of one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tesa {
    shape: Vec<usize>,
    numel: usize,
    /// Bit `i` set = element `i` (row-major) pruned.
    pruned: Vec<u64>,
    /// Width and format of every unpruned element without an override.
    uniform: ElemAttr,
    /// Elements whose width or format differ from `uniform` (never pruned ones).
    overrides: BTreeMap<usize, ElemAttr>,
}

impl Tesa {
    /// Nothing pruned, every element `bits` wide in `format`.
    pub fn dense(shape: &[usize], bits: u8, format: Format) -> Tesa {
        let numel = shape.iter().product();
        Tesa {
            shape: shape.to_vec(),
            numel,
            pruned: vec![0; numel.div_ceil(64)],
            uniform: ElemAttr::new(bits.max(1), format),
            overrides: BTreeMap::new(),
        }
    }

    /// Dense TeSA with the natural width and format of `dtype`.
    pub fn for_dtype(shape: &[usize], dtype: crate::ir::DType) -> Tesa {
        let format = if dtype.is_float() {
            if dtype.name() == "bf16" {
                Format::BFloat
            } else {
                Format::Float
            }
        } else if dtype.is_unsigned_int() {
            Format::UInt
        } else {
            Format::Int
        };
        Tesa::dense(shape, (dtype.size_bytes() * 8).clamp(1, 127) as u8, format)
    }

    /// Prunes exactly the elements of `tensor` that are zero.
    pub fn from_zeros(tensor: &crate::ir::Tensor) -> Tesa {
        let mut t = Tesa::for_dtype(tensor.shape(), tensor.dtype());
        for (i, v) in tensor.to_f64_vec().iter().enumerate() {
            if *v == 0.0 {
                t.prune(i);
            }
        }
        t
    }

    /// A pure pruning proposal: elements with `mask[i]` pruned, widths left at the
    /// maximum so that joining it never lowers bits.
    pub fn from_mask(shape: &[usize], mask: &[bool]) -> Tesa {
        let mut t = Tesa::dense(shape, 127, Format::Float);
        assert_eq!(mask.len(), t.numel, "mask length must match the shape");
        for (i, m) in mask.iter().enumerate() {
            if *m {
                t.prune(i);
            }
        }
        t
    }

    /// One bool per element, true = pruned.
    pub fn mask(&self) -> Vec<bool> {
        let mut out = vec![false; self.numel];
        for (chunk, &w) in out.chunks_mut(64).zip(&self.pruned) {
            if w != 0 {
                for (j, m) in chunk.iter_mut().enumerate() {
                    *m = w >> j & 1 == 1;
                }
            }
        }
        out
    }

    /// The pruned set as a [`BitMask`] (a copy of the words, no per-element work).
    pub fn pruned_bits(&self) -> BitMask {
        BitMask::from_words(self.numel, self.pruned.clone())
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.numel
    }

    pub fn uniform(&self) -> ElemAttr {
        self.uniform
    }

    pub fn is_pruned(&self, i: usize) -> bool {
        self.pruned[i / 64] >> (i % 64) & 1 == 1
    }

    /// Prunes element `i`; true when it was not pruned before.
    pub fn prune(&mut self, i: usize) -> bool {
        let was = self.is_pruned(i);
        self.pruned[i / 64] |= 1 << (i % 64);
        self.overrides.remove(&i);
        !was
    }

    /// The attribute of element `i`.
    pub fn attr(&self, i: usize) -> ElemAttr {
        if self.is_pruned(i) {
            ElemAttr::PRUNED
        } else {
            self.overrides.get(&i).copied().unwrap_or(self.uniform)
        }
    }

    /// Sets the width and format of every unpruned element.
    pub fn set_uniform(&mut self, attr: ElemAttr) {
        if !attr.is_pruned() {
            self.uniform = attr;
            self.overrides.clear();
        }
    }

    /// Sets the width of every unpruned element to at most `bits` (0 prunes everything).
    pub fn limit_bits(&mut self, bits: u8) -> bool {
        if bits == 0 {
            return (0..self.numel).fold(false, |c, i| self.prune(i) | c);
        }
        let mut changed = false;
        if self.uniform.bits() > bits {
            self.uniform = ElemAttr::new(bits, self.uniform.format());
            changed = true;
        }
        for a in self.overrides.values_mut() {
            if a.bits() > bits {
                *a = ElemAttr::new(bits, a.format());
                changed = true;
            }
        }
        changed
    }

    /// Stores every float element of 16 bits or more as a 16-bit float of `format` (`Float`
    /// for fp16, `BFloat` for bf16): the model's values become that type. Narrower widths and
    /// other formats (quantized integers, fp8) stay. Returns whether anything changed.
    pub fn to_half_float(&mut self, format: Format) -> bool {
        let narrow = |a: &mut ElemAttr| {
            let float = matches!(a.format(), Format::Float | Format::BFloat);
            if float && a.bits() >= 16 && (a.bits(), a.format()) != (16, format) {
                *a = ElemAttr::new(16, format);
                true
            } else {
                false
            }
        };
        let mut changed = !self.uniform.is_pruned() && narrow(&mut self.uniform);
        for a in self.overrides.values_mut() {
            changed |= !a.is_pruned() && narrow(a);
        }
        changed
    }

    /// Sets one element's attribute; width 0 prunes it. Never un-prunes.
    pub fn set_attr(&mut self, i: usize, attr: ElemAttr) {
        if attr.is_pruned() {
            self.prune(i);
        } else if !self.is_pruned(i) {
            if attr == self.uniform {
                self.overrides.remove(&i);
            } else {
                self.overrides.insert(i, attr);
            }
        }
    }

    pub fn n_pruned(&self) -> usize {
        self.pruned.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Fraction of unpruned elements (1 for an empty tensor).
    pub fn density(&self) -> f64 {
        if self.numel == 0 {
            1.0
        } else {
            (self.numel - self.n_pruned()) as f64 / self.numel as f64
        }
    }

    /// Largest bit width of any unpruned element (0 when all are pruned).
    pub fn max_bits(&self) -> u8 {
        if self.n_pruned() == self.numel {
            return 0;
        }
        let over = self.overrides.values().map(|a| a.bits()).max().unwrap_or(0);
        if self.overrides.len() + self.n_pruned() < self.numel {
            over.max(self.uniform.bits())
        } else {
            over
        }
    }

    /// The lattice join: an element is pruned when pruned in either; widths are the
    /// minimum of both. Returns true when `self` changed. Shapes must agree.
    pub fn join(&mut self, other: &Tesa) -> bool {
        assert_eq!(self.shape, other.shape, "joining TeSAs of different shapes");
        let mut changed = false;
        for (w, o) in self.pruned.iter_mut().zip(&other.pruned) {
            let new = *w | *o;
            changed |= new != *w;
            *w = new;
        }
        self.overrides.retain(|i, _| self.pruned[i / 64] >> (i % 64) & 1 == 0);
        if other.uniform.bits() < self.uniform.bits() || !other.overrides.is_empty() {
            for i in 0..self.numel {
                if self.is_pruned(i) {
                    continue;
                }
                let (a, b) = (self.attr(i), other.attr(i));
                if b.bits() < a.bits() {
                    self.set_attr(i, b);
                    changed = true;
                }
            }
            if other.uniform.bits() < self.uniform.bits() && other.overrides.is_empty() {
                self.uniform = other.uniform;
                self.overrides.retain(|_, a| a.bits() < other.uniform.bits());
            }
        }
        changed
    }

    /// Prunes every element with `mask[i]` (true = pruned) in place: the join with
    /// [`Tesa::from_mask`] without building it. Returns true when anything changed.
    pub fn prune_mask(&mut self, mask: &[bool]) -> bool {
        assert_eq!(mask.len(), self.numel, "mask length must match the shape");
        self.prune_bits(&BitMask::from_bools(mask))
    }

    /// [`Tesa::prune_mask`] for a [`BitMask`]: a word OR. Returns true when anything changed.
    pub fn prune_bits(&mut self, mask: &BitMask) -> bool {
        assert_eq!(mask.len(), self.numel, "mask length must match the shape");
        let mut changed = false;
        for (w, &bits) in self.pruned.iter_mut().zip(mask.words()) {
            let new = *w | bits;
            if new != *w {
                changed = true;
                *w = new;
            }
        }
        if changed && !self.overrides.is_empty() {
            let pruned = &self.pruned;
            self.overrides.retain(|i, _| pruned[i / 64] >> (i % 64) & 1 == 0);
        }
        changed
    }

    /// Elements pruned in both (the meet of the prune sets); widths untouched.
    pub fn intersect_pruned(&mut self, other: &Tesa) {
        for (w, o) in self.pruned.iter_mut().zip(&other.pruned) {
            *w &= *o;
        }
    }

    /// Number of blocks of shape `block` (over the last `block.len()` axes, leading
    /// axes flattened) that hold at least one unpruned element, and the block count.
    pub fn nonzero_blocks(&self, block: &[usize]) -> (usize, usize) {
        let rank = self.shape.len();
        let k = block.len().min(rank);
        let inner = &self.shape[rank - k..];
        let block = &block[block.len() - k..];
        let grid: Vec<usize> = inner.iter().zip(block).map(|(d, b)| d.div_ceil((*b).max(1))).collect();
        let n_grid: usize = grid.iter().product();
        let n_inner: usize = inner.iter().product();
        let outer = self.numel.checked_div(n_inner).unwrap_or(0);
        let mut nonzero = vec![false; outer * n_grid];
        let strides = crate::ir::strides(inner);
        for i in 0..self.numel {
            if self.is_pruned(i) {
                continue;
            }
            let (o, mut r) = (i / n_inner.max(1), i % n_inner.max(1));
            let mut g = 0;
            for ax in 0..k {
                let c = r / strides[ax];
                r %= strides[ax];
                g = g * grid[ax] + c / block[ax].max(1);
            }
            nonzero[o * n_grid + g] = true;
        }
        (nonzero.iter().filter(|b| **b).count(), nonzero.len())
    }

    /// A TeSA of `shape` whose element `j` is this one's element `positions[j]` (a slice,
    /// permutation or selection of the same tensor's elements).
    ///
    /// # Panics
    /// When `positions` does not hold one in-range position per element of `shape`.
    pub fn gather(&self, shape: &[usize], positions: &[usize]) -> Tesa {
        let mut t = Tesa::dense(shape, self.uniform.bits(), self.uniform.format());
        assert_eq!(positions.len(), t.numel, "one position per element");
        for (j, &p) in positions.iter().enumerate() {
            assert!(p < self.numel, "position {p} out of range");
            if self.is_pruned(p) {
                t.prune(j);
            } else if let Some(&a) = self.overrides.get(&p) {
                t.overrides.insert(j, a);
            }
        }
        t
    }

    /// The TeSA of this tensor with only the indices `keep` (in that order) along `axis`: what
    /// [`Tesa::gather`] gives on `rewrite::take_positions`, without a position per element
    /// (an activation of a pruned MLP holds tens of millions).
    ///
    /// # Panics
    /// When `axis` is not an axis of the shape or an index in `keep` is out of range.
    pub fn take(&self, axis: usize, keep: &[usize]) -> Tesa {
        let n = self.shape[axis];
        assert!(keep.iter().all(|&k| k < n), "an index past the {n} of axis {axis}");
        let outer: usize = self.shape[..axis].iter().product();
        let inner: usize = self.shape[axis + 1..].iter().product();
        let mut shape = self.shape.clone();
        shape[axis] = keep.len();
        let mut t = Tesa::dense(&shape, self.uniform.bits(), self.uniform.format());
        // Each index kept once (what the shrink passes take): walk the pruned bits and the
        // overrides, each sent to its place, instead of every element.
        let mut slot = vec![usize::MAX; n];
        let mut once = true;
        for (x, &k) in keep.iter().enumerate() {
            once &= slot[k] == usize::MAX;
            slot[k] = x;
        }
        if once {
            let dest = |p: usize| {
                let (o, r) = (p / (n * inner), p % (n * inner));
                let x = slot[r / inner];
                (x != usize::MAX).then(|| (o * keep.len() + x) * inner + r % inner)
            };
            self.move_into(&mut t, dest);
            return t;
        }
        let mixed = !self.overrides.is_empty();
        let mut j = 0;
        for o in 0..outer {
            for &k in keep {
                let base = (o * n + k) * inner;
                for p in base..base + inner {
                    if self.is_pruned(p) {
                        t.pruned[j / 64] |= 1 << (j % 64);
                    } else if mixed {
                        if let Some(&a) = self.overrides.get(&p) {
                            t.overrides.insert(j, a);
                        }
                    }
                    j += 1;
                }
            }
        }
        t
    }

    /// The TeSA of this tensor transposed by `perm` (ONNX Transpose: axis `d` of the result is
    /// axis `perm[d]` of this one): what [`Tesa::gather`] gives on `rewrite::transpose_positions`,
    /// walking the pruned bits and the overrides instead of a position per element.
    ///
    /// # Panics
    /// When `perm` is not a permutation of the axes.
    pub fn transpose(&self, perm: &[usize]) -> Tesa {
        let rank = self.shape.len();
        let mut seen = vec![false; rank];
        assert!(
            perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true)),
            "{perm:?} is not a permutation of {rank} axes"
        );
        let shape: Vec<usize> = perm.iter().map(|&p| self.shape[p]).collect();
        let mut t = Tesa::dense(&shape, self.uniform.bits(), self.uniform.format());
        let out_strides = crate::ir::strides(&shape);
        // Where a step along each source axis lands in the result.
        let mut step = vec![0; rank];
        for (d, &p) in perm.iter().enumerate() {
            step[p] = out_strides[d];
        }
        let dest = |mut p: usize| {
            let mut j = 0;
            for a in (0..rank).rev() {
                j += (p % self.shape[a]) * step[a];
                p /= self.shape[a];
            }
            Some(j)
        };
        self.move_into(&mut t, dest);
        t
    }

    /// Sends each pruned element and each override of this TeSA to its place `dest(p)` in `t`
    /// (`None`: dropped), walking the set pruned bits instead of every element: what
    /// [`Tesa::take`] and [`Tesa::transpose`] share.
    fn move_into(&self, t: &mut Tesa, dest: impl Fn(usize) -> Option<usize>) {
        for (w, &word) in self.pruned.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let p = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if p >= self.numel {
                    break;
                }
                if let Some(j) = dest(p) {
                    t.pruned[j / 64] |= 1 << (j % 64);
                }
            }
        }
        for (&p, &a) in &self.overrides {
            if let Some(j) = dest(p) {
                t.overrides.insert(j, a);
            }
        }
    }

    /// Zeroes the pruned elements of `t` (same shape).
    pub fn apply_to(&self, t: &crate::ir::Tensor) -> crate::ir::Tensor {
        let mut v = t.to_f64_vec();
        for (i, x) in v.iter_mut().enumerate() {
            if self.is_pruned(i) {
                *x = 0.0;
            }
        }
        crate::ir::Tensor::new(t.shape().to_vec(), crate::ir::Data::from_f64_iter(t.dtype(), v.into_iter()))
            .expect("same shape")
    }
}

impl fmt::Display for Tesa {
    /// `#tesa(density 0.25, bits 8)`, with `int`/`bfloat`... after the bits when the
    /// format is not float and `mixed` when some elements have other widths.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = (self.density() * 1e6).round() / 1e6;
        write!(f, "#tesa(density {}, bits {}", format_float(d), self.uniform.bits())?;
        if self.uniform.format() != Format::Float {
            write!(f, " {}", self.uniform.format().name())?;
        }
        if !self.overrides.is_empty() {
            write!(f, ", mixed {}", self.overrides.len())?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Tensor;

    #[test]
    fn elem_attr_packs_into_two_bytes() {
        let a = ElemAttr::new(8, Format::Int);
        assert_eq!(a.bits(), 8);
        assert_eq!(a.format(), Format::Int);
        assert_eq!(a.to_u16() >> 11, 0, "reserved bits stay zero");
        assert!(ElemAttr::PRUNED.is_pruned());
        assert_eq!(ElemAttr::new(200, Format::Float).bits(), 127);
        assert_eq!(std::mem::size_of::<ElemAttr>(), 2);
    }

    #[test]
    fn take_keeps_the_indices_along_an_axis_as_gather_does() {
        let shape = [3, 5, 4];
        let n: usize = shape.iter().product();
        let mask: Vec<bool> = (0..n).map(|i| (i * 7 + i / 3) % 5 < 2).collect();
        let mut t = Tesa::from_mask(&shape, &mask);
        // Two unpruned elements with their own width travel with their positions.
        let odd: Vec<usize> = (0..n).filter(|&i| !mask[i]).take(2).collect();
        for &i in &odd {
            t.set_attr(i, ElemAttr::new(4, Format::Int));
        }
        // Distinct indices walk the pruned bits; a repeated index takes every element's path.
        for (axis, keep) in [(0, vec![2, 0]), (1, vec![4, 1, 3]), (2, vec![0, 3]), (2, vec![]), (1, vec![3, 3, 0])] {
            let (shape, positions) = crate::rewrite::take_positions(&shape, axis, &keep);
            let want = t.gather(&shape, &positions);
            assert_eq!(t.take(axis, &keep), want, "axis {axis}, keep {keep:?}");
        }
    }

    #[test]
    fn transpose_moves_the_pruned_bits_as_gather_does() {
        let shape = [2, 3, 5, 4];
        let n: usize = shape.iter().product();
        let mask: Vec<bool> = (0..n).map(|i| (i * 11 + i / 7) % 3 == 0).collect();
        let mut t = Tesa::from_mask(&shape, &mask);
        let odd: Vec<usize> = (0..n).filter(|&i| !mask[i]).step_by(17).collect();
        for &i in &odd {
            t.set_attr(i, ElemAttr::new(8, Format::Int));
        }
        for perm in [[0, 1, 2, 3], [3, 2, 1, 0], [0, 2, 3, 1], [1, 0, 3, 2], [2, 0, 1, 3]] {
            let (shape, positions) = crate::rewrite::transpose_positions(&shape, &perm);
            assert_eq!(t.transpose(&perm), t.gather(&shape, &positions), "perm {perm:?}");
        }
    }

    #[test]
    fn from_zeros_density_and_print() {
        let t = Tensor::from_vec(vec![2, 4], vec![0.0f32, 1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 0.0]);
        let tesa = Tesa::from_zeros(&t);
        assert_eq!(tesa.n_pruned(), 5);
        assert_eq!(tesa.density(), 0.375);
        assert_eq!(tesa.to_string(), "#tesa(density 0.375, bits 32)");
        assert_eq!(tesa.nonzero_blocks(&[2, 2]), (2, 2));
        assert_eq!(tesa.nonzero_blocks(&[1, 2]), (3, 4));
    }

    #[test]
    fn join_is_monotone_and_reports_change() {
        let mut a = Tesa::dense(&[70], 32, Format::Float);
        let mut b = Tesa::dense(&[70], 32, Format::Float);
        b.prune(3);
        b.prune(69);
        assert!(a.join(&b));
        assert!(!a.join(&b), "joining twice changes nothing");
        assert_eq!(a.n_pruned(), 2);
        let mut c = Tesa::dense(&[70], 8, Format::Float);
        c.set_attr(5, ElemAttr::new(4, Format::Int));
        assert!(a.join(&c));
        assert_eq!(a.attr(0).bits(), 8);
        assert_eq!(a.attr(5).bits(), 4);
        assert!(a.attr(3).is_pruned());
        assert_eq!(a.max_bits(), 8);
        assert!(!a.join(&c));
        // The join never un-prunes.
        let dense = Tesa::dense(&[70], 32, Format::Float);
        assert!(!a.join(&dense));
        assert_eq!(a.n_pruned(), 2);
    }

    #[test]
    fn large_tesa_is_cheap() {
        let t = Tesa::dense(&[8192, 8192], 32, Format::Float);
        assert_eq!(t.pruned.len() * 8, 8 << 20);
        assert_eq!(t.density(), 1.0);
    }
}
