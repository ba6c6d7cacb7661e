//! The correctness cases as a table, one case per row: `(M, K, N)`, dtype, pattern, cover
//! and options ([`Opt`]).

use super::row::{b, build, mixed, nm24, u, Opt, Opt::*};
use super::{Case, Cover, Cover::*};
use spartac::codegen::Dtype::{self, *};
use spartac::tesa::patterns::Pattern;

/// The correctness cases: every family, both modes, every epilogue, odd row counts.
pub fn correctness_cases() -> Vec<Case> {
    CORRECTNESS
        .iter()
        .map(|(mkn, dtype, pattern, cover, opts)| build(*mkn, *dtype, pattern.clone(), *cover, opts))
        .collect()
}

/// `(M, K, N)`, dtype, pattern, cover, options.
type Row = ((usize, usize, usize), Dtype, Pattern, Cover, &'static [Opt]);

const CORRECTNESS: &[Row] = &[
    // fp32 block-sparse (SIMT)
    ((64, 128, 96), F32, b(32, 32, 0.5), Block(32, 32), &[Values]),
    // uniform blocks, values embedded: the folded kernel (row sums, one literal per block)
    ((300, 512, 512), F32, b(32, 32, 0.9), Block(32, 32), &[Bias, Relu, Values, Uniform(0.0625)]),
    ((256, 256, 256), F32, b(16, 16, 0.7), Block(16, 16), &[Values, Uniform(-1.5)]),
    // some blocks uniform: those fold, the others keep their W tiles
    ((300, 512, 512), F32, b(32, 32, 0.8), Block(32, 32), &[Bias, Gelu, Values, UniformHalf(0.375)]),
    ((200, 256, 256), F32, b(16, 16, 0.8), Block(16, 16), &[Bias, Relu]),
    ((1024, 1024, 1024), F32, b(32, 32, 0.9), Block(32, 32), &[Stream]),
    ((512, 512, 512), F32, b(32, 32, 0.95), Block(32, 32), &[Bias, Gelu, Unrolled]),
    ((384, 512, 512), F32, b(64, 64, 0.75), Block(64, 64), &[Clip(-0.5, 0.5)]),
    ((256, 256, 256), F32, b(8, 8, 0.9), Block(8, 8), &[]),
    ((128, 256, 128), F32, b(32, 32, 1.0), Block(32, 32), &[Bias]),
    // fp16/bf16 block-sparse (tensor cores)
    ((64, 128, 96), F16, b(32, 32, 0.5), Block(32, 32), &[Values]),
    ((100, 256, 256), F16, b(16, 16, 0.8), Block(16, 16), &[Bias, Relu]),
    ((1024, 1024, 1024), F16, b(32, 32, 0.9), Block(32, 32), &[Stream]),
    ((512, 512, 512), F16, b(64, 64, 0.75), Block(64, 64), &[Bias, Gelu, Unrolled]),
    ((256, 512, 512), Bf16, b(32, 32, 0.9), Block(32, 32), &[Clip(f32::NEG_INFINITY, 1.0)]),
    // tile overrides (rows per CTA, pipeline stages), ragged M
    ((300, 512, 512), F32, b(32, 32, 0.9), Block(32, 32), &[Tile(64, 2)]),
    ((300, 512, 512), F16, b(32, 32, 0.9), Block(32, 32), &[Tile(256, 3)]),
    // left orientation (C = W·B, W sparse M × K): transposed block kernels; N ragged
    // against the tile rows; the split cover exercises accumulate
    ((256, 512, 384), F32, b(32, 32, 0.8), Block(32, 32), &[Left]),
    ((128, 256, 200), F32, b(16, 16, 0.8), Block(16, 16), &[Bias, Relu, Left]),
    ((1024, 1024, 1000), F32, b(32, 32, 0.9), Block(32, 32), &[Bias, Gelu, Stream, Left]),
    ((64, 128, 96), F32, b(32, 32, 0.5), Block(32, 32), &[Values, Left]),
    ((256, 512, 264), F16, b(32, 32, 0.9), Block(32, 32), &[Bias, Gelu, Left]),
    ((96, 256, 136), F16, b(16, 16, 0.8), Block(16, 16), &[Bias, Relu, Left]),
    ((64, 128, 96), F16, b(32, 32, 0.5), Block(32, 32), &[Values, Left]),
    ((512, 1024, 512), Bf16, b(32, 32, 0.9), Block(32, 32), &[Stream, Left]),
    ((512, 512, 512), F32, u(0.0), Dense(32, 32), &[Bias, Relu, Left]),
    ((256, 512, 384), F16, u(0.0), Dense(32, 32), &[Left]),
    ((256, 512, 392), F32, b(32, 32, 0.8), Split(32, 32), &[Bias, Relu, Left]),
    ((256, 512, 392), F16, b(32, 32, 0.8), Split(32, 32), &[Bias, Left]),
    ((200, 512, 512), F32, b(32, 32, 0.8), Split(32, 32), &[Bias, Relu]),
    // Hopper wgmma (asked for; auto takes mma.sync) and mma.sync forced: ragged M, every
    // epilogue, both modes, bf16, 16..64-row and 16..64-column blocks
    ((1024, 1024, 1024), F16, b(32, 32, 0.9), Block(32, 32), &[Stream, MmaSync]),
    ((300, 512, 512), F16, b(32, 32, 0.9), Block(32, 32), &[Tile(256, 3), MmaSync]),
    ((777, 1024, 512), F16, b(32, 32, 0.9), Block(32, 32), &[Tile(256, 5), Wgmma]),
    ((4099, 512, 256), F16, b(32, 32, 0.8), Block(32, 32), &[Bias, Relu, Stream, Wgmma]),
    ((333, 512, 512), Bf16, b(32, 32, 0.7), Block(32, 32), &[Bias, Gelu, Tile(128, 4), Wgmma]),
    ((64, 256, 256), Bf16, b(32, 32, 0.5), Block(32, 32), &[Values, Tile(64, 8), Wgmma]),
    ((200, 512, 384), F16, b(64, 64, 0.6), Block(64, 64), &[Clip(-1.0, 0.25), Stream, Tile(192, 4), Wgmma]),
    ((130, 256, 384), F16, b(32, 16, 0.6), Block(32, 16), &[Bias, Wgmma]),
    ((100, 256, 256), Bf16, b(16, 16, 0.8), Block(16, 16), &[Unrolled, Wgmma]),
    ((256, 512, 512), F16, u(0.0), Dense(32, 32), &[Wgmma]),
    ((256, 1024, 1024), F16, mixed(0.9), Mixed(32, 32), &[Bias, Relu, Wgmma]),
    // The warp-specialized wgmma kernel: ragged M and N (a last group short of block
    // columns), groups 1..8, 64/128/256 rows, short rings, every epilogue, both modes,
    // bf16, 16..64-wide blocks, dense, empty block columns, the mixed cover's accumulate;
    // two CTAs per SM where few blocks are live (the 0.9 cases)
    ((777, 1024, 544), F16, b(32, 32, 0.9), Block(32, 32), &[WgmmaWs]),
    ((1000, 768, 1152), Bf16, b(32, 32, 0.9), Block(32, 32), &[Bias, Gelu, WgmmaWs]),
    ((4099, 512, 256), F16, b(32, 32, 0.8), Block(32, 32), &[Bias, Relu, Stream, WgmmaWs]),
    ((333, 512, 480), Bf16, b(32, 32, 0.7), Block(32, 32), &[Bias, Gelu, WsTile(256, 4, 2, 2), WgmmaWs]),
    ((64, 256, 256), Bf16, b(32, 32, 0.5), Block(32, 32), &[Values, WsTile(64, 3, 8, 2), WgmmaWs]),
    ((200, 512, 384), F16, b(64, 64, 0.6), Block(64, 64), &[Clip(-1.0, 0.25), Stream, WsTile(128, 5, 2, 1), WgmmaWs]),
    ((130, 256, 384), F16, b(32, 16, 0.6), Block(32, 16), &[Bias, WsTile(128, 8, 8, 1), WgmmaWs]),
    ((100, 256, 256), Bf16, b(16, 16, 0.8), Block(16, 16), &[Unrolled, WgmmaWs]),
    ((1024, 1024, 1024), F16, b(32, 32, 0.97), Block(32, 32), &[WsTile(128, 6, 1, 3), WgmmaWs]),
    ((512, 2048, 1024), F16, b(32, 32, 0.9), Block(32, 32), &[WsTile(256, 6, 4, 1), WgmmaWs]),
    ((300, 768, 320), F16, b(32, 32, 0.85), Block(32, 32), &[WsTile(128, 0, 2, 4), WgmmaWs]),
    ((256, 512, 512), F16, u(0.0), Dense(32, 32), &[WgmmaWs]),
    ((256, 1024, 1024), F16, mixed(0.9), Mixed(32, 32), &[Bias, Relu, WgmmaWs]),
    // fp32 on tensor cores (3xTF32): ragged M, every epilogue, both modes, values
    // embedded, tile overrides, 8..64-row and -column blocks, dense, the mixed cover's
    // accumulate
    ((300, 512, 512), F32, b(32, 32, 0.9), Block(32, 32), &[Bias, Relu, Tf32x3]),
    ((1024, 1024, 1024), F32, b(32, 32, 0.9), Block(32, 32), &[Stream, Tf32x3]),
    ((256, 512, 512), F32, b(32, 32, 0.7), Block(32, 32), &[Unrolled, Values, Tf32x3]),
    ((333, 512, 512), F32, b(32, 32, 0.8), Block(32, 32), &[Bias, Gelu, Tile(256, 2), Tf32x3]),
    ((200, 512, 384), F32, b(64, 32, 0.6), Block(64, 32), &[Clip(-1.0, 0.25), Tile(64, 3), Tf32x3]),
    ((130, 256, 384), F32, b(16, 8, 0.7), Block(16, 8), &[Unrolled, Tf32x3]),
    ((256, 512, 384), F32, u(0.0), Dense(32, 32), &[Bias, Tf32x3]),
    ((512, 1024, 1024), F32, mixed(0.9), Mixed(32, 32), &[Bias, Relu, Tf32x3]),
    // fine-grained
    ((1024, 1024, 1024), F32, u(0.95), Fine, &[Stream, Simt]),
    // fp32 fine on tensor cores (3xTF32 on gathered k): the goal shape, ragged M / K chunk /
    // column group, odd N (scalar stores), forced tiles
    // (rows × column groups × chunk depth / 32), epilogues, 50% and 99%.
    ((1024, 1024, 1024), F32, u(0.95), Fine, &[Tf32x3]),
    ((300, 200, 100), F32, u(0.9), Fine, &[Bias, Relu, Tf32x3]),
    ((100, 132, 77), F32, u(0.7), Fine, &[Bias, Gelu, Tf32x3]),
    ((333, 700, 520), F32, u(0.99), Fine, &[WsTile(32, 2, 8, 2), Tf32x3]),
    ((256, 512, 256), F32, u(0.95), Fine, &[WsTile(128, 3, 4, 2), Tf32x3]),
    ((200, 1000, 300), F32, u(0.95), Fine, &[Clip(-0.5, 0.5), WsTile(64, 2, 16, 4), Tf32x3]),
    ((128, 512, 256), F32, u(0.5), Fine, &[Tf32x3]),
    // Groups of 16 columns (two n8 tiles per step): chosen (dense enough), ragged M and a
    // last group half past N, odd N, forced on a sparse pattern, and a block pattern.
    ((300, 200, 100), F32, u(0.5), Fine, &[Bias, Relu, Tf32x3]),
    ((100, 132, 77), F32, u(0.6), Fine, &[Bias, Gelu, WsTile(64, 0, 4, 2), NTiles(2), Tf32x3]),
    ((256, 640, 200), F32, u(0.97), Fine, &[WsTile(32, 3, 6, 3), NTiles(2), Tf32x3]),
    ((512, 1024, 512), F32, b(32, 32, 0.8), Fine, &[Clip(-0.5, 0.5)]),
    ((96, 64, 80), F32, u(0.9), Fine, &[Bias, Relu, Values]),
    ((200, 1536, 300), F32, u(0.99), Fine, &[Bias, Gelu, Stream, Simt]),
    ((128, 512, 256), F32, u(0.5), Fine, &[Stream, Simt]),
    // fine-grained dismantled to the element (fp32, right): streamed and embedded values,
    // all of K resident and a ring (K = 4096), ragged rows and columns, every tile shape
    ((256, 1024, 512), F32, u(0.95), Fine, &[Bias, Gelu, Unrolled]),
    ((100, 512, 200), F32, u(0.95), Fine, &[Unrolled, Values]),
    ((70, 4096, 136), F32, u(0.99), Fine, &[Bias, Relu, Unrolled]),
    ((64, 512, 300), F32, u(0.95), Fine, &[Dismantled(2, 2)]),
    ((96, 256, 256), F32, u(0.9), Fine, &[Values, Dismantled(1, 8)]),
    // the default's own choice (under 1.5% kept, N ≤ 256), once with more CTAs than SMs
    // (a two-stage ring, two CTAs per SM)
    ((300, 1024, 200), F32, u(0.99), Fine, &[Bias, Relu, Simt]),
    ((4500, 512, 128), F32, u(0.99), Fine, &[]),
    ((256, 512, 512), F16, u(0.95), Fine, &[Bias]),
    // fine-grained: ragged rows, columns and chunks, K not a multiple of 4 (scalar staging),
    // every rows-per-lane tiling, bf16
    ((130, 260, 70), F32, u(0.8), Fine, &[]),
    ((77, 258, 50), F32, u(0.9), Fine, &[Bias, Relu]),
    ((300, 512, 512), F32, u(0.95), Fine, &[Tile(128, 4)]),
    ((300, 512, 512), F16, u(0.95), Fine, &[Bias, Gelu, Tile(32, 16)]),
    ((128, 256, 192), Bf16, u(0.9), Fine, &[Tile(64, 2)]),
    // fine-grained fp32 right through the ring: the shallowest chunk of a 128-row tile
    // (K = 16: two 8-deep copy steps per warp) and a chunk deeper than K (K = 40)
    ((200, 16, 96), F32, u(0.8), Fine, &[Tile(128, 2)]),
    ((150, 40, 100), F32, u(0.7), Fine, &[Tile(64, 2)]),
    // fine-grained fp32 right with the transpose prepass (At = Aᵀ, rows padded to 4): ragged
    // M (300, 77: pad columns), chunks deeper than K, a K split, every epilogue, accumulate
    // after a block part; and the transposing copies forced where auto takes the prepass
    ((300, 512, 512), F32, u(0.95), Fine, &[Prepass]),
    ((77, 258, 130), F32, u(0.9), Fine, &[Tile(64, 2), Prepass]),
    ((200, 40, 96), F32, u(0.7), Fine, &[Tile(128, 2), Prepass]),
    ((200, 1000, 300), F32, u(0.95), Fine, &[Bias, Gelu, FineTile(64, 4, 1, 2), Prepass]),
    ((333, 700, 520), F32, u(0.99), Fine, &[Bias, Relu, Prepass]),
    ((200, 512, 512), F32, mixed(0.9), Mixed(32, 32), &[Prepass]),
    ((256, 256, 2048), F32, u(0.95), Fine, &[]),
    ((256, 256, 2048), F32, u(0.95), Fine, &[Transposing]),
    // 16-bit A through the prepass (widened to an fp32 At): auto at 8 column tiles, ragged
    // M and K (scalar loads), an epilogue, bf16, a K split, the fp16 mixed cover
    ((256, 256, 2048), F16, u(0.95), Fine, &[]),
    ((77, 258, 130), F16, u(0.9), Fine, &[Tile(64, 2), Prepass]),
    ((300, 512, 512), Bf16, u(0.95), Fine, &[Bias, Gelu, Prepass]),
    ((200, 1000, 300), F16, u(0.95), Fine, &[Bias, Relu, FineTile(64, 4, 1, 2), Prepass]),
    ((200, 512, 512), F16, mixed(0.9), Mixed(32, 32), &[Prepass]),
    // 16-bit B of the left orientation through the widening prepass (Bw = B in fp32, rows
    // padded to 4): auto at 4 column tiles, ragged N (scalar loads), bf16 with an
    // epilogue, a K split, and the register path forced
    ((1024, 256, 256), F16, u(0.95), Fine, &[Left]),
    ((300, 512, 514), F16, u(0.9), Fine, &[Tile(64, 2), Left, Prepass]),
    ((300, 512, 520), Bf16, u(0.95), Fine, &[Bias, Gelu, Left, Prepass]),
    ((300, 1024, 264), F16, u(0.95), Fine, &[FineTile(64, 4, 1, 2), Left, Prepass]),
    ((1024, 256, 256), F16, u(0.95), Fine, &[Left, Transposing]),
    // fine-grained, two CTAs per SM (64 registers per thread)
    ((333, 700, 520), F32, u(0.95), Fine, &[Bias, Relu, FineTile(32, 4, 2, 1)]),
    ((300, 512, 512), F16, u(0.9), Fine, &[FineTile(32, 4, 2, 1), Transposing]),
    ((300, 512, 512), F16, u(0.9), Fine, &[FineTile(32, 4, 2, 1)]),
    ((300, 512, 520), F32, u(0.95), Fine, &[FineTile(32, 2, 2, 1), Left]),
    // fine-grained, K split over a cluster of 2 or 4 CTAs (one CTA may get no chunk: 3 chunks
    // over 4), reduced through distributed shared memory
    ((200, 1000, 300), F32, u(0.95), Fine, &[Bias, Gelu, FineTile(64, 4, 1, 2)]),
    ((130, 700, 260), F32, u(0.9), Fine, &[FineTile(128, 2, 1, 4)]),
    ((256, 1024, 512), Bf16, u(0.95), Fine, &[FineTile(32, 8, 1, 2)]),
    ((300, 1024, 264), F32, u(0.95), Fine, &[FineTile(64, 4, 1, 2), Left]),
    ((96, 1500, 200), F16, u(0.9), Fine, &[Bias, Relu, FineTile(32, 2, 1, 4), Left]),
    // fine-grained, left orientation (C = W · B)
    ((1024, 1024, 1024), F32, u(0.95), Fine, &[Left]),
    ((96, 64, 80), F32, u(0.9), Fine, &[Bias, Relu, Values, Left]),
    ((200, 1536, 300), F32, u(0.99), Fine, &[Bias, Gelu, Stream, Left]),
    ((256, 512, 512), F16, u(0.95), Fine, &[Bias, Left]),
    ((130, 100, 66), F32, u(0.8), Fine, &[Left]),
    ((300, 512, 520), F32, u(0.5), Fine, &[Tile(128, 4), Left]),
    ((64, 256, 96), Bf16, u(0.9), Fine, &[Tile(32, 2), Left]),
    // dense fallback: our kernel, and cuBLAS + our epilogue kernel
    ((512, 512, 512), F32, u(0.0), Dense(32, 32), &[Bias, Relu]),
    ((256, 512, 384), F16, u(0.0), Dense(32, 32), &[]),
    ((300, 512, 384), F32, u(0.0), Dense(32, 32), &[Bias, Gelu, Cublas]),
    ((256, 512, 384), F16, u(0.0), Dense(32, 32), &[Cublas]),
    ((200, 256, 100), F16, u(0.0), Dense(4, 4), &[Bias, Relu, Cublas]),
    ((256, 512, 512), Bf16, u(0.0), Dense(32, 32), &[Clip(-0.5, 0.5), Cublas]),
    // skinny dense 16-bit products (1×1 convolutions in NHWC): the streaming kernel; K padded
    // to 16, N in several slabs, ragged M, CTAs walking many row tiles, the planner's path
    ((4099, 16, 96), F16, u(0.0), Dense(8, 8), &[Bias, Clip(0.0, 6.0)]),
    ((1000, 24, 144), F16, u(0.0), Dense(8, 8), &[Bias, Clip(0.0, 6.0)]),
    ((777, 144, 24), Bf16, u(0.0), Dense(8, 8), &[Bias]),
    ((3000, 240, 40), F16, u(0.0), Dense(8, 8), &[Relu]),
    ((300, 48, 1152), F16, u(0.0), Dense(8, 8), &[Bias, Gelu]),
    ((100_001, 32, 16), F16, u(0.0), Dense(16, 16), &[Bias]),
    ((2048, 40, 240), F16, u(0.0), Planned, &[Bias, Clip(0.0, 6.0)]),
    // channel counts left by pruning: rows not 16-byte aligned (the packed ring), odd N; a
    // sparse weight at such a site plans dense on the streaming kernel (the memory floor)
    ((5000, 11, 43), F16, u(0.0), Planned, &[Bias, Clip(0.0, 6.0)]),
    ((3001, 202, 51), Bf16, u(0.0), Planned, &[Bias]),
    ((777, 43, 15), F16, u(0.0), Planned, &[Relu]),
    ((6000, 43, 11), F16, u(0.9), Planned, &[Bias]),
    // K past 256: tiles of 64 rows, the weight in narrower slabs
    ((1568, 346, 99), F16, u(0.0), Planned, &[Bias]),
    ((500, 480, 80), Bf16, u(0.0), Dense(16, 16), &[Relu]),
    // two slabs of an odd N: the last one partial, rows copied out element by element
    ((1000, 40, 201), Bf16, u(0.0), Planned, &[Bias, Gelu]),
    // mixed: block kernel + fine kernel accumulating, epilogue on the second
    ((512, 1024, 1024), F32, mixed(0.9), Mixed(32, 32), &[Bias, Relu]),
    ((256, 1024, 1024), F16, mixed(0.9), Mixed(32, 32), &[]),
    // the planner's own covers (plan → codegen::from_plan), several shapes per weight
    ((512, 1024, 1024), F32, mixed(0.9), Planned, &[Bias, Relu]),
    ((256, 512, 512), F32, mixed(0.7), Planned, &[]),
    ((256, 512, 512), F32, b(64, 64, 0.5), Planned, &[]),
    ((200, 512, 256), F32, u(0.95), Planned, &[]),
    ((256, 1024, 1024), F16, mixed(0.9), Planned, &[]),
    // int8 on tensor cores (m16n8k32, int32 accumulate, dequantizing epilogue, fp16 out)
    ((256, 512, 512), I8, b(32, 32, 0.5), Block(32, 32), &[]),
    ((1024, 1024, 1024), I8, b(32, 32, 0.9), Block(32, 32), &[Stream]),
    ((512, 512, 512), I8, b(32, 32, 0.9), Block(32, 32), &[Bias, Relu, Unrolled]),
    ((300, 512, 512), I8, b(32, 32, 0.9), Block(32, 32), &[Bias, Gelu, Tile(64, 3)]),
    ((100, 256, 256), I8, b(64, 64, 0.75), Block(64, 64), &[Clip(-0.5, 0.5)]),
    ((256, 512, 384), I8, u(0.0), Dense(32, 32), &[Bias]),
    ((200, 512, 512), I8, b(32, 32, 0.8), Split(32, 32), &[Bias, Relu]),
    ((256, 512, 512), I8, b(32, 32, 0.9), Planned, &[]),
    // 2:4 along K on the sparse tensor cores (issue 46). The mma.sp m16n8k32 kernel (forced,
    // or K = 96: 32-deep stages): the goal cube, MiniLM's linears with the epilogues the models
    // fuse, ragged M, N = 48 (a CTA's tile past N), forced tiles (8 warps, 256 rows or columns,
    // 2 to 4 stages)
    ((4096, 4096, 4096), F16, nm24(), TwoFour, &[MmaSync]),
    ((4096, 384, 1536), F16, nm24(), TwoFour, &[Bias, Gelu, MmaSync]),
    ((4096, 1536, 384), Bf16, nm24(), TwoFour, &[MmaSync]),
    ((333, 96, 48), F16, nm24(), TwoFour, &[Bias, Clip(-0.5, 0.5)]),
    ((1000, 512, 1152), Bf16, nm24(), TwoFour, &[MmaSync, SpTile(256, 4, 8, 3, 2)]),
    ((777, 1024, 768), F16, nm24(), TwoFour, &[Bias, MmaSync, SpTile(128, 8, 8, 3, 2)]),
    ((300, 256, 320), F16, nm24(), TwoFour, &[Relu, MmaSync, SpTile(64, 2, 4, 2, 1)]),
    ((513, 512, 512), Bf16, nm24(), TwoFour, &[Bias, MmaSync, SpTile(128, 4, 4, 4, 4)]),
    // The Hopper kernel (wgmma.mma_async.sp, what Auto takes): the goal cube, the MiniLM and
    // BERT-base linears, f16 and bf16, bias and activations; ragged M (TMA's zero rows), N
    // short of a column tile (48, 320, 1152: padded columns never stored), every tile shape
    // (64 to 256 columns, 64 to 256 rows) and 2-stage rings
    ((4096, 4096, 4096), F16, nm24(), TwoFour, &[]),
    ((4096, 4096, 4096), Bf16, nm24(), TwoFour, &[Bias]),
    ((4096, 384, 1536), F16, nm24(), TwoFour, &[Bias, Gelu]),
    ((4096, 1536, 384), F16, nm24(), TwoFour, &[Bias]),
    ((4096, 384, 1536), Bf16, nm24(), TwoFour, &[Bias, Relu]),
    ((4096, 768, 3072), F16, nm24(), TwoFour, &[Bias, Gelu]),
    ((4096, 3072, 768), F16, nm24(), TwoFour, &[Bias]),
    ((4096, 768, 3072), Bf16, nm24(), TwoFour, &[]),
    ((4096, 384, 1152), F16, nm24(), TwoFour, &[Bias]),
    ((333, 128, 48), F16, nm24(), TwoFour, &[Bias, Clip(-0.5, 0.5)]),
    ((1000, 512, 1152), Bf16, nm24(), TwoFour, &[SpTile(256, 2, 0, 0, 0)]),
    ((777, 1024, 768), F16, nm24(), TwoFour, &[Bias, SpTile(128, 4, 0, 3, 0)]),
    ((300, 256, 320), F16, nm24(), TwoFour, &[Relu, SpTile(64, 1, 0, 2, 0)]),
    ((513, 512, 512), Bf16, nm24(), TwoFour, &[Bias, SpTile(192, 2, 0, 4, 0)]),
    ((100, 64, 64), F16, nm24(), TwoFour, &[SpTile(64, 4, 0, 0, 0)]),
    // 2:4 weights with 32×32 or 64×64 blocks pruned too (whole pieces of the sparse operand zero)
    ((4096, 768, 3072), F16, nm24(), TwoFour, &[Bias, DeadBlocks(32, 32, 0.5)]),
    ((1000, 512, 1152), Bf16, nm24(), TwoFour, &[Gelu, SpTile(64, 1, 0, 0, 0), DeadBlocks(64, 64, 0.7)]),
    ((1000, 512, 1024), I8, nm24(), TwoFour, &[Bias, DeadBlocks(32, 32, 0.3)]),
    // int8 on the Hopper kernel (wgmma.mma_async.sp m64nNk64 s8, exact int32 sums, the
    // dequantizing epilogue): the goal cube, transformer linears, ragged M and N, every tile
    // shape (one m64 tile a warpgroup), bias and activations
    ((4096, 4096, 4096), I8, nm24(), TwoFour, &[Bias]),
    ((4096, 512, 1536), I8, nm24(), TwoFour, &[Bias, Relu]),
    ((4096, 1536, 384), I8, nm24(), TwoFour, &[]),
    ((333, 256, 48), I8, nm24(), TwoFour, &[Bias, Clip(-0.5, 0.5)]),
    ((1000, 512, 1152), I8, nm24(), TwoFour, &[SpTile(256, 2, 0, 0, 0)]),
    ((777, 1024, 768), I8, nm24(), TwoFour, &[Bias, Gelu, SpTile(128, 2, 0, 3, 0)]),
    ((300, 256, 320), I8, nm24(), TwoFour, &[Relu, SpTile(64, 1, 0, 2, 0)]),
    ((513, 512, 512), I8, nm24(), TwoFour, &[Bias, SpTile(192, 2, 0, 4, 0)]),
    ((100, 128, 64), I8, nm24(), TwoFour, &[SpTile(64, 1, 0, 0, 0)]),
    ((1024, 512, 512), F16, nm24(), Planned, &[Bias]),
    // NaN, +Inf and -Inf in a few rows of A (issue 47): they reach the output as ONNX gives them
    // (IEEE over the kept weights; ReLU and Clip keep NaN, Clip bounds ±Inf). Block and fine
    // covers only: a mixed or dense cover multiplies pruned zeros too, and 0 · Inf is NaN.
    ((256, 512, 512), F32, b(32, 32, 0.8), Block(32, 32), &[Bias, Relu, Simt, NonFinite]),
    ((256, 512, 512), F32, b(32, 32, 0.8), Block(32, 32), &[NonFinite]),
    ((256, 512, 512), F32, u(0.95), Fine, &[Bias, Simt, NonFinite]),
    ((100, 256, 256), F16, b(16, 16, 0.8), Block(16, 16), &[Bias, Relu, NonFinite]),
    ((512, 512, 512), F16, b(64, 64, 0.75), Block(64, 64), &[Bias, Gelu, Unrolled, NonFinite]),
    ((256, 512, 512), Bf16, b(32, 32, 0.9), Block(32, 32), &[Clip(-0.5, 0.5), NonFinite]),
];
