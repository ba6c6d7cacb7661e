//! A compact binary form of a [`Tesa`] (the propagation cache's, `propagate::cache`).
//!
//! The pruned set is stored either as the bitset's words or as alternating run lengths
//! (unpruned first, LEB128 varints), whichever is smaller: block-pruned weights and dense
//! activations take a few bytes per row or per tensor, scattered pruning never more than its
//! bits. Then the uniform attribute (its raw `u16`) and the overrides (index deltas and raw
//! attributes). Decoding checks everything against the shape the value must have, so a
//! damaged entry is an error, never a wrong TeSA: the decoded TeSA equals the encoded one.

use super::{ElemAttr, Format, Tesa};

/// The pruned set as the bitset's words (little-endian `u64`s).
const PRUNED_WORDS: u8 = 0;
/// The pruned set as run lengths.
const PRUNED_RUNS: u8 = 1;

/// Appends `x` as an unsigned LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Reads an unsigned LEB128 varint off the front of `bytes`.
pub fn take_varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first().ok_or("truncated")?;
        *bytes = rest;
        x |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(x);
        }
    }
    Err("a varint longer than 64 bits".into())
}

/// Takes `n` bytes off the front of `bytes`.
pub fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if bytes.len() < n {
        return Err("truncated".into());
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

fn take_u16(bytes: &mut &[u8]) -> Result<u16, String> {
    Ok(u16::from_le_bytes(take(bytes, 2)?.try_into().expect("two bytes")))
}

/// An attribute as a `Tesa` can hold it: a known format, the reserved bits zero.
fn attr_of(raw: u16) -> Result<ElemAttr, String> {
    let attr = ElemAttr(raw);
    if raw >> 11 != 0 || Format::from_code(((raw >> 7) & 0xf) as u8).is_none() {
        return Err(format!("element attribute {raw:#06x} is not valid"));
    }
    Ok(attr)
}

/// The run lengths of the pruned set (unpruned first; the last run ends at `numel`), as
/// varints; `None` once they would take `limit` bytes or more.
fn runs(words: &[u64], numel: usize, limit: usize) -> Option<Vec<u8>> {
    let mut out = vec![];
    let (mut pruned, mut len, mut i) = (false, 0u64, 0usize);
    while i < numel {
        let avail = (64 - i % 64).min(numel - i);
        let w = words[i / 64] >> (i % 64);
        // Bits equal to the current run's kind, from `i` on.
        let same = ((if pruned { !w } else { w }).trailing_zeros() as usize).min(avail);
        len += same as u64;
        i += same;
        if same < avail {
            put_varint(&mut out, len);
            if out.len() >= limit {
                return None;
            }
            (pruned, len) = (!pruned, 0);
        }
    }
    put_varint(&mut out, len);
    (out.len() < limit).then_some(out)
}

/// Sets bits `start..end` of `words`.
fn set_range(words: &mut [u64], start: usize, end: usize) {
    let mut i = start;
    while i < end {
        let n = (64 - i % 64).min(end - i);
        let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << (i % 64) };
        words[i / 64] |= mask;
        i += n;
    }
}

impl Tesa {
    /// Appends the binary form of this TeSA (its shape included) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.shape.len() as u64);
        for &d in &self.shape {
            put_varint(out, d as u64);
        }
        let raw_len = self.pruned.len() * 8;
        match runs(&self.pruned, self.numel, raw_len) {
            Some(r) => {
                out.push(PRUNED_RUNS);
                out.extend_from_slice(&r);
            }
            None => {
                out.push(PRUNED_WORDS);
                for w in &self.pruned {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
        }
        out.extend_from_slice(&self.uniform.0.to_le_bytes());
        put_varint(out, self.overrides.len() as u64);
        let mut last = 0;
        for (&i, a) in &self.overrides {
            put_varint(out, (i - last) as u64);
            out.extend_from_slice(&a.0.to_le_bytes());
            last = i;
        }
    }

    /// Reads a TeSA written by [`Tesa::encode`] off the front of `bytes`; it must have
    /// `shape` (what the value it belongs to has), and be one a `Tesa` can be: anything else
    /// is an error saying what is wrong.
    pub fn decode(bytes: &mut &[u8], shape: &[usize]) -> Result<Tesa, String> {
        let rank = take_varint(bytes)?;
        let mut stored = Vec::with_capacity(shape.len());
        for _ in 0..rank.min(shape.len() as u64 + 1) {
            stored.push(take_varint(bytes)?);
        }
        if rank != shape.len() as u64 || stored.iter().zip(shape).any(|(s, d)| *s != *d as u64) {
            return Err(format!("holds a TeSA of shape {stored:?}, the value has {shape:?}"));
        }
        let mut t = Tesa::dense(shape, 1, Format::Float);
        match take(bytes, 1)?[0] {
            PRUNED_WORDS => {
                for w in t.pruned.iter_mut() {
                    *w = u64::from_le_bytes(take(bytes, 8)?.try_into().expect("eight bytes"));
                }
                let tail = t.numel % 64;
                if tail != 0 && t.pruned.last().is_some_and(|w| w >> tail != 0) {
                    return Err("pruned bits past the last element".into());
                }
            }
            PRUNED_RUNS => {
                let (mut i, mut pruned) = (0usize, false);
                loop {
                    let len = take_varint(bytes)?;
                    let end = usize::try_from(len).ok().and_then(|l| i.checked_add(l)).filter(|e| *e <= t.numel);
                    let end = end.ok_or("pruned runs longer than the tensor")?;
                    if pruned {
                        set_range(&mut t.pruned, i, end);
                    }
                    i = end;
                    pruned = !pruned;
                    if i == t.numel {
                        break;
                    }
                }
            }
            kind => return Err(format!("unknown pruned-set encoding {kind}")),
        }
        t.uniform = attr_of(take_u16(bytes)?)?;
        if t.uniform.is_pruned() {
            return Err("a pruned uniform attribute".into());
        }
        let n = take_varint(bytes)?;
        if n > t.numel as u64 {
            return Err("more overrides than elements".into());
        }
        let mut last = None;
        for _ in 0..n {
            let delta = take_varint(bytes)?;
            let i = match last {
                None => delta,
                Some(l) if delta > 0 => l + delta,
                Some(_) => return Err("overrides out of order".into()),
            };
            if i >= t.numel as u64 {
                return Err("an override past the last element".into());
            }
            let i = i as usize;
            let attr = attr_of(take_u16(bytes)?)?;
            if attr.is_pruned() || attr == t.uniform || t.is_pruned(i) {
                return Err(format!("override of element {i} cannot be"));
            }
            t.overrides.insert(i, attr);
            last = Some(i as u64);
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(t: &Tesa) -> usize {
        let mut bytes = vec![];
        t.encode(&mut bytes);
        let mut rest = bytes.as_slice();
        let back = Tesa::decode(&mut rest, t.shape()).unwrap();
        assert!(rest.is_empty());
        assert_eq!(&back, t);
        bytes.len()
    }

    #[test]
    fn tesas_round_trip_exactly_and_block_patterns_stay_small() {
        // Dense: a few bytes whatever the size.
        assert!(round_trip(&Tesa::dense(&[384, 1536], 32, Format::Float)) < 16);
        // 32×32 blocks, 90% pruned: a few bytes per row, far below the bitset's 8 per 64.
        let mut rng = crate::rng::SplitMix64::new(3);
        let keep: Vec<bool> = (0..12 * 48).map(|_| rng.uniform(0.0, 1.0) < 0.1).collect();
        let mask: Vec<bool> = (0..384 * 1536).map(|i| !keep[(i / 1536 / 32) * 48 + (i % 1536) / 32]).collect();
        let block = Tesa::from_mask(&[384, 1536], &mask);
        let n = round_trip(&block);
        assert!(n < 384 * 1536 / 8 / 4, "{n} bytes");
        // Scattered pruning: never more than the bitset.
        let scattered: Vec<bool> = (0..1000).map(|_| rng.uniform(0.0, 1.0) < 0.5).collect();
        assert!(round_trip(&Tesa::from_mask(&[1000], &scattered)) <= 1000usize.div_ceil(64) * 8 + 8);
        // Widths, formats and overrides; an odd element count; everything pruned; a scalar.
        let mut mixed = Tesa::dense(&[7, 11], 8, Format::Int);
        mixed.set_attr(3, ElemAttr::new(4, Format::Int));
        mixed.set_attr(70, ElemAttr::new(16, Format::Float));
        mixed.prune(0);
        mixed.prune(76);
        round_trip(&mixed);
        let mut all = Tesa::dense(&[65], 32, Format::Float);
        all.limit_bits(0);
        round_trip(&all);
        round_trip(&Tesa::dense(&[], 16, Format::BFloat));
        round_trip(&Tesa::dense(&[0, 5], 32, Format::Float));
    }

    #[test]
    fn damaged_bytes_are_errors() {
        let mut t = Tesa::dense(&[4, 70], 8, Format::Float);
        t.prune(5);
        t.set_attr(9, ElemAttr::new(4, Format::Int));
        let mut bytes = vec![];
        t.encode(&mut bytes);
        // Another shape, every truncation, a bad attribute.
        assert!(Tesa::decode(&mut bytes.as_slice(), &[70, 4]).unwrap_err().contains("shape"));
        for n in 0..bytes.len() {
            assert!(Tesa::decode(&mut &bytes[..n], &[4, 70]).is_err(), "{n} bytes decoded");
        }
        let mut bad = bytes.clone();
        let at = bad.len() - 1;
        bad[at] = 0xff;
        assert!(Tesa::decode(&mut bad.as_slice(), &[4, 70]).is_err());
        // Runs past the end.
        let mut long = vec![];
        put_varint(&mut long, 1);
        put_varint(&mut long, 3);
        long.push(PRUNED_RUNS);
        put_varint(&mut long, 4);
        assert!(Tesa::decode(&mut long.as_slice(), &[3]).unwrap_err().contains("longer"));
    }
}
