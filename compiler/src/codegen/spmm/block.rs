//! The block kernels of this module: fp32 SIMT and fp16/bf16 mma.sync over live `(bh, bw)`
//! blocks ([`Family::Dense`] when every block is live), right and left orientation.

use super::kernel::*;
use super::shared::*;
use crate::codegen::render::{render, BlockCtx};
use crate::codegen::{CodegenError, Dtype, Mode, SpmmSpec};

/// Block and dense kernels of the right orientation; `left`: the same problem is the
/// transpose of a left-orientation one (see [`specialize_left`]).
pub(crate) fn block(spec: &SpmmSpec, live: &[bool], dense: bool, left: bool) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    let (kbs, nbs) = (k / bh, n / bw);
    let mma = spec.dtype != Dtype::F32;
    let family = if dense {
        Family::Dense
    } else if mma {
        Family::BlockMma
    } else {
        Family::BlockSimt
    };
    // Tile shapes: every number the template needs is computed here.
    let threads;
    let (bm, tm, threads_n, threads_m);
    let (a_ld, w_ld);
    if mma {
        if bh % 16 != 0 || bw % 16 != 0 || bw > 64 {
            return Err(spec_err(format!(
                "tensor-core kernels need bh, bw multiples of 16 and bw <= 64, got {bh}x{bw}"
            )));
        }
        let warps = warp_rows(spec, "tensor-core")?;
        threads = 32 * warps;
        bm = 32 * warps;
        (tm, threads_n, threads_m) = (0, 0, 0);
        // Left: the A' tile is k-major (BH rows of BM), as it comes from rows of B.
        (a_ld, w_ld) = (if left { bm + 8 } else { bh + 8 }, bw + 8);
    } else {
        if bh % 4 != 0 || bw % 4 != 0 || bw > 128 {
            return Err(spec_err(format!(
                "fp32 block kernels need bh, bw multiples of 4 and bw <= 128, got {bh}x{bw}"
            )));
        }
        threads = 256;
        threads_n = bw / 4;
        threads_m = threads / threads_n;
        // Enough rows per thread for reuse, few enough CTAs lost on small M.
        tm = match spec.tile {
            Some(t) if t.rows % threads_m == 0 && [1, 2, 4, 8].contains(&(t.rows / threads_m)) => t.rows / threads_m,
            Some(t) => {
                return Err(spec_err(format!(
                    "fp32 tiles at bw {bw} hold {threads_m} × 1, 2, 4 or 8 rows, not {}",
                    t.rows
                )))
            }
            // 8 rows per thread (with 2 stages) at large M: the fastest fp32 tile in runs 2 and 4
            // (their notes are in the git history of benches/results/).
            None if m >= 2048 && threads_m * 8 <= 256 => 8,
            None if threads_m * 4 <= 256 => 4,
            None => 1,
        };
        bm = threads_m * tm;
        (a_ld, w_ld) = (if left { bm + 4 } else { bh + 4 }, bw);
    }
    let stages = pipeline_stages(
        spec,
        if mma {
            4
        } else if tm == 8 {
            2
        } else {
            3
        },
    )?;
    let esize = spec.dtype.bytes();
    let a_tile = if left { bh * a_ld } else { bm * a_ld };
    let mut smem = stages * (a_tile + bh * w_ld) * esize;
    // Left tensor-core kernels stage C'ᵀ (bw × bm fp32, rows padded by 4) for the store.
    let cs_ld = bm + 4;
    if left && mma {
        smem = smem.max(bw * cs_ld * 4);
    }
    if smem > 227 * 1024 {
        return Err(spec_err(format!("block {bh}x{bw} needs {smem} bytes of shared memory per CTA (at most 232448)")));
    }

    let tables = block_tables(m, (kbs, nbs), (bh, bw), bm, live)?;
    let (ptr, idx) = (&tables.ptr, &tables.idx);
    // Folding: when the values are known, a uniform block (one value repeated, e.g. binarized
    // or HPEC-style weights) needs one literal instead of the block, and a row sum of the A
    // tile instead of the block product (fp32 kernel). When every live block is uniform the
    // W tiles go entirely (unrolled kernels); when some are, those blocks skip their W tile and
    // take the row sum (either mode).
    let block_values = match (&spec.values, family, left) {
        (Some(v), Family::BlockSimt, false) => uniform_block_values(ptr, idx, (bh, bw), n, v),
        _ => vec![],
    };
    let uniform_blocks = block_values.iter().filter(|v| v.is_some()).count();
    let all_uniform = uniform_blocks > 0 && uniform_blocks == block_values.len();
    let w_words = spec.values.as_ref().map_or(0, |_| idx.len() * bh * bw * esize / 4);
    let value_words = match (all_uniform, uniform_blocks) {
        (true, _) => block_values.len(),
        (false, 0) => w_words,
        (false, _) => block_values.len() + w_words,
    };
    let literal_words = if dense { 0 } else { ptr.len() + idx.len() } + value_words;
    let mode = if dense && spec.values.is_none() { Mode::IndexStream } else { resolve_mode(spec, literal_words) };
    let folded = all_uniform && mode == Mode::Unrolled;
    // Partial folding embeds one literal per block even when the tables and W stream from
    // device memory (W too large to embed): the uniform blocks' W tiles are then not read.
    let part_folded = !all_uniform && uniform_blocks > 0 && block_values.len() <= spec.code_budget;
    let launch =
        Launch { grid: (nbs as u32, m.div_ceil(bm) as u32, 1), block: (threads as u32, 1, 1), smem_bytes: smem as u32 };
    let mut kernel = Kernel::new(String::new(), family, mode, launch, (m, k, n), spec.dtype, (bh, bw))
        .with_block_tables(tables, literal_words, spec.values.is_some());
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(_), true) if folded => vec![],
        (Some(v), true) => value_bits(spec.dtype, &kernel.pack_weight(v)),
        _ => vec![],
    };
    let unrolled = mode == Mode::Unrolled;
    kernel.name = format!(
        "spmm_{}_{}_{}x{}_{}{}{}",
        family.name(),
        spec.dtype.name(),
        if left { bw } else { bh },
        if left { bh } else { bw },
        if unrolled { "unrolled" } else { "stream" },
        if left { "_left" } else { "" },
        if folded {
            "_folded"
        } else if part_folded {
            "_partfolded"
        } else {
            ""
        }
    );
    if folded {
        // No W tiles in shared memory.
        kernel.launch.smem_bytes = (stages * a_tile * esize) as u32;
    }
    let ctx = BlockCtx {
        head: kernel_head(&kernel.name, spec.dtype, spec),
        literals: kernel_literals(
            &kernel,
            kernel.idx.clone(),
            values,
            if esize == 4 { 32 } else { 16 },
            if folded || part_folded { kernel.idx.len() } else { 0 },
        ),
        bh,
        bw,
        bm,
        tm,
        threads,
        threads_n,
        threads_m,
        warps: threads / 32,
        stages,
        a_ld,
        w_ld,
        a_chunks: bm * bh * esize / 16,
        w_chunks: bh * bw * esize / 16,
        a_row_chunks: if left { bm } else { bh } * esize / 16,
        w_row_chunks: bw * esize / 16,
        dense,
        k_blocks: kbs,
        folded,
        part_folded,
        // Folded: float literals. Partly folded: raw bits, NaN marking a general block (a
        // uniform block's value is finite).
        block_values: if folded {
            block_values.iter().flatten().map(|x| float_literal(*x)).collect()
        } else if part_folded {
            block_values.iter().map(|x| x.map_or(0x7fff_ffff, f32::to_bits).to_string()).collect()
        } else {
            vec![]
        },
        n_tiles: bw / 8,
        left,
        cs_ld,
        c_chunks: bw * bm / 8,
        c_row_chunks: bm / 8,
    };
    kernel.source = render(if mma { "spmm_block_mma.cu.tera" } else { "spmm_block_simt.cu.tera" }, &ctx)?;
    Ok(kernel)
}
