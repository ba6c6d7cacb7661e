//! A 2:4 weight in the register layout of `mma.sp` m16n8k32 (16-bit), and back.
//!
//! The kernel computes `Cᵀ = Wᵀ·Aᵀ`, so the sparse operand (PTX's A, `16 × 32` per
//! instruction) is a tile of `Wᵀ`: 16 output columns (its rows `r`) × 32 k. Of every 4
//! consecutive k ("chunk") of a row at most 2 are kept; the compressed tile is `16 × 16`, the
//! kept values of chunk `c` at compressed columns `2c` and `2c + 1`, lower k first. PTX ISA,
//! "Matrix fragments for sparse mma.m16n8k32 with .f16/.bf16": lane `l` (`g = l / 4`,
//! `t = l % 4`) holds the compressed tile as a dense m16n8k16 A fragment:
//! - `a0`: row `g`, chunk `t`; `a1`: row `g + 8`, chunk `t`; `a2`: row `g`, chunk `4 + t`;
//!   `a3`: row `g + 8`, chunk `4 + t` (two 16-bit values each, lower k in the low half);
//! - the metadata (sparsity selector 0) comes from lanes `4g` (chunks 0-3) and `4g + 1`
//!   (chunks 4-7): bits `16h + 4(c % 4)` hold chunk `c` of row `g + 8h`, its first index in the
//!   low 2 bits and its second above, the indices increasing (`mma.sp::ordered_metadata`).
//!
//! Packed for the device, tile by tile (`N/16` sparse tiles of `Wᵀ`, each `K/32` k-steps):
//! - values: per (tile, step), 32 lanes × 8 values (`a0..a3`), so a lane's fragment is one
//!   16-byte load and a warp's one contiguous 512 bytes;
//! - metadata: per (tile, step), 16 words, word `2g + h` = lane `4g + h`'s register.
//!
//! A chunk keeping fewer than 2 values is filled with the smallest unused indices (value 0),
//! since equal indices are invalid metadata.

use super::wgmma::Geometry;
use crate::codegen::Dtype;
use crate::sparse::WeightLookup;

/// The chunks of a `k × n` weight, kept positions as a 4-bit mask each (`mask[col * k/4 + chunk]`,
/// bit `i` = k `4·chunk + i`), from its kept elements `(k, col)`. Errors name the first
/// column and chunk that keeps more than 2.
pub fn chunk_masks(k: usize, n: usize, kept: &[(usize, usize)]) -> Result<Vec<u8>, String> {
    if !k.is_multiple_of(4) {
        return Err(format!("a 2:4 weight needs K a multiple of 4, got {k}"));
    }
    let chunks = k / 4;
    let mut mask = vec![0u8; chunks * n];
    for &(r, c) in kept {
        if r >= k || c >= n {
            return Err(format!("element ({r}, {c}) lies outside the {k}x{n} weight"));
        }
        let m = &mut mask[c * chunks + r / 4];
        let bit = 1u8 << (r % 4);
        if *m & bit != 0 {
            return Err(format!("element ({r}, {c}) is listed twice"));
        }
        *m |= bit;
        if m.count_ones() > 2 {
            let k0 = r / 4 * 4;
            return Err(format!(
                "column {c} keeps more than 2 of k {k0}..{}: not 2:4 along the reduction axis",
                k0 + 3
            ));
        }
    }
    Ok(mask)
}

/// The two indices (increasing) a chunk's metadata names: its kept positions, filled up with
/// the smallest unused ones.
pub fn chunk_indices(mask: u8) -> [usize; 2] {
    let mut out = [0usize; 2];
    let mut n = 0;
    for i in 0..4 {
        if mask & (1 << i) != 0 {
            out[n] = i;
            n += 1;
        }
    }
    for i in 0..4 {
        if n == 2 {
            break;
        }
        if mask & (1 << i) == 0 && !out[..n].contains(&i) {
            out[n] = i;
            n += 1;
        }
    }
    out.sort_unstable();
    out
}

/// The metadata words of a `k × n` weight (K a multiple of 32, N of 16) with chunk masks
/// `mask` ([`chunk_masks`]), in the device order (module docs): per 16-column tile and k32
/// step, the 16 words of `mma.sp`'s lanes, each row's and chunk's slot the one the Hopper
/// kernel's 16-bit layout gives ([`Geometry::meta_slot`]: the two instructions read their
/// metadata alike).
pub fn metadata(k: usize, n: usize, mask: &[u8]) -> Vec<u32> {
    let g = Geometry::of(Dtype::F16);
    let (chunks, steps) = (k / 4, k / 32);
    let mut out = vec![0u32; n / 16 * steps * 16];
    for tile in 0..n / 16 {
        for step in 0..steps {
            for row in 0..16 {
                for chunk in 0..8 {
                    let [i0, i1] = chunk_indices(mask[(tile * 16 + row) * chunks + step * 8 + chunk]);
                    let nibble = (i0 | i1 << 2) as u32;
                    let (word, bit) = g.meta_slot(row, chunk);
                    out[(tile * steps + step) * 16 + word] |= nibble << bit;
                }
            }
        }
    }
    out
}

/// Where element `(k, col)` of the weight lives among the packed values, given the chunk's
/// indices `[i0, i1]` (None when the chunk does not name `k`).
fn packed_position(k: usize, n_steps: usize, col: usize, indices: [usize; 2]) -> Option<usize> {
    let which = indices.iter().position(|&i| i == k % 4)?;
    let (tile, row) = (col / 16, col % 16);
    let (step, chunk) = (k / 32, (k / 4) % 8);
    let lane = 4 * (row % 8) + chunk % 4;
    let reg = row / 8 + 2 * (chunk / 4);
    Some(((tile * n_steps + step) * 32 + lane) * 8 + 2 * reg + which)
}

/// The compressed values of a `k × n` weight `w` (row-major, zero outside its kept elements)
/// in the device order, for the chunk masks `mask`.
pub fn pack_values<T: Copy + Default, W: WeightLookup<T> + ?Sized>(k: usize, n: usize, mask: &[u8], w: &W) -> Vec<T> {
    let (chunks, steps) = (k / 4, k / 32);
    let mut out = vec![T::default(); n * k / 2];
    for col in 0..n {
        for chunk in 0..chunks {
            let m = mask[col * chunks + chunk];
            let indices = chunk_indices(m);
            for i in 0..4 {
                if m & (1 << i) != 0 {
                    let kk = chunk * 4 + i;
                    let at = packed_position(kk, steps, col, indices).expect("a kept index is named");
                    out[at] = w.at(kk * n + col);
                }
            }
        }
    }
    out
}

/// Lane `lane`'s value `e` (0..8) of sparse tile `tile`, k-step `step`, read the way `mma.sp`
/// reads it: its row of the tile, and its k from the metadata of the lane that holds it
/// (module docs). Returns `(column of W, k)`.
fn fragment_element(meta: &[u32], steps: usize, (tile, step, lane, e): (usize, usize, usize, usize)) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    let (reg, which) = (e / 2, e % 2);
    let row = g + 8 * (reg & 1);
    let chunk = t + 4 * (reg >> 1);
    let holder = 4 * g + chunk / 4;
    let word = meta[(tile * steps + step) * 16 + 2 * (holder / 4) + holder % 4];
    let nibble = (word >> (16 * (row / 8) + 4 * (chunk % 4))) & 0xf;
    let index = ((nibble >> (2 * which)) & 3) as usize;
    (tile * 16 + row, step * 32 + chunk * 4 + index)
}

/// The dense row-major `k × n` weight the packed `values` and `meta` describe, read as
/// `mma.sp` reads them: the inverse of [`pack_values`] + [`metadata`] (fillers read 0).
pub fn unpack(k: usize, n: usize, values: &[f32], meta: &[u32]) -> Vec<f32> {
    let steps = k / 32;
    let mut w = vec![0.0f32; k * n];
    for (i, v) in values.iter().enumerate() {
        let (col, kk) = fragment_element(meta, steps, (i / 256 / steps, i / 256 % steps, i / 8 % 32, i % 8));
        w[kk * n + col] = *v;
    }
    w
}

/// The kernel's arithmetic on the packed form, in f64: `C = A·W` (`A` row-major `m × k`) as a
/// sum of `mma.sp` m16n8k32 products over sparse tiles and k-steps, each lane's values paired
/// with the rows of A its metadata selects. What the GPU computes, up to rounding.
pub fn emulate(m: usize, k: usize, n: usize, a: &[f32], values: &[f32], meta: &[u32]) -> Vec<f64> {
    let steps = k / 32;
    let mut c = vec![0.0f64; m * n];
    for tile in 0..n / 16 {
        for step in 0..steps {
            for lane in 0..32 {
                for e in 0..8 {
                    let v = values[((tile * steps + step) * 32 + lane) * 8 + e] as f64;
                    let (col, kk) = fragment_element(meta, steps, (tile, step, lane, e));
                    for row in 0..m {
                        c[row * n + col] += a[row * k + kk] as f64 * v;
                    }
                }
            }
        }
    }
    c
}
