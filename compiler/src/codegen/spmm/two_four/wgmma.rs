//! The Hopper 2:4 kernel ([`Family::TwoFourWgmma`]): `wgmma.mma_async.sp` on `Cᵀ = Wᵀ·Aᵀ`,
//! m64nNk32 on f16/bf16, m64nNk64 on int8 (s8 × s8, int32 sums, the int8 family's
//! dequantizing epilogue and fp16 output), warp-specialized and persistent
//! (`templates/spmm_two_four_wgmma.cu.tera`, tiling in
//! [`crate::kernel_choice::two_four::wgmma_tiling`]).
//!
//! In bytes both widths are one kernel: a stage is 128 bytes of each row of A (64 or 128 k),
//! two instructions each reading a 64 × 32-byte compressed tile of the weight. What differs
//! is the metadata ([`Geometry`]). PTX ISA, "Matrix fragments for sparse wgmma": each warp of
//! the warpgroup gives the metadata of 16 rows of the 64-row sparse operand (row `g` and
//! `g + 8` for lanes of group `g`):
//! - 16-bit (k32, sparsity selector 0): as for `mma.sp` m16n8k32 ([`super::pack`]), lanes
//!   `4g` (chunks 0-3) and `4g + 1` (chunks 4-7), row `g` in bits 0-15 and `g + 8` above;
//! - int8 (k64, selector 0, every lane gives a word): lane `4g + h + 2j` holds row `g + 8h`,
//!   chunks `8j .. 8j + 8` at bits `4c` (the layout CUTLASS's cute names `ELayout_64x64`);
//!
//! and the compressed operand is read from shared memory through a matrix descriptor like a
//! dense `64 × 32`-byte K-major tile.
//!
//! Packed for the device, per work item's column tile `f` (`cols` output columns, the last
//! one padded with zero columns) and stage `ks`, one record each so that one bulk copy lands
//! it:
//! - values (the packed weight): the stage's shared-memory image, `cols` rows of 64 bytes
//!   (the 64-byte swizzle: [`CoreLayout`] with 4 chunks), m64 tile `t` at byte `4096 t`;
//!   stored value `(k_step/2)·q + 2c + i` of a row is kept value `i` of chunk `c` of the
//!   stage's instruction `q`;
//! - metadata (`idx`): `[m64 tile][warp][instruction][16 or 32 words]`, as
//!   [`Geometry::meta_slot`] places them.
//!
//! `ptr` holds one entry, `cols`, so that [`pack`] can find the records' width.

use super::pack::{chunk_indices, chunk_masks};
use crate::codegen::render::{render, KernelHead};
use crate::codegen::spmm::kernel::*;
use crate::codegen::spmm::shared::*;
use crate::codegen::spmm::wgmma::CoreLayout;
use crate::codegen::{CodegenError, Dtype, Mode, SpmmSpec};
use crate::kernel_choice::two_four::{wgmma_tiling, WGMMA_SLICE};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// SMs the persistent grid is sized for (H100/H200 SXM).
const TARGET_SMS: usize = 132;
/// The compressed weight's layout: 64-byte rows (32 values of 16 bits, 64 of int8).
const W_LAYOUT: CoreLayout = CoreLayout { k_chunks: 4 };
/// A's layout: 128-byte rows (64 k of 16 bits, 128 of int8), as TMA's 128-byte swizzle lands them.
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
    int8: bool,
    k_stage: usize,
    k_step: usize,
    meta_words: usize,
    desc_w: String,
    // wgmma.cuh's context (its dense wgmma is unused here).
    desc_const: String,
    bw: usize,
    operand_a: usize,
    operand_b: usize,
    operand_one: usize,
}

/// The Hopper 2:4 kernel of `spec` (`spec.two_four`, K whole stages, no accumulation onto C).
pub(crate) fn specialize(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.accumulate {
        return Err(spec_err("the Hopper 2:4 kernel writes C; it does not accumulate onto it".into()));
    }
    let t = wgmma_tiling(spec.dtype, (m, k, n), spec.tile).map_err(|e| spec_err(e.0))?;
    let g = Geometry::of(spec.dtype);
    let mask = chunk_masks(k, n, &spec.blocks).map_err(spec_err)?;
    let meta = records(g, k, n, &mask, t.cols());
    let int8 = spec.dtype == Dtype::I8;
    let name = format!("spmm_two_four_wgmma_{}_{}x{}s{}", spec.dtype.name(), t.cols(), t.tn, t.stages);
    let acc = t.acc_regs();
    let ctx = Ctx {
        head: kernel_head(&name, spec.dtype.output(), spec),
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
        int8,
        k_stage: t.k_stage,
        k_step: g.k_step(),
        meta_words: g.words(),
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
        tma_a: Some(TmaBox { rows: t.tn as u32, cols: t.k_stage as u32, swizzle_bytes: 128 }),
        ..Kernel::new(name, Family::TwoFourWgmma, Mode::IndexStream, launch, (m, k, n), spec.dtype, (1, 1))
    })
}

/// Column tiles of a `n`-column weight in items of `cols` columns.
fn column_tiles(n: usize, cols: usize) -> usize {
    n.div_ceil(cols)
}

/// Where one operand width puts things: bytes of a weight value, k of one instruction, and
/// the lane and bit of each chunk's metadata (PTX's sparse wgmma fragments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of one weight value: 2 (f16/bf16) or 1 (int8).
    pub elem_bytes: usize,
}

impl Geometry {
    pub fn of(dtype: Dtype) -> Geometry {
        Geometry { elem_bytes: if dtype == Dtype::I8 { 1 } else { 2 } }
    }
    /// Logical k of one instruction: 32 (16-bit) or 64 (int8); a stage is two.
    pub fn k_step(self) -> usize {
        64 / self.elem_bytes
    }
    /// 4-k chunks of one instruction's row.
    fn chunks_per_step(self) -> usize {
        self.k_step() / 4
    }
    /// Metadata words per warp and instruction (module docs).
    pub fn words(self) -> usize {
        32 / self.elem_bytes
    }
    /// Kept values a 16-byte core-matrix chunk of a compressed row holds.
    fn per_chunk(self) -> usize {
        16 / self.elem_bytes
    }
    /// The word (among the warp's [`Self::words`]) and bit of the metadata of row `row` (0..16
    /// of the warp's rows) and chunk `c` of one instruction.
    pub fn meta_slot(self, row: usize, c: usize) -> (usize, usize) {
        if self.elem_bytes == 2 {
            // Lane 4g + c/4 (g = row % 8): rows g at bits 0..16, g + 8 above.
            (2 * (row % 8) + c / 4, 16 * (row / 8) + 4 * (c % 4))
        } else {
            // Lane 4g + row/8 + 2·(c/8): chunks 0..8 (k 0..32) from lanes 4g, 4g + 1 (rows g,
            // g + 8), chunks 8..16 from 4g + 2, 4g + 3.
            (4 * (row % 8) + row / 8 + 2 * (c / 8), 4 * (c % 8))
        }
    }
}

/// The metadata records of a `k × n` weight with chunk masks `mask` (module docs), columns
/// past `n` up to whole tiles of `cols` named as empty chunks (indices 0 and 1, zero values).
pub fn records(g: Geometry, k: usize, n: usize, mask: &[u8], cols: usize) -> Vec<u32> {
    let chunks = k / 4;
    let n_pad = column_tiles(n, cols) * cols;
    let (cps, stages, words) = (g.chunks_per_step(), k / (2 * g.k_step()), g.words());
    let mut out = vec![0u32; n_pad / cols * stages * cols / 16 * 2 * words];
    for col in 0..n_pad {
        let (f, tile, row) = (col / cols, (col % cols) / 16, col % 16);
        for chunk in 0..chunks {
            let m = if col < n { mask[col * chunks + chunk] } else { 0 };
            let [i0, i1] = chunk_indices(m);
            let (ks, q, c) = (chunk / (2 * cps), (chunk / cps) % 2, chunk % cps);
            let (word, shift) = g.meta_slot(row, c);
            out[(((f * stages + ks) * (cols / 16) + tile) * 2 + q) * words + word] |= ((i0 | i1 << 2) as u32) << shift;
        }
    }
    out
}

/// The chunk masks (`mask[col * k/4 + chunk]`, as [`chunk_masks`]) the records name, for the
/// `n_pad` padded columns; fillers are named too (and hold zeros in the weight).
fn masks_of_records(g: Geometry, k: usize, n_pad: usize, cols: usize, meta: &[u32]) -> Vec<u8> {
    let chunks = k / 4;
    let (cps, stages, words) = (g.chunks_per_step(), k / (2 * g.k_step()), g.words());
    let mut mask = vec![0u8; n_pad * chunks];
    for col in 0..n_pad {
        let (f, tile, row) = (col / cols, (col % cols) / 16, col % 16);
        for chunk in 0..chunks {
            let (ks, q, c) = (chunk / (2 * cps), (chunk / cps) % 2, chunk % cps);
            let (word, shift) = g.meta_slot(row, c);
            let word = meta[(((f * stages + ks) * (cols / 16) + tile) * 2 + q) * words + word];
            let nibble = (word >> shift) & 0xf;
            mask[col * chunks + chunk] = (1 << (nibble & 3)) | (1 << (nibble >> 2));
        }
    }
    mask
}

/// Where stored value `s` (`k_step/2 · q + 2c + i`) of row `row` of column tile `f`, stage `ks`
/// sits among the packed values.
fn image_position(g: Geometry, stages: usize, cols: usize, (f, ks, row, s): (usize, usize, usize, usize)) -> usize {
    let rec = (f * stages + ks) * cols * 64 / g.elem_bytes;
    let (t, r) = (row / 64, row % 64);
    rec + (4096 * t + W_LAYOUT.offset(r, s / g.per_chunk())) / g.elem_bytes + s % g.per_chunk()
}

/// The weight as the kernel reads it: per (column tile, stage) the shared-memory image of the
/// kept values (module docs), zeros for fillers and padded columns.
pub(crate) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, k, n) = kernel.spec_shape;
    let g = Geometry::of(kernel.dtype);
    let cols = kernel.ptr[0] as usize;
    let n_pad = column_tiles(n, cols) * cols;
    let meta: Vec<u32> = kernel.idx.iter().map(|&x| x as u32).collect();
    let mask = masks_of_records(g, k, n_pad, cols, &meta);
    let (chunks, cps, stages) = (k / 4, g.chunks_per_step(), k / (2 * g.k_step()));
    let mut out = vec![T::default(); n_pad * k / 2];
    for col in 0..n {
        for chunk in 0..chunks {
            let m = mask[col * chunks + chunk];
            let indices = chunk_indices(m);
            for (i, &kk) in indices.iter().enumerate() {
                let s = 2 * cps * ((chunk / cps) % 2) + 2 * (chunk % cps) + i;
                let at = image_position(g, stages, cols, (col / cols, chunk / (2 * cps), col % cols, s));
                out[at] = w.at((chunk * 4 + kk) * n + col);
            }
        }
    }
    out
}

/// The kernel's arithmetic on the packed form, in f64: `C = A·W` (`A` row-major `m × k`), each
/// stored value found where the hardware reads it (the descriptor's swizzled address of the
/// compressed tile) and paired with the k its lane's metadata word names. What the GPU computes,
/// up to rounding (int8: exactly, before the scales).
#[cfg(test)]
pub fn emulate(
    g: Geometry,
    (m, k, n): (usize, usize, usize),
    cols: usize,
    a: &[f32],
    values: &[f32],
    meta: &[u32],
) -> Vec<f64> {
    let (cps, stages, words) = (g.chunks_per_step(), k / (2 * g.k_step()), g.words());
    let n_pad = column_tiles(n, cols) * cols;
    let desc = W_LAYOUT.descriptor_const();
    let mut c = vec![0.0f64; m * n];
    for f in 0..n_pad / cols {
        for ks in 0..stages {
            let rec = (f * stages + ks) * cols * 64 / g.elem_bytes;
            for t in 0..cols / 64 {
                for warp in 0..4 {
                    for q in 0..2 {
                        let at = (((f * stages + ks) * (cols / 16) + 4 * t + warp) * 2 + q) * words;
                        let block = &meta[at..at + words];
                        for r in 0..16 {
                            let col = f * cols + 64 * t + 16 * warp + r;
                            for ch in 0..cps {
                                let (word, shift) = g.meta_slot(r, ch);
                                let nibble = (block[word] >> shift) & 0xf;
                                for i in 0..2 {
                                    let index = ((nibble >> (2 * i)) & 3) as usize;
                                    // Instruction q reads its compressed 64 × 32-byte tile from byte 32q.
                                    let byte = CoreLayout::descriptor_offset(
                                        desc,
                                        4096 * t + 32 * q,
                                        16 * warp + r,
                                        2 * ch + i,
                                        g.elem_bytes,
                                    );
                                    let v = values[rec + byte / g.elem_bytes] as f64;
                                    let kk = 2 * g.k_step() * ks + g.k_step() * q + 4 * ch + index;
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
