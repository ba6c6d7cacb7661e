//! The 2:4 packing against the PTX register layout, its round trip, its CPU emulation against
//! the dense f64 product, and the specializer's refusals.

use super::{pack, replay};
use crate::codegen::{specialize, Activation, Dtype, Engine, Epilogue, Family, Mode, SpmmSpec, Tile};
use crate::rng::SplitMix64;

/// A random `k × n` weight 2:4 along K (each chunk keeps 0, 1 or 2 elements; -0.0 among the
/// values) and its kept elements.
pub(crate) fn two_four_weight(k: usize, n: usize, seed: u64) -> (Vec<f32>, Vec<(usize, usize)>) {
    let mut rng = SplitMix64::new(seed);
    let mut w = vec![0.0f32; k * n];
    let mut kept = vec![];
    for col in 0..n {
        for chunk in 0..k / 4 {
            let keep = rng.below(3) as usize;
            let mut pos: Vec<usize> = (0..4).collect();
            for i in 0..keep {
                let j = i + rng.below((4 - i) as u64) as usize;
                pos.swap(i, j);
                let r = chunk * 4 + pos[i];
                let v = if rng.below(50) == 0 { -0.0 } else { rng.uniform(-1.0, 1.0) as f32 };
                w[r * n + col] = half::f16::from_f32(v).to_f32();
                kept.push((r, col));
            }
        }
    }
    (w, kept)
}

/// A 2:4 spec on the `mma.sp` kernel (`Engine::MmaSync`; the Hopper kernel has its tests in
/// `wgmma_tests`).
fn spec(m: usize, k: usize, n: usize, dtype: Dtype, kept: Vec<(usize, usize)>) -> SpmmSpec {
    let mut s = SpmmSpec::new(m, k, n, dtype, (1, 1), kept);
    s.two_four = true;
    s.engine = Engine::MmaSync;
    s
}

/// One element, its place worked out by hand from the PTX ISA's m16n8k32 figures: column 9 is
/// row 9 of the first sparse tile (g = 1, the upper half), k 18 is chunk 4 (t = 0, the second
/// k-half): lane 4, register a3, the second value (its chunk names k 16 and 18); the metadata
/// sits in lane 4g + 1 = 5's word, bits 16..19 = 0b1000 (indices 0 and 2).
#[test]
fn one_element_lands_where_the_ptx_layout_puts_it() {
    let (k, n) = (32, 16);
    let mut w = vec![0.0f32; k * n];
    w[18 * n + 9] = 3.0;
    let kern = specialize(&spec(64, k, n, Dtype::F16, vec![(18, 9)])).unwrap();
    assert_eq!(kern.family, Family::TwoFour);
    assert_eq!(kern.idx.len(), 16, "one tile, one k-step: 16 metadata words");
    let words: Vec<u32> = kern.idx.iter().map(|&x| x as u32).collect();
    assert_eq!(words[3], 0x4448_4444, "word 2g + h = 3: row 9, chunk 4 names k 0 and 2");
    assert!(words.iter().enumerate().all(|(i, &x)| i == 3 || x == 0x4444_4444), "fillers: indices 0 and 1");
    let packed = kern.pack_weight(&w);
    assert_eq!(packed.len(), k * n / 2);
    let at: Vec<usize> = (0..packed.len()).filter(|&i| packed[i] != 0.0).collect();
    assert_eq!(at, vec![4 * 8 + 2 * 3 + 1], "lane 4, a3, high half");
}

#[test]
fn packing_round_trips_exactly_and_the_emulation_matches_the_product() {
    for (m, k, n, seed) in [(40, 64, 48, 1), (17, 256, 128, 2), (8, 96, 32, 3)] {
        let (w, kept) = two_four_weight(k, n, seed);
        let kern = specialize(&spec(m, k, n, Dtype::F16, kept)).unwrap();
        let packed = kern.pack_weight(&w);
        let meta: Vec<u32> = kern.idx.iter().map(|&x| x as u32).collect();
        assert_eq!(meta.len(), n / 16 * k / 32 * 16);
        let back = pack::unpack(k, n, &packed, &meta);
        assert!(back.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()), "{k}x{n}: unpack(pack(w)) != w");
        // Every metadata nibble is a valid ordered pair.
        for word in &meta {
            for c in 0..8 {
                let nib = (word >> (4 * c)) & 0xf;
                assert!((nib & 3) < (nib >> 2), "nibble {nib:#x} is not two increasing indices");
            }
        }
        let a = random_a(m, k, seed + 100);
        let got = pack::emulate(m, k, n, &a, &packed, &meta);
        assert_is_the_product((m, k, n), &a, &w, &got);
    }
}

/// A random row-major `m × k` dense operand in [-1, 1).
pub(crate) fn random_a(m: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..m * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
}

/// `got` (an emulation of a kernel, f64) is `A·W` to 1e-12 relative, element by element.
pub(crate) fn assert_is_the_product((m, k, n): (usize, usize, usize), a: &[f32], w: &[f32], got: &[f64]) {
    for r in 0..m {
        for c in 0..n {
            let want: f64 = (0..k).map(|kk| a[r * k + kk] as f64 * w[kk * n + c] as f64).sum();
            let e = (got[r * n + c] - want).abs();
            assert!(e <= 1e-12 * (1.0 + want.abs()), "{m}x{k}x{n} ({r}, {c}): {} vs {want}", got[r * n + c]);
        }
    }
}

#[test]
fn a_weight_that_is_not_2_4_along_k_is_refused_in_one_line() {
    // Three of k 4..7 in column 5.
    let e = specialize(&spec(64, 64, 16, Dtype::F16, vec![(4, 5), (5, 5), (7, 5)])).unwrap_err().to_string();
    assert!(e.contains("column 5 keeps more than 2 of k 4..7") && !e.contains('\n'), "{e}");
    // 2:4 along N but not along K is the same refusal.
    let along_n: Vec<(usize, usize)> = (0..8).map(|c| (0, c)).chain((0..8).map(|c| (1, c))).chain([(2, 0)]).collect();
    assert!(specialize(&spec(64, 64, 16, Dtype::F16, along_n)).is_err());
    let e = specialize(&spec(64, 48, 16, Dtype::F16, vec![])).unwrap_err().to_string();
    assert!(e.contains("K a multiple of 32"), "{e}");
    assert!(specialize(&spec(64, 64, 16, Dtype::F32, vec![])).is_err(), "fp32 has no mma.sp kernel here");
    let mut unrolled = spec(64, 64, 16, Dtype::F16, vec![]);
    unrolled.mode = Mode::Unrolled;
    assert!(specialize(&unrolled).is_err());
    assert!(pack::chunk_masks(8, 2, &[(8, 0)]).unwrap_err().contains("outside"));
    assert!(pack::chunk_masks(8, 2, &[(1, 1), (1, 1)]).unwrap_err().contains("twice"));
}

#[test]
fn renders_the_tile_the_epilogue_and_the_ragged_edge() {
    let (w, kept) = two_four_weight(384, 1536, 9);
    let mut s = spec(4096, 384, 1536, Dtype::Bf16, kept);
    s.epilogue = Epilogue { bias: true, activation: Activation::GeluErf };
    let kern = specialize(&s).unwrap();
    assert!(kern.source.contains("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"));
    assert!(kern.source.contains("erf_16") && !kern.source.contains("Ms[i] = 0x44444444u"));
    assert_eq!(kern.launch.grid, (12, 32, 1), "128 × 128 tiles");
    assert_eq!(kern.pack_weight(&w).len(), 384 * 1536 / 2);
    assert_eq!(kern.flops(), 4096.0 * 384.0 * 1536.0);
    // 48 columns on 64-wide CTAs: the last CTA's tile past N is zero-filled.
    let (_, kept) = two_four_weight(64, 48, 4);
    let mut s = spec(100, 64, 48, Dtype::F16, kept);
    s.tile = Some(Tile { group: 2, ..Tile::new(64, 2) });
    s.accumulate = true;
    let kern = specialize(&s).unwrap();
    assert!(kern.source.contains("Ms[i] = 0x44444444u") && kern.source.contains("const uint4 old = *dst;"));
    assert_eq!(kern.launch.grid, (1, 2, 1));
    assert_eq!(kern.name, "spmm_two_four_f16_64x64x64s2w4");
}

/// The kernel of an `m × k × n` f16 2:4 product (no kept elements: the addresses do not depend
/// on the pattern), with the given epilogue and tile.
fn replay_kernel(
    m: usize,
    k: usize,
    n: usize,
    bias: bool,
    tile: Option<Tile>,
    accumulate: bool,
) -> crate::codegen::Kernel {
    let mut s = spec(m, k, n, Dtype::F16, vec![]);
    s.epilogue = Epilogue { bias, activation: Activation::None };
    s.tile = tile;
    s.accumulate = accumulate;
    specialize(&s).unwrap()
}

/// The launches that faulted on the H200 (every 2:4 launch: the cube and MiniLM's linears, with
/// and without bias), replayed address by address on the CPU: every access in bounds, aligned,
/// inside the dynamic shared memory the launch reports.
#[test]
fn the_gpu_cases_replay_inside_their_buffers_and_shared_memory() {
    for (m, k, n) in [(4096, 4096, 4096), (4096, 384, 1152), (4096, 384, 1536), (4096, 1536, 384)] {
        for bias in [true, false] {
            let kern = replay_kernel(m, k, n, bias, None, false);
            let stats = replay::replay(&kern).unwrap_or_else(|e| panic!("{m}x{k}x{n} bias {bias}: {e}"));
            assert!(stats.ctas >= 9 && stats.accesses > 0, "{stats:?}");
            assert_eq!(stats.smem_used, kern.launch.smem_bytes as usize, "the launch reserves what the ring takes");
        }
    }
}

/// The forced tiles of the bench and the GPU tests, ragged M and N, 32-deep stages and the
/// accumulating epilogue.
#[test]
fn forced_tiles_and_ragged_edges_replay_inside_their_buffers() {
    let tile = |rows, group, warps, stages, k_rows| Some(Tile { group, warps, k_rows, ..Tile::new(rows, stages) });
    let cases = [
        (4096, 4096, 4096, tile(128, 4, 8, 4, 2), false),
        (4096, 4096, 4096, tile(256, 4, 8, 3, 2), false),
        (4096, 384, 1152, tile(128, 8, 8, 3, 2), false),
        (4096, 1536, 384, tile(64, 4, 4, 4, 2), false),
        (4096, 384, 1536, tile(128, 4, 4, 3, 4), false),
        (333, 96, 48, None, false),
        (1000, 512, 1152, tile(256, 4, 8, 3, 2), false),
        (777, 1024, 768, tile(128, 8, 8, 3, 2), false),
        (300, 256, 320, tile(64, 2, 4, 2, 1), false),
        (513, 512, 512, tile(128, 4, 4, 4, 4), false),
        (100, 64, 48, Some(Tile { group: 2, ..Tile::new(64, 2) }), true),
    ];
    for (m, k, n, t, accumulate) in cases {
        let kern = replay_kernel(m, k, n, true, t, accumulate);
        replay::replay(&kern).unwrap_or_else(|e| panic!("{m}x{k}x{n} {t:?}: {e}"));
    }
}

/// The replay fails where the launch and the template disagree: 16 bytes less dynamic shared
/// memory than the arrays take, a block of the wrong size, a grid short of the output, a copy
/// past the end of the metadata.
#[test]
fn the_replay_catches_a_launch_that_disagrees_with_the_template() {
    let kern = replay_kernel(4096, 384, 1536, true, None, false);
    let used = replay::replay(&kern).unwrap().smem_used as u32;
    let mut short = kern.clone();
    short.launch.smem_bytes = used - 16;
    let e = replay::replay(&short).unwrap_err();
    assert!(e.contains("past the launch's") && e.contains("dynamic shared memory"), "{e}");
    let mut block = kern.clone();
    block.launch.block.0 *= 2;
    assert!(replay::replay(&block).unwrap_err().contains("block"));
    let mut grid = kern.clone();
    grid.launch.grid.1 -= 1;
    assert!(replay::replay(&grid).unwrap_err().contains("does not cover"));
    // A ragged N: without its skips, the last CTA would copy W and metadata past their ends.
    let ragged = replay_kernel(100, 64, 48, false, Some(Tile { group: 2, ..Tile::new(64, 2) }), false);
    assert!(replay::replay(&ragged).is_ok());
    let no_skip = ragged.source.replace("if (t0 + t >= W_TILES) continue;", "");
    let e = replay::replay(&crate::codegen::Kernel { source: no_skip, ..ragged }).unwrap_err();
    assert!(e.contains("cp.async meta src: idx (metadata) bytes 384..400 past its 384 bytes"), "{e}");
}
