//! Row-movement kernels of batched sparse networks (the HPEC task graph, [`crate::program::hpec`]):
//! scatter CSR rows into dense rows ([`load_rows`]), drop the rows that became all zero
//! ([`compact_rows`]), also merge identical rows ([`merge_rows`], [`resolve_aliases`]), and flag
//! the rows that stay nonzero ([`mark_rows`]); run a network's converged tail, many layers on
//! few rows, in one launch ([`tail_layers`]); and run a layer as a gather from staged rows, in
//! fp32 or with the f64 reference's arithmetic bit for bit ([`gather_layer`]). Each is one Tera template
//! (`templates/rows_*.cu.tera`). Rows are `f32` or `f64`; the kernels that only move or test
//! rows (compact, merge, mark) see an f64 row as `2 × cols` 32-bit words, and `cols` (in words)
//! is a multiple of 4.

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
    f64: bool,
}

/// Scatter `count` rows of an `images`-row CSR matrix, starting at a per-launch `first`, into
/// dense rows (f64 with `f64`, else f32); also writes the ids, the row count and zeroes `clear`
/// counters after it (and, with `alias`, the batch's aliases, see [`merge_rows`]).
/// Signature `(offsets, indices, values, D, ids, live, [alias,] int first)`.
pub fn load_rows(
    count: usize,
    cols: usize,
    images: usize,
    clear: usize,
    alias: bool,
    f64: bool,
) -> Result<RowsKernel, CodegenError> {
    check_cols(cols)?;
    if count == 0 {
        return Err(CodegenError::Spec(format!("load_rows: {count} rows, {clear} counters to clear")));
    }
    let name = format!(
        "load_rows_{count}x{cols}_of_{images}_c{clear}{}{}",
        if alias { "_a" } else { "" },
        if f64 { "_f64" } else { "" }
    );
    let ctx = LoadCtx { kernel_name: name.clone(), count, cols, images, clear, warps: WARPS, alias, f64 };
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

#[derive(Serialize)]
struct PermuteCtx {
    kernel_name: String,
    cols: usize,
    slice: usize,
    threads: usize,
}

/// Columns of a row [`permute_columns`] stages at a time: 128 KiB of fp32.
const PERMUTE_SLICE: usize = 32 * 1024;

/// `D[r][p] = S[r][columns[p]]` for the rows `r < live[0]` of fp32 rows `cols` wide (a CTA per
/// row, staged in slices of at most [`PERMUTE_SLICE`] columns, two CTAs per multiprocessor).
/// Signature `(S, columns, D, live)`.
pub fn permute_columns(max_rows: usize, cols: usize, sm_count: usize) -> Result<RowsKernel, CodegenError> {
    check_cols(cols)?;
    let name = format!("permute_columns_{cols}");
    let slice = cols.min(PERMUTE_SLICE);
    let ctx = PermuteCtx { kernel_name: name.clone(), cols, slice, threads: 1024 };
    let source = render("rows_permute.cu.tera", &ctx)?;
    let grid = max_rows.clamp(1, 2 * sm_count.max(1)) as u32;
    Ok(RowsKernel {
        name,
        source,
        launch: Launch { grid: (grid, 1, 1), block: (1024, 1, 1), smem_bytes: (4 * slice) as u32 },
    })
}

#[derive(Serialize)]
struct DropCtx {
    kernel_name: String,
    stage: &'static str,
    cols: usize,
    warps: usize,
}

/// The three kernels that drop the dead rows of one buffer in place ([`crate::program::Op::DropRows`]):
/// `flag` `(R, live, flags)` marks the live rows and counts them into `live[1]`; `pair`
/// `(live, flags, holes, movers, counters)` lists the dead rows below the count and the live
/// rows above it; `move` `(R, ids, holes, movers, counters)` moves each such live row (and its
/// id) into a hole. Only the rows that die and the rows that fill their places move, where a
/// packing copy moves every live row.
pub fn drop_rows(max_rows: usize, cols: usize) -> Result<[RowsKernel; 3], CodegenError> {
    check_cols(cols)?;
    let warps_launch =
        Launch { grid: (stride_grid(max_rows), 1, 1), block: ((WARPS * 32) as u32, 1, 1), smem_bytes: 0 };
    let threads_launch =
        Launch { grid: (max_rows.div_ceil(256).clamp(1, 132 * 8) as u32, 1, 1), block: (256, 1, 1), smem_bytes: 0 };
    let kernel = |stage: &'static str, launch: Launch| -> Result<RowsKernel, CodegenError> {
        let name = format!("drop_rows_{stage}_{cols}");
        let ctx = DropCtx { kernel_name: name.clone(), stage, cols, warps: WARPS };
        Ok(RowsKernel { source: render("rows_drop.cu.tera", &ctx)?, name, launch })
    };
    Ok([kernel("flag", warps_launch)?, kernel("pair", threads_launch)?, kernel("move", warps_launch)?])
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

#[derive(Serialize)]
struct TailCtx {
    kernel_name: String,
    n: usize,
    slots: usize,
    layers: usize,
    max_rows: usize,
    threads: usize,
    grid: usize,
    clip_hi: String,
    f64: bool,
}

/// Threads per CTA of [`tail_layers`].
const TAIL_THREADS: usize = 256;

/// Most nonzeros of a column [`tail_layers`] takes: a thread holds its column's slots in
/// registers.
pub const TAIL_MAX_SLOTS: usize = 64;

/// Several square layers' weights as ELL slots, the tables of [`tail_layers`].
#[derive(Clone, Debug, PartialEq)]
pub struct TailTables {
    pub neurons: usize,
    pub layers: usize,
    /// The most nonzeros of any column of any of the layers.
    pub slots: usize,
    /// Per layer, `slots` rows of `neurons` entries: column `c`'s nonzeros' k in k order, then
    /// pads (`-1`).
    pub idx: Vec<i32>,
    /// The values at the same places (0 in pads).
    pub values: Vec<f32>,
}

/// The most nonzeros of any column of any of `layers`: the slots [`tail_tables`] gives them.
pub fn tail_slots(layers: &[crate::sparse::CsrRef<'_>]) -> usize {
    use rayon::prelude::*;
    let most = |l: &crate::sparse::CsrRef<'_>| {
        let mut per_col = vec![0usize; l.cols];
        l.indices.iter().for_each(|&c| per_col[c as usize] += 1);
        per_col.into_iter().max().unwrap_or(0)
    };
    layers.par_iter().map(most).max().unwrap_or(0)
}

/// [`TailTables`] of `layers` (each `n × n`).
pub fn tail_tables(layers: &[crate::sparse::CsrRef<'_>]) -> Result<TailTables, CodegenError> {
    use rayon::prelude::*;
    let n = layers.first().map_or(0, |l| l.cols);
    if let Some(l) = layers.iter().find(|l| l.rows != n || l.cols != n) {
        return Err(CodegenError::Spec(format!("tail layers must be {n}x{n}, got {}x{}", l.rows, l.cols)));
    }
    let slots = tail_slots(layers).max(1);
    let mut idx = vec![-1i32; layers.len() * slots * n];
    let mut values = vec![0f32; layers.len() * slots * n];
    let chunk = (slots * n).max(1);
    idx.par_chunks_mut(chunk).zip(values.par_chunks_mut(chunk)).zip(layers.par_iter()).for_each(|((li, lv), l)| {
        // Rows (k) ascending, so each column's slots fill in k order.
        let mut next = vec![0usize; n];
        for k in 0..l.rows {
            for e in l.offsets[k] as usize..l.offsets[k + 1] as usize {
                let c = l.indices[e] as usize;
                let at = next[c] * n + c;
                li[at] = k as i32;
                lv[at] = l.values[e];
                next[c] += 1;
            }
        }
    });
    Ok(TailTables { neurons: n, layers: layers.len(), slots, idx, values })
}

/// The last `layers` layers of a batched network in one launch ([`tail_tables`]' `slots`, at
/// most [`TAIL_MAX_SLOTS`];
/// at most `max_rows` live rows; every output `clip(. + bias, 0, clip_hi)`), its CTAs meeting
/// at a grid barrier between layers: at most `sm_count` CTAs so that all are resident at once.
/// Signature `(X, Y, idx, W, bias, live, barrier)`; the result is in `Y` when `layers` is odd,
/// else in `X`; `barrier` one word that must be zero at launch. With `f64` the activations are
/// f64 and every product and sum is rounded on its own, as in [`gather_layer`].
pub fn tail_layers(
    n: usize,
    slots: usize,
    layers: usize,
    max_rows: usize,
    clip_hi: f32,
    sm_count: usize,
    f64: bool,
) -> Result<RowsKernel, CodegenError> {
    if n == 0 || layers == 0 || slots == 0 || slots > TAIL_MAX_SLOTS || max_rows == 0 {
        return Err(CodegenError::Spec(format!(
            "tail_layers: {n} neurons, {layers} layers, {slots} slots, {max_rows} rows"
        )));
    }
    // Enough CTAs for a few rows of items, at most one per multiprocessor (a grid barrier needs
    // every CTA resident): fewer CTAs meet faster.
    let grid = (n * max_rows.min(4)).div_ceil(TAIL_THREADS).clamp(1, sm_count.max(1));
    let name = format!("tail_layers_{n}_s{slots}_l{layers}_r{max_rows}_g{grid}{}", if f64 { "_f64" } else { "" });
    let ctx = TailCtx {
        kernel_name: name.clone(),
        n,
        slots,
        layers,
        max_rows,
        threads: TAIL_THREADS,
        grid,
        clip_hi: super::spmm::shared::float_literal(clip_hi),
        f64,
    };
    let source = render("rows_tail.cu.tera", &ctx)?;
    let launch = Launch { grid: (grid as u32, 1, 1), block: (TAIL_THREADS as u32, 1, 1), smem_bytes: 0 };
    Ok(RowsKernel { name, source, launch })
}

#[derive(Serialize)]
struct GatherCtx {
    kernel_name: String,
    n: usize,
    slots: usize,
    rows: usize,
    max_rows: usize,
    threads: usize,
    slice: usize,
    staged: bool,
    unrolled: bool,
    narrow: bool,
    f64: bool,
    value: Option<String>,
    clip_hi: String,
}

/// Threads per CTA of [`gather_layer`].
const GATHER_THREADS: usize = 512;

/// Shared memory a CTA of [`gather_layer`] may stage its rows in (one CTA per multiprocessor
/// where they fill it: fewer, larger row groups read each column's slots fewer times).
const GATHER_STAGE_BYTES: usize = 200 << 10;

/// Most rows a CTA of [`gather_layer`] takes at a time (each a register accumulator per thread).
const GATHER_MAX_ROWS: usize = 8;

/// Columns of one CTA's slice in [`gather_layer`]: a layer wider than this splits its columns
/// over CTAs (`blockIdx.y`), so that few rows still occupy several multiprocessors.
const GATHER_SLICE: usize = 2048;

/// The narrowest column slice [`gather_layer`] cuts for a batch of few rows.
const GATHER_MIN_SLICE: usize = 256;

/// A layer for [`gather_layer`]: `n × n`, its [`tail_tables`] (one layer) with `slots` per
/// column; `value` the layer's one nonzero value when it has only one (folded into the code:
/// no value table), `narrow` for k stored as u16 ([`narrow_idx`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GatherLayer {
    pub n: usize,
    pub slots: usize,
    pub max_rows: usize,
    pub clip_hi: f32,
    pub sm_count: usize,
    /// f64 activations and the f64 reference's arithmetic, bit for bit (else fp32 FMAs).
    pub f64: bool,
    pub value: Option<f32>,
    pub narrow: bool,
}

/// Whether [`gather_layer`] stages rows of `n` elements (f64 with `f64`) in shared memory: at
/// least one fits the 200 KiB staging buffer. Wider rows are gathered through L1, one 32-byte
/// sector a nonzero.
pub fn gather_stages(n: usize, f64: bool) -> bool {
    n * if f64 { 8 } else { 4 } <= GATHER_STAGE_BYTES
}

/// The `idx` table of [`tail_tables`] as u16 pairs in i32 words (`0xffff` in a pad), for
/// layers narrower than 65,536: a quarter of the bytes of k and value.
pub fn narrow_idx(idx: &[i32]) -> Vec<i32> {
    let half = |k: i32| if k < 0 { 0xffffu32 } else { k as u32 & 0xffff };
    idx.chunks(2).map(|p| (half(p[0]) | (p.get(1).map_or(0xffff, |&k| half(k)) << 16)) as i32).collect()
}

/// One `n × n` layer as a gather from staged rows: every output sums its column's slots in k
/// order, then `+ bias`, then `clip(., 0, clip_hi)`; with `f64`, f64 rows and every product and
/// sum rounded on its own, the f64 reference's arithmetic bit for bit (the `--precision f64`
/// layers); else fp32 FMAs. A CTA stages as many rows as fit 200 KiB (at most 8)
/// in shared memory and computes them for its column slice; rows wider than that are read
/// through L1, 4 at a time. Signature `(A, W, ptr, idx, bias, C, live)`, the layer kernels'
/// (`ptr` unread, `W` unread when the value is folded, `bias` f32); the grid strides over the
/// live rows.
pub fn gather_layer(g: &GatherLayer) -> Result<RowsKernel, CodegenError> {
    let n = g.n;
    check_cols(n)?;
    if g.slots == 0 || g.max_rows == 0 || (g.narrow && n >= 0xffff) {
        return Err(CodegenError::Spec(format!(
            "gather_layer: {n} neurons, {} slots, {} rows, narrow {}",
            g.slots, g.max_rows, g.narrow
        )));
    }
    let elem = if g.f64 { 8 } else { 4 };
    let fit = GATHER_STAGE_BYTES / (elem * n);
    let (rows, staged) = if gather_stages(n, g.f64) { (fit.min(GATHER_MAX_ROWS), true) } else { (4, false) };
    let smem = if staged { elem * n * rows } else { 0 };
    let per_sm = if staged { (GATHER_STAGE_BYTES / smem).clamp(1, 2) } else { 2 };
    // Column slices of 2048, or narrower (down to 256) while even a full batch's row groups
    // would leave multiprocessors idle: a batch of a few rows (the screened precision's settle)
    // then still spreads over the GPU.
    let (groups, want) = (g.max_rows.div_ceil(rows), g.sm_count.max(1) * per_sm);
    let mut slice = GATHER_SLICE.min(n);
    while slice > GATHER_MIN_SLICE && groups * n.div_ceil(slice) < want {
        slice /= 2;
    }
    let slices = n.div_ceil(slice);
    let gx = groups.clamp(1, want.div_ceil(slices));
    let name = format!(
        "gather_layer_{n}_s{}_r{rows}_m{}_g{gx}x{slices}{}{}{}",
        g.slots,
        g.max_rows,
        if g.f64 { "_f64" } else { "" },
        if g.value.is_some() { "_v" } else { "" },
        if g.narrow { "_u16" } else { "" }
    );
    let float = super::spmm::shared::float_literal;
    let ctx = GatherCtx {
        kernel_name: name.clone(),
        n,
        slots: g.slots,
        rows,
        max_rows: g.max_rows,
        threads: GATHER_THREADS,
        slice,
        staged,
        unrolled: g.slots <= TAIL_MAX_SLOTS,
        narrow: g.narrow,
        f64: g.f64,
        value: g.value.map(float),
        clip_hi: float(g.clip_hi),
    };
    let source = render("rows_gather.cu.tera", &ctx)?;
    let launch =
        Launch { grid: (gx as u32, slices as u32, 1), block: (GATHER_THREADS as u32, 1, 1), smem_bytes: smem as u32 };
    Ok(RowsKernel { name, source, launch })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::Csr;

    #[test]
    fn tail_tables_hold_every_nonzero_once_in_k_order_and_pads_read_nothing() {
        // Two 6x6 layers with columns of 0 to 3 nonzeros.
        let mut rng = crate::rng::SplitMix64::new(7);
        let dense: Vec<Vec<f32>> = (0..2)
            .map(|_| {
                (0..36)
                    .map(|_| if rng.next_u64().is_multiple_of(3) { 1.0 + (rng.next_u64() % 7) as f32 } else { 0.0 })
                    .collect()
            })
            .collect();
        let layers: Vec<Csr> = dense.iter().map(|d| Csr::from_dense(d, 6, 6)).collect();
        let refs: Vec<_> = layers.iter().map(Csr::view).collect();
        let TailTables { slots, idx, values, .. } = tail_tables(&refs).unwrap();
        let most =
            dense.iter().flat_map(|d| (0..6).map(move |c| (0..6).filter(|&k| d[k * 6 + c] != 0.0).count())).max();
        assert_eq!(Some(slots), most);
        for (l, d) in dense.iter().enumerate() {
            for c in 0..6 {
                let ks: Vec<i32> = (0..slots).map(|s| idx[(l * slots + s) * 6 + c]).collect();
                let want: Vec<i32> = (0..6).filter(|&k| d[k * 6 + c] != 0.0).map(|k| k as i32).collect();
                assert_eq!(&ks[..want.len()], &want[..], "layer {l} column {c}: k ascending");
                assert!(ks[want.len()..].iter().all(|&k| k == -1), "pads after the nonzeros");
                for (s, &k) in ks.iter().enumerate() {
                    let v = values[(l * slots + s) * 6 + c];
                    assert_eq!(v, if k >= 0 { d[k as usize * 6 + c] } else { 0.0 });
                }
            }
        }
        let odd = Csr::from_dense(&[1.0; 12], 3, 4);
        assert!(tail_tables(&[layers[0].view(), odd.view()]).is_err(), "layers of another shape");
        let k = tail_layers(6, slots, 2, 10, 32.0, 132, false).unwrap();
        assert!(k.source.contains(&k.name) && k.launch.grid.0 >= 1);
        assert!(tail_layers(6, slots, 0, 10, 32.0, 132, false).is_err());
    }

    #[test]
    fn a_gather_over_few_rows_cuts_narrower_column_slices_to_fill_the_gpu() {
        let layer = |max_rows, f64| GatherLayer {
            n: 4096,
            slots: 32,
            max_rows,
            clip_hi: 32.0,
            sm_count: 132,
            f64,
            value: Some(0.0625),
            narrow: true,
        };
        // A full batch: 2048-column slices, 132 CTAs (6 staged f64 rows of 32 KiB each).
        let k = gather_layer(&layer(60_000, true)).unwrap();
        assert_eq!((k.launch.grid.0, k.launch.grid.1), (66, 2));
        assert!(k.source.contains("#define SLICE 2048"));
        // 40 rows: 7 row groups, so 16 slices of 256 columns (112 CTAs) instead of 14 CTAs.
        let k = gather_layer(&layer(40, true)).unwrap();
        assert_eq!((k.launch.grid.0, k.launch.grid.1), (7, 16));
        assert!(k.source.contains("#define SLICE 256") && k.name.contains("g7x16"));
        // Enough rows to fill the GPU with 2048-column slices keep them.
        let k = gather_layer(&layer(800, true)).unwrap();
        assert_eq!(k.launch.grid.1, 2);
    }
}
