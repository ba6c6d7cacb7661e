//! Row-movement kernels of batched sparse networks (the HPEC task graph, [`crate::program::hpec`]):
//! scatter CSR rows into dense rows ([`load_rows`]), drop the rows that became all zero
//! ([`compact_rows`]), also merge identical rows ([`merge_rows`], [`resolve_aliases`]), and flag
//! the rows that stay nonzero ([`mark_rows`]). Each is one Tera
//! template (`templates/rows_*.cu.tera`), one warp per row; rows are `f32`, `cols` a multiple of 4.

use super::render::render;
use super::{CodegenError, Launch};
use serde::Serialize;

/// Warps per CTA of the row kernels.
const WARPS: usize = 8;

/// A rendered row kernel: source, entry point and launch geometry.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsKernel {
    pub name: String,
    pub source: String,
    pub launch: Launch,
}

fn check_cols(cols: usize) -> Result<(), CodegenError> {
    if cols == 0 || !cols.is_multiple_of(4) {
        return Err(CodegenError::Spec(format!("row kernels need a positive multiple of 4 columns, got {cols}")));
    }
    Ok(())
}

#[derive(Serialize)]
struct LoadCtx {
    kernel_name: String,
    count: usize,
    cols: usize,
    images: usize,
    clear: usize,
    warps: usize,
    alias: bool,
}

/// Scatter `count` rows of an `images`-row CSR matrix, starting at a per-launch `first`, into
/// dense rows; also writes the ids, the row count and zeroes `clear` counters after it (and,
/// with `alias`, the batch's aliases, see [`merge_rows`]).
/// Signature `(offsets, indices, values, D, ids, live, [alias,] int first)`.
pub fn load_rows(
    count: usize,
    cols: usize,
    images: usize,
    clear: usize,
    alias: bool,
) -> Result<RowsKernel, CodegenError> {
    check_cols(cols)?;
    if count == 0 {
        return Err(CodegenError::Spec(format!("load_rows: {count} rows, {clear} counters to clear")));
    }
    let name = format!("load_rows_{count}x{cols}_of_{images}_c{clear}{}", if alias { "_a" } else { "" });
    let ctx = LoadCtx { kernel_name: name.clone(), count, cols, images, clear, warps: WARPS, alias };
    let source = render("rows_load.cu.tera", &ctx)?;
    let grid = count.div_ceil(WARPS) as u32;
    Ok(RowsKernel {
        name,
        source,
        launch: Launch { grid: (grid, 1, 1), block: ((WARPS * 32) as u32, 1, 1), smem_bytes: 0 },
    })
}

#[derive(Serialize)]
struct RowsCtx {
    kernel_name: String,
    cols: usize,
    per_lane: usize,
    warps: usize,
}

/// Grid of the grid-stride row kernels: enough warps for `max_rows`, at most 132 × 16 CTAs.
fn stride_grid(max_rows: usize) -> u32 {
    max_rows.div_ceil(WARPS).clamp(1, 132 * 16) as u32
}

/// Pack the nonzero rows of `S` (at most `max_rows`, the count in `live[0]`) into `D` with
/// their ids; the packed count into `live[1]`. Signature `(S, sids, D, dids, live)`.
pub fn compact_rows(max_rows: usize, cols: usize) -> Result<RowsKernel, CodegenError> {
    check_cols(cols)?;
    let name = format!("compact_rows_{cols}");
    let ctx = RowsCtx { kernel_name: name.clone(), cols, per_lane: cols.div_ceil(128), warps: WARPS };
    let source = render("rows_compact.cu.tera", &ctx)?;
    let launch = Launch { grid: (stride_grid(max_rows), 1, 1), block: ((WARPS * 32) as u32, 1, 1), smem_bytes: 0 };
    Ok(RowsKernel { name, source, launch })
}

/// `flags[ids[r]] = 1` for the nonzero rows `r < live[0]` of `S`. Signature `(S, ids, live, flags)`.
pub fn mark_rows(max_rows: usize, cols: usize) -> Result<RowsKernel, CodegenError> {
    check_cols(cols)?;
    let name = format!("mark_rows_{cols}");
    let ctx = RowsCtx { kernel_name: name.clone(), cols, per_lane: cols.div_ceil(128), warps: WARPS };
    let source = render("rows_mark.cu.tera", &ctx)?;
    let launch = Launch { grid: (stride_grid(max_rows), 1, 1), block: ((WARPS * 32) as u32, 1, 1), smem_bytes: 0 };
    Ok(RowsKernel { name, source, launch })
}

#[derive(Serialize)]
struct MergeCtx {
    kernel_name: String,
    hash_name: String,
    cols: usize,
    slots: usize,
    warps: usize,
}

/// Table slots of a merging compaction of at most `max_rows` rows: a power of two, at least
/// twice the rows, so that probes stay short.
pub fn merge_slots(max_rows: usize) -> usize {
    (2 * max_rows.max(1)).next_power_of_two()
}

/// The two kernels of a compaction that also merges bitwise-identical rows
/// ([`crate::program::Merge`]): `(hash, pack)`. `hash`: signature
/// `(S, live, keys, reps, row_slot)`; `pack`: `(S, sids, D, dids, live, reps, row_slot, alias)`
/// (`keys` the first `2 · slots` words of the table, `reps` the `slots` after them).
pub fn merge_rows(max_rows: usize, cols: usize) -> Result<(RowsKernel, RowsKernel), CodegenError> {
    check_cols(cols)?;
    let slots = merge_slots(max_rows);
    let hash_name = format!("merge_hash_{cols}_s{slots}");
    let pack_name = format!("merge_pack_{cols}");
    let ctx = |kernel_name: &str| MergeCtx {
        kernel_name: kernel_name.into(),
        hash_name: hash_name.clone(),
        cols,
        slots,
        warps: WARPS,
    };
    let launch = Launch { grid: (stride_grid(max_rows), 1, 1), block: ((WARPS * 32) as u32, 1, 1), smem_bytes: 0 };
    let hash =
        RowsKernel { name: hash_name.clone(), source: render("rows_merge_hash.cu.tera", &ctx(&hash_name))?, launch };
    let pack =
        RowsKernel { name: pack_name.clone(), source: render("rows_merge_pack.cu.tera", &ctx(&pack_name))?, launch };
    Ok((hash, pack))
}

#[derive(Serialize)]
struct ResolveCtx {
    kernel_name: String,
    count: usize,
    images: usize,
}

/// The categories of the images a merge aliased: for each image of the batch, the flag of the
/// image standing for it. Signature `(alias, flags, int first)`; one thread per image.
pub fn resolve_aliases(count: usize, images: usize) -> Result<RowsKernel, CodegenError> {
    if count == 0 {
        return Err(CodegenError::Spec("resolve_aliases: a batch of 0 images".into()));
    }
    let name = format!("resolve_aliases_{count}_of_{images}");
    let source = render("rows_resolve.cu.tera", &ResolveCtx { kernel_name: name.clone(), count, images })?;
    let launch = Launch { grid: (count.div_ceil(256) as u32, 1, 1), block: (256, 1, 1), smem_bytes: 0 };
    Ok(RowsKernel { name, source, launch })
}
