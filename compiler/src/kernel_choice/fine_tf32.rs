//! The 3xTF32 fine kernel (`codegen/spmm/fine_tf32/`: an element-sparse fp32 weight on tensor
//! cores, columns in groups of 8 or 16 gathering the k where any of them is nonzero): whether
//! `Engine::Auto` takes it ([`auto_prefers`]) and the work it does on a pattern
//! ([`auto_work`], [`FineTf32Work`]).
//!
//! The work is counted as the kernel counts it, because it is the kernel's own layout: the
//! group width (`pick_nt`), the tiling (rows, groups and k-chunk per CTA, ring stages, sized
//! to shared memory by `tiling`) and the runs of k8 steps per (chunk, group) ([`steps_of`]).
//! The specializer builds its tables from these runs and the cost model prices a part by their
//! count, so the two see the same steps and column tiles.

use super::{DenseCopy, Dtype, Engine, Mode, Orientation, SpecError, SpmmSpec};

/// Shared memory a CTA may take (227 KiB on sm_90).
const SMEM_MAX: usize = 227 * 1024;
/// Bytes of one step in a stage of a kernel with `nt` n8 tiles per group: 64 weight words per
/// tile and 4 index words.
fn step_bytes(nt: usize) -> usize {
    64 * 4 * nt + 4 * 4
}
/// Cost of a step of two n8 tiles against one of one (the A fragments, offsets and loop are
/// shared; the tensor-core products and W's split double). Predicted 1.35; measured 1.5-1.6
/// (run 20 call 4, both widths forced at 96-deep chunks: 4096³ 50% 2.160 against 2.666 ms at
/// half the steps, 90% 1.844 against 1.659 at 0.72 of them, 95% 1.358 against 1.082; the
/// mixed pattern 0.762 against 0.726; 116 registers and 8 warps per CTA against 80 and 16).
const NT2_STEP_COST: f64 = 1.6;

/// The tiling of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiling {
    /// Rows of C per CTA (16 × m16 tiles per warp).
    pub bm: usize,
    /// Column groups (of 8) per CTA, one warp each.
    pub groups: usize,
    /// Depth of a k-chunk.
    pub chunk: usize,
    pub stages: usize,
    /// n8 tiles per group (a group is `8 · nt` columns on one set of gathered k).
    pub nt: usize,
}

/// Whether `Engine::Auto` takes the 3xTF32 fine kernel: fp32, right orientation, K a multiple
/// of 4, nothing forced that belongs to the other fine kernels (a tile, a dense-copy method,
/// the unrolled mode, a dismantled weight); then always for outputs of at most 2^22 elements,
/// and above that unless the gathered k cost the tensor cores 5× the useful work or more
/// (`gathered_work`) at 2% kept or more. Measured on the H200 (run 19, call 7, same binary,
/// same call): at 1024³ it beats the SIMT loop kernel at every density (50% 0.048 against
/// 0.112 ms, 90% 0.0325 against 0.0372, 95% 0.0221 against 0.0251, 99% 0.0118 against
/// 0.0145); at 4096³ it wins at 50% (2.65 against 6.07, 2× the useful work) and 99% (0.349
/// against 0.385, where the loop kernel's runs are short) and loses at 90% (1.67 against
/// 1.64) and 95% (0.995 against 0.926), about 6× and 7× the useful work; the whole mixed
/// pattern (32×32 blocks at 90% + 1%) gathers 1.6× and runs 0.644 ms. At the 2^22 edge
/// (2048³, run 20 call 1) it wins at 50% (0.343 against 0.775), 90% (0.218 against 0.222) and
/// 99% (0.053 against 0.061) and loses 1.7% at 95% (0.135 against 0.133).
pub fn auto_prefers(spec: &SpmmSpec) -> Result<bool, SpecError> {
    if spec.dtype != Dtype::F32
        || spec.orientation != Orientation::Right
        || !spec.k.is_multiple_of(4)
        || spec.tile.is_some()
        || spec.dense_copy != DenseCopy::Auto
        || spec.mode == Mode::Unrolled
        || super::dismantled::applies(spec)?
    {
        return Ok(false);
    }
    let density = spec.blocks.len() as f64 / (spec.k * spec.n) as f64;
    Ok(spec.m * spec.n <= 1 << 22 || density < 0.02 || gathered_work(spec) < 5.0)
}

/// What the 3xTF32 fine kernel does for a pattern, for the planner's cost model
/// (`plan::cost::CostModel::fine_tf32_time`): its k8 steps, each an `M × 8·nt × 8` TF32 product
/// (three with the split), and its CTA column tiles, each of which reads all of A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FineTf32Work {
    pub steps: usize,
    /// n8 tiles per step (1 or 2: a step of 2 multiplies 16 columns on its 8 gathered k).
    pub nt: usize,
    pub col_tiles: usize,
    /// The CTA tile `(rows, columns, chunk depth)`.
    pub tile: (usize, usize, usize),
    /// Steps of the heaviest CTA ([`heaviest_cta`]); 0 where not counted (older records).
    #[serde(default)]
    pub heaviest: usize,
}

/// Steps of the heaviest CTA of a 3xTF32 fine kernel whose run `c · groups_padded + j` (k-chunk
/// `c`, column group `j`) holds `run_len(c · groups_padded + j)` steps, `per_cta` groups to a CTA
/// (one per consumer warp): the warps of a CTA wait for each other at every chunk, so a CTA
/// takes the sum over chunks of its busiest warp's steps.
pub fn heaviest_cta(run_len: impl Fn(usize) -> usize, chunks: usize, groups_padded: usize, per_cta: usize) -> usize {
    let per_cta = per_cta.max(1);
    let cta = |tile: usize| -> usize {
        let warps = tile * per_cta..((tile + 1) * per_cta).min(groups_padded);
        (0..chunks).map(|c| warps.clone().map(|j| run_len(c * groups_padded + j)).max().unwrap_or(0)).sum()
    };
    (0..groups_padded.div_ceil(per_cta)).map(cta).max().unwrap_or(0)
}

impl FineTf32Work {
    /// The steps in units of a one-tile step (a two-tile step counts `NT2_STEP_COST`).
    pub fn step_units(&self) -> f64 {
        self.steps as f64 * if self.nt == 2 { NT2_STEP_COST } else { 1.0 }
    }
}

/// The work of the kernel `Engine::Auto` would build for `spec` (the pattern is its element
/// list), `None` when Auto hands the spec to another fine kernel ([`auto_prefers`]).
pub fn auto_work(spec: &SpmmSpec) -> Result<Option<FineTf32Work>, SpecError> {
    if spec.engine != Engine::Auto || !auto_prefers(spec)? {
        return Ok(None);
    }
    let (t, runs) = layout(spec)?;
    let chunks = spec.k.div_ceil(t.chunk).max(1);
    Ok(Some(FineTf32Work {
        steps: runs.iter().map(Vec::len).sum(),
        nt: t.nt,
        col_tiles: spec.n.div_ceil(8 * t.nt).div_ceil(t.groups),
        tile: (t.bm, 8 * t.nt * t.groups, t.chunk),
        heaviest: heaviest_cta(|r| runs.get(r).map_or(0, Vec::len), chunks, runs.len() / chunks, t.groups),
    }))
}

/// The kernel's tiling and runs: the group width (`nt` n8 tiles) forced by the tile or chosen
/// by [`pick_nt`], then [`tiling`].
pub(crate) fn layout(spec: &SpmmSpec) -> Result<(Tiling, Runs), SpecError> {
    // A forced tile keeps groups of 8 unless it names the width.
    let nt = match spec.tile.map(|t| t.n_tiles) {
        None => pick_nt(spec),
        Some(0) => 1,
        Some(nt @ (1 | 2)) => nt,
        Some(other) => return Err(SpecError(format!("3xTF32 fine groups take 1 or 2 n8 tiles, not {other}"))),
    };
    let n_groups = spec.n.div_ceil(8 * nt);
    let runs_of = |groups: usize, chunk: usize| runs(spec, chunk, n_groups.next_multiple_of(groups), nt);
    tiling(spec, n_groups, nt, &runs_of)
}

/// Groups of 16 columns (two n8 tiles on one set of gathered k) where their steps, each
/// [`NT2_STEP_COST`] of a one-tile step, cost less than the 8-column groups' steps: where the
/// union of 16 columns' k is not much larger than that of 8 (dense patterns, block patterns);
/// compared at the default chunk.
fn pick_nt(spec: &SpmmSpec) -> usize {
    let steps = |nt: usize| -> usize {
        let groups = spec.n.div_ceil(8 * nt);
        runs(spec, 192, groups, nt).iter().map(Vec::len).sum()
    };
    if (steps(2) as f64) * NT2_STEP_COST < steps(1) as f64 {
        2
    } else {
        1
    }
}

/// Multiply-adds the kernel's steps issue per nonzero of W: each group of 8 columns takes
/// every k where one of them is nonzero (before padding).
pub(crate) fn gathered_work(spec: &SpmmSpec) -> f64 {
    let groups = spec.n.div_ceil(8);
    let mut rows: Vec<Vec<u32>> = vec![vec![]; groups];
    for &(k, n) in &spec.blocks {
        rows[n / 8].push(k as u32);
    }
    let union: usize = rows
        .iter_mut()
        .map(|r| {
            r.sort_unstable();
            r.dedup();
            r.len()
        })
        .sum();
    (8 * union) as f64 / spec.blocks.len().max(1) as f64
}

/// The k8 steps of one (chunk, column group): `ks` are the chunk-relative k of the group's
/// nonzero rows (increasing). Each step is 8 slots, quads `[0..4]` and `[4..8]`; a quad takes
/// one k from each of the fullest residue classes (mod 4) while at least one remains, then
/// pads with the zero column `chunk + r` of a residue it does not hold yet. Returns slot values
/// (chunk-relative k, `>= chunk` for padding).
pub fn steps_of(ks: &[usize], chunk: usize) -> Vec<[usize; 8]> {
    let mut classes: [Vec<usize>; 4] = Default::default();
    for &k in ks.iter().rev() {
        classes[k % 4].push(k); // popped from the back: increasing k
    }
    let mut quads = vec![];
    while classes.iter().any(|c| !c.is_empty()) {
        let mut order = [0usize, 1, 2, 3];
        order.sort_by_key(|&r| std::cmp::Reverse(classes[r].len()));
        let mut quad = [usize::MAX; 4];
        let mut used = [false; 4];
        for (slot, &r) in order.iter().enumerate() {
            if let Some(k) = classes[r].pop() {
                quad[slot] = k;
                used[r] = true;
            }
        }
        // Fewer than four classes left: the fullest one fills the rest (a bank conflict is
        // cheaper than a padded slot while entries remain).
        for (slot, q) in quad.iter_mut().enumerate() {
            if *q == usize::MAX {
                let r = (0..4).max_by_key(|&r| classes[r].len()).unwrap();
                if let Some(k) = classes[r].pop() {
                    *q = k;
                } else if let Some(r) = (0..4).find(|&r| !used[r]) {
                    used[r] = true;
                    *q = chunk + r;
                } else {
                    *q = chunk + slot;
                }
            }
        }
        quads.push(quad);
    }
    if quads.len() % 2 == 1 {
        quads.push([chunk, chunk + 1, chunk + 2, chunk + 3]);
    }
    quads.chunks(2).map(|q| [q[0][0], q[0][1], q[0][2], q[0][3], q[1][0], q[1][1], q[1][2], q[1][3]]).collect()
}

/// Runs of steps per (chunk, group) of a trial tiling (`groups` per CTA, `chunk` deep).
pub(crate) type Runs = Vec<Vec<[usize; 8]>>;

/// The largest number of steps one CTA copies for one chunk (at least 1).
pub(crate) fn max_steps(runs: &Runs, groups: usize) -> usize {
    runs.chunks(groups).map(|tile| tile.iter().map(Vec::len).sum::<usize>()).max().unwrap_or(0).max(1)
}

/// Whether `t` is a tile the 3xTF32 fine kernel takes when forced (`--fine-tile`): 32, 64 or
/// 128 rows, 1 to 31 column groups, k_rows 1 to 8, n_tiles 0 (= 1), 1 or 2. The CLI checks a
/// forced tile with it up front, whatever the model.
pub fn check_forced_tile(t: &super::Tile) -> Result<(), SpecError> {
    if ![32, 64, 128].contains(&t.rows) {
        return Err(SpecError(format!("3xTF32 fine tiles hold 32, 64 or 128 rows, not {}", t.rows)));
    }
    if !(1..=31).contains(&t.group) {
        // One warp per group and a producer warp: at most 1024 threads.
        return Err(SpecError(format!("3xTF32 fine tiles take 1 to 31 column groups, not {}", t.group)));
    }
    if !(1..=8).contains(&t.k_rows) {
        return Err(SpecError(format!("3xTF32 fine chunks are 32 to 256 deep (k_rows 1-8), not {}", t.k_rows)));
    }
    if t.n_tiles > 2 {
        return Err(SpecError(format!("3xTF32 fine groups take 1 or 2 n8 tiles, not {}", t.n_tiles)));
    }
    Ok(())
}

/// The tiling and the runs it was sized on (`runs_of(groups, chunk)` builds them; a chunk that
/// does not fit is halved and the runs rebuilt).
fn tiling(
    spec: &SpmmSpec,
    n_groups: usize,
    nt: usize,
    runs_of: &dyn Fn(usize, usize) -> Runs,
) -> Result<(Tiling, Runs), SpecError> {
    let (bm, groups, chunk, stages) = match spec.tile {
        Some(t) => {
            check_forced_tile(&t)?;
            (t.rows, t.group, 32 * t.k_rows, t.stages)
        }
        // 64 × 128 tiles (128 CTAs at 1024³), k in chunks of 192 (1024³ 95%: 0.0218 ms against
        // 0.0224 at 128 and 0.0245 at 64; 4096³ 95%: 0.995 against 1.034 and 1.197; run 19).
        // Groups of 16 columns: 8 per CTA (the same 128 columns, and registers for the doubled
        // accumulators).
        None => (64, (16 / nt).min(n_groups.next_power_of_two()), 192, 0),
    };
    let mut chunk = chunk.min(spec.k.next_multiple_of(32));
    loop {
        if a_bytes(bm, chunk) > 1 << 16 {
            // Byte offsets into the stage's A boxes are 16-bit.
            if spec.tile.is_none() && chunk > 32 {
                chunk /= 2;
                continue;
            }
            return Err(SpecError(format!(
                "a {bm}-row CTA takes chunks of at most {} k",
                (1 << 16) / (bm * 128) * 32 - 32
            )));
        }
        let runs = runs_of(groups, chunk);
        let stage = stage_bytes(bm, chunk, max_steps(&runs, groups), nt);
        // 1024 bytes of alignment slack, the run table and two barriers per stage.
        let fixed = 1024 + 4 * runs_words(spec.k.div_ceil(chunk), groups);
        let fit = SMEM_MAX.saturating_sub(fixed) / (stage + 16);
        match stages {
            // As many stages as fit, up to 8 and no more than the chunks (at least 2).
            0 if fit >= 2 => {
                let stages = fit.min(8).min(spec.k.div_ceil(chunk).max(2));
                return Ok((Tiling { bm, groups, chunk, stages, nt }, runs));
            }
            s if s >= 2 && s <= fit => return Ok((Tiling { bm, groups, chunk, stages: s, nt }, runs)),
            _ if spec.tile.is_none() && chunk > 32 => chunk /= 2,
            _ => {
                return Err(SpecError(format!(
                    "a {bm}-row, {groups}-group CTA with {chunk}-deep chunks needs {stage} bytes per stage; \
                     {} stages do not fit in {SMEM_MAX}",
                    stages.max(2)
                )))
            }
        }
    }
}

/// The (chunk, group) runs of steps of `spec`'s element pattern, chunks of `chunk`,
/// `groups_padded` groups per chunk (those past N empty). Built from the element list (each
/// element files its k under its (chunk, group); sorted and deduplicated), so the cost is the
/// nonzeros', not the `K × N` grid's.
fn runs(spec: &SpmmSpec, chunk: usize, groups_padded: usize, nt: usize) -> Vec<Vec<[usize; 8]>> {
    let chunks = spec.k.div_ceil(chunk);
    let mut keys: Vec<u64> = spec
        .blocks
        .iter()
        .map(|&(kk, col)| {
            let run = (kk / chunk) * groups_padded + col / (8 * nt);
            (run as u64) << 32 | (kk % chunk) as u64
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::with_capacity(chunks * groups_padded);
    let mut ks = vec![];
    let mut at = 0;
    for run in 0..chunks * groups_padded {
        ks.clear();
        while at < keys.len() && (keys[at] >> 32) as usize == run {
            ks.push((keys[at] & 0xffff_ffff) as usize);
            at += 1;
        }
        out.push(steps_of(&ks, chunk));
    }
    out
}

/// Bytes of a stage's A boxes (`chunk / 32` of `bm` rows × 128 bytes) and its zero box.
fn a_bytes(bm: usize, chunk: usize) -> usize {
    (chunk / 32 + 1) * bm * 128
}

/// Bytes of one ring stage: the A boxes, the zero box and `max_steps` steps, to 1024 bytes (the
/// 128-byte swizzle repeats every 8 rows, so each box starts 1024-byte aligned).
pub(crate) fn stage_bytes(bm: usize, chunk: usize, max_steps: usize, nt: usize) -> usize {
    (a_bytes(bm, chunk) + max_steps * step_bytes(nt)).next_multiple_of(1024)
}

/// Words of a CTA's run table: `groups + 1` run starts per chunk, padded to 16 bytes.
pub(crate) fn runs_words(chunks: usize, groups: usize) -> usize {
    (chunks * (groups + 1)).next_multiple_of(4)
}
