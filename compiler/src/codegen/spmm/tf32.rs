//! fp32 block-sparse matmul on tensor cores at fp32 accuracy ([`Family::BlockTf32`]).
//!
//! TF32 keeps 10 of fp32's 23 mantissa bits, so one TF32 product loses about three decimal
//! digits. Splitting each operand into a TF32 part and a TF32 remainder, `x = big + small`
//! with `|x - big - small| ≤ 2^-22 |x|`, and summing `small·big + big·small + big·big` in
//! fp32 (the `small·small` term is below fp32's rounding) gives products as accurate as
//! fp32 FMAs at three `mma.sync` m16n8k8 each, which on Hopper still outruns the SIMT pipe.
//! W is split once here ([`split_blocks`]), A in registers as its fragments load.
//!
//! The loop nest is the block kernels' one (block column → live k-blocks → k8 steps), with
//! the same tables ([`block_tables`]); `templates/spmm_block_tf32.cu.tera` renders it.
//! W is packed n-major (big part, then small part) so that ldmatrix loads its fragments. Each
//! k-block's products are summed apart and added in fp32, since the tensor core's own
//! accumulation truncates.
//!
//! Choice ([`auto_takes`], in [`crate::kernel_choice::block_tf32`] because the planner's cost
//! model applies it too): `Engine::Auto` runs right-orientation fp32 blocks of 8-128 × 8-32
//! (powers of two) here unless known values make a block uniform (the SIMT kernel folds those);
//! `Engine::Simt` keeps the SIMT kernel, `Engine::Tf32x3` forces this one. Shared device
//! helpers (the splits, the TF32 mma) are in `templates/tf32.cuh`.

use crate::codegen::render::{render, BlockCtx};
use crate::codegen::spmm::kernel::{block_flops, blocks, FamilyOps, Packer};
use crate::codegen::spmm::shared::{
    block_tables, kernel_head, kernel_literals, pipeline_stages, resolve_mode, spec_err, uniform_block, value_bits,
    warp_rows,
};
use crate::codegen::{CodegenError, Dtype, Engine, Family, Kernel, Launch, Mode, SpmmSpec};
use crate::kernel_choice::block_tf32::{auto_takes, supports};

/// Rounds to TF32 as `cvt.rna.tf32.f32` does: to the nearest value with 10 mantissa bits,
/// ties away from zero; infinities and NaNs pass unchanged.
pub fn tf32_round(x: f32) -> f32 {
    let bits = x.to_bits();
    if (bits & 0x7f80_0000) == 0x7f80_0000 {
        return x;
    }
    // Adding half of the dropped range to the magnitude carries into the kept bits exactly
    // when the dropped part is at least half (ties away); a carry out of the mantissa moves
    // the exponent up, as rounding should (up to infinity at the top).
    f32::from_bits(bits.wrapping_add(0x1000) & 0xffff_e000)
}

/// Packs the live blocks (each `bh × bw`, row-major, as `pack_blocks` lays them out) as each
/// block's TF32 big part followed by its TF32 small part, both transposed (`bw` rows of `bh`,
/// k contiguous: the layout whose rows ldmatrix turns into B fragments).
pub fn split_blocks(blocks: &[f32], (bh, bw): (usize, usize)) -> Vec<f32> {
    let mut out = Vec::with_capacity(2 * blocks.len());
    for b in blocks.chunks(bh * bw) {
        let t = |c: usize, r: usize| b[r * bw + c];
        out.extend((0..bw).flat_map(|c| (0..bh).map(move |r| tf32_round(t(c, r)))));
        out.extend((0..bw).flat_map(|c| (0..bh).map(move |r| tf32_round(t(c, r) - tf32_round(t(c, r))))));
    }
    out
}

/// The 3xTF32 kernel for `spec` if its engine selects it; `None` hands the spec on.
pub(super) fn try_specialize(spec: &SpmmSpec, live: &[bool], dense: bool) -> Result<Option<Kernel>, CodegenError> {
    let (bh, bw) = spec.block;
    match spec.engine {
        Engine::Tf32x3 | Engine::Simt if spec.dtype != Dtype::F32 => {
            Err(spec_err(format!("the {:?} engine takes f32 weights, not {}", spec.engine, spec.dtype.name())))
        }
        Engine::Tf32x3 if !supports(bh, bw) => {
            Err(spec_err(format!("3xTF32 kernels need bh in 8..=128 and bw in 8..=32, powers of two, got {bh}x{bw}")))
        }
        Engine::Tf32x3 => block_tf32(spec, live, dense).map(Some),
        // Auto: fp32 blocks the kernel takes go to tensor cores (run 14, 4096³ 32×32: 90%
        // 0.270 ms against 0.430 on SIMT, 50% 1.35 against 2.05, 99% 0.049 against 0.062; dense
        // 2.59 against cuBLAS's 2.68), except known weights with uniform blocks, which the SIMT
        // kernel folds to one literal each.
        Engine::Auto if auto_takes(spec.dtype, spec.orientation, spec.block) && !has_uniform_block(spec, live) => {
            block_tf32(spec, live, dense).map(Some)
        }
        _ => Ok(None),
    }
}

/// Whether the weight's values are known and some live block is one the SIMT kernel folds.
fn has_uniform_block(spec: &SpmmSpec, live: &[bool]) -> bool {
    let Some(v) = &spec.values else { return false };
    let nbs = spec.n / spec.block.1;
    live.iter().enumerate().any(|(b, &l)| l && uniform_block(v, spec.n, spec.block, b / nbs, b % nbs).is_some())
}

fn block_tf32(spec: &SpmmSpec, live: &[bool], dense: bool) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    let (kbs, nbs) = (k / bh, n / bw);
    let warps = warp_rows(spec, "3xTF32")?;
    // Two stages leave shared memory for three 128-row CTAs per SM (12 warps): 4096³ 90%
    // 0.253 ms against 0.291 with three stages (run 14).
    let stages = pipeline_stages(spec, 2)?;
    let (threads, bm) = (32 * warps, 32 * warps);
    // A rows and (n-major) W rows 16 bytes past a multiple of 128: the 8 rows of each ldmatrix
    // phase hit 8 distinct 16-byte bank groups.
    let (a_ld, w_ld) = (bh + 4, bh + 4);
    let smem = stages * (bm * a_ld + 2 * bw * w_ld) * 4;
    if smem > 227 * 1024 {
        return Err(spec_err(format!("block {bh}x{bw} needs {smem} bytes of shared memory per CTA (at most 232448)")));
    }
    let tables = block_tables(m, (kbs, nbs), (bh, bw), bm, live)?;
    let (ptr, idx) = (&tables.ptr, &tables.idx);
    let w_words = spec.values.as_ref().map_or(0, |_| 2 * idx.len() * bh * bw);
    let literal_words = if dense { 0 } else { ptr.len() + idx.len() } + w_words;
    let mode = if dense && spec.values.is_none() { Mode::IndexStream } else { resolve_mode(spec, literal_words) };
    let unrolled = mode == Mode::Unrolled;
    let name = format!(
        "spmm_{}_{bh}x{bw}_{}",
        if dense { "dense_tf32x3" } else { "block_tf32x3" },
        if unrolled { "unrolled" } else { "stream" }
    );
    let launch =
        Launch { grid: (nbs as u32, m.div_ceil(bm) as u32, 1), block: (threads as u32, 1, 1), smem_bytes: smem as u32 };
    let mut kernel = Kernel::new(name, Family::BlockTf32, mode, launch, (m, k, n), Dtype::F32, (bh, bw))
        .with_block_tables(tables, literal_words, spec.values.is_some());
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(v), true) => value_bits(Dtype::F32, &kernel.pack_weight(v)),
        _ => vec![],
    };
    let ctx = BlockCtx {
        head: kernel_head(&kernel.name, Dtype::F32, spec),
        literals: kernel_literals(&kernel, kernel.idx.clone(), values, 32, 0),
        bh,
        bw,
        bm,
        tm: 0,
        threads,
        threads_n: 0,
        threads_m: 0,
        warps,
        stages,
        a_ld,
        w_ld,
        a_chunks: bm * bh / 4,
        // The big and the small part, n-major: 2 × bw rows of bh.
        w_chunks: 2 * bh * bw / 4,
        a_row_chunks: bh / 4,
        w_row_chunks: bh / 4,
        dense,
        k_blocks: kbs,
        n_tiles: bw / 8,
        folded: false,
        part_folded: false,
        block_values: vec![],
        left: false,
        cs_ld: 0,
        c_chunks: 0,
        c_row_chunks: 0,
    };
    kernel.source = render("spmm_block_tf32.cu.tera", &ctx)?;
    Ok(kernel)
}

/// The 3xTF32 block family's entry in the family table: the live blocks split
/// ([`split_blocks`]) as fp32 values, as they are as int8 ones.
pub(crate) const OPS: FamilyOps = FamilyOps {
    pack: Packer { f32: |kernel, w| split_blocks(&blocks(kernel, w), kernel.block), i8: |kernel, w| blocks(kernel, w) },
    flops: block_flops,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_rounding_is_nearest_ties_away_and_the_split_is_exact_to_fp32() {
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: away from zero.
        assert_eq!(tf32_round(1.0 + 2f32.powi(-11)), 1.0 + 2f32.powi(-10));
        assert_eq!(tf32_round(-(1.0 + 2f32.powi(-11))), -(1.0 + 2f32.powi(-10)));
        // Just under the tie: down.
        assert_eq!(tf32_round(1.0 + 2f32.powi(-11) - 2f32.powi(-23)), 1.0);
        assert_eq!(tf32_round(f32::INFINITY), f32::INFINITY);
        assert!(tf32_round(f32::NAN).is_nan());
        let mut x = 0.7_f32;
        for _ in 0..1000 {
            x = (x * 1.618_034 + 0.1).fract() * 3.0 - 1.5;
            let big = tf32_round(x);
            let small = tf32_round(x - big);
            assert_eq!(big.to_bits() & 0x1fff, 0);
            assert_eq!(small.to_bits() & 0x1fff, 0);
            assert!((x - big - small).abs() <= x.abs() * 2f32.powi(-21), "{x}: {big} + {small}");
        }
    }

    #[test]
    fn engine_selects_the_kernel_and_its_weight_is_split_per_block() {
        let blocks = vec![(0, 1), (2, 0), (3, 1)];
        let mut s = SpmmSpec::new(64, 128, 64, Dtype::F32, (32, 32), blocks);
        s.engine = Engine::Tf32x3;
        let kern = super::super::specialize(&s).unwrap();
        assert_eq!(kern.family, Family::BlockTf32);
        assert!(kern.source.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
        let w: Vec<f32> = (0..128 * 64).map(|i| 1.0 + i as f32 * 1e-4).collect();
        let packed = kern.pack_weight(&w);
        assert_eq!(packed.len(), 2 * 3 * 32 * 32);
        // Block column 0 holds k-block 2: its big part, then its small part, n-major (element
        // (k 5, n 7) at n × 32 + k).
        let x = w[(2 * 32 + 5) * 64 + 7];
        assert_eq!(packed[7 * 32 + 5], tf32_round(x));
        assert_eq!(packed[32 * 32 + 7 * 32 + 5], tf32_round(x - tf32_round(x)));
        // Auto takes it too, unless known values make a block uniform (the SIMT kernel folds
        // those); the Simt engine keeps the SIMT kernel; other dtypes and odd blocks are errors.
        s.engine = Engine::Auto;
        assert_eq!(super::super::specialize(&s).unwrap().family, Family::BlockTf32);
        let mut uniform = w.clone();
        (0..32).for_each(|r| uniform[(2 * 32 + r) * 64..(2 * 32 + r) * 64 + 32].fill(0.5));
        s.values = Some(uniform);
        assert_eq!(super::super::specialize(&s).unwrap().family, Family::BlockSimt);
        s.values = Some(w.clone());
        assert_eq!(super::super::specialize(&s).unwrap().family, Family::BlockTf32);
        s.engine = Engine::Simt;
        assert_eq!(super::super::specialize(&s).unwrap().family, Family::BlockSimt);
        let mut h = SpmmSpec::new(64, 128, 64, Dtype::F16, (32, 32), vec![(0, 0)]);
        h.engine = Engine::Tf32x3;
        assert!(super::super::specialize(&h).is_err());
        let mut odd = SpmmSpec::new(64, 128, 60, Dtype::F32, (4, 4), vec![(0, 0)]);
        odd.engine = Engine::Tf32x3;
        assert!(super::super::specialize(&odd).unwrap_err().to_string().contains("powers of two"));
    }
}
