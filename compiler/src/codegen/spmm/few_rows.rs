//! Element-sparse fp32 weight for a few live rows ([`Family::FineRows`]): one thread per output
//! element, walking its column's nonzeros in ELL slots.
//!
//! The tiled kernels (3xTF32 fine, SIMT fine) give each warp a column group and walk its k in
//! series over a row tile: with a handful of live rows that chain is the layer's whole time,
//! however few rows there are (~15 µs for a 1024-wide layer of the HPEC network). Here a
//! thread owns one column for the rows of its CTA's y-stride: it loads the column's nonzeros
//! once into registers (slot `s` of column `c` at `s × N + c`, so a warp's loads are coalesced),
//! then for each row gathers `A[r, k]` for them (the row is L1/L2-resident) into independent
//! loads and one FMA chain of the column's length. The grid is `⌈N / 128⌉ × rows_y` CTAs and a
//! layer costs about one gather round trip.
//!
//! It is the few-rows half of a live-rows product: it does nothing when more than `max_rows`
//! rows are live, and the tiled kernel of the same product, specialized with
//! `SpmmSpec::live_above = max_rows`, does nothing at or below it; the two launch back to back and
//! exactly one of them computes. Tables: `idx` the ELL slots' k (`-1` pads a column shorter
//! than the longest), `W` the values in the same order (`0` in a pad); `ptr` is not read.

use super::kernel::*;
use super::shared::*;
use crate::codegen::render::render;
use crate::codegen::{CodegenError, Dtype, Mode, Orientation, SpmmSpec};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// Threads per CTA: one column each.
const THREADS: usize = 128;
/// Slots held in registers (unrolled); longer columns loop over the tables.
const MAX_UNROLLED_SLOTS: usize = 64;

#[derive(Serialize)]
struct Ctx {
    #[serde(flatten)]
    head: crate::codegen::render::KernelHead,
    slots: usize,
    unrolled: bool,
    max_rows: usize,
    threads: usize,
}

/// The few-rows kernel of `spec` (right orientation, fp32, 1×1 blocks, `live_rows`): computes
/// the product when at most `max_rows` rows are live, and nothing otherwise. `spec.blocks` are
/// the nonzeros `(k, n)`.
pub fn specialize(spec: &SpmmSpec, max_rows: usize) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.block != (1, 1) || spec.orientation != Orientation::Right || spec.dtype != Dtype::F32 {
        return Err(spec_err(format!(
            "the few-rows kernel takes an element-sparse fp32 weight on the right, not {:?} {:?} blocks {:?}",
            spec.orientation, spec.dtype, spec.block
        )));
    }
    if !spec.live_rows || spec.accumulate || max_rows == 0 || m == 0 || k == 0 || n == 0 {
        return Err(spec_err(format!(
            "the few-rows kernel needs live rows, no accumulation and a row bound (m {m}, max rows {max_rows})"
        )));
    }
    let mut per_col = vec![0usize; n];
    for &(r, c) in &spec.blocks {
        if r >= k || c >= n {
            return Err(spec_err(format!("nonzero ({r}, {c}) outside the {k}x{n} weight")));
        }
        per_col[c] += 1;
    }
    let slots = per_col.iter().copied().max().unwrap_or(0).max(1);
    let mut next = vec![0usize; n];
    let mut idx = vec![-1i32; slots * n];
    let mut sorted = spec.blocks.clone();
    sorted.sort_unstable_by_key(|&(r, c)| (c, r));
    for (r, c) in sorted {
        idx[next[c] * n + c] = r as i32;
        next[c] += 1;
    }
    // The pattern streams in (idx, W): one source for every weight of this shape and slot count.
    let name = format!("spmm_few_rows_{m}x{k}x{n}_s{slots}_r{max_rows}");
    let mut head = kernel_head(&name, Dtype::F32, spec);
    head.live_above = 0;
    let ctx = Ctx { head, slots, unrolled: slots <= MAX_UNROLLED_SLOTS, max_rows, threads: THREADS };
    let source = render("spmm_few_rows.cu.tera", &ctx)?;
    // y: enough CTAs that max_rows rows are spread over the GPU at one row per CTA, at most.
    let rows_y = max_rows.clamp(1, 65535) as u32;
    let launch = Launch { grid: (n.div_ceil(THREADS) as u32, rows_y, 1), block: (THREADS as u32, 1, 1), smem_bytes: 0 };
    Ok(Kernel {
        source,
        idx,
        live_instances: spec.blocks.len(),
        dead_instances: k * n - spec.blocks.len(),
        ..Kernel::new(name, Family::FineRows, Mode::IndexStream, launch, (m, k, n), Dtype::F32, (1, 1))
    })
}

/// The weight (`K × N` row-major) in the kernel's slot order: `idx`'s k of each slot, 0 in pads.
pub(crate) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, _, n) = kernel.spec_shape;
    kernel
        .idx
        .iter()
        .enumerate()
        .map(|(i, &kk)| if kk < 0 { T::default() } else { w.at(kk as usize * n + i % n) })
        .collect()
}

/// The few-rows family's entry in the family table.
pub(crate) const OPS: FamilyOps = FamilyOps { pack: packer!(pack), flops: block_flops };

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::{Activation, Epilogue};

    fn spec(blocks: Vec<(usize, usize)>) -> SpmmSpec {
        let mut s = SpmmSpec::new(64, 16, 8, Dtype::F32, (1, 1), blocks);
        s.live_rows = true;
        s.epilogue = Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: 32.0 } };
        s
    }

    #[test]
    fn slots_hold_each_column_in_k_order_and_pads_read_nothing() {
        // Column 0: k 3 and 1; column 2: k 5; the others empty.
        let kern = specialize(&spec(vec![(3, 0), (5, 2), (1, 0)]), 16).unwrap();
        assert_eq!(kern.family, Family::FineRows);
        let n = 8;
        assert_eq!(kern.idx.len(), 2 * n, "two slots: the longest column");
        assert_eq!((kern.idx[0], kern.idx[n]), (1, 3));
        assert_eq!((kern.idx[2], kern.idx[n + 2]), (5, -1));
        assert!(kern.idx.iter().enumerate().all(|(i, &k)| k == -1 || [0, 2].contains(&(i % n))));
        let mut w = vec![0.0f32; 16 * 8];
        w[3 * 8] = 2.0;
        w[8] = 1.0;
        w[5 * 8 + 2] = -4.0;
        let packed = pack(&kern, &w);
        assert_eq!((packed[0], packed[n], packed[2], packed[n + 2]), (1.0, 2.0, -4.0, 0.0));
        assert!(kern.source.contains("#define MAX_ROWS 16"), "the row bound is in the code");
        assert_eq!(kern.launch.grid, (1, 16, 1));
    }

    #[test]
    fn refuses_what_it_does_not_compute() {
        let mut s = spec(vec![(0, 0)]);
        s.live_rows = false;
        assert!(specialize(&s, 8).is_err());
        assert!(specialize(&spec(vec![(0, 0)]), 0).is_err());
        assert!(specialize(&spec(vec![(16, 0)]), 8).is_err(), "a nonzero outside the weight");
        let mut s = spec(vec![(0, 0)]);
        s.block = (2, 2);
        assert!(specialize(&s, 8).is_err());
    }
}
