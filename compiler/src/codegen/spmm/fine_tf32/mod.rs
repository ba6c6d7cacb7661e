//! Element-sparse fp32 weight on tensor cores at fp32 accuracy ([`Family::FineTf32`]).
//!
//! The fine SIMT kernel pays a shared-memory load of A per multiply-add. This one gathers:
//! the weight's columns go in groups of eight (one n8 tile of `mma.sync` m16n8k8), and each
//! group multiplies only the k where at least one of its columns has a nonzero (at 95%
//! sparsity a third of K), as a dense TF32 product on the gathered columns of A, split into
//! big and small parts as the block kernel does (3xTF32, see `spmm::tf32`). The tensor cores
//! do about seven times the useful work, at a much higher rate than the FMA pipe, and A's
//! tiles are copied into shared memory as they are (no transposition).
//!
//! Groups are 16 columns wide (two n8 tiles on one set of gathered k) where they count fewer
//! step units that way: a two-tile step costs 1.6 one-tile steps (measured). Consumer
//! warps (one per group) never meet at a CTA barrier, only at the ring's mbarriers.
//! `Engine::Tf32x3` forces this kernel, `Engine::Simt` refuses it, and `Engine::Auto` takes it
//! where it measured faster ([`auto_prefers`]: small outputs, or gathered work under 5× the
//! useful work, or under 2% kept); K must be a multiple of 4. The choice, the tiling and the
//! runs of steps ([`layout`]) are in [`crate::kernel_choice::fine_tf32`], where the planner
//! counts the same work ([`crate::kernel_choice::fine_tf32::auto_work`]); this module turns
//! the runs into tables, renders and packs. Shared device helpers:
//! `templates/tf32.cuh` (splits, the TF32 mma), `templates/mbarrier.cuh` (mbarriers, bulk and
//! TMA copies).
//!
//! Layout and tables (`templates/spmm_fine_tf32.cu.tera`):
//! - K goes in chunks of `chunk` (a multiple of 32); a CTA takes `bm` rows of A (each
//!   consumer warp all of them, `bm / 16` m16 tiles) and `groups` column groups (one per
//!   consumer warp). One producer thread lands A's tile by TMA as `chunk / 32` boxes of
//!   `bm` rows × 32 k (128-byte rows, the 16-byte units of row r swizzled by XOR with r % 8;
//!   K must be a multiple of 4), followed in the stage by a zero box for padding slots.
//! - Per (chunk, group) a run of k8 steps; a step names 8 gathered k by their byte offsets in
//!   the stage as row 0 has them ([`stage_offset`]), two per thread of a quad (`t` and
//!   `t + 4`, the fragment's columns), 16 bits each in one `idx` word per `t` (4 words per
//!   step); a lane XORs in its row's swizzle. The 32 lanes' loads of a fragment register
//!   then hit 32 banks exactly when the four k of a quad have distinct residues mod 4, so
//!   `steps_of` deals each quad from the residue classes, fullest first; padding slots
//!   point at the zero box (one word per residue).
//! - `ptr[c × groups_padded + j]` is the first step of (chunk `c`, group `j`); the runs of one
//!   chunk are in group order, so a CTA's steps of a chunk are one contiguous range, which
//!   lands in its stage by two bulk copies (at most `max_steps` steps).
//! - The weight packs 64 floats per step, lane `4g + t` taking `W[k_t][8j + g]` and
//!   `W[k_{t+4}][8j + g]` (its B fragment), zero for padding and for columns past N.

use crate::codegen::render::{render, KernelHead};
use crate::codegen::spmm::kernel::{entry_flops, packer, FamilyOps};
use crate::codegen::spmm::shared::{kernel_head, spec_err};
use crate::codegen::{
    CodegenError, Dtype, Engine, Family, FineTable, Kernel, Launch, Mode, Orientation, SpmmSpec, TmaBox,
};
use crate::kernel_choice::fine_tf32::{auto_prefers, layout, max_steps, runs_words, stage_bytes};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// Steps (three truncating tensor-core adds each) a partial sum takes before it joins the
/// accumulator by a rounded fp32 add: at most this plus one chunk's steps per partial.
const FLUSH_STEPS: usize = 12;

#[derive(Serialize)]
struct FineTf32Ctx {
    #[serde(flatten)]
    head: KernelHead,
    bm: usize,
    m_tiles: usize,
    groups: usize,
    groups_padded: usize,
    threads: usize,
    chunk: usize,
    chunks: usize,
    /// 32-column boxes of A per chunk.
    subs: usize,
    /// Bytes of one ring stage (1024-byte multiple).
    stage_bytes: usize,
    stages: usize,
    max_steps: usize,
    /// Words of the CTA's run table in shared memory (`chunks × (groups + 1)`, padded to 4).
    runs_words: usize,
    /// Steps a partial sum takes before it joins the accumulator (see [`FLUSH_STEPS`]).
    flush_steps: usize,
    /// N is even: 8-byte stores of each thread's column pair.
    vec_out: bool,
    nt: usize,
    /// W's values are TF32 numbers: no product with their (zero) remainder.
    w_exact: bool,
}

/// The kernel for a fine right-orientation spec if its engine selects it; `None` hands it on
/// (to the dismantled or the SIMT loop kernel). `Engine::Auto` takes it where it measured
/// faster ([`auto_prefers`]); `Engine::Simt` never.
pub(super) fn try_specialize(spec: &SpmmSpec) -> Result<Option<Kernel>, CodegenError> {
    match spec.engine {
        Engine::Tf32x3 if spec.dtype != Dtype::F32 => {
            Err(spec_err(format!("the 3xTF32 engine takes f32 weights, not {}", spec.dtype.name())))
        }
        Engine::Tf32x3 if spec.mode == Mode::Unrolled => {
            Err(spec_err("the 3xTF32 fine kernel streams its tables (no unrolled mode)".into()))
        }
        Engine::Tf32x3 if !spec.k.is_multiple_of(4) => Err(spec_err(format!(
            "the 3xTF32 fine kernel copies A's rows in 16-byte units and needs K a multiple of 4, got {}",
            spec.k
        ))),
        Engine::Tf32x3 => fine_tf32(spec).map(Some),
        Engine::Auto if auto_prefers(spec)? => fine_tf32(spec).map(Some),
        _ => Ok(None),
    }
}

/// Byte offset in a stage of chunk-relative `k` in row 0 (its box, its 16-byte unit, its word);
/// `k >= chunk` is a padding slot of residue `k - chunk`, in the zero box.
fn stage_offset(bm: usize, chunk: usize, k: usize) -> usize {
    if k >= chunk {
        return (chunk / 32) * bm * 128 + 4 * (k - chunk);
    }
    (k / 32) * bm * 128 + (k % 32) / 4 * 16 + 4 * (k % 4)
}

fn fine_tf32(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.orientation != Orientation::Right {
        return Err(spec_err("the 3xTF32 fine kernel takes the right orientation (A · W, W sparse) only".into()));
    }
    let (t, runs) = layout(spec)?;
    let n_groups = n.div_ceil(8 * t.nt);
    let groups_padded = n_groups.next_multiple_of(t.groups);
    let chunks = k.div_ceil(t.chunk);
    let max_steps = max_steps(&runs, t.groups);
    let mut ptr = Vec::with_capacity(runs.len() + 1);
    let mut idx = vec![];
    ptr.push(0);
    let off = |kk: usize| stage_offset(t.bm, t.chunk, kk);
    for run in &runs {
        for step in run {
            for q in 0..4 {
                idx.push((off(step[q]) | (off(step[q + 4]) << 16)) as i32);
            }
        }
        ptr.push((idx.len() / 4) as i32);
    }
    let nnz = spec.blocks.len();
    let runs_words = runs_words(chunks, t.groups);
    let stage_bytes = stage_bytes(t.bm, t.chunk, max_steps, t.nt);
    let smem = 1024 + 4 * runs_words + t.stages * (16 + stage_bytes);
    // One consumer warp per column group and one producer warp.
    let threads = 32 * (t.groups + 1);
    let name = format!(
        "spmm_fine_tf32x{}_{}x{}c{}{}",
        if spec.w_tf32_exact { 2 } else { 3 },
        t.bm,
        8 * t.nt * t.groups,
        t.chunk,
        if t.nt == 2 { "n16" } else { "" }
    );
    let launch = Launch {
        grid: ((groups_padded / t.groups) as u32, m.div_ceil(t.bm) as u32, 1),
        block: (threads as u32, 1, 1),
        smem_bytes: smem as u32,
    };
    let mut kernel = Kernel {
        ptr,
        idx,
        // `ld` is the rows of an A box (the offsets' row stride is 128 bytes).
        // (`cols / warps` = the group width, 8 or 16.)
        fine: Some(FineTable { chunk: t.chunk, ld: t.bm, cols: 8 * t.nt * t.groups, warps: t.groups }),
        live_instances: nnz,
        dead_instances: k * n - nnz,
        tma_a: Some(TmaBox { rows: t.bm as u32, cols: 32, swizzle_bytes: 128 }),
        ..Kernel::new(name, Family::FineTf32, Mode::IndexStream, launch, (m, k, n), Dtype::F32, (1, 1))
    };
    let ctx = FineTf32Ctx {
        head: kernel_head(&kernel.name, Dtype::F32, spec),
        bm: t.bm,
        m_tiles: t.bm / 16,
        groups: t.groups,
        groups_padded,
        threads,
        chunk: t.chunk,
        chunks,
        subs: t.chunk / 32,
        stage_bytes,
        stages: t.stages,
        max_steps,
        runs_words,
        flush_steps: FLUSH_STEPS,
        vec_out: n % 2 == 0,
        nt: t.nt,
        w_exact: spec.w_tf32_exact,
    };
    kernel.source = render("spmm_fine_tf32.cu.tera", &ctx)?;
    Ok(kernel)
}

/// The chunk-relative k at stage offset `off` (see [`stage_offset`]); `>= chunk` for padding.
fn chunk_k(table: FineTable, off: usize) -> usize {
    let box_bytes = table.ld * 128;
    if off >= (table.chunk / 32) * box_bytes {
        return table.chunk + (off % 16) / 4;
    }
    (off / box_bytes) * 32 + (off % 128) / 16 * 4 + (off % 16) / 4
}

/// The weight (row-major `K × N`) in the kernel's step order: 64 floats per step, lane
/// `4g + t` holding `W[k_t][8j + g]` then `W[k_{t+4}][8j + g]`.
pub(super) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, k, n) = kernel.spec_shape;
    let table = kernel.fine.expect("the 3xTF32 fine kernel carries its table layout");
    let groups_padded = (kernel.ptr.len() - 1) / k.div_ceil(table.chunk);
    let nt = table.cols / (8 * table.warps);
    let mut out = vec![T::default(); 16 * nt * kernel.idx.len()];
    for run in 0..kernel.ptr.len() - 1 {
        let (c, j) = (run / groups_padded, run % groups_padded);
        for s in kernel.ptr[run] as usize..kernel.ptr[run + 1] as usize {
            for lane in 0..32 {
                let (g, t) = (lane / 4, lane % 4);
                let word = kernel.idx[4 * s + t] as u32;
                // Lane words: (tile 0: k_t, k_t+4), (tile 1: k_t, k_t+4).
                for (h, off) in [word & 0xffff, word >> 16].into_iter().enumerate() {
                    let kk = chunk_k(table, off as usize);
                    for q in 0..nt {
                        let col = 8 * (nt * j + q) + g;
                        if kk < table.chunk && col < n {
                            out[64 * nt * s + 2 * nt * lane + 2 * q + h] = w.at((c * table.chunk + kk) * n + col);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The 3xTF32 fine family's entry in the family table.
pub(crate) const OPS: FamilyOps = FamilyOps { pack: packer!(pack), flops: entry_flops };

#[cfg(test)]
mod tests;
