//! The Hopper 2:4 kernel's packing against the PTX layouts (the compressed tile read back
//! through its matrix descriptor, the metadata through the lanes that give it), its choice of
//! kernel and tile, and what it renders.

use super::tests::{assert_is_the_product, random_a, two_four_weight};
use super::{pack, wgmma};
use crate::codegen::{specialize, Activation, Dtype, Engine, Epilogue, Family, SpmmSpec, Tile};
use crate::kernel_choice::two_four::wgmma_tiling;

fn spec(m: usize, k: usize, n: usize, dtype: Dtype, kept: Vec<(usize, usize)>) -> SpmmSpec {
    let mut s = SpmmSpec::new(m, k, n, dtype, (1, 1), kept);
    s.two_four = true;
    s
}

fn forced(rows: usize, group: usize, stages: usize) -> Option<Tile> {
    Some(Tile { group, ..Tile::new(rows, stages) })
}

/// Each case's seeded 2:4 weight (integers in -127..=127 for int8) packed by the Hopper kernel of
/// `dtype`: as many values and metadata words as whole column tiles and stages hold, every
/// nonzero packed once, and the packed tiles and metadata read the way the hardware reads them
/// (descriptor addresses, metadata lanes) give the product the dense weight gives.
fn assert_records_multiply(dtype: Dtype, cases: &[(usize, usize, usize, Option<Tile>, u64)]) {
    let g = wgmma::Geometry::of(dtype);
    for &(m, k, n, tile, seed) in cases {
        let (w, kept) = two_four_weight(k, n, seed);
        let (w_i8, _) = two_four_weight_i8(k, n, seed);
        let w: Vec<f32> = if dtype == Dtype::I8 { w_i8.iter().map(|&v| v as f32).collect() } else { w };
        let mut s = spec(m, k, n, dtype, kept);
        s.tile = tile;
        let kern = specialize(&s).unwrap();
        assert_eq!(kern.family, Family::TwoFourWgmma);
        let cols = kern.ptr[0] as usize;
        let packed: Vec<f32> = match dtype {
            Dtype::I8 => kern.pack_weight_i8(&w_i8).iter().map(|&v| v as f32).collect(),
            _ => kern.pack_weight(&w),
        };
        assert_eq!(packed.len(), n.div_ceil(cols) * cols * k / 2);
        let meta: Vec<u32> = kern.idx.iter().map(|&x| x as u32).collect();
        assert_eq!(meta.len(), n.div_ceil(cols) * cols / 16 * k / g.k_step() * g.words(), "words per warp and step");
        let nonzero = w.iter().filter(|v| v.to_bits() != 0).count();
        assert_eq!(packed.iter().filter(|v| v.to_bits() != 0).count(), nonzero, "every value packed once");
        let a = random_a(m, k, seed + 100);
        let a: Vec<f32> = if dtype == Dtype::I8 { a.iter().map(|v| (v * 127.0).round()).collect() } else { a };
        let got = wgmma::emulate(g, (m, k, n), cols, &a, &packed, &meta);
        assert_is_the_product((m, k, n), &a, &w, &got);
    }
}

/// fp16 (m64nNk32): every tile width, ragged M and N padded to whole tiles.
#[test]
fn the_packed_records_multiply_as_the_weight_does() {
    assert_records_multiply(
        Dtype::F16,
        &[
            (40, 64, 64, forced(64, 1, 2), 1),
            (17, 256, 128, forced(128, 2, 3), 2),
            (9, 128, 48, forced(64, 1, 0), 3),
            (33, 192, 320, forced(128, 4, 0), 4),
            (20, 128, 1152, None, 5),
        ],
    );
}

/// One element placed by hand: column 9 of a 64-column tile is row 9 of m64 tile 0 (warp 0,
/// g = 1, upper half), k 82 is stage 1, k32 step 0, chunk 4 (indices 0 and 2: value 1 of the
/// chunk, stored value 2·4 + 1 = 9: 16-byte chunk 1 of the 64-byte row, which row 9 (64 bytes
/// into its 512-byte atom, address bit 7 clear) leaves unswizzled); its metadata is the word of
/// lane 4g + 1 in the stage's first block of 16.
#[test]
fn one_element_lands_where_the_ptx_layouts_put_it() {
    let (k, n) = (128, 64);
    let mut w = vec![0.0f32; k * n];
    w[82 * n + 9] = 3.0;
    let mut s = spec(64, k, n, Dtype::F16, vec![(82, 9)]);
    s.tile = forced(64, 1, 2);
    let kern = specialize(&s).unwrap();
    let words: Vec<u32> = kern.idx.iter().map(|&x| x as u32).collect();
    let stage1 = 4 * 2 * 16;
    assert_eq!(words[stage1 + 3], 0x4448_4444);
    let packed = kern.pack_weight(&w);
    let at: Vec<usize> = (0..packed.len()).filter(|&i| packed[i] != 0.0).collect();
    // Stage 1's record starts at 64 rows × 32 values; row 9 is in atom 1 (512 bytes), 64 bytes in.
    assert_eq!(at, vec![64 * 32 + (512 + 64 + 16) / 2 + 1]);
}

#[test]
fn auto_takes_the_hopper_kernel_where_it_applies() {
    let (_, kept) = two_four_weight(384, 1536, 9);
    let mut s = spec(4096, 384, 1536, Dtype::Bf16, kept.clone());
    s.epilogue = Epilogue { bias: true, activation: Activation::GeluErf };
    let kern = specialize(&s).unwrap();
    assert_eq!(kern.family, Family::TwoFourWgmma);
    assert!(kern.source.contains("wgmma.mma_async.sp.sync.aligned.m64n") && kern.source.contains(".f32.bf16.bf16"));
    assert!(kern.source.contains("erf_16") && kern.source.contains("stmatrix.sync.aligned.m8n8.x4.trans"));
    assert!(kern.tma_a.is_some_and(|b| b.cols == 64 && b.swizzle_bytes == 128));
    assert_eq!(kern.flops(), 4096.0 * 384.0 * 1536.0);
    assert!(kern.launch.grid.0 as usize <= 132 && kern.launch.smem_bytes <= 232_448);
    // The mma.sp kernel where asked for, where K is not whole 64-deep stages, or where the part
    // accumulates onto C (the Hopper epilogue writes C).
    s.engine = Engine::MmaSync;
    assert_eq!(specialize(&s).unwrap().family, Family::TwoFour);
    let (_, kept96) = two_four_weight(96, 64, 3);
    assert_eq!(specialize(&spec(100, 96, 64, Dtype::F16, kept96)).unwrap().family, Family::TwoFour);
    let mut acc = spec(4096, 384, 1536, Dtype::F16, kept);
    acc.accumulate = true;
    assert_eq!(specialize(&acc).unwrap().family, Family::TwoFour);
}

#[test]
fn tiles_fit_the_machine_and_forced_ones_are_checked() {
    for (m, k, n) in [(4096, 4096, 4096), (4096, 384, 1152), (4096, 384, 1536), (4096, 1536, 384), (4096, 3072, 768)] {
        let t = wgmma_tiling(Dtype::F16, (m, k, n), None).unwrap();
        assert!(t.acc_regs() <= 128 && t.stages >= 3 && t.smem_bytes() <= 232_448, "{m}x{k}x{n}: {t:?}");
        assert!(t.items(m, n) >= 96, "{m}x{k}x{n}: {t:?} leaves most SMs idle");
    }
    for (rows, group) in [(64, 1), (128, 1), (256, 1), (128, 2), (256, 2), (64, 4), (128, 4), (192, 2)] {
        let t = wgmma_tiling(Dtype::F16, (4096, 4096, 4096), Some(Tile { group, ..Tile::new(rows, 0) })).unwrap();
        assert_eq!((t.tn, t.cols()), (rows, 64 * group));
        assert!(t.smem_bytes() <= 232_448 && t.stages >= 3, "{t:?}");
    }
    let e = wgmma_tiling(Dtype::F16, (4096, 4096, 4096), Some(Tile { group: 4, ..Tile::new(256, 0) })).unwrap_err().0;
    assert!(e.contains("at most 128 accumulators"), "{e}");
    assert!(wgmma_tiling(Dtype::F16, (4096, 4096, 4096), Some(Tile { group: 3, ..Tile::new(128, 0) })).is_err());
    assert!(
        wgmma_tiling(Dtype::F16, (4096, 4096, 4096), Some(Tile { group: 2, ..Tile::new(256, 8) })).is_err(),
        "8 stages overflow"
    );
    assert!(wgmma_tiling(Dtype::F16, (4096, 96, 4096), None).is_err());
}

/// Records are the mma.sp metadata reordered: the same words, by column tile and stage.
#[test]
fn records_reorder_the_mma_sp_metadata() {
    let (k, n) = (128, 64);
    let (_, kept) = two_four_weight(k, n, 7);
    let mask = pack::chunk_masks(k, n, &kept).unwrap();
    let flat = pack::metadata(k, n, &mask);
    let rec = wgmma::records(wgmma::Geometry::of(Dtype::F16), k, n, &mask, 64);
    let mut a = flat.clone();
    let mut b = rec.clone();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    // Stage 0, m64 tile 0, warp 1, step 1 is 16-column tile 1, k32 step 1.
    let (tile16, q, steps) = (1, 1, k / 32);
    assert_eq!(rec[(tile16 * 2 + q) * 16..][..16], flat[(tile16 * steps + q) * 16..][..16]);
}
/// The automatic tile is the one measured fastest of the bench's (c56 and c58, H200): 128 columns ×
/// 256 rows at 4096³ and BERT-base ffn1, × 192 rows on MiniLM's qkv and ffn1 and BERT-base
/// ffn2, × 128 rows on MiniLM's ffn2 (384 columns: 3 column tiles).
#[test]
fn the_automatic_tile_is_the_one_measured_fastest() {
    for ((m, k, n), tn) in [
        ((4096, 4096, 4096), 256),
        ((4096, 768, 3072), 256),
        ((4096, 384, 1152), 192),
        ((4096, 384, 1536), 192),
        ((4096, 3072, 768), 192),
        ((4096, 1536, 384), 128),
    ] {
        let t = wgmma_tiling(Dtype::F16, (m, k, n), None).unwrap();
        assert_eq!((t.cols(), t.tn), (128, tn), "{m}x{k}x{n}: {t:?}");
    }
}

/// An int8 weight 2:4 along K: [`two_four_weight`]'s pattern with integer values in -127..=127.
fn two_four_weight_i8(k: usize, n: usize, seed: u64) -> (Vec<i8>, Vec<(usize, usize)>) {
    let (w, kept) = two_four_weight(k, n, seed);
    (w.iter().map(|v| (v * 127.0).round() as i8).collect(), kept)
}

/// int8 (m64nNk64, every lane's metadata word): the exact integer product, every tile width,
/// ragged M and N.
#[test]
fn int8_records_multiply_as_the_weight_does() {
    assert_records_multiply(
        Dtype::I8,
        &[
            (40, 128, 64, forced(64, 1, 2), 11),
            (17, 256, 128, forced(128, 2, 3), 12),
            (9, 384, 48, forced(64, 1, 0), 13),
            (33, 256, 320, forced(192, 2, 0), 14),
            (20, 512, 1152, None, 15),
        ],
    );
}

/// One int8 element placed by hand: column 9 is row 9 of m64 tile 0 (warp 0, g = 1, h = 1),
/// k 150 is stage 1 (128 k a stage), k64 step 0, chunk 5, index 2 (indices 0 and 2: the
/// chunk's value 1, stored byte 2·5 + 1 = 11 of the row's first 16-byte chunk; row 9 is 64
/// bytes into its 512-byte atom, unswizzled). Its metadata: lane 4g + h + 2·(5 / 8) = 5,
/// bits 4·5 = 0b1000, the word's other chunks empty (indices 0 and 1).
#[test]
fn one_int8_element_lands_where_the_ptx_layouts_put_it() {
    let (k, n) = (256, 64);
    let mut w = vec![0i8; k * n];
    w[150 * n + 9] = 3;
    let mut s = spec(64, k, n, Dtype::I8, vec![(150, 9)]);
    s.tile = forced(64, 1, 2);
    let kern = specialize(&s).unwrap();
    let words: Vec<u32> = kern.idx.iter().map(|&x| x as u32).collect();
    // Stage 1 starts after stage 0's 4 warps × 2 steps × 32 words.
    let stage1 = 4 * 2 * 32;
    assert_eq!(words[stage1 + 5], 0x4484_4444);
    assert!(words.iter().enumerate().all(|(i, &x)| i == stage1 + 5 || x == 0x4444_4444), "fillers: indices 0 and 1");
    let packed = kern.pack_weight_i8(&w);
    let at: Vec<usize> = (0..packed.len()).filter(|&i| packed[i] != 0).collect();
    // Stage 1's record starts at 64 rows × 64 bytes; row 9 is in atom 1 (512 bytes), 64 bytes in.
    assert_eq!(at, vec![64 * 64 + 512 + 64 + 11]);
}

#[test]
fn int8_runs_on_the_hopper_kernel_or_is_refused() {
    let (_, kept) = two_four_weight_i8(512, 1536, 9);
    let mut s = spec(4096, 512, 1536, Dtype::I8, kept.clone());
    s.epilogue = Epilogue { bias: true, activation: Activation::Relu };
    let kern = specialize(&s).unwrap();
    assert_eq!(kern.family, Family::TwoFourWgmma);
    assert!(
        kern.source.contains("k64.s32.s8.s8") && kern.source.contains("scale_w"),
        "the int8 instruction and scales"
    );
    assert!(kern.tma_a.is_some_and(|b| b.cols == 128 && b.swizzle_bytes == 128), "128 int8 k a stage");
    assert_eq!(kern.flops(), 4096.0 * 512.0 * 1536.0);
    let t = wgmma_tiling(Dtype::I8, (4096, 512, 1536), None).unwrap();
    assert_eq!((t.k_stage, t.meta_bytes()), (128, t.cols() / 16 * 2 * 32 * 4));
    assert!(kern.launch.smem_bytes as usize == t.smem_bytes() && t.smem_bytes() <= 232_448);
    // No mma.sp kernel on int8: what the Hopper kernel cannot take is an error naming why.
    let (_, kept64) = two_four_weight_i8(64, 64, 3);
    let e = specialize(&spec(100, 64, 64, Dtype::I8, kept64)).unwrap_err().to_string();
    assert!(e.contains("K a multiple of 128"), "{e}");
    let mut acc = spec(4096, 512, 1536, Dtype::I8, kept.clone());
    acc.accumulate = true;
    assert!(specialize(&acc).unwrap_err().to_string().contains("accumulating"));
    let mut mma = spec(4096, 512, 1536, Dtype::I8, kept);
    mma.engine = Engine::MmaSync;
    assert!(specialize(&mma).unwrap_err().to_string().contains("mma.sync"));
}

#[test]
fn int8_tiles_hold_one_m64_tile_a_warpgroup() {
    for (rows, group) in [(64, 1), (128, 1), (256, 1), (128, 2), (256, 2), (192, 2)] {
        let t = wgmma_tiling(Dtype::I8, (4096, 4096, 4096), Some(Tile { group, ..Tile::new(rows, 0) })).unwrap();
        assert_eq!((t.tn, t.cols(), t.k_stage), (rows, 64 * group, 128));
        assert!(t.smem_bytes() <= 232_448 && t.stages >= 3, "{t:?}");
    }
    let e = wgmma_tiling(Dtype::I8, (4096, 4096, 4096), Some(Tile { group: 4, ..Tile::new(128, 0) })).unwrap_err().0;
    assert!(e.contains("on int8"), "{e}");
    assert!(wgmma_tiling(Dtype::I8, (4096, 320, 1536), None).is_err(), "320 is not whole 128-deep stages");
    let t = wgmma_tiling(Dtype::I8, (4096, 4096, 4096), None).unwrap();
    assert_eq!(t.m_tiles, 1);
}
