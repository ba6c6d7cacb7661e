//! The benchmark cases as a table: per size and dtype, each row once for each sparsity of
//! the sweep above it.

use super::row::{build, Opt, Opt::*};
use super::{Case, Cover, Cover::*};
use spartac::codegen::Dtype::{self, *};
use spartac::tesa::patterns::Pattern;
use Dtypes::*;
use Line::*;
use Pat::*;

/// The benchmark cases of one size and dtype (PEERS.md and SparTA Fig. 16): unstructured
/// and 32×32-block patterns at 50/90/95/99%, mixed patterns (32×32 blocks + 1% scattered)
/// under the mixed cover and both single-shape covers, and the dense kernel.
pub fn bench_cases(size: usize, dtype: Dtype) -> Vec<Case> {
    let table = if dtype == I8 { BENCH_INT8 } else { BENCH };
    let mut out = vec![];
    for block in table.chunk_by(|_, next| !matches!(next, Sweep(_))) {
        let Some((Sweep(sparsities), lines)) = block.split_first() else {
            unreachable!("a bench table starts with a sweep")
        };
        for &s in *sparsities {
            for line in lines {
                let (mkn, dtypes, pat, cover, opts) = match *line {
                    Sweep(_) => unreachable!("a sweep starts a block"),
                    Cube(dtypes, pat, cover, opts) => ((size, size, size), dtypes, pat, cover, opts),
                    Tall(m, dtypes, pat, cover, opts) if size == 1024 => ((m, 1024, 256), dtypes, pat, cover, opts),
                    Tall(..) => continue,
                    Shape(mkn, dtypes, pat, cover, opts) if size == 1024 => (mkn, dtypes, pat, cover, opts),
                    Shape(..) => continue,
                };
                if dtypes.includes(dtype) {
                    out.push(build(mkn, dtype, pat.at(s), cover, opts));
                }
            }
        }
    }
    out
}

/// The linear layers of the transformers we compile (`m` = batch × sequence, `k` → `n`):
/// MiniLM-L6 at 32 × 128, a BERT-style encoder (hidden 512) at 16 × 256 and BERT-base at
/// 8 × 384, each with Q, K and V merged into one product as well.
pub const TRANSFORMER_SHAPES: &[(&str, (usize, usize, usize))] = &[
    ("minilm qkv", (4096, 384, 1152)),
    ("minilm out", (4096, 384, 384)),
    ("minilm ffn1", (4096, 384, 1536)),
    ("minilm ffn2", (4096, 1536, 384)),
    ("bert512 qkv", (4096, 512, 1536)),
    ("bert512 out", (4096, 512, 512)),
    ("bert512 ffn1", (4096, 512, 2048)),
    ("bert512 ffn2", (4096, 2048, 512)),
    ("bertbase qkv", (3072, 768, 2304)),
    ("bertbase out", (3072, 768, 768)),
    ("bertbase ffn1", (3072, 768, 3072)),
    ("bertbase ffn2", (3072, 3072, 768)),
];

/// The 16-bit block kernels against cuBLAS on [`TRANSFORMER_SHAPES`], with the bias the models
/// fuse: 32×32 blocks at 50% and 90% under the default engine, mma.sync, tiles of the
/// warp-specialized wgmma kernel and the planner's choice; dense on cuBLAS and on our kernel.
pub fn transformer_cases(dtype: Dtype) -> Vec<(&'static str, Case)> {
    let mut out = vec![];
    for &(name, mkn) in TRANSFORMER_SHAPES {
        for s in [0.5, 0.9] {
            let pat = || B(32, 32).at(s);
            out.push((name, build(mkn, dtype, pat(), Block(32, 32), &[Bias])));
            out.push((name, build(mkn, dtype, pat(), Block(32, 32), &[Bias, MmaSync])));
            out.push((name, build(mkn, dtype, pat(), Block(32, 32), &[Bias, WgmmaWs])));
            for &(rows, group, k_rows) in WS_TILES {
                let opts = [Bias, WsTile(rows, 0, group, k_rows), WgmmaWs];
                out.push((name, build(mkn, dtype, pat(), Block(32, 32), &opts)));
            }
            out.push((name, build(mkn, dtype, pat(), Planned, &[Bias])));
        }
        out.push((name, build(mkn, dtype, U.at(0.0), Dense(32, 32), &[Bias, Cublas])));
        out.push((name, build(mkn, dtype, U.at(0.0), Dense(32, 32), &[Bias])));
    }
    out
}

/// The shapes of the 2:4 bench: the goal cube and the MiniLM-L6 and BERT-base linears at
/// 4096 rows (`k → n`).
pub const TWO_FOUR_SHAPES: &[(&str, (usize, usize, usize))] = &[
    ("cube", (4096, 4096, 4096)),
    ("minilm qkv", (4096, 384, 1152)),
    ("minilm ffn1", (4096, 384, 1536)),
    ("minilm ffn2", (4096, 1536, 384)),
    ("bertbase ffn1", (4096, 768, 3072)),
    ("bertbase ffn2", (4096, 3072, 768)),
];

/// Tiles of the Hopper 2:4 kernel the bench tries beside its automatic one: (rows of A,
/// columns / 64) per item.
const TWO_FOUR_TILES: &[(usize, usize)] = &[(256, 2), (128, 4), (128, 2), (64, 4), (192, 2), (128, 1)];

/// The 2:4 kernels against dense in the same call, on [`TWO_FOUR_SHAPES`] with the bias the
/// models fuse: the dense reference first (the ratio `kernels bench` prints: cuBLAS on 16 bits;
/// on int8, which cuBLAS is not routed for, our dense int8 kernel on its fastest 64×64 tiles,
/// and `benches/two_four_torch.py` times cuBLASLt's int8 GEMM in the same call), then the
/// Hopper kernel's automatic tile, once without the bias, [`TWO_FOUR_TILES`], on 16 bits the
/// `mma.sp` kernel's automatic tile; then the weight with 30% and 50% of its 32×32 blocks
/// pruned too, on the 2:4 kernel, the block kernel and (16 bits) the planner's choice. int8
/// would skip a shape whose K is not whole 128-deep stages (none of these).
pub fn two_four_cases(dtype: Dtype) -> Vec<(&'static str, Case)> {
    let mut out = vec![];
    for &(name, mkn) in TWO_FOUR_SHAPES {
        if dtype == I8 && !mkn.1.is_multiple_of(128) {
            continue;
        }
        if dtype == I8 {
            out.push((name, build(mkn, dtype, U.at(0.0), Dense(64, 64), &[Bias])));
        } else {
            out.push((name, build(mkn, dtype, U.at(0.0), Dense(32, 32), &[Bias, Cublas])));
        }
        let nm = Pattern::NM { n: 2, m: 4 };
        out.push((name, build(mkn, dtype, nm.clone(), TwoFour, &[Bias])));
        out.push((name, build(mkn, dtype, nm.clone(), TwoFour, &[])));
        // int8 has one m64 tile a warpgroup: no 256-column items.
        for &(rows, group) in TWO_FOUR_TILES.iter().filter(|t| dtype != I8 || t.1 < 4) {
            out.push((name, build(mkn, dtype, nm.clone(), TwoFour, &[Bias, SpTile(rows, group, 0, 0, 0)])));
        }
        if dtype != I8 {
            out.push((name, build(mkn, dtype, nm.clone(), TwoFour, &[Bias, MmaSync])));
        }
        // The weight 2:4 with 30% / 50% of its 32×32 blocks pruned too (SparTA's 2:4 + block
        // weight): the 2:4 kernel alone, the block kernel alone, and the planner's choice.
        for s in [0.3, 0.5] {
            let dead = DeadBlocks(32, 32, s);
            out.push((name, build(mkn, dtype, nm.clone(), TwoFour, &[Bias, dead])));
            out.push((name, build(mkn, dtype, nm.clone(), Block(32, 32), &[Bias, dead])));
            if dtype != I8 {
                out.push((name, build(mkn, dtype, nm.clone(), Planned, &[Bias, dead])));
            }
        }
    }
    out
}

/// Tiles of the warp-specialized wgmma kernel on [`TRANSFORMER_SHAPES`]: (rows per item,
/// block columns per item, k-block rows per stage).
const WS_TILES: &[(usize, usize, usize)] = &[(128, 1, 1), (128, 2, 2), (256, 2, 1), (64, 4, 2)];

/// One line of a bench table.
#[derive(Clone, Copy)]
enum Line {
    /// The rows down to the next sweep, in turn for each of these sparsities.
    Sweep(&'static [f64]),
    /// A `size³` case for these dtypes: pattern (at the sweep's sparsity), cover, options.
    Cube(Dtypes, Pat, Cover, &'static [Opt]),
    /// The same on an `m × 1024 × 256` matmul, in the 1024³ list only.
    Tall(usize, Dtypes, Pat, Cover, &'static [Opt]),
    /// The same on an `m × k × n` matmul, in the 1024³ list only.
    Shape((usize, usize, usize), Dtypes, Pat, Cover, &'static [Opt]),
}

/// The dtypes a bench row is for.
#[derive(Clone, Copy)]
enum Dtypes {
    All,
    Fp32,
    /// fp16 and bf16 (int8 has a table of its own).
    Half,
}

impl Dtypes {
    fn includes(self, dtype: Dtype) -> bool {
        match self {
            All => true,
            Fp32 => dtype == F32,
            Half => dtype != F32,
        }
    }
}

/// A bench row's pattern, its sparsity left to the sweep.
#[derive(Clone, Copy)]
enum Pat {
    /// Unstructured.
    U,
    /// `bh × bw` blocks.
    B(usize, usize),
    /// `bh × bw` blocks plus 1% scattered (the sparsity is the blocks').
    M(usize, usize),
}

impl Pat {
    fn at(self, sparsity: f64) -> Pattern {
        match self {
            U => Pattern::Unstructured { sparsity },
            B(bh, bw) => Pattern::Block { bh, bw, sparsity },
            M(bh, bw) => Pattern::Mixed { bh, bw, block_sparsity: sparsity, scattered: 0.01 },
        }
    }
}

const SPARSITIES: &[f64] = &[0.5, 0.9, 0.95, 0.99];

const BENCH: &[Line] = &[
    // The fine kernel; fp32 with both of its engines forced too: tensor cores (3xTF32 on
    // gathered k) and SIMT.
    Sweep(SPARSITIES),
    Cube(All, U, Fine, &[]),
    Cube(Fp32, U, Fine, &[Tf32x3]),
    Cube(Fp32, U, Fine, &[Simt]),
    // fp32 3xTF32 fine tiles at 95%: rows × column groups × chunk depth / 32 (stages as fit).
    Sweep(&[0.95]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 16, 2), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 16, 6), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 8, 4), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(32, 0, 16, 4), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(32, 0, 24, 4), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(128, 0, 8, 2), Tf32x3]),
    // Both group widths forced (8 columns: 16 groups per CTA; 16 columns: 8), every density
    // and the mixed pattern's fine cover.
    Sweep(SPARSITIES),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 16, 3), NTiles(1), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 8, 3), NTiles(2), Tf32x3]),
    Sweep(&[0.9]),
    Cube(Fp32, M(32, 32), Fine, &[WsTile(64, 0, 16, 3), NTiles(1), Tf32x3]),
    Cube(Fp32, M(32, 32), Fine, &[WsTile(64, 0, 8, 3), NTiles(2), Tf32x3]),
    // At 99% every CTA reads all of A's rows (its 128 columns leave no chunk empty): wider
    // CTAs read A fewer times.
    Sweep(&[0.99]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 16, 6), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 24, 6), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(64, 0, 31, 6), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(32, 0, 31, 6), Tf32x3]),
    Cube(Fp32, U, Fine, &[WsTile(128, 0, 16, 2), Tf32x3]),
    // 32×32 blocks; the mixed pattern under the mixed cover, both single-shape covers and the
    // planner's.
    Sweep(SPARSITIES),
    Cube(All, B(32, 32), Block(32, 32), &[]),
    Sweep(&[0.9, 0.95, 0.99]),
    Cube(All, M(32, 32), Mixed(32, 32), &[]),
    Cube(All, M(32, 32), Block(32, 32), &[]),
    Cube(All, M(32, 32), Fine, &[]),
    Cube(All, M(32, 32), Planned, &[]),
    // The right fine kernel's two ways to A's columns, both forced (auto takes one of them),
    // on the unstructured patterns, the 95% tilings (rows, columns / 32, K split) and the
    // mixed cover (16-bit A without the prepass comes through registers); 16-bit B of the
    // left orientation widened by the prepass, or through registers. Transposing first:
    Sweep(SPARSITIES),
    Cube(All, U, Fine, &[Transposing]),
    Sweep(&[0.95]),
    Cube(All, U, Fine, &[FineTile(64, 4, 1, 1), Transposing]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 1), Transposing]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 2), Transposing]),
    Cube(All, U, Fine, &[FineTile(128, 4, 1, 1), Transposing]),
    Cube(All, U, Fine, &[FineTile(32, 16, 1, 1), Transposing]),
    Sweep(&[0.9]),
    Cube(All, M(32, 32), Mixed(32, 32), &[Transposing]),
    Sweep(&[0.9, 0.95, 0.99]),
    Cube(Half, U, Fine, &[Left, Transposing]),
    // ... then the prepass.
    Sweep(SPARSITIES),
    Cube(All, U, Fine, &[Prepass]),
    Sweep(&[0.95]),
    Cube(All, U, Fine, &[FineTile(64, 4, 1, 1), Prepass]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 1), Prepass]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 2), Prepass]),
    Cube(All, U, Fine, &[FineTile(128, 4, 1, 1), Prepass]),
    Cube(All, U, Fine, &[FineTile(32, 16, 1, 1), Prepass]),
    Sweep(&[0.9]),
    Cube(All, M(32, 32), Mixed(32, 32), &[Prepass]),
    Sweep(&[0.9, 0.95, 0.99]),
    Cube(Half, U, Fine, &[Left, Prepass]),
    // Dense: our kernel and cuBLAS.
    Sweep(&[0.0]),
    Cube(All, U, Dense(32, 32), &[]),
    Cube(All, U, Dense(32, 32), &[Cublas]),
    // Skinny 16-bit products (EfficientNet-Lite0's 1×1 convolutions at batch 32, dense and
    // with 70% of the channels pruned): the streaming kernel against cuBLAS (+ bias pass).
    Shape((401_408, 16, 96), Half, U, Dense(8, 8), &[Bias]),
    Shape((401_408, 16, 96), Half, U, Dense(8, 8), &[Bias, Cublas]),
    Shape((100_352, 24, 144), Half, U, Dense(8, 8), &[Bias]),
    Shape((100_352, 24, 144), Half, U, Dense(8, 8), &[Bias, Cublas]),
    Shape((100_352, 144, 24), Half, U, Dense(8, 8), &[Bias]),
    Shape((100_352, 144, 24), Half, U, Dense(8, 8), &[Bias, Cublas]),
    Shape((100_352, 11, 43), Half, U, Planned, &[Bias]),
    Shape((1_568, 346, 99), Half, U, Planned, &[Bias]),
    // The goal case (32×32 blocks at 90%). Uniform weights (one value, as in the HPEC
    // networks): folded vs the general kernel; half the block columns uniform: those blocks
    // fold, the others stay general.
    Sweep(&[0.9]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Values, Uniform(0.0625)]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Uniform(0.0625)]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Values, UniformHalf(0.0625)]),
    // Tile variants of the goal case.
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(128, 3)]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(128, 4)]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(256, 2)]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(64, 4)]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(64, 4)]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(128, 6)]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(256, 3)]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(256, 4)]),
    // The warp-specialized wgmma kernel at the other block sparsities.
    Sweep(&[0.5, 0.95, 0.99]),
    Cube(Half, B(32, 32), Block(32, 32), &[WgmmaWs]),
    // Both tensor-core paths on the goal case, and the wgmma kernel's tiles (auto = mma.sync).
    Sweep(&[0.9]),
    Cube(Half, B(32, 32), Block(32, 32), &[MmaSync]),
    Cube(Half, B(32, 32), Block(32, 32), &[Wgmma]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(128, 8), Wgmma]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(192, 5), Wgmma]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(256, 4), Wgmma]),
    Cube(Half, B(32, 32), Block(32, 32), &[Tile(256, 6), Wgmma]),
    // The warp-specialized kernel: rows × block columns per item × k-block rows per stage
    // (rings as deep as fit).
    Cube(Half, B(32, 32), Block(32, 32), &[WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(128, 0, 1, 2), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(128, 0, 2, 2), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(128, 0, 4, 2), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(256, 0, 2, 2), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(256, 0, 2, 3), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(256, 0, 3, 2), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(256, 0, 4, 2), WgmmaWs]),
    Cube(Half, B(32, 32), Block(32, 32), &[WsTile(64, 0, 8, 2), WgmmaWs]),
    // fp32 on tensor cores at fp32 accuracy (3xTF32): the goal case, its tiles, the other
    // sparsities and the mixed pattern's block and mixed covers.
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tf32x3]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(64, 3), Tf32x3]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(64, 4), Tf32x3]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(128, 2), Tf32x3]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(128, 4), Tf32x3]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(256, 2), Tf32x3]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tile(256, 3), Tf32x3]),
    Sweep(&[0.5, 0.95, 0.99]),
    Cube(Fp32, B(32, 32), Block(32, 32), &[Tf32x3]),
    Sweep(&[0.9]),
    Cube(Fp32, M(32, 32), Mixed(32, 32), &[Tf32x3]),
    Cube(Fp32, M(32, 32), Block(32, 32), &[Tf32x3]),
    Sweep(&[0.0]),
    Cube(Fp32, U, Dense(32, 32), &[Tf32x3]),
    // The 3xTF32 block kernel's other shapes (auto runs them on it), for the cost DB's
    // `block_tf32` entry: heights against widths separate its math from its A slices.
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(8, 8), Block(8, 8), &[]),
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(16, 16), Block(16, 16), &[]),
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(32, 8), Block(32, 8), &[]),
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(32, 16), Block(32, 16), &[]),
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(8, 32), Block(8, 32), &[]),
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(64, 32), Block(64, 32), &[]),
    Sweep(&[0.5, 0.9, 0.99]),
    Cube(Fp32, B(128, 32), Block(128, 32), &[]),
    // The goal case with the sparse weight on the left (C = W·B).
    Sweep(&[0.9]),
    Cube(All, B(32, 32), Block(32, 32), &[Left]),
    // The fine kernel at the unstructured goal densities. fp32: dismantled to the element (one
    // FFMA per nonzero in the code), its tiles (columns per warp / 32, warps per CTA) and with
    // the values as immediates.
    Sweep(&[0.95, 0.99]),
    Cube(Fp32, U, Fine, &[Unrolled]),
    Cube(Fp32, U, Fine, &[Dismantled(1, 4)]),
    Cube(Fp32, U, Fine, &[Dismantled(1, 8)]),
    Cube(Fp32, U, Fine, &[Dismantled(2, 8)]),
    Cube(Fp32, U, Fine, &[Dismantled(2, 2)]),
    Cube(Fp32, U, Fine, &[Unrolled, Values]),
    // A narrow weight under many rows (256 columns: one CTA covers all of them, so A is read
    // once and every CTA on an SM runs the same code): where dismantling should pay.
    Tall(4096, Fp32, U, Fine, &[]),
    Tall(4096, Fp32, U, Fine, &[Stream]),
    Tall(4096, Fp32, U, Fine, &[Unrolled]),
    Tall(4096, Fp32, U, Fine, &[Dismantled(1, 8)]),
    Tall(16384, Fp32, U, Fine, &[]),
    Tall(16384, Fp32, U, Fine, &[Stream]),
    Tall(16384, Fp32, U, Fine, &[Unrolled]),
    Tall(16384, Fp32, U, Fine, &[Dismantled(1, 8)]),
    // Tile variants (rows per CTA, columns per CTA / 32).
    Cube(All, U, Fine, &[Tile(32, 4)]),
    Cube(All, U, Fine, &[Tile(32, 8)]),
    Cube(All, U, Fine, &[Tile(32, 16)]),
    Cube(All, U, Fine, &[Tile(64, 2)]),
    Cube(All, U, Fine, &[Tile(64, 4)]),
    Cube(All, U, Fine, &[Tile(64, 8)]),
    Cube(All, U, Fine, &[Tile(128, 2)]),
    Cube(All, U, Fine, &[Tile(128, 4)]),
    // Two CTAs per SM (64 registers per thread), and K split over a cluster of 2 or 4 (with
    // the fp32 ring, 64 × 256 split over 2 is the 1024³ default; the others are watched).
    Cube(All, U, Fine, &[FineTile(32, 4, 2, 1)]),
    Cube(All, U, Fine, &[FineTile(32, 8, 1, 2)]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 2)]),
    Cube(All, U, Fine, &[FineTile(64, 4, 1, 2)]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 4)]),
    Cube(All, U, Fine, &[FineTile(32, 16, 1, 2)]),
    // The left orientation (W · B): fp32 D tiles stream in by cp.async (no register cap on
    // the chunk).
    Cube(All, U, Fine, &[Tile(32, 16), Left]),
    Cube(All, U, Fine, &[Tile(64, 4), Left]),
    Cube(All, U, Fine, &[Tile(64, 8), Left]),
    Cube(All, U, Fine, &[Tile(128, 2), Left]),
    Cube(All, U, Fine, &[Tile(128, 4), Left]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 2), Left]),
    Cube(All, U, Fine, &[FineTile(128, 4, 1, 2), Left]),
    Cube(All, U, Fine, &[FineTile(32, 8, 1, 2), Left]),
    Cube(All, U, Fine, &[FineTile(64, 4, 1, 2), Left]),
    Cube(All, U, Fine, &[FineTile(64, 8, 1, 4), Left]),
    Cube(All, U, Fine, &[FineTile(32, 16, 1, 2), Left]),
    Cube(All, U, Fine, &[Left]),
];

/// int8 (block kernels only: there is no int8 fine kernel): 32×32 blocks at 50/90/95/99%,
/// 64×64 at 90%, dense, and tile variants of the 90% case.
const BENCH_INT8: &[Line] = &[
    Sweep(SPARSITIES),
    Cube(All, B(32, 32), Block(32, 32), &[]),
    Sweep(&[0.9]),
    Cube(All, B(64, 64), Block(64, 64), &[]),
    Sweep(&[0.0]),
    Cube(All, U, Dense(32, 32), &[]),
    Cube(All, U, Dense(64, 64), &[]),
    Sweep(&[0.9]),
    Cube(All, B(32, 32), Block(32, 32), &[Tile(64, 4)]),
    Cube(All, B(32, 32), Block(32, 32), &[Tile(256, 3)]),
    Cube(All, B(32, 32), Block(32, 32), &[Tile(128, 6)]),
];
