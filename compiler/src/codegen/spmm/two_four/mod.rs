//! The 2:4 kernels: a 16-bit or int8 weight 2:4-sparse along K on the sparse tensor cores, on
//! `Cᵀ = Wᵀ·Aᵀ` (PTX's sparse operand is the instruction's A; see
//! [`crate::kernel_choice::two_four`]). int8 parts, and 16-bit ones where [`takes_wgmma`] says
//! so, run on the Hopper kernel ([`wgmma`], `wgmma.mma_async.sp`); the other 16-bit ones on the
//! kernel below ([`Family::TwoFour`]), `mma.sp::ordered_metadata` m16n8k32 with fp32 accumulate.
//!
//! The spec lists the kept elements (block (1, 1)); here they become the metadata, packed
//! once at specialization into the kernel's `idx` table, and [`Kernel::pack_weight`] gathers
//! the kept values in the same order ([`pack`]: the register layout of `mma.sp`). The template
//! (`templates/spmm_two_four.cu.tera`) streams A tiles, compressed W tiles and their metadata
//! through a cp.async ring; a warp reads its W fragments with one 16-byte load each, A's by
//! `ldmatrix`; the fp32 tile is staged in shared memory and leaves through the shared
//! epilogue (`templates/epilogue.cuh`) as 16-byte rows of C. The kernel has one mode: the
//! metadata and values stream from device memory (`Mode::IndexStream`; the pattern is data,
//! the code depends on the shape and tile only). [`replay`] recomputes every access of a
//! launch on the CPU against the buffers and the dynamic shared memory it reports.

pub mod pack;
pub mod replay;
#[cfg(test)]
pub(crate) mod tests;
pub mod wgmma;
#[cfg(test)]
mod wgmma_tests;

use super::kernel::*;
use super::shared::*;
use crate::codegen::render::{render, KernelHead};
use crate::codegen::{CodegenError, Dtype, Mode, SpmmSpec};
use crate::kernel_choice::two_four::{supports, supports_int8, takes_wgmma, tiling};
use crate::sparse::WeightLookup;
use serde::Serialize;

#[derive(Serialize)]
struct Ctx {
    #[serde(flatten)]
    head: KernelHead,
    bm: usize,
    bn: usize,
    bk: usize,
    wm: usize,
    wn: usize,
    warps_n: usize,
    warps: usize,
    threads: usize,
    stages: usize,
    a_ld: usize,
    c_ld: usize,
    /// N is not a multiple of the CTA's columns: the last CTA's tiles past N hold zeros.
    ragged_n: bool,
}

/// The 2:4 kernel of `spec` (`spec.two_four`): its metadata from the kept elements, its tiling
/// from the shape (or `spec.tile`), the rendered source.
pub(crate) fn specialize(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.block != (1, 1) {
        return Err(spec_err(format!("a 2:4 spec lists its elements (block 1x1), not {:?} blocks", spec.block)));
    }
    if spec.live_rows || spec.mode == Mode::Unrolled {
        return Err(spec_err("the 2:4 kernel reads a fixed row count and streams its metadata".into()));
    }
    if spec.dtype == Dtype::I8 {
        if !supports_int8(spec.orientation, k, n, spec.accumulate) || spec.engine == crate::codegen::Engine::MmaSync {
            return Err(spec_err(format!(
                "the int8 2:4 kernel (Hopper, wgmma.sp) takes weights on the right with K a multiple of 128 and N of 16, writing C, not {:?} {k}x{n}{}{}",
                spec.orientation,
                if spec.accumulate { " accumulating" } else { "" },
                if spec.engine == crate::codegen::Engine::MmaSync { " on mma.sync" } else { "" }
            )));
        }
        return wgmma::specialize(spec);
    }
    if !supports(spec.dtype, spec.orientation, k, n) {
        return Err(spec_err(format!(
            "the 2:4 kernel takes f16/bf16 weights on the right with K a multiple of 32 and N of 16, not {} {:?} {k}x{n}",
            spec.dtype.name(),
            spec.orientation
        )));
    }
    if takes_wgmma(spec.engine, k, spec.accumulate) {
        return wgmma::specialize(spec);
    }
    let t = tiling(m, k, n, spec.tile).map_err(|e| spec_err(e.0))?;
    let grid = (n.div_ceil(t.bn), m.div_ceil(t.bm));
    if grid.1 > 65535 || m > i32::MAX as usize {
        return Err(spec_err(format!("{m} rows exceed the 2:4 kernel's grid")));
    }
    let mask = pack::chunk_masks(k, n, &spec.blocks).map_err(spec_err)?;
    let meta = pack::metadata(k, n, &mask);
    let name = format!("spmm_two_four_{}_{}x{}x{}s{}w{}", spec.dtype.name(), t.bn, t.bm, t.bk, t.stages, t.warps());
    let ctx = Ctx {
        head: kernel_head(&name, spec.dtype, spec),
        bm: t.bm,
        bn: t.bn,
        bk: t.bk,
        wm: t.wm(),
        wn: t.wn(),
        warps_n: t.warps_n,
        warps: t.warps(),
        threads: 32 * t.warps(),
        stages: t.stages,
        a_ld: t.a_ld(),
        c_ld: t.c_ld(),
        ragged_n: !n.is_multiple_of(t.bn),
    };
    let source = render("spmm_two_four.cu.tera", &ctx)?;
    let launch = Launch {
        grid: (grid.0 as u32, grid.1 as u32, 1),
        block: ((32 * t.warps()) as u32, 1, 1),
        smem_bytes: t.smem_bytes() as u32,
    };
    Ok(Kernel {
        source,
        idx: meta.into_iter().map(|w| w as i32).collect(),
        live_instances: spec.blocks.len(),
        dead_instances: k * n / 2 - spec.blocks.len(),
        ..Kernel::new(name, Family::TwoFour, Mode::IndexStream, launch, (m, k, n), spec.dtype, (1, 1))
    })
}

/// The weight as the kernel reads it: the kept values in `mma.sp`'s register layout, chosen by
/// the kernel's metadata (`idx`), `K/2 × N` values (zero where a chunk keeps fewer than 2).
pub(crate) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, k, n) = kernel.spec_shape;
    let (chunks, steps) = (k / 4, k / 32);
    let meta: Vec<u32> = kernel.idx.iter().map(|&x| x as u32).collect();
    // The chunk masks back from the metadata: fillers are read too, and hold zeros in `w`.
    let mut mask = vec![0u8; chunks * n];
    for col in 0..n {
        for chunk in 0..chunks {
            let (tile, row, step, c) = (col / 16, col % 16, chunk / 8, chunk % 8);
            let word = meta[(tile * steps + step) * 16 + 2 * (row % 8) + c / 4];
            let nibble = (word >> (16 * (row / 8) + 4 * (c % 4))) & 0xf;
            mask[col * chunks + chunk] = (1 << (nibble & 3)) | (1 << (nibble >> 2));
        }
    }
    pack::pack_values(k, n, &mask, w)
}

/// The 2:4 family's entry in the family table: the half of the weight the sparse tensor cores
/// multiply (kept values and fillers).
pub(crate) const OPS: FamilyOps =
    FamilyOps { pack: packer!(pack), flops: |kernel, m| m as f64 * (kernel.spec_shape.1 * kernel.spec_shape.2) as f64 };
