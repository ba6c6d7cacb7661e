//! What one sparse × dense matmul is, as both the planner and the specializer see it: the
//! plain [`SpmmSpec`] and the types of its fields (element type, orientation, epilogue, table
//! mode, tile override, engine, dense-operand copy).

use serde::{Deserialize, Serialize};

/// Element type of the operands. Float types accumulate in fp32 and write their own type;
/// `I8` (symmetric int8 operands, see [`crate::codegen::quant`]) accumulates in int32,
/// dequantizes in the epilogue and writes fp16 ([`Dtype::output`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    I8,
}

impl Dtype {
    pub fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I8 => 1,
        }
    }
    /// Element type of the output (and of the bias): the operand type, except int8, whose
    /// dequantized result is written as fp16 (half the bytes of fp32; the int32 sum is exact,
    /// so fp16 rounding is the only error).
    pub fn output(self) -> Dtype {
        match self {
            Dtype::I8 => Dtype::F16,
            d => d,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I8 => "i8",
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Dtype, String> {
        match s {
            "f32" | "fp32" => Ok(Dtype::F32),
            "f16" | "fp16" => Ok(Dtype::F16),
            "bf16" => Ok(Dtype::Bf16),
            "i8" | "int8" => Ok(Dtype::I8),
            other => Err(format!("unknown dtype {other:?} (choose f32, f16, bf16 or i8)")),
        }
    }
}

/// Where the sparse operand sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Orientation {
    /// `C[M,N] = A[M,K] · W[K,N]`, W sparse: ONNX MatMul with a pruned weight.
    Right,
    /// `C[M,N] = W[M,K] · B[K,N]`, W sparse: ONNX MatMul with the pruned weight first.
    /// The spec's `block`, `blocks` and `values` then describe W as `M × K`, the dense
    /// operand (the kernel's `A` argument) is B, row-major `K × N`, and the bias is per
    /// column of C (length N), as in the right orientation.
    Left,
}

/// Element-wise function applied to the fp32 accumulator before the store.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Activation {
    None,
    Relu,
    /// `min(max(x, lo), hi)`; ONNX Clip, and Min with a constant when `lo` is -inf.
    Clip {
        lo: f32,
        hi: f32,
    },
    /// The tanh approximation of GELU.
    Gelu,
    /// GELU as defined, `x·Φ(x) = 0.5·x·(1 + erf(x/√2))` (BERT's).
    GeluErf,
}

/// Fused epilogue: `act(acc + bias[col])`, bias optional.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Epilogue {
    pub bias: bool,
    pub activation: Activation,
}

impl Epilogue {
    pub const NONE: Epilogue = Epilogue { bias: false, activation: Activation::None };

    /// The epilogue on one value, in f64: the CPU reference uses this. ReLU and Clip keep NaN
    /// as ONNX's Relu and Clip do (`f64::max` would make a NaN the bound).
    pub fn apply(&self, x: f64, bias: f64) -> f64 {
        let x = if self.bias { x + bias } else { x };
        let at_least = |x: f64, lo: f64| if x < lo { lo } else { x };
        let at_most = |x: f64, hi: f64| if x > hi { hi } else { x };
        match self.activation {
            Activation::None => x,
            Activation::Relu => at_least(x, 0.0),
            Activation::Clip { lo, hi } => at_most(at_least(x, lo as f64), hi as f64),
            Activation::Gelu => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Activation::GeluErf => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        }
    }
}

/// Whether the pattern is baked into the code or streamed from device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// Live instances as literal tables (and values, if given) in the source.
    Unrolled,
    /// Block / CSC index arrays in device memory; one kernel serves any pattern.
    IndexStream,
    /// Unrolled unless the literals exceed [`SpmmSpec::code_budget`].
    Auto,
}

/// A tile choice that overrides the heuristic (for tuning): rows of C per CTA and the depth
/// of the cp.async pipeline. The fine kernels read it as dense rows per CTA (32, 64, 128),
/// sparse columns per CTA / 32 (`stages`), CTAs resident per SM (`per_sm`: 1, or 2 with
/// registers capped at 64 per thread) and the split of K over a thread-block cluster (`split`:
/// 1, 2 or 4 CTAs, each summing a share of the k-chunks, reduced through distributed shared
/// memory). The dismantled fine kernel reads `warps` (> 0 selects it: warps per CTA) and
/// `stages` (output columns per warp / 32: 1 or 2), with `rows` = 32. 0 = the specializer's choice.
/// The warp-specialized wgmma kernel reads `group`: block columns per work item (1..=8),
/// `k_rows`: k-block rows per ring stage (1..=4), and `per_sm` (1, or 2 where two CTAs' shared
/// memory fits an SM; its automatic tile takes 2 when at most a fifth of the blocks are live).
/// Other block kernels ignore `per_sm`,
/// `split`, `warps`, `group` and `k_rows`. The 3xTF32 fine kernel (`Engine::Tf32x3`) reads
/// `rows` (32, 64 or 128), `group` (column groups per CTA, 1..=31), `k_rows` (k-chunk
/// depth / 32, 1..=8), `stages` (0 = as many as fit, up to 8) and `n_tiles` (n8 tiles per
/// group: 1 or 2, groups of 8 or 16 columns; 0 = 1 under a forced tile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tile {
    pub rows: usize,
    pub stages: usize,
    pub per_sm: usize,
    pub split: usize,
    pub warps: usize,
    pub group: usize,
    pub k_rows: usize,
    pub n_tiles: usize,
}

impl Tile {
    pub fn new(rows: usize, stages: usize) -> Tile {
        Tile { rows, stages, per_sm: 0, split: 0, warps: 0, group: 0, k_rows: 0, n_tiles: 0 }
    }
}

/// Which tensor-core path a kernel takes: fp16/bf16 blocks on mma.sync or wgmma, fp32 blocks
/// and fp32 element-sparse weights (right orientation) on SIMT FMAs or on tensor cores at
/// fp32 accuracy (3xTF32); other fine kernels ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Engine {
    /// The specializer's choice: fp16/bf16 right-orientation blocks take `WgmmaWs` (the dense
    /// kernel and the left orientation mma.sync; run 17, in the git history of benches/results/);
    /// fp32 blocks take 3xTF32 where it applies, fp32 element-sparse weights on the right
    /// where it measured faster ([`super::fine_tf32::auto_prefers`]).
    Auto,
    /// Warp-level `mma.sync` m16n8k16 (any tensor-core GPU).
    MmaSync,
    /// Warpgroup-level `wgmma.mma_async` from shared memory (Hopper, sm_90a only).
    Wgmma,
    /// `wgmma.mma_async` fed through an mbarrier ring by one producer thread (A by TMA, W by
    /// bulk copies), each work item a row tile × a group of block columns sharing its A tiles
    /// (Hopper, sm_90a only).
    WgmmaWs,
    /// fp32 on tensor cores: `mma.sync` m16n8k8 TF32 on each operand split into a TF32 part
    /// and a TF32 remainder, three products summed in fp32 (fp32-level accuracy; right
    /// orientation). Element-sparse weights: columns in groups of 8 on gathered k
    /// (`Family::FineTf32`).
    Tf32x3,
    /// fp32 on the SIMT FMA pipe (element-sparse weights: the loop or dismantled kernels).
    Simt,
}

/// How the fine kernel gets its dense operand into its fp32 k-major tile (`Ds[k][row]`): A
/// (right orientation) is row-major `M × K`, so its tiles must be transposed; 16-bit B (left)
/// must be widened. Other kernels, and the left orientation on fp32 B, ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DenseCopy {
    /// The specializer's choice (see `codegen`'s `spmm::prepass_pays`).
    Auto,
    /// In the kernel: fp32 A transposed on the way into shared memory, one element per copy;
    /// 16-bit A or B loaded through registers (converted there).
    Transposing,
    /// A prepass kernel writes the dense operand once into an fp32 scratch buffer, k-major
    /// (Aᵀ, `K × M`; or B widened, `K × N`); the fine kernel then copies its tiles 16 bytes at a
    /// time through its shared-memory ring.
    Prepass,
}

/// One sparse × dense matmul to specialize. Plain data, so that the plan's sub-operators
/// (block shape, dtype, orientation, epilogue, nonzero block coordinates, values, mode)
/// map onto it one field each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpmmSpec {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub dtype: Dtype,
    /// Block shape `(bh, bw)` of the weight's pattern; `(1, 1)` selects the fine-grained kernel.
    pub block: (usize, usize),
    pub orientation: Orientation,
    pub epilogue: Epilogue,
    /// Add the product to the existing output instead of overwriting it (the second part of
    /// a mixed pattern; the epilogue is then applied to the sum).
    pub accumulate: bool,
    /// Nonzero blocks `(block_row, block_col)` of the weight, any order, no duplicates.
    pub blocks: Vec<(usize, usize)>,
    /// The weight, row-major `K × N`, when its values are to be embedded as literals.
    pub values: Option<Vec<f32>>,
    pub mode: Mode,
    /// Most literal words (4 bytes each) an unrolled kernel may embed; `Mode::Auto`
    /// switches to the index stream above it. 16384 words = the 64 KiB constant bank.
    pub code_budget: usize,
    /// Most nonzeros a fine-grained weight may have for `Mode::Auto` to dismantle it down to
    /// the element (one multiply-add instruction each, see [`super::dismantled::applies`]);
    /// above it the fine kernel loops over index tables.
    pub unroll_budget: usize,
    /// Tile override; `None` lets the specializer choose.
    pub tile: Option<Tile>,
    /// Tensor-core path of fp16/bf16 block kernels.
    pub engine: Engine,
    /// How the right-orientation fine kernel reads A's columns.
    pub dense_copy: DenseCopy,
    /// Only a prefix of the `m` rows of A is live, its length read at run time: the kernel takes
    /// one more, last parameter `const int* live_rows` and row tiles at or past `*live_rows` do
    /// nothing (rows past it in a live tile are computed from whatever A holds there and must not
    /// be read). The batched networks that drop dead rows use it ([`crate::program::hpec`]).
    /// Right-orientation element-sparse kernels only (the fine loop kernel without its prepass,
    /// and the 3xTF32 fine kernel).
    pub live_rows: bool,
    /// With `live_rows`: the kernel does nothing unless more than this many rows are live (a
    /// kernel for few rows, [`crate::codegen::few_rows::specialize`], takes the product below
    /// it). 0: always.
    pub live_above: usize,
    /// Every weight value is a TF32 number (its low 13 mantissa bits zero), as read from the
    /// actual values where a kernel's spec meets its weight (`codegen::from_plan`, so the tune
    /// times what the lowerings run); never assumed. The 3xTF32 fine
    /// kernel then leaves out the product with W's remainder, which is exactly zero: the same
    /// sums bit for bit from two tensor-core products a step instead of three.
    pub w_tf32_exact: bool,
    /// The weight's elements (`block` (1, 1), `blocks` the kept elements) keep at most 2 of
    /// every 4 consecutive k of a column, and the part runs on the 2:4 sparse tensor-core
    /// kernel ([`super::Family::TwoFour`]; 16-bit, right orientation, see
    /// [`super::two_four::supports`]). Its tile reads `rows`, `group`, `warps`, `stages` and
    /// `k_rows` ([`super::two_four::tiling`]).
    pub two_four: bool,
    /// LayerNorm work around the epilogue (`program::SpmmNorm` states what it computes): the
    /// warp-specialized wgmma kernel takes it, no other kernel does.
    pub row_norm: RowNorm,
}

/// The LayerNorm work a 16-bit block product's kernel does around its epilogue, so that a
/// LayerNorm between two products needs no step of its own (`program::model::norm_defer`).
/// Row statistics pass between kernels as each row's sum and sum of squares (f64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RowNorm {
    /// A holds a LayerNorm's input `s` (its rows' sums, the LayerNorm's `eps`): before
    /// the epilogue, `acc ← rstd·(acc − mean·colsum)` with each column's sum of the weight
    /// (which holds diag(γ)·W), so that the product is the normalized rows' (the epilogue's
    /// bias carries βᵀW).
    pub input: Option<RowStatsIn>,
    /// A residual added after the epilogue (the epilogue's value rounded to the output type,
    /// plus the residual, rounded again).
    pub residual: bool,
    /// The residual is a LayerNorm's input, normalized as it is read: `(r − mean)·rstd·γ + β`.
    pub residual_affine: Option<RowStatsIn>,
    /// The output rows' sums added (f64 atomics; zero before the kernel).
    pub stats: bool,
}

/// Row statistics a kernel reads: the LayerNorm's epsilon.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RowStatsIn {
    pub eps: f32,
}

impl RowNorm {
    pub fn any(&self) -> bool {
        self.input.is_some() || self.residual || self.stats
    }
}

/// Whether every value is exactly a TF32 number (what [`SpmmSpec::w_tf32_exact`] states): the
/// challenge networks' 1/16 weights are, trained weights almost never.
pub fn tf32_exact(values: &[f32]) -> bool {
    values.iter().all(|v| v.to_bits() & 0x1fff == 0)
}

impl SpmmSpec {
    /// A spec for the right orientation with no epilogue, auto mode and the default budget.
    pub fn new(m: usize, k: usize, n: usize, dtype: Dtype, block: (usize, usize), blocks: Vec<(usize, usize)>) -> Self {
        SpmmSpec {
            m,
            k,
            n,
            dtype,
            block,
            orientation: Orientation::Right,
            epilogue: Epilogue::NONE,
            accumulate: false,
            blocks,
            values: None,
            mode: Mode::Auto,
            code_budget: 16384,
            unroll_budget: DEFAULT_UNROLL_BUDGET,
            tile: None,
            engine: Engine::Auto,
            dense_copy: DenseCopy::Auto,
            live_rows: false,
            live_above: 0,
            w_tf32_exact: false,
            two_four: false,
            row_norm: RowNorm::default(),
        }
    }

    /// The nonzero blocks of a `K × N` pruned mask (`true` = pruned) at block shape `block`.
    pub fn blocks_of_mask(mask: &[bool], k: usize, n: usize, block: (usize, usize)) -> Vec<(usize, usize)> {
        let (bh, bw) = block;
        let mut live = vec![false; k.div_ceil(bh) * n.div_ceil(bw)];
        let nbw = n.div_ceil(bw);
        for r in 0..k {
            for c in 0..n {
                if !mask[r * n + c] {
                    live[(r / bh) * nbw + c / bw] = true;
                }
            }
        }
        (0..live.len()).filter(|i| live[*i]).map(|i| (i / nbw, i % nbw)).collect()
    }
}

/// Default [`SpmmSpec::unroll_budget`]: 2^16 nonzeros (NVRTC and ptxas take ~1 min for 52 k on
/// two cores). `Mode::Auto` dismantles only where it measured faster on the H200 (run 12,
/// `benches/results/spmm_gpu.md`): under 1.5% kept with N ≤ 256 (16384 × 1024 × 256 at 99%:
/// 0.0457 ms against the loop kernel's 0.0788; 4096 rows: 0.0190 against 0.0232). At 1024³ it lost
/// (95%: 0.0542 against 0.0269; 99%: 0.0227 against 0.0172) and at 95% everywhere: its
/// straight-line code streams from L2 at instruction-fetch latency.
pub const DEFAULT_UNROLL_BUDGET: usize = 1 << 16;
