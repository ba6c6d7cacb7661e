//! A very sparse fp32 weight for many live rows ([`Family::RowScatter`]): each row of the
//! activation is scanned once for its nonzeros, and only the rows of `W` they select are read.
//!
//! The 3xTF32 fine kernel reads a tile of `A` once per column tile, so its `A` traffic grows with
//! `N / 192`; at 16,384 neurons and 32 nonzeros per column (0.2% dense) that is ~85 reads of a
//! 3.9 GB activation per layer, and its k8 × n8 steps hold one useful product in eight. Here a
//! CTA owns a slab of at most 16,384 output columns and a stride of rows; per row it zeroes the
//! slab's accumulators in shared memory, compacts the row's nonzeros chunk by chunk, and its
//! threads (one per nonzero) add `a · w` for the `W` entries of each nonzero's row that fall in the slab. `A` is
//! read once per slab, `W` (row-major CSR per slab, a few MB) stays in L2, and the work is the
//! activation's nonzeros times the weight's row length.
//!
//! Accumulation is in 64-bit fixed point: each product is exact in double and rounded once to
//! `2^-frac_bits` (`frac_bits` ≤ 40, chosen from a bound on `|A·W|` the caller gives, so no sum
//! leaves the range; integer addition wraps exactly, so only the final sum must fit), and shared
//! memory atomics on integers give the same sum in any order: the result is deterministic and
//! at least as accurate as an fp32 FMA chain (2^-41 per product against 2^-24 relative per add).
//!
//! Tables: `ptr[k · slabs + s] .. ptr[k · slabs + s + 1]` are row k's entries in slab `s`; `idx`
//! their column within the slab; `W` their values. Like the tiled kernels it does nothing at or
//! below `SpmmSpec::live_above` live rows (the few-rows kernel computes there).
//!
//! Measured (H100, `benches/results/hpec_gpu.md`): slower than the 3xTF32 fine kernel so far,
//! 16384×120 MNIST 1,178 ms against 384 (1024×120: 23.6 against 3.18 ms), with the same
//! categories. It is latency bound: one CTA per multiprocessor holds one row at a time, and each
//! row is a chain of scan, compaction, gathers of the selected weight rows and atomics. HPEC
//! runs it only with `--scatter-from`; its tables are CSR-sized (~8 bytes a nonzero, against
//! ~47 for the 3xTF32 fine kernel's with the few-rows slots at 16384 neurons).

use super::kernel::*;
use super::shared::*;
use crate::codegen::render::render;
use crate::codegen::{CodegenError, Dtype, Mode, Orientation, SpmmSpec};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// Threads per CTA (32 warps, one CTA per multiprocessor at the largest slab).
const THREADS: usize = 1024;
/// Widest slab: 16,384 columns of 8-byte accumulators are 128 KiB of shared memory.
pub const SLAB_MAX: usize = 16_384;
/// Activation elements compacted per step (their k and value: 16 KiB of shared memory).
const CHUNK: usize = 2048;
/// Fraction bits at most: 2^-40 resolution, and sums up to 2^22 in magnitude.
const FRAC_BITS_MAX: i32 = 40;

#[derive(Serialize)]
struct Ctx {
    #[serde(flatten)]
    head: crate::codegen::render::KernelHead,
    slab: usize,
    slabs: usize,
    chunk: usize,
    threads: usize,
    frac_bits: i32,
    scale: String,
    inv_scale: String,
}

/// Column slabs of an `n`-column weight: as few as fit [`SLAB_MAX`], of equal width.
pub fn slabs_of(n: usize) -> (usize, usize) {
    let slabs = n.div_ceil(SLAB_MAX).max(1);
    (slabs, n.div_ceil(slabs))
}

/// Fraction bits for sums bounded by `sum_bound` in magnitude: as many as leave two bits of
/// headroom below 2^63, at most 40.
pub fn frac_bits_for(sum_bound: f64) -> i32 {
    let int_bits = sum_bound.max(1.0).log2().ceil() as i32;
    (61 - int_bits).clamp(0, FRAC_BITS_MAX)
}

/// The row-scatter kernel of `spec` (right orientation, fp32, 1×1 blocks, live rows, first
/// and only launch of its product), for products `A·W` bounded by `sum_bound` in magnitude
/// (e.g. the largest activation times the largest column sum of `|W|`). `sm_count` sizes the
/// row stride. `spec.blocks` are the nonzeros `(k, n)`.
pub fn specialize(spec: &SpmmSpec, sum_bound: f64, sm_count: usize) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.block != (1, 1) || spec.orientation != Orientation::Right || spec.dtype != Dtype::F32 {
        return Err(spec_err(format!(
            "the row-scatter kernel takes an element-sparse fp32 weight on the right, not {:?} {:?} blocks {:?}",
            spec.orientation, spec.dtype, spec.block
        )));
    }
    if !spec.live_rows || spec.accumulate || m == 0 || k == 0 || n == 0 {
        return Err(spec_err(format!("the row-scatter kernel needs live rows and no accumulation (m {m})")));
    }
    if !sum_bound.is_finite() {
        return Err(spec_err("the row-scatter kernel needs a finite bound on its sums".into()));
    }
    let (slabs, slab) = slabs_of(n);
    let mut counts = vec![0i32; k * slabs + 1];
    for &(r, c) in &spec.blocks {
        if r >= k || c >= n {
            return Err(spec_err(format!("nonzero ({r}, {c}) outside the {k}x{n} weight")));
        }
        counts[r * slabs + c / slab + 1] += 1;
    }
    for i in 1..counts.len() {
        counts[i] += counts[i - 1];
    }
    let ptr = counts;
    let mut next: Vec<i32> = ptr[..k * slabs].to_vec();
    let mut idx = vec![0i32; spec.blocks.len()];
    let mut sorted = spec.blocks.clone();
    sorted.sort_unstable();
    for (r, c) in sorted {
        let at = &mut next[r * slabs + c / slab];
        idx[*at as usize] = (c % slab) as i32;
        *at += 1;
    }
    let frac_bits = frac_bits_for(sum_bound);
    let name = format!("spmm_row_scatter_{m}x{k}x{n}_s{slabs}_f{frac_bits}_a{}", spec.live_above);
    let head = kernel_head(&name, Dtype::F32, spec);
    let scale = 2f64.powi(frac_bits);
    let ctx = Ctx {
        head,
        slab,
        slabs,
        chunk: CHUNK,
        threads: THREADS,
        frac_bits,
        scale: format!("{scale:e}"),
        inv_scale: format!("{:e}", 1.0 / scale),
    };
    let source = render("spmm_row_scatter.cu.tera", &ctx)?;
    let smem_bytes = (8 * slab + 8 * CHUNK) as u32;
    // Rows in y: two CTAs per multiprocessor over all the slabs, each striding the rows.
    let rows_y = (2 * sm_count.max(1)).div_ceil(slabs).clamp(1, m.min(65_535)) as u32;
    let launch = Launch { grid: (slabs as u32, rows_y, 1), block: (THREADS as u32, 1, 1), smem_bytes };
    Ok(Kernel {
        source,
        ptr,
        idx,
        live_instances: spec.blocks.len(),
        dead_instances: k * n - spec.blocks.len(),
        ..Kernel::new(name, Family::RowScatter, Mode::IndexStream, launch, (m, k, n), Dtype::F32, (1, 1))
    })
}

/// The weight's values in the kernel's table order (row, slab, column).
pub(crate) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, k, n) = kernel.spec_shape;
    let (slabs, slab) = slabs_of(n);
    let mut out = Vec::with_capacity(kernel.idx.len());
    for r in 0..k {
        for s in 0..slabs {
            let range = kernel.ptr[r * slabs + s] as usize..kernel.ptr[r * slabs + s + 1] as usize;
            out.extend(kernel.idx[range].iter().map(|&c| w.at(r * n + s * slab + c as usize)));
        }
    }
    out
}

/// The row-scatter family's entry in the family table.
pub(crate) const OPS: FamilyOps = FamilyOps { pack: packer!(pack), flops: block_flops };

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::{Activation, Epilogue};

    fn spec(k: usize, n: usize, blocks: Vec<(usize, usize)>) -> SpmmSpec {
        let mut s = SpmmSpec::new(64, k, n, Dtype::F32, (1, 1), blocks);
        s.live_rows = true;
        s.live_above = 8;
        s.epilogue = Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: 32.0 } };
        s
    }

    #[test]
    fn tables_hold_each_row_by_slab_and_pack_follows_them() {
        // 40,000 columns: three slabs of 13,334.
        let (k, n) = (5, 40_000);
        let blocks = vec![(0, 39_999), (0, 1), (3, 13_334), (3, 13_333), (4, 20_000)];
        let kern = specialize(&spec(k, n, blocks.clone()), 1024.0, 132).unwrap();
        assert_eq!(slabs_of(n), (3, 13_334));
        assert_eq!(kern.ptr.len(), k * 3 + 1);
        // Row 0: column 1 in slab 0, column 39,999 in slab 2 (at 13,331); row 3: 13,333 in slab
        // 0, 13,334 in slab 1 (at 0); row 4: 20,000 in slab 1.
        assert_eq!(kern.idx, vec![1, 13_331, 13_333, 0, 6_666]);
        assert_eq!(&kern.ptr[..4], &[0, 1, 1, 2]);
        let w = crate::sparse::Csr {
            rows: k,
            cols: n,
            offsets: vec![0, 2, 2, 2, 4, 5],
            indices: vec![1, 39_999, 13_333, 13_334, 20_000],
            values: vec![1.0, 2.0, 3.0, 4.0, 5.0],
        };
        assert_eq!(kern.pack_weight(&w), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!(kern.source.contains("#define SLABS 3") && kern.source.contains("rows <= 8"));
        assert_eq!(kern.launch.smem_bytes as usize, 8 * 13_334 + 8 * CHUNK);
    }

    #[test]
    fn fraction_bits_leave_room_for_the_bound() {
        assert_eq!(frac_bits_for(1024.0), 40);
        assert_eq!(frac_bits_for(2f64.powi(30)), 31);
        assert_eq!(frac_bits_for(0.0), 40);
        assert!(specialize(&spec(4, 8, vec![(0, 0)]), f64::INFINITY, 132).is_err());
        let mut s = spec(4, 8, vec![(4, 0)]);
        assert!(specialize(&s, 1.0, 132).is_err(), "a nonzero outside the weight");
        s.blocks = vec![(0, 0)];
        s.accumulate = true;
        assert!(specialize(&s, 1.0, 132).is_err());
    }
}
