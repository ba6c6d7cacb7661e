//! Sparse-matmul cases: one list for the compile-only tests (no GPU) and the GPU tests and
//! benchmarks. A case turns into a problem: a seeded mask from `tesa::patterns`, random
//! weight values and the kernel specs that cover the weight (one, or two for a mixed cover).
//!
//! Here: what a case is ([`Case`], [`Cover`]), its label and the [`Problem`] it builds. The
//! lists are tables: `correctness.rs` ([`correctness_cases`], one case per row) and `bench.rs`
//! ([`bench_cases`], each row once per sparsity of its sweep); `row.rs` turns a row into a
//! [`Case`] (its options are the `Case::with_*` builders as data).

use spartac::codegen::{Activation, DenseCopy, Dtype, Engine, Epilogue, Mode, Orientation, SpmmSpec, Tile};
use spartac::rng::SplitMix64;
use spartac::tesa::patterns::Pattern;

mod bench;
mod correctness;
mod row;

pub use bench::{bench_cases, transformer_cases, two_four_cases, TRANSFORMER_SHAPES, TWO_FOUR_SHAPES};
pub use correctness::correctness_cases;

/// How the weight's nonzeros are assigned to kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cover {
    /// Every block of this shape holding a nonzero goes to the block kernel.
    Block(usize, usize),
    /// Every nonzero goes to the fine-grained kernel.
    Fine,
    /// Blocks of this shape at least half full go to the block kernel, the remaining
    /// nonzeros to the fine-grained kernel (SparTA's mixed decomposition).
    Mixed(usize, usize),
    /// The dense kernel with `(bh, bw)` tiles, ignoring the pattern.
    Dense(usize, usize),
    /// Whatever the execution planner chooses (`plan` → `codegen::from_plan`): the
    /// compiler's own path from a pruned weight to kernels.
    Planned,
    /// The live blocks of this shape in two block-kernel launches, even block rows of the
    /// weight then odd ones, the second accumulating into the first's output: the
    /// accumulate path of the block kernels on its own, without the fine-grained kernel.
    Split(usize, usize),
    /// The whole weight (2:4 along K) on the 2:4 sparse tensor-core kernel.
    TwoFour,
}

impl Cover {
    pub fn label(&self) -> String {
        match self {
            Cover::Block(h, w) => format!("block{h}x{w}"),
            Cover::Fine => "fine".into(),
            Cover::Mixed(h, w) => format!("mixed{h}x{w}+fine"),
            Cover::Dense(32, 32) => "dense".into(),
            Cover::Dense(h, w) => format!("dense{h}x{w}"),
            Cover::Planned => "planned".into(),
            Cover::Split(h, w) => format!("split{h}x{w}"),
            Cover::TwoFour => "two_four".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Case {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub dtype: Dtype,
    pub pattern: Pattern,
    pub cover: Cover,
    pub epilogue: Epilogue,
    pub mode: Mode,
    /// Embed the weight values in the source.
    pub values_literal: bool,
    /// Tile override for the block kernel (and for the fine kernel of a `Cover::Fine`).
    pub tile: Option<Tile>,
    /// Run dense sub-operators on cuBLAS (plus our epilogue kernel) instead of our own
    /// dense kernel: the planner's fallback.
    pub cublas_dense: bool,
    /// Where the sparse weight sits: `Right` (`C = A·W`, W `K × N`) or `Left`
    /// (`C = W·B`, W `M × K`, the dense operand B `K × N`).
    pub orientation: Orientation,
    /// Every kept weight element takes this value (binarized / HPEC-style weights), which
    /// lets the fp32 block kernel fold its blocks when the values are embedded.
    pub uniform: Option<f32>,
    /// With `uniform`: only the even 32-column groups of the weight take the value, the others
    /// keep random values (a weight with some uniform blocks: the kernel folds just those).
    pub uniform_half: bool,
    /// `(bh, bw, sparsity)`: blocks of the weight pruned on top of its pattern (a 2:4 weight
    /// whose blocks are pruned too: the weight of SparTA's 2:4 + block split).
    pub dead_blocks: Option<(usize, usize, f64)>,
    /// Tensor-core path of fp16/bf16 block kernels.
    pub engine: Engine,
    /// How the right-orientation fine kernel reads A's columns.
    pub dense_copy: DenseCopy,
    /// NaN, +Inf and -Inf in a few elements of the dense operand ([`Case::nonfinite_inputs`]).
    pub nonfinite: bool,
}

impl Case {
    pub fn new(mkn: (usize, usize, usize), dtype: Dtype, pattern: Pattern, cover: Cover) -> Case {
        Case {
            m: mkn.0,
            k: mkn.1,
            n: mkn.2,
            dtype,
            pattern,
            cover,
            epilogue: Epilogue::NONE,
            mode: Mode::Auto,
            values_literal: false,
            tile: None,
            cublas_dense: cover == Cover::Planned,
            orientation: Orientation::Right,
            uniform: None,
            uniform_half: false,
            dead_blocks: None,
            engine: Engine::Auto,
            dense_copy: DenseCopy::Auto,
            nonfinite: false,
        }
    }
    /// Puts NaN, +Inf and -Inf into the dense operand (see [`Case::nonfinite_inputs`]).
    pub fn with_nonfinite(mut self) -> Case {
        self.nonfinite = true;
        self
    }
    pub fn with_uniform(mut self, v: f32) -> Case {
        self.uniform = Some(v);
        self
    }
    /// [`Case::with_uniform`] on the even 32-column groups only.
    /// Prunes `sparsity` of the `bh × bw` blocks of the weight on top of its pattern.
    pub fn with_dead_blocks(mut self, bh: usize, bw: usize, sparsity: f64) -> Case {
        self.dead_blocks = Some((bh, bw, sparsity));
        self
    }
    pub fn with_uniform_half(mut self, v: f32) -> Case {
        self.uniform = Some(v);
        self.uniform_half = true;
        self
    }
    pub fn with_orientation(mut self, orientation: Orientation) -> Case {
        self.orientation = orientation;
        self
    }
    /// Shape of the sparse weight: `K × N` (right) or `M × K` (left).
    pub fn weight_shape(&self) -> (usize, usize) {
        match self.orientation {
            Orientation::Right => (self.k, self.n),
            Orientation::Left => (self.m, self.k),
        }
    }
    /// Shape of the dense operand: A `M × K` (right) or B `K × N` (left).
    pub fn dense_shape(&self) -> (usize, usize) {
        match self.orientation {
            Orientation::Right => (self.m, self.k),
            Orientation::Left => (self.k, self.n),
        }
    }
    pub fn with_engine(mut self, engine: Engine) -> Case {
        self.engine = engine;
        self
    }
    pub fn with_dense_copy(mut self, dense_copy: DenseCopy) -> Case {
        self.dense_copy = dense_copy;
        self
    }
    pub fn with_tile(mut self, rows: usize, stages: usize) -> Case {
        self.tile = Some(Tile::new(rows, stages));
        self
    }
    /// A fine-kernel tile with `per_sm` CTAs resident per SM and K split over a cluster of
    /// `split` CTAs (see [`Tile`]).
    pub fn with_fine_tile(mut self, rows: usize, stages: usize, per_sm: usize, split: usize) -> Case {
        self.tile = Some(Tile { per_sm, split, ..Tile::new(rows, stages) });
        self
    }
    /// A tile of the warp-specialized wgmma kernel: `rows` per item, a ring of `stages`,
    /// `group` block columns per item, `k_rows` k-block rows per stage (see [`Tile`]; 0 = the
    /// specializer's choice).
    pub fn with_ws_tile(mut self, rows: usize, stages: usize, group: usize, k_rows: usize) -> Case {
        self.tile = Some(Tile { group, k_rows, ..Tile::new(rows, stages) });
        self
    }
    /// A tile of a 2:4 kernel. The `mma.sp` kernel (`Engine::MmaSync`): `rows` of A and
    /// `group` × 32 output columns per CTA, `warps`, a ring of `stages`, `k_rows` × 32 of K a
    /// stage (see `kernel_choice::two_four::tiling`). The Hopper kernel: `rows` of A and
    /// `group` × 64 output columns per item, `stages` (`two_four::wgmma_tiling`; it ignores
    /// `warps` and `k_rows`). 0 = the specializer's choice.
    pub fn with_two_four_tile(mut self, rows: usize, group: usize, warps: usize, stages: usize, k_rows: usize) -> Case {
        self.tile = Some(Tile { group, warps, k_rows, ..Tile::new(rows, stages) });
        self
    }
    /// The 3xTF32 fine kernel's group width on a forced tile: `n_tiles` n8 tiles (1 or 2).
    pub fn with_n_tiles(mut self, n_tiles: usize) -> Case {
        self.tile = Some(Tile { n_tiles, ..self.tile.unwrap_or(Tile::new(64, 0)) });
        self
    }
    /// A tile of the dismantled fine kernel: `32 × cols32` output columns per warp, `warps`
    /// warps per CTA (see [`Tile`]).
    pub fn with_dismantled_tile(mut self, cols32: usize, warps: usize) -> Case {
        self.tile = Some(Tile { warps, ..Tile::new(32, cols32) });
        self
    }
    pub fn with_epilogue(mut self, bias: bool, activation: Activation) -> Case {
        self.epilogue = Epilogue { bias, activation };
        self
    }
    pub fn with_mode(mut self, mode: Mode) -> Case {
        self.mode = mode;
        self
    }
    pub fn with_cublas(mut self) -> Case {
        self.cublas_dense = true;
        self
    }
    pub fn with_values(mut self) -> Case {
        self.values_literal = true;
        self
    }

    /// Whether `spec` (one of this case's specs) runs on the library: a dense sub-operator
    /// of a case that sends those to cuBLAS, except, in a planned case, the skinny 16-bit ones
    /// the model lowering keeps on the streaming kernel (`codegen::library_takes`).
    pub fn uses_library(&self, spec: &SpmmSpec) -> bool {
        // int8 stays on our kernel: cuBLAS's int8 path needs a dequantizing epilogue not built.
        let weight = if spec.orientation == Orientation::Left { spec.m * spec.k } else { spec.k * spec.n };
        self.cublas_dense
            && spec.dtype != Dtype::I8
            && spec.blocks.len() * spec.block.0 * spec.block.1 == weight
            && !(self.cover == Cover::Planned
                && spec.engine == Engine::Auto
                && !spec.accumulate
                && spartac::kernel_choice::stream::auto_takes(spec.dtype, spec.orientation, spec.k, spec.n))
    }

    pub fn label(&self) -> String {
        let act = match self.epilogue.activation {
            Activation::None => "",
            Activation::Relu => "+relu",
            Activation::Clip { .. } => "+clip",
            Activation::Gelu => "+gelu",
            Activation::GeluErf => "+gelu_erf",
        };
        format!(
            "{}x{}x{} {} {} {}{}{}{}{}{}{}{}{}{}{}{}{}",
            self.m,
            self.k,
            self.n,
            self.dtype.name(),
            self.pattern.label(),
            self.cover.label(),
            if self.epilogue.bias { " +bias" } else { "" },
            act,
            match self.mode {
                Mode::Unrolled => " unrolled",
                Mode::IndexStream => " stream",
                Mode::Auto => "",
            },
            if self.values_literal { " +values" } else { "" },
            self.tile
                .map(|t| {
                    let per_sm = if t.per_sm > 1 { format!("x{}", t.per_sm) } else { String::new() };
                    let split = if t.split > 1 { format!("k{}", t.split) } else { String::new() };
                    let warps = if t.warps > 0 { format!("w{}", t.warps) } else { String::new() };
                    let group = if t.group > 0 { format!("g{}", t.group) } else { String::new() };
                    let k_rows = if t.k_rows > 0 { format!("r{}", t.k_rows) } else { String::new() };
                    let n_tiles = if t.n_tiles > 0 { format!("n{}", t.n_tiles) } else { String::new() };
                    format!(" tile{}s{}{per_sm}{split}{warps}{group}{k_rows}{n_tiles}", t.rows, t.stages)
                })
                .unwrap_or_default(),
            if self.cublas_dense && self.cover != Cover::Planned { " cublas" } else { "" },
            if self.orientation == Orientation::Left { " left" } else { "" },
            self.uniform
                .map(|v| format!(" uniform{v}{}", if self.uniform_half { "/half" } else { "" }))
                .unwrap_or_default(),
            match self.engine {
                Engine::Auto => "",
                Engine::MmaSync => " mmasync",
                Engine::Wgmma => " wgmma",
                Engine::WgmmaWs => " wgmma-ws",
                Engine::Tf32x3 => " tf32x3",
                Engine::Simt => " simt",
            },
            match self.dense_copy {
                DenseCopy::Auto => "",
                DenseCopy::Transposing => " transposing",
                DenseCopy::Prepass => " prepass",
            },
            if self.nonfinite { " +nonfinite" } else { "" },
            self.dead_blocks.map(|(bh, bw, s)| format!(" +dead{bh}x{bw}@{s}")).unwrap_or_default()
        )
    }

    /// The non-finite elements of a [`Case::with_nonfinite`] case's dense operand, as
    /// (row-major index into the operand, value), drawn from `seed`; empty for other cases.
    /// Four lines of the operand take them (rows of A on the right, columns of B on the left:
    /// the first, one a third in, one two thirds in, the last): a NaN, a +Inf, a -Inf, and a
    /// +Inf with a -Inf at the neighbouring K index (so that they meet in one sum when the
    /// weight keeps both K indices for a column, as a block pattern does). The K indices are
    /// ones where the weight keeps some element (`mask`: true where pruned), so that every
    /// special value reaches the output.
    pub fn nonfinite_inputs(&self, mask: &[bool], seed: u64) -> Vec<(usize, f32)> {
        let (m, k, n) = (self.m, self.k, self.n);
        if !self.nonfinite {
            return vec![];
        }
        let left = self.orientation == Orientation::Left;
        let (w_rows, w_cols) = self.weight_shape();
        let kept = |kk: usize| {
            if left {
                (0..w_rows).any(|r| !mask[r * w_cols + kk])
            } else {
                (0..w_cols).any(|c| !mask[kk * w_cols + c])
            }
        };
        let live_k: Vec<usize> = (0..k).filter(|kk| kept(*kk)).collect();
        if live_k.is_empty() {
            return vec![];
        }
        // Rows of A (`M × K`) on the right, columns of B (`K × N`) on the left.
        let n_lines = if left { n } else { m };
        let index = |line: usize, kk: usize| if left { kk * n + line } else { line * k + kk };
        let mut lines = vec![0, n_lines / 3, 2 * n_lines / 3, n_lines - 1];
        lines.dedup();
        let mut rng = SplitMix64::new(seed ^ 0x4e41_4e1f);
        let mut out = vec![];
        for (i, line) in lines.into_iter().enumerate() {
            let kk = live_k[rng.below(live_k.len() as u64) as usize];
            match i {
                0 => out.push((index(line, kk), f32::NAN)),
                1 => out.push((index(line, kk), f32::INFINITY)),
                2 => out.push((index(line, kk), f32::NEG_INFINITY)),
                _ => {
                    out.push((index(line, kk), f32::INFINITY));
                    let partner = kk ^ 1;
                    if partner < k && kept(partner) {
                        out.push((index(line, partner), f32::NEG_INFINITY));
                    }
                }
            }
        }
        out
    }

    /// The mask (seeded by `seed`), the weight values (fresh from `seed`, rounded to the
    /// dtype, zero where pruned) and the kernel specs covering it, in launch order.
    pub fn problem(&self, seed: u64) -> Problem {
        let (m, k, n) = (self.m, self.k, self.n);
        // The weight is `rows × cols`: `K × N` on the right, `M × K` on the left.
        let (rows, cols) = self.weight_shape();
        // N:M groups run along K, the reduction axis (what `mma.sp` and the planner's 2:4 split
        // take): the pattern's groups along its rows, drawn on the transposed weight.
        let mask = match self.pattern {
            Pattern::NM { .. } if self.orientation == Orientation::Right => {
                let t = self.pattern.mask(cols, rows, seed);
                (0..rows * cols).map(|i| t[(i % cols) * rows + i / cols]).collect()
            }
            _ => self.pattern.mask(rows, cols, seed),
        };
        let mask: Vec<bool> = match self.dead_blocks {
            Some((bh, bw, sparsity)) => {
                let dead = Pattern::Block { bh, bw, sparsity }.mask(rows, cols, seed ^ 0xdead_b10c);
                mask.iter().zip(&dead).map(|(a, b)| *a || *b).collect()
            }
            None => mask,
        };
        let mut rng = SplitMix64::new(seed ^ 0x5_eed0_fa11);
        let w: Vec<f32> = mask
            .iter()
            .enumerate()
            .map(|(i, pruned)| {
                let v = rng.uniform(-1.0, 1.0) as f32;
                let uniform = self.uniform.filter(|_| !self.uniform_half || (i % cols / 32) % 2 == 0);
                if *pruned {
                    0.0
                } else {
                    round_to(self.dtype, uniform.unwrap_or(v))
                }
            })
            .collect();
        let spec = |block: (usize, usize), blocks: Vec<(usize, usize)>| {
            let mut s = SpmmSpec::new(m, k, n, self.dtype, block, blocks);
            s.orientation = self.orientation;
            s.mode = self.mode;
            s.epilogue = self.epilogue;
            if self.values_literal {
                s.values = Some(w.clone());
            }
            if block != (1, 1) || self.cover == Cover::Fine {
                s.tile = self.tile;
                s.engine = self.engine;
            }
            s.dense_copy = self.dense_copy;
            s
        };
        let mut part_weights = None;
        let specs = match self.cover {
            Cover::Planned => {
                let kernels =
                    spartac::codegen::from_plan::plan_single_weight_oriented(m, k, n, &w, self.dtype, self.orientation)
                        .unwrap_or_else(|e| panic!("planning {}: {e}", self.label()));
                part_weights = Some(kernels.iter().map(|pk| pk.weight.clone()).collect());
                kernels
                    .into_iter()
                    .map(|pk| {
                        let mut s = pk.spec;
                        s.mode = self.mode;
                        s.epilogue = Epilogue::NONE;
                        s
                    })
                    .collect()
            }
            Cover::Block(bh, bw) => vec![spec((bh, bw), SpmmSpec::blocks_of_mask(&mask, rows, cols, (bh, bw)))],
            Cover::Fine => vec![spec((1, 1), SpmmSpec::blocks_of_mask(&mask, rows, cols, (1, 1)))],
            Cover::TwoFour => {
                let mut s = spec((1, 1), SpmmSpec::blocks_of_mask(&mask, rows, cols, (1, 1)));
                s.two_four = true;
                s.tile = self.tile;
                s.engine = self.engine;
                vec![s]
            }
            Cover::Split(bh, bw) => {
                let (even, odd): (Vec<_>, Vec<_>) =
                    SpmmSpec::blocks_of_mask(&mask, rows, cols, (bh, bw)).into_iter().partition(|(r, _)| r % 2 == 0);
                let part = |parity: usize| -> Vec<f32> {
                    w.iter().enumerate().map(|(i, v)| if (i / cols / bh) % 2 == parity { *v } else { 0.0 }).collect()
                };
                part_weights = Some(vec![part(0), part(1)]);
                let mut first = spec((bh, bw), even);
                first.epilogue = Epilogue::NONE;
                let mut second = spec((bh, bw), odd);
                second.accumulate = true;
                vec![first, second]
            }
            Cover::Dense(bh, bw) => {
                let all = (0..rows / bh).flat_map(|r| (0..cols / bw).map(move |c| (r, c))).collect();
                vec![spec((bh, bw), all)]
            }
            Cover::Mixed(bh, bw) => {
                let (k, n) = (rows, cols);
                let nbw = n / bw;
                let mut kept = vec![0usize; (k / bh) * nbw];
                for r in 0..k {
                    for c in 0..n {
                        if !mask[r * n + c] {
                            kept[(r / bh) * nbw + c / bw] += 1;
                        }
                    }
                }
                let full = |r: usize, c: usize| kept[(r / bh) * nbw + c / bw] * 2 >= bh * bw;
                let blocks: Vec<(usize, usize)> =
                    (0..kept.len()).filter(|i| kept[*i] * 2 >= bh * bw).map(|i| (i / nbw, i % nbw)).collect();
                let scattered: Vec<(usize, usize)> =
                    (0..k * n).filter(|i| !mask[*i] && !full(i / n, i % n)).map(|i| (i / n, i % n)).collect();
                // fp32: the fine kernel writes C first and the block kernel accumulates onto
                // it; other dtypes the other way round (codegen::launch_order, run 14).
                let mut out = vec![];
                if !blocks.is_empty() || scattered.is_empty() {
                    out.push(spec((bh, bw), blocks));
                }
                if !scattered.is_empty() {
                    out.push(spec((1, 1), scattered));
                }
                if spartac::codegen::fine_first(self.dtype) {
                    out.reverse();
                }
                let last = out.len() - 1;
                for (i, s) in out.iter_mut().enumerate() {
                    s.accumulate = i > 0;
                    if i != last {
                        s.epilogue = Epilogue::NONE;
                    }
                }
                out
            }
        };
        let mut specs = specs;
        if self.cover == Cover::Planned {
            // The epilogue goes on the last launch only.
            if let Some(s) = specs.last_mut() {
                s.epilogue = self.epilogue;
            }
        }
        Problem { mask, w, specs, part_weights }
    }
}

pub struct Problem {
    pub mask: Vec<bool>,
    /// Row-major `K × N` (left orientation: `M × K`), zeros where pruned, exactly
    /// representable in the dtype.
    pub w: Vec<f32>,
    pub specs: Vec<SpmmSpec>,
    /// Per spec, the part of `w` it multiplies with (planned covers, whose parts may
    /// overlap geometrically but own disjoint elements); `None`: every spec reads `w`.
    pub part_weights: Option<Vec<Vec<f32>>>,
}

/// `x` rounded to the nearest value of `dtype`, back in f32.
pub fn round_to(dtype: Dtype, x: f32) -> f32 {
    match dtype {
        Dtype::F32 => x,
        Dtype::F16 => half::f16::from_f32(x).to_f32(),
        Dtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        // int8 cases keep float weights here; the runner quantizes them (per column).
        Dtype::I8 => x,
    }
}
