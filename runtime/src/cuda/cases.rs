//! Sparse-matmul cases: one list for the compile-only tests (no GPU) and the GPU tests and
//! benchmarks. A case turns into a problem: a seeded mask from `tesa::patterns`, random
//! weight values and the kernel specs that cover the weight (one, or two for a mixed cover).

use spartac::codegen::{Activation, DenseCopy, Dtype, Engine, Epilogue, Mode, Orientation, SpmmSpec, Tile};
use spartac::rng::SplitMix64;
use spartac::tesa::patterns::Pattern;

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
    /// Tensor-core path of fp16/bf16 block kernels.
    pub engine: Engine,
    /// How the right-orientation fine kernel reads A's columns.
    pub dense_copy: DenseCopy,
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
            engine: Engine::Auto,
            dense_copy: DenseCopy::Auto,
        }
    }
    pub fn with_uniform(mut self, v: f32) -> Case {
        self.uniform = Some(v);
        self
    }
    /// [`Case::with_uniform`] on the even 32-column groups only.
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
    /// of a case that sends those to cuBLAS.
    pub fn uses_library(&self, spec: &SpmmSpec) -> bool {
        // int8 stays on our kernel: cuBLAS's int8 path needs a dequantizing epilogue not built.
        let weight = if spec.orientation == Orientation::Left { spec.m * spec.k } else { spec.k * spec.n };
        self.cublas_dense && spec.dtype != Dtype::I8 && spec.blocks.len() * spec.block.0 * spec.block.1 == weight
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
            "{}x{}x{} {} {} {}{}{}{}{}{}{}{}{}{}{}",
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
            }
        )
    }

    /// The mask (seeded by `seed`), the weight values (fresh from `seed`, rounded to the
    /// dtype, zero where pruned) and the kernel specs covering it, in launch order.
    pub fn problem(&self, seed: u64) -> Problem {
        let (m, k, n) = (self.m, self.k, self.n);
        // The weight is `rows × cols`: `K × N` on the right, `M × K` on the left.
        let (rows, cols) = self.weight_shape();
        let mask = self.pattern.mask(rows, cols, seed);
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

/// The correctness cases: every family, both modes, every epilogue, odd row counts.
pub fn correctness_cases() -> Vec<Case> {
    use Activation::*;
    use Cover::*;
    use Dtype::*;
    use Engine::*;
    use Orientation::Left;
    let b = |s: f64| Pattern::Block { bh: 32, bw: 32, sparsity: s };
    let u = |s: f64| Pattern::Unstructured { sparsity: s };
    let mixed = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.9, scattered: 0.01 };
    vec![
        // fp32 block-sparse (SIMT)
        Case::new((64, 128, 96), F32, b(0.5), Block(32, 32)).with_values(),
        // uniform blocks, values embedded: the folded kernel (row sums, one literal per block)
        Case::new((300, 512, 512), F32, b(0.9), Block(32, 32))
            .with_uniform(0.0625)
            .with_values()
            .with_epilogue(true, Relu),
        Case::new((256, 256, 256), F32, Pattern::Block { bh: 16, bw: 16, sparsity: 0.7 }, Block(16, 16))
            .with_uniform(-1.5)
            .with_values(),
        // some blocks uniform: those fold, the others keep their W tiles
        Case::new((300, 512, 512), F32, b(0.8), Block(32, 32))
            .with_uniform_half(0.375)
            .with_values()
            .with_epilogue(true, Gelu),
        Case::new((200, 256, 256), F32, Pattern::Block { bh: 16, bw: 16, sparsity: 0.8 }, Block(16, 16))
            .with_epilogue(true, Relu),
        Case::new((1024, 1024, 1024), F32, b(0.9), Block(32, 32)).with_mode(Mode::IndexStream),
        Case::new((512, 512, 512), F32, b(0.95), Block(32, 32)).with_mode(Mode::Unrolled).with_epilogue(true, Gelu),
        Case::new((384, 512, 512), F32, Pattern::Block { bh: 64, bw: 64, sparsity: 0.75 }, Block(64, 64))
            .with_epilogue(false, Clip { lo: -0.5, hi: 0.5 }),
        Case::new((256, 256, 256), F32, Pattern::Block { bh: 8, bw: 8, sparsity: 0.9 }, Block(8, 8)),
        Case::new((128, 256, 128), F32, b(1.0), Block(32, 32)).with_epilogue(true, None),
        // fp16/bf16 block-sparse (tensor cores)
        Case::new((64, 128, 96), F16, b(0.5), Block(32, 32)).with_values(),
        Case::new((100, 256, 256), F16, Pattern::Block { bh: 16, bw: 16, sparsity: 0.8 }, Block(16, 16))
            .with_epilogue(true, Relu),
        Case::new((1024, 1024, 1024), F16, b(0.9), Block(32, 32)).with_mode(Mode::IndexStream),
        Case::new((512, 512, 512), F16, Pattern::Block { bh: 64, bw: 64, sparsity: 0.75 }, Block(64, 64))
            .with_mode(Mode::Unrolled)
            .with_epilogue(true, Gelu),
        Case::new((256, 512, 512), Bf16, b(0.9), Block(32, 32))
            .with_epilogue(false, Clip { lo: f32::NEG_INFINITY, hi: 1.0 }),
        // tile overrides (rows per CTA, pipeline stages), ragged M
        Case::new((300, 512, 512), F32, b(0.9), Block(32, 32)).with_tile(64, 2),
        Case::new((300, 512, 512), F16, b(0.9), Block(32, 32)).with_tile(256, 3),
        // left orientation (C = W·B, W sparse M × K): transposed block kernels; N ragged
        // against the tile rows; the split cover exercises accumulate
        Case::new((256, 512, 384), F32, b(0.8), Block(32, 32)).with_orientation(Left),
        Case::new((128, 256, 200), F32, Pattern::Block { bh: 16, bw: 16, sparsity: 0.8 }, Block(16, 16))
            .with_epilogue(true, Relu)
            .with_orientation(Left),
        Case::new((1024, 1024, 1000), F32, b(0.9), Block(32, 32))
            .with_mode(Mode::IndexStream)
            .with_epilogue(true, Gelu)
            .with_orientation(Left),
        Case::new((64, 128, 96), F32, b(0.5), Block(32, 32)).with_values().with_orientation(Left),
        Case::new((256, 512, 264), F16, b(0.9), Block(32, 32)).with_epilogue(true, Gelu).with_orientation(Left),
        Case::new((96, 256, 136), F16, Pattern::Block { bh: 16, bw: 16, sparsity: 0.8 }, Block(16, 16))
            .with_epilogue(true, Relu)
            .with_orientation(Left),
        Case::new((64, 128, 96), F16, b(0.5), Block(32, 32)).with_values().with_orientation(Left),
        Case::new((512, 1024, 512), Bf16, b(0.9), Block(32, 32)).with_mode(Mode::IndexStream).with_orientation(Left),
        Case::new((512, 512, 512), F32, u(0.0), Dense(32, 32)).with_epilogue(true, Relu).with_orientation(Left),
        Case::new((256, 512, 384), F16, u(0.0), Dense(32, 32)).with_orientation(Left),
        Case::new((256, 512, 392), F32, b(0.8), Split(32, 32)).with_epilogue(true, Relu).with_orientation(Left),
        Case::new((256, 512, 392), F16, b(0.8), Split(32, 32)).with_epilogue(true, None).with_orientation(Left),
        Case::new((200, 512, 512), F32, b(0.8), Split(32, 32)).with_epilogue(true, Relu),
        // Hopper wgmma (asked for; auto takes mma.sync) and mma.sync forced: ragged M, every
        // epilogue, both modes, bf16, 16..64-row and 16..64-column blocks
        Case::new((1024, 1024, 1024), F16, b(0.9), Block(32, 32)).with_mode(Mode::IndexStream).with_engine(MmaSync),
        Case::new((300, 512, 512), F16, b(0.9), Block(32, 32)).with_tile(256, 3).with_engine(MmaSync),
        Case::new((777, 1024, 512), F16, b(0.9), Block(32, 32)).with_tile(256, 5).with_engine(Wgmma),
        Case::new((4099, 512, 256), F16, b(0.8), Block(32, 32))
            .with_mode(Mode::IndexStream)
            .with_epilogue(true, Relu)
            .with_engine(Wgmma),
        Case::new((333, 512, 512), Bf16, b(0.7), Block(32, 32))
            .with_tile(128, 4)
            .with_epilogue(true, Gelu)
            .with_engine(Wgmma),
        Case::new((64, 256, 256), Bf16, b(0.5), Block(32, 32)).with_tile(64, 8).with_values().with_engine(Wgmma),
        Case::new((200, 512, 384), F16, Pattern::Block { bh: 64, bw: 64, sparsity: 0.6 }, Block(64, 64))
            .with_tile(192, 4)
            .with_mode(Mode::IndexStream)
            .with_epilogue(false, Clip { lo: -1.0, hi: 0.25 })
            .with_engine(Wgmma),
        Case::new((130, 256, 384), F16, Pattern::Block { bh: 32, bw: 16, sparsity: 0.6 }, Block(32, 16))
            .with_epilogue(true, None)
            .with_engine(Wgmma),
        Case::new((100, 256, 256), Bf16, Pattern::Block { bh: 16, bw: 16, sparsity: 0.8 }, Block(16, 16))
            .with_mode(Mode::Unrolled)
            .with_engine(Wgmma),
        Case::new((256, 512, 512), F16, u(0.0), Dense(32, 32)).with_engine(Wgmma),
        Case::new((256, 1024, 1024), F16, mixed.clone(), Mixed(32, 32)).with_epilogue(true, Relu).with_engine(Wgmma),
        // The warp-specialized wgmma kernel: ragged M and N (a last group short of block
        // columns), groups 1..8, 64/128/256 rows, short rings, every epilogue, both modes,
        // bf16, 16..64-wide blocks, dense, empty block columns, the mixed cover's accumulate
        Case::new((777, 1024, 544), F16, b(0.9), Block(32, 32)).with_engine(WgmmaWs),
        Case::new((4099, 512, 256), F16, b(0.8), Block(32, 32))
            .with_mode(Mode::IndexStream)
            .with_epilogue(true, Relu)
            .with_engine(WgmmaWs),
        Case::new((333, 512, 480), Bf16, b(0.7), Block(32, 32))
            .with_ws_tile(256, 4, 2, 2)
            .with_epilogue(true, Gelu)
            .with_engine(WgmmaWs),
        Case::new((64, 256, 256), Bf16, b(0.5), Block(32, 32))
            .with_ws_tile(64, 3, 8, 2)
            .with_values()
            .with_engine(WgmmaWs),
        Case::new((200, 512, 384), F16, Pattern::Block { bh: 64, bw: 64, sparsity: 0.6 }, Block(64, 64))
            .with_ws_tile(128, 5, 2, 1)
            .with_mode(Mode::IndexStream)
            .with_epilogue(false, Clip { lo: -1.0, hi: 0.25 })
            .with_engine(WgmmaWs),
        Case::new((130, 256, 384), F16, Pattern::Block { bh: 32, bw: 16, sparsity: 0.6 }, Block(32, 16))
            .with_ws_tile(128, 8, 8, 1)
            .with_epilogue(true, None)
            .with_engine(WgmmaWs),
        Case::new((100, 256, 256), Bf16, Pattern::Block { bh: 16, bw: 16, sparsity: 0.8 }, Block(16, 16))
            .with_mode(Mode::Unrolled)
            .with_engine(WgmmaWs),
        Case::new((1024, 1024, 1024), F16, b(0.97), Block(32, 32)).with_ws_tile(128, 6, 1, 3).with_engine(WgmmaWs),
        Case::new((512, 2048, 1024), F16, b(0.9), Block(32, 32)).with_ws_tile(256, 6, 4, 1).with_engine(WgmmaWs),
        Case::new((300, 768, 320), F16, b(0.85), Block(32, 32)).with_ws_tile(128, 0, 2, 4).with_engine(WgmmaWs),
        Case::new((256, 512, 512), F16, u(0.0), Dense(32, 32)).with_engine(WgmmaWs),
        Case::new((256, 1024, 1024), F16, mixed.clone(), Mixed(32, 32)).with_epilogue(true, Relu).with_engine(WgmmaWs),
        // fp32 on tensor cores (3xTF32): ragged M, every epilogue, both modes, values
        // embedded, tile overrides, 8..64-row and -column blocks, dense, the mixed cover's
        // accumulate
        Case::new((300, 512, 512), F32, b(0.9), Block(32, 32)).with_epilogue(true, Relu).with_engine(Tf32x3),
        Case::new((1024, 1024, 1024), F32, b(0.9), Block(32, 32)).with_mode(Mode::IndexStream).with_engine(Tf32x3),
        Case::new((256, 512, 512), F32, b(0.7), Block(32, 32))
            .with_values()
            .with_mode(Mode::Unrolled)
            .with_engine(Tf32x3),
        Case::new((333, 512, 512), F32, b(0.8), Block(32, 32))
            .with_tile(256, 2)
            .with_epilogue(true, Gelu)
            .with_engine(Tf32x3),
        Case::new((200, 512, 384), F32, Pattern::Block { bh: 64, bw: 32, sparsity: 0.6 }, Block(64, 32))
            .with_tile(64, 3)
            .with_epilogue(false, Clip { lo: -1.0, hi: 0.25 })
            .with_engine(Tf32x3),
        Case::new((130, 256, 384), F32, Pattern::Block { bh: 16, bw: 8, sparsity: 0.7 }, Block(16, 8))
            .with_mode(Mode::Unrolled)
            .with_engine(Tf32x3),
        Case::new((256, 512, 384), F32, u(0.0), Dense(32, 32)).with_epilogue(true, None).with_engine(Tf32x3),
        Case::new((512, 1024, 1024), F32, mixed.clone(), Mixed(32, 32)).with_epilogue(true, Relu).with_engine(Tf32x3),
        // fine-grained
        Case::new((1024, 1024, 1024), F32, u(0.95), Fine).with_mode(Mode::IndexStream).with_engine(Simt),
        // fp32 fine on tensor cores (3xTF32 on gathered k): the goal shape, ragged M / K chunk /
        // column group, odd N (scalar stores), forced tiles
        // (rows × column groups × chunk depth / 32), epilogues, 50% and 99%.
        Case::new((1024, 1024, 1024), F32, u(0.95), Fine).with_engine(Tf32x3),
        Case::new((300, 200, 100), F32, u(0.9), Fine).with_epilogue(true, Relu).with_engine(Tf32x3),
        Case::new((100, 132, 77), F32, u(0.7), Fine).with_epilogue(true, Gelu).with_engine(Tf32x3),
        Case::new((333, 700, 520), F32, u(0.99), Fine).with_ws_tile(32, 2, 8, 2).with_engine(Tf32x3),
        Case::new((256, 512, 256), F32, u(0.95), Fine).with_ws_tile(128, 3, 4, 2).with_engine(Tf32x3),
        Case::new((200, 1000, 300), F32, u(0.95), Fine)
            .with_ws_tile(64, 2, 16, 4)
            .with_epilogue(false, Clip { lo: -0.5, hi: 0.5 })
            .with_engine(Tf32x3),
        Case::new((128, 512, 256), F32, u(0.5), Fine).with_engine(Tf32x3),
        // Groups of 16 columns (two n8 tiles per step): chosen (dense enough), ragged M and a
        // last group half past N, odd N, forced on a sparse pattern, and a block pattern.
        Case::new((300, 200, 100), F32, u(0.5), Fine).with_epilogue(true, Relu).with_engine(Tf32x3),
        Case::new((100, 132, 77), F32, u(0.6), Fine)
            .with_ws_tile(64, 0, 4, 2)
            .with_n_tiles(2)
            .with_epilogue(true, Gelu)
            .with_engine(Tf32x3),
        Case::new((256, 640, 200), F32, u(0.97), Fine).with_ws_tile(32, 3, 6, 3).with_n_tiles(2).with_engine(Tf32x3),
        Case::new((512, 1024, 512), F32, b(0.8), Fine).with_epilogue(false, Clip { lo: -0.5, hi: 0.5 }),
        Case::new((96, 64, 80), F32, u(0.9), Fine).with_values().with_epilogue(true, Relu),
        Case::new((200, 1536, 300), F32, u(0.99), Fine)
            .with_mode(Mode::IndexStream)
            .with_epilogue(true, Gelu)
            .with_engine(Simt),
        Case::new((128, 512, 256), F32, u(0.5), Fine).with_mode(Mode::IndexStream).with_engine(Simt),
        // fine-grained dismantled to the element (fp32, right): streamed and embedded values,
        // all of K resident and a ring (K = 4096), ragged rows and columns, every tile shape
        Case::new((256, 1024, 512), F32, u(0.95), Fine).with_mode(Mode::Unrolled).with_epilogue(true, Gelu),
        Case::new((100, 512, 200), F32, u(0.95), Fine).with_mode(Mode::Unrolled).with_values(),
        Case::new((70, 4096, 136), F32, u(0.99), Fine).with_mode(Mode::Unrolled).with_epilogue(true, Relu),
        Case::new((64, 512, 300), F32, u(0.95), Fine).with_dismantled_tile(2, 2),
        Case::new((96, 256, 256), F32, u(0.9), Fine).with_dismantled_tile(1, 8).with_values(),
        // the default's own choice (under 1.5% kept, N ≤ 256), once with more CTAs than SMs
        // (a two-stage ring, two CTAs per SM)
        Case::new((300, 1024, 200), F32, u(0.99), Fine).with_epilogue(true, Relu).with_engine(Simt),
        Case::new((4500, 512, 128), F32, u(0.99), Fine),
        Case::new((256, 512, 512), F16, u(0.95), Fine).with_epilogue(true, None),
        // fine-grained: ragged rows, columns and chunks, K not a multiple of 4 (scalar staging),
        // every rows-per-lane tiling, bf16
        Case::new((130, 260, 70), F32, u(0.8), Fine),
        Case::new((77, 258, 50), F32, u(0.9), Fine).with_epilogue(true, Relu),
        Case::new((300, 512, 512), F32, u(0.95), Fine).with_tile(128, 4),
        Case::new((300, 512, 512), F16, u(0.95), Fine).with_tile(32, 16).with_epilogue(true, Gelu),
        Case::new((128, 256, 192), Bf16, u(0.9), Fine).with_tile(64, 2),
        // fine-grained fp32 right through the ring: the shallowest chunk of a 128-row tile
        // (K = 16: two 8-deep copy steps per warp) and a chunk deeper than K (K = 40)
        Case::new((200, 16, 96), F32, u(0.8), Fine).with_tile(128, 2),
        Case::new((150, 40, 100), F32, u(0.7), Fine).with_tile(64, 2),
        // fine-grained fp32 right with the transpose prepass (At = Aᵀ, rows padded to 4): ragged
        // M (300, 77: pad columns), chunks deeper than K, a K split, every epilogue, accumulate
        // after a block part; and the transposing copies forced where auto takes the prepass
        Case::new((300, 512, 512), F32, u(0.95), Fine).with_dense_copy(DenseCopy::Prepass),
        Case::new((77, 258, 130), F32, u(0.9), Fine).with_tile(64, 2).with_dense_copy(DenseCopy::Prepass),
        Case::new((200, 40, 96), F32, u(0.7), Fine).with_tile(128, 2).with_dense_copy(DenseCopy::Prepass),
        Case::new((200, 1000, 300), F32, u(0.95), Fine)
            .with_fine_tile(64, 4, 1, 2)
            .with_epilogue(true, Gelu)
            .with_dense_copy(DenseCopy::Prepass),
        Case::new((333, 700, 520), F32, u(0.99), Fine).with_epilogue(true, Relu).with_dense_copy(DenseCopy::Prepass),
        Case::new((200, 512, 512), F32, mixed.clone(), Cover::Mixed(32, 32)).with_dense_copy(DenseCopy::Prepass),
        Case::new((256, 256, 2048), F32, u(0.95), Fine),
        Case::new((256, 256, 2048), F32, u(0.95), Fine).with_dense_copy(DenseCopy::Transposing),
        // 16-bit A through the prepass (widened to an fp32 At): auto at 8 column tiles, ragged
        // M and K (scalar loads), an epilogue, bf16, a K split, the fp16 mixed cover
        Case::new((256, 256, 2048), F16, u(0.95), Fine),
        Case::new((77, 258, 130), F16, u(0.9), Fine).with_tile(64, 2).with_dense_copy(DenseCopy::Prepass),
        Case::new((300, 512, 512), Bf16, u(0.95), Fine).with_epilogue(true, Gelu).with_dense_copy(DenseCopy::Prepass),
        Case::new((200, 1000, 300), F16, u(0.95), Fine)
            .with_fine_tile(64, 4, 1, 2)
            .with_epilogue(true, Relu)
            .with_dense_copy(DenseCopy::Prepass),
        Case::new((200, 512, 512), F16, mixed.clone(), Cover::Mixed(32, 32)).with_dense_copy(DenseCopy::Prepass),
        // 16-bit B of the left orientation through the widening prepass (Bw = B in fp32, rows
        // padded to 4): auto at 4 column tiles, ragged N (scalar loads), bf16 with an
        // epilogue, a K split, and the register path forced
        Case::new((1024, 256, 256), F16, u(0.95), Fine).with_orientation(Orientation::Left),
        Case::new((300, 512, 514), F16, u(0.9), Fine)
            .with_orientation(Orientation::Left)
            .with_tile(64, 2)
            .with_dense_copy(DenseCopy::Prepass),
        Case::new((300, 512, 520), Bf16, u(0.95), Fine)
            .with_orientation(Orientation::Left)
            .with_epilogue(true, Gelu)
            .with_dense_copy(DenseCopy::Prepass),
        Case::new((300, 1024, 264), F16, u(0.95), Fine)
            .with_orientation(Orientation::Left)
            .with_fine_tile(64, 4, 1, 2)
            .with_dense_copy(DenseCopy::Prepass),
        Case::new((1024, 256, 256), F16, u(0.95), Fine)
            .with_orientation(Orientation::Left)
            .with_dense_copy(DenseCopy::Transposing),
        // fine-grained, two CTAs per SM (64 registers per thread)
        Case::new((333, 700, 520), F32, u(0.95), Fine).with_fine_tile(32, 4, 2, 1).with_epilogue(true, Relu),
        Case::new((300, 512, 512), F16, u(0.9), Fine)
            .with_fine_tile(32, 4, 2, 1)
            .with_dense_copy(DenseCopy::Transposing),
        Case::new((300, 512, 512), F16, u(0.9), Fine).with_fine_tile(32, 4, 2, 1),
        Case::new((300, 512, 520), F32, u(0.95), Fine).with_fine_tile(32, 2, 2, 1).with_orientation(Orientation::Left),
        // fine-grained, K split over a cluster of 2 or 4 CTAs (one CTA may get no chunk: 3 chunks
        // over 4), reduced through distributed shared memory
        Case::new((200, 1000, 300), F32, u(0.95), Fine).with_fine_tile(64, 4, 1, 2).with_epilogue(true, Gelu),
        Case::new((130, 700, 260), F32, u(0.9), Fine).with_fine_tile(128, 2, 1, 4),
        Case::new((256, 1024, 512), Bf16, u(0.95), Fine).with_fine_tile(32, 8, 1, 2),
        Case::new((300, 1024, 264), F32, u(0.95), Fine).with_fine_tile(64, 4, 1, 2).with_orientation(Orientation::Left),
        Case::new((96, 1500, 200), F16, u(0.9), Fine)
            .with_fine_tile(32, 2, 1, 4)
            .with_orientation(Orientation::Left)
            .with_epilogue(true, Relu),
        // fine-grained, left orientation (C = W · B)
        Case::new((1024, 1024, 1024), F32, u(0.95), Fine).with_orientation(Orientation::Left),
        Case::new((96, 64, 80), F32, u(0.9), Fine)
            .with_orientation(Orientation::Left)
            .with_values()
            .with_epilogue(true, Relu),
        Case::new((200, 1536, 300), F32, u(0.99), Fine)
            .with_orientation(Orientation::Left)
            .with_mode(Mode::IndexStream)
            .with_epilogue(true, Gelu),
        Case::new((256, 512, 512), F16, u(0.95), Fine).with_orientation(Orientation::Left).with_epilogue(true, None),
        Case::new((130, 100, 66), F32, u(0.8), Fine).with_orientation(Orientation::Left),
        Case::new((300, 512, 520), F32, u(0.5), Fine).with_orientation(Orientation::Left).with_tile(128, 4),
        Case::new((64, 256, 96), Bf16, u(0.9), Fine).with_orientation(Orientation::Left).with_tile(32, 2),
        // dense fallback: our kernel, and cuBLAS + our epilogue kernel
        Case::new((512, 512, 512), F32, u(0.0), Dense(32, 32)).with_epilogue(true, Relu),
        Case::new((256, 512, 384), F16, u(0.0), Dense(32, 32)),
        Case::new((300, 512, 384), F32, u(0.0), Dense(32, 32)).with_cublas().with_epilogue(true, Gelu),
        Case::new((256, 512, 384), F16, u(0.0), Dense(32, 32)).with_cublas(),
        Case::new((200, 256, 100), F16, u(0.0), Dense(4, 4)).with_cublas().with_epilogue(true, Relu),
        Case::new((256, 512, 512), Bf16, u(0.0), Dense(32, 32))
            .with_cublas()
            .with_epilogue(false, Clip { lo: -0.5, hi: 0.5 }),
        // mixed: block kernel + fine kernel accumulating, epilogue on the second
        Case::new((512, 1024, 1024), F32, mixed.clone(), Mixed(32, 32)).with_epilogue(true, Relu),
        Case::new((256, 1024, 1024), F16, mixed.clone(), Mixed(32, 32)),
        // the planner's own covers (plan → codegen::from_plan), several shapes per weight
        Case::new((512, 1024, 1024), F32, mixed.clone(), Planned).with_epilogue(true, Relu),
        Case::new(
            (256, 512, 512),
            F32,
            Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.7, scattered: 0.01 },
            Planned,
        ),
        Case::new((256, 512, 512), F32, Pattern::Block { bh: 64, bw: 64, sparsity: 0.5 }, Planned),
        Case::new((200, 512, 256), F32, u(0.95), Planned),
        Case::new((256, 1024, 1024), F16, mixed, Planned),
        // int8 on tensor cores (m16n8k32, int32 accumulate, dequantizing epilogue, fp16 out)
        Case::new((256, 512, 512), I8, b(0.5), Block(32, 32)),
        Case::new((1024, 1024, 1024), I8, b(0.9), Block(32, 32)).with_mode(Mode::IndexStream),
        Case::new((512, 512, 512), I8, b(0.9), Block(32, 32)).with_mode(Mode::Unrolled).with_epilogue(true, Relu),
        Case::new((300, 512, 512), I8, b(0.9), Block(32, 32)).with_epilogue(true, Gelu).with_tile(64, 3),
        Case::new((100, 256, 256), I8, Pattern::Block { bh: 64, bw: 64, sparsity: 0.75 }, Block(64, 64))
            .with_epilogue(false, Clip { lo: -0.5, hi: 0.5 }),
        Case::new((256, 512, 384), I8, u(0.0), Dense(32, 32)).with_epilogue(true, None),
        Case::new((200, 512, 512), I8, b(0.8), Split(32, 32)).with_epilogue(true, Relu),
        Case::new((256, 512, 512), I8, b(0.9), Planned),
    ]
}

/// The benchmark cases of one size and dtype (PEERS.md and SparTA Fig. 16): unstructured
/// and 32×32-block patterns at 50/90/95/99%, mixed patterns (32×32 blocks + 1% scattered)
/// under the mixed cover and both single-shape covers, and the dense kernel.
pub fn bench_cases(size: usize, dtype: Dtype) -> Vec<Case> {
    let mkn = (size, size, size);
    if dtype == Dtype::I8 {
        return bench_cases_int8(mkn);
    }
    let mut out = vec![];
    for s in [0.5, 0.9, 0.95, 0.99] {
        out.push(Case::new(mkn, dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine));
        if dtype == Dtype::F32 {
            // Both fp32 fine engines forced: on tensor cores (3xTF32 on gathered k) and SIMT.
            for engine in [Engine::Tf32x3, Engine::Simt] {
                out.push(Case::new(mkn, dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine).with_engine(engine));
            }
        }
    }
    if dtype == Dtype::F32 {
        // Its tiles at 95%: rows × column groups × chunk depth / 32 (stages as fit).
        let fine =
            Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 0.95 }, Cover::Fine).with_engine(Engine::Tf32x3);
        for (rows, group, k_rows) in [(64, 16, 2), (64, 16, 6), (64, 8, 4), (32, 16, 4), (32, 24, 4), (128, 8, 2)] {
            out.push(fine.clone().with_ws_tile(rows, 0, group, k_rows));
        }
        // Both group widths forced (8 columns: 16 groups per CTA; 16 columns: 8), every density
        // and the mixed pattern's fine cover.
        for s in [0.5, 0.9, 0.95, 0.99] {
            let fine =
                Case::new(mkn, dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine).with_engine(Engine::Tf32x3);
            out.push(fine.clone().with_ws_tile(64, 0, 16, 3).with_n_tiles(1));
            out.push(fine.with_ws_tile(64, 0, 8, 3).with_n_tiles(2));
        }
        let p = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.9, scattered: 0.01 };
        let fine = Case::new(mkn, dtype, p, Cover::Fine).with_engine(Engine::Tf32x3);
        out.push(fine.clone().with_ws_tile(64, 0, 16, 3).with_n_tiles(1));
        out.push(fine.with_ws_tile(64, 0, 8, 3).with_n_tiles(2));
        // At 99% every CTA reads all of A's rows (its 128 columns leave no chunk empty): wider
        // CTAs read A fewer times.
        let fine =
            Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 0.99 }, Cover::Fine).with_engine(Engine::Tf32x3);
        for (rows, group, k_rows) in [(64, 16, 6), (64, 24, 6), (64, 31, 6), (32, 31, 6), (128, 16, 2)] {
            out.push(fine.clone().with_ws_tile(rows, 0, group, k_rows));
        }
    }
    for s in [0.5, 0.9, 0.95, 0.99] {
        out.push(Case::new(mkn, dtype, Pattern::Block { bh: 32, bw: 32, sparsity: s }, Cover::Block(32, 32)));
    }
    for s in [0.9, 0.95, 0.99] {
        let p = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: s, scattered: 0.01 };
        for cover in [Cover::Mixed(32, 32), Cover::Block(32, 32), Cover::Fine, Cover::Planned] {
            out.push(Case::new(mkn, dtype, p.clone(), cover));
        }
    }
    {
        // The right fine kernel's two ways to A's columns, both forced (auto takes one of them),
        // on the unstructured patterns, the 95% tilings and the mixed cover (16-bit A without
        // the prepass comes through registers).
        for copy in [DenseCopy::Transposing, DenseCopy::Prepass] {
            for s in [0.5, 0.9, 0.95, 0.99] {
                let fine = Case::new(mkn, dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine);
                out.push(fine.with_dense_copy(copy));
            }
            let fine = Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 0.95 }, Cover::Fine);
            for (rows, cols32, split) in [(64, 4, 1), (64, 8, 1), (64, 8, 2), (128, 4, 1), (32, 16, 1)] {
                out.push(fine.clone().with_fine_tile(rows, cols32, 1, split).with_dense_copy(copy));
            }
            let p = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.9, scattered: 0.01 };
            out.push(Case::new(mkn, dtype, p, Cover::Mixed(32, 32)).with_dense_copy(copy));
            if dtype != Dtype::F32 {
                // 16-bit B of the left orientation: widened by the prepass, or through registers.
                for s in [0.9, 0.95, 0.99] {
                    let left = Case::new(mkn, dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine);
                    out.push(left.with_orientation(Orientation::Left).with_dense_copy(copy));
                }
            }
        }
    }
    out.push(Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 0.0 }, Cover::Dense(32, 32)));
    out.push(Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 0.0 }, Cover::Dense(32, 32)).with_cublas());
    if dtype == Dtype::F32 {
        // Uniform weights (one value, as in the HPEC networks): folded vs the general kernel.
        let goal = Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 };
        out.push(Case::new(mkn, dtype, goal.clone(), Cover::Block(32, 32)).with_uniform(0.0625).with_values());
        out.push(Case::new(mkn, dtype, goal.clone(), Cover::Block(32, 32)).with_uniform(0.0625));
        // Half the block columns uniform: those blocks fold, the others stay general.
        out.push(Case::new(mkn, dtype, goal, Cover::Block(32, 32)).with_uniform_half(0.0625).with_values());
    }
    // Tile variants of the goal case (32×32 blocks at 90%).
    let goal = Case::new(mkn, dtype, Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 }, Cover::Block(32, 32));
    let variants: &[(usize, usize)] = if dtype == Dtype::F32 {
        &[(128, 3), (128, 4), (256, 2), (64, 4)]
    } else {
        &[(64, 4), (128, 6), (256, 3), (256, 4)]
    };
    for &(rows, stages) in variants {
        out.push(goal.clone().with_tile(rows, stages));
    }
    if dtype != Dtype::F32 {
        // The warp-specialized wgmma kernel at the other block sparsities.
        for s in [0.5, 0.95, 0.99] {
            let p = Pattern::Block { bh: 32, bw: 32, sparsity: s };
            out.push(Case::new(mkn, dtype, p, Cover::Block(32, 32)).with_engine(Engine::WgmmaWs));
        }
        // Both tensor-core paths on the goal case, and the wgmma kernel's tiles (auto = mma.sync).
        out.push(goal.clone().with_engine(Engine::MmaSync));
        out.push(goal.clone().with_engine(Engine::Wgmma));
        for (rows, stages) in [(128, 8), (192, 5), (256, 4), (256, 6)] {
            out.push(goal.clone().with_tile(rows, stages).with_engine(Engine::Wgmma));
        }
        // The warp-specialized kernel: rows × block columns per item × k-block rows per stage
        // (rings as deep as fit).
        out.push(goal.clone().with_engine(Engine::WgmmaWs));
        for (rows, group, k_rows) in
            [(128, 1, 2), (128, 2, 2), (128, 4, 2), (256, 2, 2), (256, 2, 3), (256, 3, 2), (256, 4, 2), (64, 8, 2)]
        {
            out.push(goal.clone().with_ws_tile(rows, 0, group, k_rows).with_engine(Engine::WgmmaWs));
        }
    }
    if dtype == Dtype::F32 {
        // fp32 on tensor cores at fp32 accuracy (3xTF32): the goal case, its tiles, the other
        // sparsities and the mixed pattern's block and mixed covers.
        let tf = goal.clone().with_engine(Engine::Tf32x3);
        out.push(tf.clone());
        for (rows, stages) in [(64, 3), (64, 4), (128, 2), (128, 4), (256, 2), (256, 3)] {
            out.push(tf.clone().with_tile(rows, stages));
        }
        for s in [0.5, 0.95, 0.99] {
            let p = Pattern::Block { bh: 32, bw: 32, sparsity: s };
            out.push(Case::new(mkn, dtype, p, Cover::Block(32, 32)).with_engine(Engine::Tf32x3));
        }
        let p = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.9, scattered: 0.01 };
        for cover in [Cover::Mixed(32, 32), Cover::Block(32, 32)] {
            out.push(Case::new(mkn, dtype, p.clone(), cover).with_engine(Engine::Tf32x3));
        }
        out.push(
            Case::new(mkn, dtype, Pattern::Unstructured { sparsity: 0.0 }, Cover::Dense(32, 32))
                .with_engine(Engine::Tf32x3),
        );
        // The 3xTF32 block kernel's other shapes (auto runs them on it), for the cost DB's
        // `block_tf32` entry: heights against widths separate its math from its A slices.
        for (bh, bw) in [(8, 8), (16, 16), (32, 8), (32, 16), (8, 32), (64, 32), (128, 32)] {
            for s in [0.5, 0.9, 0.99] {
                out.push(Case::new(mkn, dtype, Pattern::Block { bh, bw, sparsity: s }, Cover::Block(bh, bw)));
            }
        }
    }
    // The same matmul with the sparse weight on the left (C = W·B).
    out.push(goal.with_orientation(Orientation::Left));
    // Fine kernel: tile variants (rows per CTA, columns per CTA / 32) of the unstructured goal
    // cases, and the left orientation (W · B) with the same patterns.
    for s in [0.95, 0.99] {
        let fine = Case::new(mkn, dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine);
        if dtype == Dtype::F32 {
            // Dismantled to the element (one FFMA per nonzero in the code), its tiles (columns
            // per warp / 32, warps per CTA) and with the values as immediates.
            out.push(fine.clone().with_mode(Mode::Unrolled));
            for (cols32, warps) in [(1, 4), (1, 8), (2, 8), (2, 2)] {
                out.push(fine.clone().with_dismantled_tile(cols32, warps));
            }
            out.push(fine.clone().with_mode(Mode::Unrolled).with_values());
            if size == 1024 {
                // A narrow weight under many rows (256 columns: one CTA covers all of them, so A is
                // read once and every CTA on an SM runs the same code): where dismantling should pay.
                for m in [4096, 16384] {
                    let tall = Case::new((m, 1024, 256), dtype, Pattern::Unstructured { sparsity: s }, Cover::Fine);
                    out.push(tall.clone());
                    out.push(tall.clone().with_mode(Mode::IndexStream));
                    out.push(tall.clone().with_mode(Mode::Unrolled));
                    out.push(tall.with_dismantled_tile(1, 8));
                }
            }
        }
        for (rows, cols32) in [(32, 4), (32, 8), (32, 16), (64, 2), (64, 4), (64, 8), (128, 2), (128, 4)] {
            out.push(fine.clone().with_tile(rows, cols32));
        }
        // Two CTAs per SM (64 registers per thread), and K split over a cluster of 2 or 4 (with
        // the fp32 ring, 64 × 256 split over 2 is the 1024³ default; the others are watched).
        out.push(fine.clone().with_fine_tile(32, 4, 2, 1));
        for (rows, cols32, split) in [(32, 8, 2), (64, 8, 2), (64, 4, 2), (64, 8, 4), (32, 16, 2)] {
            out.push(fine.clone().with_fine_tile(rows, cols32, 1, split));
        }
        let left = fine.with_orientation(Orientation::Left);
        // Left tilings: fp32 D tiles stream in by cp.async (no register cap on the chunk).
        for (rows, cols32) in [(32, 16), (64, 4), (64, 8), (128, 2), (128, 4)] {
            out.push(left.clone().with_tile(rows, cols32));
        }
        for (rows, cols32, split) in [(64, 8, 2), (128, 4, 2), (32, 8, 2), (64, 4, 2), (64, 8, 4), (32, 16, 2)] {
            out.push(left.clone().with_fine_tile(rows, cols32, 1, split));
        }
        out.push(left);
    }
    out
}

/// The int8 benchmark cases (block kernels only: there is no int8 fine kernel): 32×32
/// blocks at 50/90/95/99%, 64×64 at 90%, dense, and tile variants of the 90% case.
fn bench_cases_int8(mkn: (usize, usize, usize)) -> Vec<Case> {
    let block =
        |b: usize, s: f64| Case::new(mkn, Dtype::I8, Pattern::Block { bh: b, bw: b, sparsity: s }, Cover::Block(b, b));
    let mut out: Vec<Case> = [0.5, 0.9, 0.95, 0.99].iter().map(|s| block(32, *s)).collect();
    out.push(block(64, 0.9));
    out.push(Case::new(mkn, Dtype::I8, Pattern::Unstructured { sparsity: 0.0 }, Cover::Dense(32, 32)));
    out.push(Case::new(mkn, Dtype::I8, Pattern::Unstructured { sparsity: 0.0 }, Cover::Dense(64, 64)));
    for (rows, stages) in [(64, 4), (256, 3), (128, 6)] {
        out.push(block(32, 0.9).with_tile(rows, stages));
    }
    out
}
