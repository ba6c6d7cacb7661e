//! Sparse × dense matmul: family choice, loop nest, dismantle, tables and rendering.

use super::loopnest::{Level, LoopNest};
use super::render::{render, BlockCtx, EpilogueCtx, FineCtx};
use super::{CodegenError, Dtype, Mode, Orientation, SpmmSpec};
use serde::Serialize;

/// Kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Family {
    /// fp32 block-sparse on CUDA cores (FFMA), cp.async pipeline.
    BlockSimt,
    /// fp16/bf16 block-sparse on tensor cores (ldmatrix + mma.sync m16n8k16, fp32 accumulate).
    BlockMma,
    /// Element-wise sparse weight (block 1×1): chunked CSC, A tile transposed in shared memory.
    Fine,
    /// Every block present: the block kernels without tables.
    Dense,
    /// fp16/bf16 block-sparse on Hopper tensor cores (wgmma from shared memory, persistent grid);
    /// W blocks packed transposed. See `spmm_wgmma.rs`.
    BlockWgmma,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::BlockSimt => "block_simt",
            Family::BlockMma => "block_mma",
            Family::Fine => "fine",
            Family::Dense => "dense",
            Family::BlockWgmma => "block_wgmma",
        }
    }
}

/// Launch geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem_bytes: u32,
}

/// A specialized kernel: source, entry point, launch geometry and the tables its arguments
/// take. Every family has the signature
/// `(const T* A, const T* W, const int* ptr, const int* idx, const T* bias, T* C)`;
/// `W` is the weight packed by [`Kernel::pack_weight`]; in unrolled mode `ptr`/`idx` (and `W`
/// when the values are embedded) are ignored and may be null.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    pub name: String,
    pub family: Family,
    /// `Unrolled` or `IndexStream`, never `Auto`.
    pub mode: Mode,
    pub source: String,
    pub launch: Launch,
    pub spec_shape: (usize, usize, usize),
    pub dtype: Dtype,
    pub block: (usize, usize),
    /// Block kernels: start of each block column's run in `idx` (`N/bw + 1`).
    /// Fine kernel: start of each (k-chunk, column) run (`chunks × N + 1`).
    pub ptr: Vec<i32>,
    /// Block kernels: block row of each live block. Fine kernel: row inside its chunk.
    pub idx: Vec<i32>,
    /// Fine kernel: the k-chunk width.
    pub chunk: usize,
    pub live_instances: usize,
    pub dead_instances: usize,
    pub literal_words: usize,
    pub values_embedded: bool,
}

impl Kernel {
    /// Packs a row-major `K × N` weight into the order the kernel reads it: block kernels
    /// store each live block row-major, blocks in `idx` order; the fine kernel one value per
    /// entry in `idx` order; dense: the same as block kernels with every block live.
    pub fn pack_weight(&self, w: &[f32]) -> Vec<f32> {
        let (_, k, n) = self.spec_shape;
        assert_eq!(w.len(), k * n, "weight has the wrong size");
        match self.family {
            Family::Fine => {
                let chunks = k.div_ceil(self.chunk);
                let mut out = Vec::with_capacity(self.idx.len());
                for c in 0..chunks {
                    for col in 0..n {
                        let s = c * n + col;
                        for e in self.ptr[s]..self.ptr[s + 1] {
                            let row = c * self.chunk + self.idx[e as usize] as usize;
                            out.push(w[row * n + col]);
                        }
                    }
                }
                out
            }
            Family::BlockWgmma => super::spmm_wgmma::pack_transposed(self, w),
            _ => {
                let (bh, bw) = self.block;
                let mut out = Vec::with_capacity(self.idx.len() * bh * bw);
                for j in 0..self.ptr.len() - 1 {
                    for e in self.ptr[j]..self.ptr[j + 1] {
                        let kb = self.idx[e as usize] as usize;
                        for r in 0..bh {
                            for c in 0..bw {
                                out.push(w[(kb * bh + r) * n + j * bw + c]);
                            }
                        }
                    }
                }
                out
            }
        }
    }

    /// Multiply-adds the kernel executes (live blocks or entries only) times 2.
    pub fn flops(&self) -> f64 {
        let (m, _, _) = self.spec_shape;
        match self.family {
            Family::Fine => 2.0 * m as f64 * self.idx.len() as f64,
            _ => 2.0 * m as f64 * (self.idx.len() * self.block.0 * self.block.1) as f64,
        }
    }
}

pub(super) fn spec_err(msg: String) -> CodegenError {
    CodegenError::Spec(msg)
}

/// Specializes `spec` into a kernel (SparTA's code specialization pass).
pub fn specialize(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    if m == 0 || k == 0 || n == 0 {
        return Err(spec_err(format!("empty matmul {m}x{k}x{n}")));
    }
    if spec.orientation == Orientation::Left {
        return Err(spec_err(
            "the left orientation (sparse W · dense B) has no kernel yet; transpose the operands".into(),
        ));
    }
    if bh == 0 || bw == 0 || k % bh != 0 || n % bw != 0 {
        return Err(spec_err(format!("block {bh}x{bw} does not tile the {k}x{n} weight")));
    }
    if let Some(v) = &spec.values {
        if v.len() != k * n {
            return Err(spec_err(format!("values hold {} elements, the weight {k}x{n} has {}", v.len(), k * n)));
        }
    }
    let (kbs, nbs) = (k / bh, n / bw);
    let mut live = vec![false; kbs * nbs];
    for &(r, c) in &spec.blocks {
        if r >= kbs || c >= nbs {
            return Err(spec_err(format!("block ({r}, {c}) lies outside the {kbs}x{nbs} block grid")));
        }
        if std::mem::replace(&mut live[r * nbs + c], true) {
            return Err(spec_err(format!("block ({r}, {c}) is listed twice")));
        }
    }
    if (bh, bw) == (1, 1) {
        return fine(spec, &live);
    }
    let dense = spec.blocks.len() == kbs * nbs;
    if let Some(kernel) = super::spmm_wgmma::try_specialize(spec, &live, dense)? {
        return Ok(kernel);
    }
    block(spec, &live, dense)
}

/// Resolves `Auto` against the budget.
pub(super) fn resolve_mode(spec: &SpmmSpec, words: usize) -> Mode {
    match spec.mode {
        Mode::Auto if words <= spec.code_budget => Mode::Unrolled,
        Mode::Auto => Mode::IndexStream,
        m => m,
    }
}

pub(super) fn epilogue_ctx(spec: &SpmmSpec) -> EpilogueCtx {
    use super::Activation::*;
    let (act, lo, hi) = match spec.epilogue.activation {
        None => ("none", 0.0, 0.0),
        Relu => ("relu", 0.0, 0.0),
        Clip { lo, hi } => ("clip", lo, hi),
        Gelu => ("gelu", 0.0, 0.0),
    };
    EpilogueCtx {
        bias: spec.epilogue.bias,
        activation: act.to_string(),
        clip_lo: float_literal(lo),
        clip_hi: float_literal(hi),
        accumulate: spec.accumulate,
    }
}

/// A C float literal that round-trips `x` (infinities as the CUDA constants).
fn float_literal(x: f32) -> String {
    if x == f32::INFINITY {
        "__int_as_float(0x7f800000)".into()
    } else if x == f32::NEG_INFINITY {
        "__int_as_float(0xff800000)".into()
    } else {
        format!("{x:e}f")
    }
}

/// Raw bits of the packed values in the kernel's dtype, as hex literals.
pub(super) fn value_bits(dtype: Dtype, packed: &[f32]) -> Vec<String> {
    packed
        .iter()
        .map(|v| match dtype {
            Dtype::F32 => format!("0x{:08x}u", v.to_bits()),
            Dtype::F16 => format!("0x{:04x}u", half::f16::from_f32(*v).to_bits()),
            Dtype::Bf16 => format!("0x{:04x}u", half::bf16::from_f32(*v).to_bits()),
        })
        .collect()
}

fn block(spec: &SpmmSpec, live: &[bool], dense: bool) -> Result<Kernel, CodegenError> {
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
        let warps = match spec.tile {
            Some(t) if t.rows % 32 == 0 && (32..=256).contains(&t.rows) => t.rows / 32,
            Some(t) => {
                return Err(spec_err(format!("tensor-core tiles hold 32 to 256 rows in steps of 32, not {}", t.rows)))
            }
            None if m >= 128 => 4,
            None => 2,
        };
        threads = 32 * warps;
        bm = 32 * warps;
        (tm, threads_n, threads_m) = (0, 0, 0);
        (a_ld, w_ld) = (bh + 8, bw + 8);
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
            // 8 rows per thread (with 2 stages) at large M: see benches/results/spmm_notes.md.
            None if m >= 2048 && threads_m * 8 <= 256 => 8,
            None if threads_m * 4 <= 256 => 4,
            None => 1,
        };
        bm = threads_m * tm;
        (a_ld, w_ld) = (bh + 4, bw);
    }
    let stages = match spec.tile {
        Some(t) if (2..=8).contains(&t.stages) => t.stages,
        Some(t) => return Err(spec_err(format!("pipelines have 2 to 8 stages, not {}", t.stages))),
        None if mma => 4,
        None if tm == 8 => 2,
        None => 3,
    };
    let esize = spec.dtype.bytes();
    let smem = stages * (bm * a_ld + bh * w_ld) * esize;
    if smem > 227 * 1024 {
        return Err(spec_err(format!("block {bh}x{bw} needs {smem} bytes of shared memory per CTA (at most 232448)")));
    }

    // Loop nest: block columns, then the k-blocks of each; rows and the k inside a block stay loops.
    let nest = LoopNest::new(vec![
        Level::new("n_block", nbs, bw),
        Level::new("k_block", kbs, bh),
        Level::new("m", m, bm),
        Level::new("k", bh, 1),
    ]);
    let d = nest.dismantle(nest.level("k_block")?, |p| match p {
        // Column blocks always live: their output must be written even when empty.
        [_] => true,
        [j, kb] => live[kb * nbs + j],
        _ => false,
    })?;
    let mut ptr = vec![0i32; nbs + 1];
    let mut idx = Vec::with_capacity(d.instances.len());
    for inst in &d.instances {
        ptr[inst[0] + 1] += 1;
        idx.push(inst[1] as i32);
    }
    for j in 0..nbs {
        ptr[j + 1] += ptr[j];
    }
    let value_words = spec.values.as_ref().map(|_| idx.len() * bh * bw * esize / 4).unwrap_or(0);
    let literal_words = if dense { 0 } else { ptr.len() + idx.len() } + value_words;
    let mode = if dense && spec.values.is_none() { Mode::IndexStream } else { resolve_mode(spec, literal_words) };
    let mut kernel = Kernel {
        name: String::new(),
        family,
        mode,
        source: String::new(),
        launch: Launch {
            grid: (nbs as u32, m.div_ceil(bm) as u32, 1),
            block: (threads as u32, 1, 1),
            smem_bytes: smem as u32,
        },
        spec_shape: (m, k, n),
        dtype: spec.dtype,
        block: (bh, bw),
        ptr,
        idx,
        chunk: 0,
        live_instances: d.instances.len(),
        dead_instances: d.dead_instances(),
        literal_words: if mode == Mode::Unrolled { literal_words } else { 0 },
        values_embedded: mode == Mode::Unrolled && spec.values.is_some(),
    };
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(v), true) => value_bits(spec.dtype, &kernel.pack_weight(v)),
        _ => vec![],
    };
    let unrolled = mode == Mode::Unrolled;
    kernel.name = format!(
        "spmm_{}_{}_{}x{}_{}",
        family.name(),
        spec.dtype.name(),
        bh,
        bw,
        if unrolled { "unrolled" } else { "stream" }
    );
    let ctx = BlockCtx {
        kernel_name: kernel.name.clone(),
        dtype: spec.dtype.name().to_string(),
        m,
        k,
        n,
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
        a_row_chunks: bh * esize / 16,
        w_row_chunks: bw * esize / 16,
        dense,
        k_blocks: kbs,
        unrolled,
        tables_in_constant: kernel.ptr.len() + kernel.idx.len() <= 16384,
        ptr: if unrolled { kernel.ptr.clone() } else { vec![] },
        idx: if unrolled { kernel.idx.clone() } else { vec![] },
        values,
        value_bits: if esize == 4 { 32 } else { 16 },
        n_tiles: bw / 8,
        epilogue: epilogue_ctx(spec),
    };
    kernel.source = render(if mma { "spmm_block_mma.cu.tera" } else { "spmm_block_simt.cu.tera" }, &ctx)?;
    Ok(kernel)
}

fn fine(spec: &SpmmSpec, live: &[bool]) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let chunk = k.min(512);
    let chunks = k.div_ceil(chunk);
    let (bm, threads) = (32usize, 512usize);
    let warps = threads / 32;
    let nnz = live.iter().filter(|l| **l).count();
    // Columns per CTA: fewest bytes (A re-read once per column group, the entries once per
    // row tile) among the tilings that still give every SM two CTAs; the most CTAs otherwise.
    let row_tiles = m.div_ceil(bm);
    let mut best: Option<(f64, usize)> = None;
    let mut nc = warps;
    while nc <= n.next_power_of_two().clamp(warps, 256) {
        let ctas = row_tiles * n.div_ceil(nc);
        let bytes = (m * k * spec.dtype.bytes()) as f64 * n.div_ceil(nc) as f64 + (nnz * 8 * row_tiles) as f64;
        let penalty = if ctas >= 264 { 1.0 } else { 264.0 / ctas as f64 };
        let score = bytes * penalty;
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, nc));
        }
        nc *= 2;
    }
    let nc = best.map(|b| b.1).unwrap_or(warps);
    let nest = LoopNest::new(vec![
        Level::new("k_chunk", chunks, chunk),
        Level::new("n", n, 1),
        Level::new("k", chunk, 1),
        Level::new("m", m, bm),
    ]);
    let d = nest.dismantle(nest.level("k")?, |p| match p {
        [_] | [_, _] => true,
        [c, col, kk] => {
            let row = c * chunk + kk;
            row < k && live[row * n + col]
        }
        _ => false,
    })?;
    let mut ptr = vec![0i32; chunks * n + 1];
    let mut idx = Vec::with_capacity(d.instances.len());
    for inst in &d.instances {
        ptr[inst[0] * n + inst[1] + 1] += 1;
        idx.push(inst[2] as i32);
    }
    for s in 0..chunks * n {
        ptr[s + 1] += ptr[s];
    }
    let value_words = spec.values.as_ref().map(|_| idx.len() * spec.dtype.bytes() / 4).unwrap_or(0);
    let literal_words = ptr.len() + idx.len() + value_words;
    let mode = resolve_mode(spec, literal_words);
    let unrolled = mode == Mode::Unrolled;
    let a_ld = bm + 1;
    let smem = (chunk * a_ld + bm * (nc + 1)) * 4;
    let mut kernel = Kernel {
        name: format!("spmm_fine_{}_{}", spec.dtype.name(), if unrolled { "unrolled" } else { "stream" }),
        family: Family::Fine,
        mode,
        source: String::new(),
        launch: Launch {
            grid: (n.div_ceil(nc) as u32, row_tiles as u32, 1),
            block: (threads as u32, 1, 1),
            smem_bytes: smem as u32,
        },
        spec_shape: (m, k, n),
        dtype: spec.dtype,
        block: (1, 1),
        ptr,
        idx,
        chunk,
        live_instances: d.instances.len(),
        dead_instances: d.dead_instances(),
        literal_words: if unrolled { literal_words } else { 0 },
        values_embedded: unrolled && spec.values.is_some(),
    };
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(v), true) => value_bits(spec.dtype, &kernel.pack_weight(v)),
        _ => vec![],
    };
    let ctx = FineCtx {
        kernel_name: kernel.name.clone(),
        dtype: spec.dtype.name().to_string(),
        m,
        k,
        n,
        bm,
        nc,
        threads,
        warps,
        chunk,
        chunks,
        a_ld,
        unrolled,
        tables_in_constant: kernel.ptr.len() + kernel.idx.len() <= 16384,
        ptr: if unrolled { kernel.ptr.clone() } else { vec![] },
        idx: if unrolled { kernel.idx.clone() } else { vec![] },
        values,
        value_bits: if spec.dtype.bytes() == 4 { 32 } else { 16 },
        epilogue: epilogue_ctx(spec),
    };
    kernel.source = render("spmm_fine.cu.tera", &ctx)?;
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::Tile;

    fn spec(blocks: Vec<(usize, usize)>) -> SpmmSpec {
        SpmmSpec::new(64, 64, 96, Dtype::F32, (32, 32), blocks)
    }

    #[test]
    fn tables_follow_block_columns_and_pack_weight_matches_them() {
        let k = specialize(&spec(vec![(1, 2), (0, 0), (1, 0)])).unwrap();
        assert_eq!(k.family, Family::BlockSimt);
        assert_eq!(k.ptr, vec![0, 2, 2, 3]);
        assert_eq!(k.idx, vec![0, 1, 1]);
        assert_eq!((k.live_instances, k.dead_instances), (3, 3));
        let w: Vec<f32> = (0..64 * 96).map(|i| i as f32).collect();
        let packed = k.pack_weight(&w);
        assert_eq!(packed.len(), 3 * 32 * 32);
        // Second packed block = block (1, 0): row 32, column 0 first.
        assert_eq!(packed[1024], w[32 * 96]);
        assert_eq!(packed[1024 + 33], w[33 * 96 + 1]);
        assert_eq!(k.flops(), 2.0 * 64.0 * 3.0 * 1024.0);
    }

    #[test]
    fn auto_mode_unrolls_under_the_budget_and_streams_above_it() {
        let mut s = spec(vec![(0, 0), (1, 1)]);
        assert_eq!(specialize(&s).unwrap().mode, Mode::Unrolled);
        s.code_budget = 3;
        let k = specialize(&s).unwrap();
        assert_eq!(k.mode, Mode::IndexStream);
        assert!(!k.source.contains("IDX_LIT[]") && k.source.contains("const int* idx = idx_arg;"));
        s.mode = Mode::Unrolled;
        assert!(specialize(&s).unwrap().source.contains("IDX_LIT[] = { 0,1, 0 }"));
    }

    #[test]
    fn every_block_present_selects_the_dense_kernel() {
        let all = (0..2).flat_map(|r| (0..3).map(move |c| (r, c))).collect();
        assert_eq!(specialize(&spec(all)).unwrap().family, Family::Dense);
        let mut s = spec(vec![(0, 0)]);
        s.dtype = Dtype::F16;
        assert_eq!(specialize(&s).unwrap().family, Family::BlockMma);
        s.block = (1, 1);
        assert_eq!(specialize(&s).unwrap().family, Family::Fine);
    }

    #[test]
    fn bad_specs_are_errors_not_panics() {
        let cases: Vec<(SpmmSpec, &str)> = vec![
            ({ spec(vec![(2, 0)]) }, "outside"),
            ({ spec(vec![(0, 0), (0, 0)]) }, "twice"),
            ({ SpmmSpec::new(64, 60, 96, Dtype::F32, (32, 32), vec![]) }, "does not tile"),
            (
                {
                    let mut s = spec(vec![]);
                    s.orientation = Orientation::Left;
                    s
                },
                "left orientation",
            ),
            (
                {
                    let mut s = spec(vec![]);
                    s.tile = Some(Tile { rows: 100, stages: 3 });
                    s
                },
                "tiles",
            ),
            (
                {
                    let mut s = spec(vec![]);
                    s.values = Some(vec![0.0; 3]);
                    s
                },
                "values hold",
            ),
            ({ SpmmSpec::new(0, 64, 96, Dtype::F32, (32, 32), vec![]) }, "empty"),
        ];
        for (s, want) in cases {
            let e = match specialize(&s) {
                Ok(_) => panic!("spec accepted, expected an error mentioning {want:?}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }
}
