//! [`BitMask`]: one bit per element of a flat tensor (row-major), set = pruned; the form the
//! propagation rules compute in. It is the pruned set of a [`super::Tesa`] without widths, so
//! taking it from a TeSA and joining it back are word copies and word ORs.
//!
//! Besides whole-mask logic (`or`, `and`, `not`) it offers the three bit movements the rules
//! are made of, each a word at a time: copying a run of bits between arbitrary offsets,
//! filling a run, and testing a run; and on top of them broadcasting
//! ([`BitMask::broadcast`], [`BitMask::reduce_all`]) and axis permutation
//! ([`BitMask::permute`]). Bits past `len` are always zero.

/// A set of elements of a flat tensor: bit `i` set = element `i` pruned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BitMask {
    len: usize,
    words: Vec<u64>,
}

/// The low `n` bits (`n` ≤ 64) set.
fn low(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

impl BitMask {
    /// `len` elements, none set.
    pub fn new(len: usize) -> BitMask {
        BitMask { len, words: vec![0; len.div_ceil(64)] }
    }

    /// `len` elements, all set.
    pub fn ones(len: usize) -> BitMask {
        let mut m = BitMask { len, words: vec![u64::MAX; len.div_ceil(64)] };
        m.clear_tail();
        m
    }

    /// From words (bit `i` of word `i / 64`); bits past `len` are cleared.
    ///
    /// # Panics
    /// When `words` does not hold exactly `len.div_ceil(64)` words.
    pub fn from_words(len: usize, words: Vec<u64>) -> BitMask {
        assert_eq!(words.len(), len.div_ceil(64), "one word per 64 elements");
        let mut m = BitMask { len, words };
        m.clear_tail();
        m
    }

    /// One bit per bool, set where true.
    pub fn from_bools(bools: &[bool]) -> BitMask {
        let mut m = BitMask::new(bools.len());
        for (w, chunk) in m.words.iter_mut().zip(bools.chunks(64)) {
            *w = chunk.iter().enumerate().fold(0u64, |acc, (j, b)| acc | ((*b as u64) << j));
        }
        m
    }

    /// One bool per element, true where set.
    pub fn to_bools(&self) -> Vec<bool> {
        let mut out = vec![false; self.len];
        for (chunk, &w) in out.chunks_mut(64).zip(&self.words) {
            if w != 0 {
                for (j, b) in chunk.iter_mut().enumerate() {
                    *b = w >> j & 1 == 1;
                }
            }
        }
        out
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    fn clear_tail(&mut self) {
        if !self.len.is_multiple_of(64) {
            if let Some(last) = self.words.last_mut() {
                *last &= low(self.len % 64);
            }
        }
    }

    pub fn get(&self, i: usize) -> bool {
        self.words[i / 64] >> (i % 64) & 1 == 1
    }

    pub fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub fn clear(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    /// Whether any element is set.
    pub fn any(&self) -> bool {
        self.words.iter().any(|w| *w != 0)
    }

    pub fn count_ones(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Sets every element set in `other` (same length); true when anything changed.
    pub fn or_assign(&mut self, other: &BitMask) -> bool {
        assert_eq!(self.len, other.len, "masks of different lengths");
        let mut changed = false;
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            let new = *w | *o;
            changed |= new != *w;
            *w = new;
        }
        changed
    }

    /// Keeps only the elements also set in `other` (same length).
    pub fn and_assign(&mut self, other: &BitMask) {
        assert_eq!(self.len, other.len, "masks of different lengths");
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w &= *o;
        }
    }

    /// The complement.
    pub fn not(&self) -> BitMask {
        BitMask::from_words(self.len, self.words.iter().map(|w| !w).collect())
    }

    /// The `n` (≤ 64) bits from `off`, as the low bits of a word.
    pub fn read(&self, off: usize, n: usize) -> u64 {
        if n == 0 {
            return 0;
        }
        let (w, s) = (off / 64, off % 64);
        let mut v = self.words[w] >> s;
        if s != 0 && s + n > 64 {
            v |= self.words[w + 1] << (64 - s);
        }
        v & low(n)
    }

    /// Writes the low `n` (≤ 64) bits of `v` at `off`.
    pub fn write(&mut self, off: usize, n: usize, v: u64) {
        if n == 0 {
            return;
        }
        let (w, s) = (off / 64, off % 64);
        let m = low(n);
        let v = v & m;
        self.words[w] = (self.words[w] & !(m << s)) | (v << s);
        if s != 0 && s + n > 64 {
            let hi = 64 - s;
            self.words[w + 1] = (self.words[w + 1] & !(m >> hi)) | (v >> hi);
        }
    }

    /// Copies `len` bits of `src` from `src_off` to `dst_off` of this mask.
    pub fn copy_run(&mut self, dst_off: usize, src: &BitMask, src_off: usize, len: usize) {
        let mut done = 0;
        if dst_off.is_multiple_of(64) && src_off.is_multiple_of(64) {
            let (d, s, n) = (dst_off / 64, src_off / 64, len / 64);
            self.words[d..d + n].copy_from_slice(&src.words[s..s + n]);
            done = n * 64;
        }
        while done < len {
            let n = (len - done).min(64);
            self.write(dst_off + done, n, src.read(src_off + done, n));
            done += n;
        }
    }

    /// Clears the `len` bits from `dst_off` that are clear in `src` from `src_off` (an AND).
    pub fn and_run(&mut self, dst_off: usize, src: &BitMask, src_off: usize, len: usize) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(64);
            let v = self.read(dst_off + done, n) & src.read(src_off + done, n);
            self.write(dst_off + done, n, v);
            done += n;
        }
    }

    /// Sets the `len` bits from `dst_off` that are set in `src` from `src_off` (an OR).
    pub fn or_run(&mut self, dst_off: usize, src: &BitMask, src_off: usize, len: usize) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(64);
            let v = self.read(dst_off + done, n) | src.read(src_off + done, n);
            self.write(dst_off + done, n, v);
            done += n;
        }
    }

    /// Sets (`value`) or clears the `len` bits from `off`.
    pub fn fill_run(&mut self, off: usize, len: usize, value: bool) {
        let word = if value { u64::MAX } else { 0 };
        let mut done = 0;
        while done < len {
            let n = (len - done).min(64);
            self.write(off + done, n, word);
            done += n;
        }
    }

    /// Whether all `len` bits from `off` are set (true for an empty run).
    pub fn all_run(&self, off: usize, len: usize) -> bool {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(64);
            if self.read(off + done, n) != low(n) {
                return false;
            }
            done += n;
        }
        true
    }

    /// This mask, of shape `in_shape`, broadcast (numpy rules) to `out_shape`: element `o`
    /// of the result is the element of this mask that `o` reads.
    pub fn broadcast(&self, in_shape: &[usize], out_shape: &[usize]) -> BitMask {
        if in_shape == out_shape {
            return self.clone();
        }
        let runs = BroadcastRuns::new(in_shape, out_shape);
        let mut out = BitMask::new(runs.out_len);
        runs.for_each(|out_off, in_off, len, copy| {
            if copy {
                out.copy_run(out_off, self, in_off, len);
            } else if self.get(in_off) {
                out.fill_run(out_off, len, true);
            }
        });
        out
    }

    /// The reverse of [`BitMask::broadcast`] from `in_shape` to `out_shape` on this mask of
    /// `out_shape`: an element of `in_shape` is set when every output element reading it is
    /// (and when none does).
    pub fn reduce_all(&self, in_shape: &[usize], out_shape: &[usize]) -> BitMask {
        let n_in: usize = in_shape.iter().product();
        if in_shape == out_shape {
            return self.clone();
        }
        let runs = BroadcastRuns::new(in_shape, out_shape);
        let mut back = BitMask::ones(n_in);
        runs.for_each(|out_off, in_off, len, copy| {
            if copy {
                back.and_run(in_off, self, out_off, len);
            } else if !self.all_run(out_off, len) {
                back.clear(in_off);
            }
        });
        back
    }

    /// This mask of shape `shape` with its axes permuted: axis `a` of the result is axis
    /// `perm[a]` of this one (ONNX `Transpose`).
    pub fn permute(&self, shape: &[usize], perm: &[usize]) -> BitMask {
        let rank = shape.len();
        let strides = crate::ir::strides(shape);
        // Output axes with their input strides, size-1 axes dropped and runs that stay
        // contiguous in the input merged.
        let mut dims: Vec<(usize, usize)> = vec![];
        for &p in perm.iter().take(rank) {
            let (d, s) = (shape[p], strides[p]);
            if d == 1 {
                continue;
            }
            match dims.last_mut() {
                Some((ld, ls)) if *ls == s * d => {
                    *ld *= d;
                    *ls = s;
                }
                _ => dims.push((d, s)),
            }
        }
        let mut out = BitMask::new(self.len);
        if self.len == 0 {
            return out;
        }
        let Some(&(inner, inner_stride)) = dims.last() else {
            out.copy_run(0, self, 0, self.len);
            return out;
        };
        let outer = &dims[..dims.len() - 1];
        let mut idx = vec![0usize; outer.len()];
        let (mut in_off, mut out_off) = (0usize, 0usize);
        loop {
            if inner_stride == 1 {
                out.copy_run(out_off, self, in_off, inner);
            } else {
                let mut t = 0;
                while t < inner {
                    let n = (inner - t).min(64);
                    let mut v = 0u64;
                    for j in 0..n {
                        v |= (self.get(in_off + (t + j) * inner_stride) as u64) << j;
                    }
                    out.write(out_off + t, n, v);
                    t += n;
                }
            }
            out_off += inner;
            let mut ax = outer.len();
            loop {
                if ax == 0 {
                    return out;
                }
                ax -= 1;
                idx[ax] += 1;
                in_off += outer[ax].1;
                if idx[ax] < outer[ax].0 {
                    break;
                }
                in_off -= outer[ax].1 * idx[ax];
                idx[ax] = 0;
            }
        }
    }
}

/// A broadcast from one shape to another as runs: per run, where it starts in the output,
/// where in the input, its length, and whether it copies input elements one for one
/// (`true`) or repeats one input element (`false`).
struct BroadcastRuns {
    out_len: usize,
    /// Output axes after merging, outermost first: (size, input stride; 0 = broadcast).
    dims: Vec<(usize, usize)>,
}

impl BroadcastRuns {
    fn new(in_shape: &[usize], out_shape: &[usize]) -> BroadcastRuns {
        let rank = out_shape.len();
        let offset = rank - in_shape.len();
        let in_strides = crate::ir::strides(in_shape);
        let mut dims: Vec<(usize, usize)> = vec![];
        for (ax, &d) in out_shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let s = if ax < offset || in_shape[ax - offset] == 1 { 0 } else { in_strides[ax - offset] };
            match dims.last_mut() {
                Some((ld, ls)) if (*ls == 0 && s == 0) || (s != 0 && *ls == s * d) => {
                    *ld *= d;
                    *ls = s;
                }
                _ => dims.push((d, s)),
            }
        }
        BroadcastRuns { out_len: out_shape.iter().product(), dims }
    }

    /// Calls `f(out_off, in_off, len, copy)` for every run, in output order.
    fn for_each(&self, mut f: impl FnMut(usize, usize, usize, bool)) {
        if self.out_len == 0 {
            return;
        }
        let Some(&(inner, inner_stride)) = self.dims.last() else {
            f(0, 0, 1, true);
            return;
        };
        debug_assert!(inner_stride <= 1, "the innermost merged axis is contiguous or broadcast");
        let outer = &self.dims[..self.dims.len() - 1];
        let mut idx = vec![0usize; outer.len()];
        let (mut in_off, mut out_off) = (0usize, 0usize);
        loop {
            f(out_off, in_off, inner, inner_stride == 1);
            out_off += inner;
            let mut ax = outer.len();
            loop {
                if ax == 0 {
                    return;
                }
                ax -= 1;
                idx[ax] += 1;
                in_off += outer[ax].1;
                if idx[ax] < outer[ax].0 {
                    break;
                }
                in_off -= outer[ax].1 * idx[ax];
                idx[ax] = 0;
            }
        }
    }
}

#[cfg(test)]
#[path = "bitmask_tests.rs"]
mod tests;
