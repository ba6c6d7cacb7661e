//! The Hopper 2:4 kernel ([`Family::TwoFourWgmma`]): `wgmma.mma_async.sp` m64nNk32 on
//! `Cᵀ = Wᵀ·Aᵀ`, warp-specialized and persistent (`templates/spmm_two_four_wgmma.cu.tera`,
//! tiling in [`crate::kernel_choice::two_four::wgmma_tiling`]).
//!
//! PTX ISA, "Matrix fragments for sparse wgmma.mma_async.m64nNk32": each warp of the
//! warpgroup gives the metadata of 16 rows of the 64-row sparse operand, laid out as for
//! `mma.sp` m16n8k32 ([`super::pack`]: lanes `4g` and `4g + 1`, sparsity selector 0); the
//! compressed operand (`64 × 16` values per k32 step) is read from shared memory through a
//! matrix descriptor like a dense `64 × 16` K-major tile.
//!
//! Packed for the device, per work item's column tile `f` (`cols` output columns, the last
//! one padded with zero columns) and 64-deep stage `ks`, one record each so that one bulk copy
//! lands it:
//! - values (the packed weight): the stage's shared-memory image, `cols` rows of 32 kept
//!   values (64 bytes, the 64-byte swizzle: [`CoreLayout`] with 4 chunks), m64 tile `t` at
//!   byte `4096 t`; stored value `16 q + 2 c + i` of a row is index `i` of chunk `c` of k32
//!   step `q`;
//! - metadata (`idx`): `[m64 tile][warp][k32 step][16 words]`, word `2g + h` as in
//!   [`super::pack::metadata`].
//!
//! `ptr` holds one entry, `cols`, so that [`pack`] can find the records' width.

use super::pack::{chunk_indices, chunk_masks, metadata};
use crate::codegen::render::{render, KernelHead};
use crate::codegen::spmm::kernel::*;
use crate::codegen::spmm::shared::*;
use crate::codegen::spmm::wgmma::CoreLayout;
use crate::codegen::{CodegenError, Mode, SpmmSpec};
use crate::kernel_choice::two_four::{wgmma_tiling, WGMMA_SLICE};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// SMs the persistent grid is sized for (H100/H200 SXM).
const TARGET_SMS: usize = 132;
/// The compressed weight's layout: 64-byte rows (32 values of 16 bits).
const W_LAYOUT: CoreLayout = CoreLayout { k_chunks: 4 };
/// A's layout: 128-byte rows (64 k of 16 bits), as TMA's 128-byte swizzle lands them.
const A_LAYOUT: CoreLayout = CoreLayout { k_chunks: 8 };

#[derive(Serialize)]
struct Ctx {
    #[serde(flatten)]
    head: KernelHead,
    tn: usize,
    warpgroups: usize,
    m_tiles: usize,
    cols: usize,
    threads: usize,
    stages: usize,
    w_bytes: usize,
    meta_bytes: usize,
    a_off: usize,
    stage_bytes: usize,
    slice: usize,
    stg_ld: usize,
    acc_regs: usize,
    desc_w: String,
    // wgmma.cuh's context (its dense wgmma is unused here).
    desc_const: String,
    bw: usize,
    operand_a: usize,
    operand_b: usize,
    operand_one: usize,
}

/// The Hopper 2:4 kernel of `spec` (`spec.two_four`, K a multiple of 64, no accumulation onto C).
pub(crate) fn specialize(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.accumulate {
        return Err(spec_err("the Hopper 2:4 kernel writes C; it does not accumulate onto it".into()));
    }
    let t = wgmma_tiling(m, k, n, spec.tile).map_err(|e| spec_err(e.0))?;
    let mask = chunk_masks(k, n, &spec.blocks).map_err(spec_err)?;
    let meta = records(k, n, &mask, t.cols());
    let name = format!("spmm_two_four_wgmma_{}_{}x{}s{}", spec.dtype.name(), t.cols(), t.tn, t.stages);
    let acc = t.acc_regs();
    let ctx = Ctx {
        head: kernel_head(&name, spec.dtype, spec),
        tn: t.tn,
        warpgroups: t.warpgroups,
        m_tiles: t.m_tiles,
        cols: t.cols(),
        threads: 128 * (1 + t.warpgroups),
        stages: t.stages,
        w_bytes: t.w_bytes(),
        meta_bytes: t.meta_bytes(),
        a_off: t.a_offset(),
        stage_bytes: t.stage_bytes(),
        slice: WGMMA_SLICE,
        stg_ld: t.stg_ld(),
        acc_regs: acc / t.m_tiles,
        desc_w: format!("0x{:016x}", W_LAYOUT.descriptor_const()),
        desc_const: format!("0x{:016x}", A_LAYOUT.descriptor_const()),
        bw: t.tn,
        operand_a: acc / t.m_tiles,
        operand_b: acc / t.m_tiles + 1,
        operand_one: acc / t.m_tiles + 2,
    };
    let source = render("spmm_two_four_wgmma.cu.tera", &ctx)?;
    let items = t.items(m, n);
    let launch = Launch {
        grid: (items.min(TARGET_SMS) as u32, 1, 1),
        block: ((128 * (1 + t.warpgroups)) as u32, 1, 1),
        smem_bytes: t.smem_bytes() as u32,
    };
    Ok(Kernel {
        source,
        ptr: vec![t.cols() as i32],
        idx: meta.into_iter().map(|w| w as i32).collect(),
        live_instances: spec.blocks.len(),
        dead_instances: k * n / 2 - spec.blocks.len().min(k * n / 2),
        tma_a: Some(TmaBox { rows: t.tn as u32, cols: 64, swizzle_bytes: 128 }),
        ..Kernel::new(name, Family::TwoFourWgmma, Mode::IndexStream, launch, (m, k, n), spec.dtype, (1, 1))
    })
}

/// Column tiles of a `n`-column weight in items of `cols` columns.
fn column_tiles(n: usize, cols: usize) -> usize {
    n.div_ceil(cols)
}

/// The metadata records of a `k × n` weight with chunk masks `mask` (module docs), columns
/// past `n` up to whole tiles of `cols` named as empty chunks (indices 0 and 1, zero values).
pub fn records(k: usize, n: usize, mask: &[u8], cols: usize) -> Vec<u32> {
    let chunks = k / 4;
    let n_pad = column_tiles(n, cols) * cols;
    let mut padded = mask.to_vec();
    padded.resize(n_pad * chunks, 0);
    // The mma.sp order: [16-column tile][k32 step][16 words].
    let flat = metadata(k, n_pad, &padded);
    let (steps, stages) = (k / 32, k / 64);
    let mut out = Vec::with_capacity(flat.len());
    for f in 0..n_pad / cols {
        for ks in 0..stages {
            for tile in 0..cols / 16 {
                for q in 0..2 {
                    let at = ((f * cols / 16 + tile) * steps + 2 * ks + q) * 16;
                    out.extend_from_slice(&flat[at..at + 16]);
                }
            }
        }
    }
    out
}

/// The chunk masks (`mask[col * k/4 + chunk]`, as [`chunk_masks`]) the records name, for the
/// `n_pad` padded columns; fillers are named too (and hold zeros in the weight).
fn masks_of_records(k: usize, n_pad: usize, cols: usize, meta: &[u32]) -> Vec<u8> {
    let (chunks, stages) = (k / 4, k / 64);
    let mut mask = vec![0u8; n_pad * chunks];
    for col in 0..n_pad {
        let (f, tile, row) = (col / cols, (col % cols) / 16, col % 16);
        for chunk in 0..chunks {
            let (ks, q, c) = (chunk / 16, (chunk / 8) % 2, chunk % 8);
            let word = meta[(((f * stages + ks) * (cols / 16) + tile) * 2 + q) * 16 + 2 * (row % 8) + c / 4];
            let nibble = (word >> (16 * (row / 8) + 4 * (c % 4))) & 0xf;
            mask[col * chunks + chunk] = (1 << (nibble & 3)) | (1 << (nibble >> 2));
        }
    }
    mask
}

/// Where stored value `s` (0..32: `16 q + 2 c + i`) of row `row` of column tile `f`, stage `ks`
/// sits among the packed values.
fn image_position(stages: usize, cols: usize, (f, ks, row, s): (usize, usize, usize, usize)) -> usize {
    let rec = (f * stages + ks) * cols * 32;
    let (t, r) = (row / 64, row % 64);
    rec + (4096 * t + W_LAYOUT.offset(r, s / 8)) / 2 + s % 8
}

/// The weight as the kernel reads it: per (column tile, stage) the shared-memory image of the
/// kept values (module docs), zeros for fillers and padded columns.
pub(crate) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, k, n) = kernel.spec_shape;
    let cols = kernel.ptr[0] as usize;
    let n_pad = column_tiles(n, cols) * cols;
    let meta: Vec<u32> = kernel.idx.iter().map(|&x| x as u32).collect();
    let mask = masks_of_records(k, n_pad, cols, &meta);
    let (chunks, stages) = (k / 4, k / 64);
    let mut out = vec![T::default(); n_pad * k / 2];
    for col in 0..n {
        for chunk in 0..chunks {
            let m = mask[col * chunks + chunk];
            let indices = chunk_indices(m);
            for (i, &kk) in indices.iter().enumerate() {
                let s = 16 * ((chunk / 8) % 2) + 2 * (chunk % 8) + i;
                let at = image_position(stages, cols, (col / cols, chunk / 16, col % cols, s));
                out[at] = w.at((chunk * 4 + kk) * n + col);
            }
        }
    }
    out
}

/// The kernel's arithmetic on the packed form, in f64: `C = A·W` (`A` row-major `m × k`), each
/// stored value found where the hardware reads it (the descriptor's swizzled address of the
/// compressed tile) and paired with the k its lane's metadata word names. What the GPU computes,
/// up to rounding.
#[cfg(test)]
pub fn emulate(m: usize, k: usize, n: usize, cols: usize, a: &[f32], values: &[f32], meta: &[u32]) -> Vec<f64> {
    let stages = k / 64;
    let n_pad = column_tiles(n, cols) * cols;
    let desc = W_LAYOUT.descriptor_const();
    let mut c = vec![0.0f64; m * n];
    for f in 0..n_pad / cols {
        for ks in 0..stages {
            let rec = (f * stages + ks) * cols * 32;
            for t in 0..cols / 64 {
                for warp in 0..4 {
                    for q in 0..2 {
                        let words = &meta[(((f * stages + ks) * (cols / 16) + 4 * t + warp) * 2 + q) * 16..][..16];
                        for r in 0..16 {
                            let col = f * cols + 64 * t + 16 * warp + r;
                            for ch in 0..8 {
                                // The metadata of row r, chunk ch comes from lane 4·(r % 8) + ch / 4.
                                let word = words[2 * (r % 8) + ch / 4];
                                let nibble = (word >> (16 * (r / 8) + 4 * (ch % 4))) & 0xf;
                                for i in 0..2 {
                                    let index = ((nibble >> (2 * i)) & 3) as usize;
                                    let byte = CoreLayout::descriptor_offset(
                                        desc,
                                        4096 * t + 32 * q,
                                        16 * warp + r,
                                        2 * ch + i,
                                        2,
                                    );
                                    let v = values[rec + byte / 2] as f64;
                                    let kk = 64 * ks + 32 * q + 4 * ch + index;
                                    if col < n && v != 0.0 {
                                        for row in 0..m {
                                            c[row * n + col] += a[row * k + kk] as f64 * v;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    c
}

/// The Hopper 2:4 family's entry in the family table.
pub(crate) const OPS: FamilyOps =
    FamilyOps { pack: packer!(pack), flops: |kernel, m| m as f64 * (kernel.spec_shape.1 * kernel.spec_shape.2) as f64 };
