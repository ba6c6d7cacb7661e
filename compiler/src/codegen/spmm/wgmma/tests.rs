//! Tests of the family: tables, packing and the rendered source.

use super::*;
use crate::codegen::{specialize, Tile};

#[test]
fn core_layout_is_a_bijection_that_the_descriptor_reads_back() {
    for k_chunks in [2, 4, 8] {
        let l = CoreLayout { k_chunks };
        let desc = l.descriptor_const();
        let rows = 128;
        let mut seen = vec![false; rows * k_chunks];
        for r in 0..rows {
            for q in 0..k_chunks {
                let off = l.offset(r, q);
                assert_eq!(off % 16, 0);
                assert!(!std::mem::replace(&mut seen[off / 16], true), "chunk ({r}, {q}) overlaps");
                // The tensor core finds element (r, 8q + e) where the copy put it, from the
                // tile start and from the k16 steps (start advanced by 32 bytes each).
                for e in 0..8 {
                    let k = 8 * q + e;
                    assert_eq!(CoreLayout::descriptor_offset(desc, 0, r, k, 2), off + 2 * e);
                    let step = k / 16;
                    assert_eq!(CoreLayout::descriptor_offset(desc, 32 * step, r, k % 16, 2), off + 2 * e);
                }
            }
        }
        assert!(seen.iter().all(|s| *s));
        // The 8 rows of a core-matrix column (chunk 0) fall in 8 distinct 16-byte bank
        // groups: no bank conflict when the tensor core reads them together.
        let banks: std::collections::BTreeSet<usize> = (0..8).map(|r| l.offset(r, 0) % 128).collect();
        assert_eq!(banks.len(), 8, "{k_chunks} chunks per row");
    }
    assert_eq!(CoreLayout { k_chunks: 4 }.descriptor_const(), (1u64 << 16) | (32u64 << 32) | (2u64 << 62));
}

fn f16_spec(blocks: Vec<(usize, usize)>) -> SpmmSpec {
    SpmmSpec::new(100, 128, 96, Dtype::F16, (32, 32), blocks)
}

#[test]
fn wgmma_is_taken_when_asked_for() {
    let mut s = f16_spec(vec![(1, 2), (0, 0)]);
    s.engine = Engine::MmaSync;
    assert_eq!(specialize(&s).unwrap().family, Family::BlockMma);
    s.engine = Engine::Wgmma;
    let k = specialize(&s).unwrap();
    assert_eq!(k.family, Family::BlockWgmma);
    assert!(k.source.contains("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16"));
    // 100 rows → one 128-row tile (2 warpgroups) × 3 block columns = 3 items.
    assert_eq!((k.launch.grid, k.launch.block), ((3, 1, 1), (256, 1, 1)));
    s.block = (16, 16);
    s.blocks = vec![(0, 0)];
    assert_eq!(specialize(&s).unwrap().family, Family::BlockWgmma);
    let mut odd = SpmmSpec::new(96, 96, 96, Dtype::F16, (48, 16), vec![(0, 0)]);
    odd.engine = Engine::Wgmma;
    assert!(specialize(&odd).unwrap_err().to_string().contains("bh 16, 32 or 64"));
    s.dtype = Dtype::F32;
    assert!(specialize(&s).unwrap_err().to_string().contains("f16 or bf16"));
    s.engine = Engine::Simt;
    assert_eq!(specialize(&s).unwrap().family, Family::BlockSimt);
    s.dtype = Dtype::Bf16;
    s.engine = Engine::Wgmma;
    s.tile = Some(Tile::new(96, 4));
    assert!(specialize(&s).unwrap_err().to_string().contains("96"));
}

#[test]
fn auto_takes_the_warp_specialized_kernel_for_16_bit_right_blocks() {
    // 256 × 512 × 256: 16 k-blocks × 8 block columns, 3 live blocks in every column.
    let blocks: Vec<(usize, usize)> = (0..8).flat_map(|j| [(j, j), ((j + 5) % 16, j), ((j + 9) % 16, j)]).collect();
    let s = SpmmSpec::new(256, 512, 256, Dtype::F16, (32, 32), blocks.clone());
    let k = specialize(&s).unwrap();
    assert_eq!(k.family, Family::BlockWgmma);
    assert!(k.name.starts_with("spmm_block_wgmma_ws_f16_32x32_g1"), "{}", k.name);
    // Few items (2 row tiles × 4 column pairs at 256 rows): 128 rows × 1 column; a
    // producer warpgroup (one thread: TMA and bulk copies) on top of 2 consumer warpgroups;
    // one CTA per item.
    assert_eq!((k.launch.grid, k.launch.block), ((16, 1, 1), (384, 1, 1)));
    assert!(k.source.contains("mbarrier.try_wait.parity"));
    assert!(k.source.contains("cp.async.bulk.tensor.2d") && k.source.contains("cp.async.bulk.shared::cluster.global"));
    // The staged epilogue, unless the kernel accumulates onto C.
    assert!(k.source.contains("bar.sync %0, 128"));
    let mut acc = s.clone();
    acc.accumulate = true;
    assert!(!specialize(&acc).unwrap().source.contains("bar.sync %0, 128"));
    // A single live block still takes it; every block live (dense) does not.
    let one = SpmmSpec::new(256, 512, 256, Dtype::F16, (32, 32), vec![(3, 5)]);
    assert_eq!(specialize(&one).unwrap().family, Family::BlockWgmma);
    let all: Vec<(usize, usize)> = (0..16).flat_map(|kb| (0..8).map(move |j| (kb, j))).collect();
    let dense = SpmmSpec::new(256, 512, 256, Dtype::F16, (32, 32), all);
    assert_ne!(specialize(&dense).unwrap().family, Family::BlockWgmma);
    // fp32, the left orientation and mma.sync asked for stay off it.
    let mut f32s = s.clone();
    f32s.dtype = Dtype::F32;
    assert_ne!(specialize(&f32s).unwrap().family, Family::BlockWgmma);
    let mut left = SpmmSpec::new(256, 256, 512, Dtype::F16, (32, 32), vec![(1, 2), (3, 4)]);
    left.orientation = Orientation::Left;
    assert_eq!(specialize(&left).unwrap().family, Family::BlockMma);
    let mut mma = s.clone();
    mma.engine = Engine::MmaSync;
    assert_eq!(specialize(&mma).unwrap().family, Family::BlockMma);
    // Many items: 256 rows × 2 block columns (4096 rows × 2048 columns: 16 × 32 items), a
    // quarter of the blocks live (a fifth or fewer run two CTAs per SM instead).
    let wide: Vec<(usize, usize)> =
        (0..64).flat_map(|j| [(j % 16, j), ((j + 3) % 16, j), ((j + 7) % 16, j), ((j + 11) % 16, j)]).collect();
    let w = SpmmSpec::new(4096, 512, 2048, Dtype::Bf16, (32, 32), wide);
    let k = specialize(&w).unwrap();
    assert!(k.name.starts_with("spmm_block_wgmma_ws_bf16_32x32_g2"), "{}", k.name);
    assert_eq!(k.launch.grid, (132, 1, 1));
}

#[test]
fn the_schedule_merges_each_groups_block_rows() {
    // 5 block columns in groups of 2: {0: kb 1, 3}, {1: kb 3}, {2: -}, {3: -}, {4: kb 0, 2}.
    let ptr = [0, 2, 3, 3, 3, 5];
    let idx = [1, 3, 3, 0, 2];
    let s = schedule(&ptr, &idx, 2, 1);
    let word = |kb: i32, mask: i32| kb | (mask << 16);
    // Step pointers of the 3 groups, then the steps: kb 1 (slot 0), kb 3 (slots 0 and 1);
    // the empty group's one step without slots; kb 0 and 2 (slot 0 of the last, short group).
    assert_eq!(s, vec![0, 2, 3, 5, word(1, 1), word(3, 3), word(0, 0), word(0, 1), word(2, 1)]);
    // Two rows per step: the empty group's step and any odd row count are padded with
    // rows without slots.
    let s2 = schedule(&ptr, &idx, 2, 2);
    let pad = word(0, 0);
    assert_eq!(s2, vec![0, 2, 4, 6, word(1, 1), word(3, 3), pad, pad, word(0, 1), word(2, 1)]);
    let s3 = schedule(&ptr, &idx, 2, 3);
    assert_eq!(s3[..4], [0, 3, 6, 9]);
    assert_eq!(s3[4..7], [word(1, 1), word(3, 3), pad]);
    // The kernel reads it after idx; the block tables and the weight packing are unchanged.
    let mut spec = f16_spec(vec![(1, 0), (3, 0), (3, 1), (0, 2)]);
    spec.engine = Engine::WgmmaWs;
    spec.tile = Some(Tile { group: 2, k_rows: 1, ..Tile::new(128, 4) });
    let k = specialize(&spec).unwrap();
    assert_eq!(k.ptr, vec![0, 2, 3, 4]);
    assert_eq!(k.device_idx()[..4], k.idx[..]);
    assert_eq!(k.device_idx()[4..], schedule(&k.ptr, &k.idx, 2, 1)[..]);
}

#[test]
fn warp_specialized_tiles_and_their_errors() {
    let mut s = f16_spec(vec![(1, 2), (0, 0), (3, 1)]);
    s.engine = Engine::WgmmaWs;
    s.tile = Some(Tile { group: 3, k_rows: 1, ..Tile::new(256, 0) });
    let k = specialize(&s).unwrap();
    // 100 rows → one 256-row item of 3 block columns; ring as deep as fits (7 stages of
    // 16 KB A + 3 × 2 KB W), plus the mbarriers, plus the epilogue's
    // staging rows (2 warpgroups × 128 rows × (3 × 64 + 16) bytes).
    assert_eq!((k.launch.grid, k.launch.block), ((1, 1, 1), (384, 1, 1)));
    assert_eq!(k.launch.smem_bytes as usize, 7 * (16384 + 3 * 2048) + 1024 + 16 * 7 + 2 * 128 * (3 * 64 + 16) + 16);
    assert!(k.source.contains("#define G 3"));
    assert!(k.source.contains("#define KR 1"));
    // The default is one k-block row per stage at 256 rows (the same kernel as above) and
    // two at 128 rows: 2 × (8 KB A + 3 × 2 KB W) per stage, as many stages as fit.
    s.tile = Some(Tile { group: 3, ..Tile::new(128, 0) });
    let k128 = specialize(&s).unwrap();
    assert!(k128.source.contains("#define KR 2"));
    let (stage, staging) = (2 * (8192 + 3 * 2048), 2 * 64 * (3 * 64 + 16) + 16);
    let stages = ((SMEM_PER_CTA_MAX - 1024 - staging) / (stage + 16)).min(12);
    assert_eq!(k128.launch.smem_bytes as usize, stages * stage + 1024 + 16 * stages + staging);
    s.tile = Some(Tile { group: 3, ..Tile::new(256, 0) });
    let k = specialize(&s).unwrap();
    assert!(k.source.contains("#define KR 1"));
    // A comes by TMA: 256-row boxes of one 32-column k-block, in the 64-byte swizzle.
    assert_eq!(k.tma_a, Some(TmaBox { rows: 256, cols: 32, swizzle_bytes: 64 }));
    assert!(k.source.contains("const __grid_constant__ TmaMap tmap_a"));
    assert_eq!(k.launch.smem_bytes as usize, 7 * (16384 + 3 * 2048) + 1024 + 16 * 7 + 2 * 128 * (3 * 64 + 16) + 16);
    for (tile, needle) in [
        (Tile { group: 2, k_rows: 5, ..Tile::new(128, 4) }, "1 to 4 k-block rows"),
        (Tile { group: 8, k_rows: 3, ..Tile::new(64, 3) }, "at most 16 slots"),
        (Tile { group: 9, ..Tile::new(128, 4) }, "1 to 8 block columns"),
        (Tile { group: 8, ..Tile::new(256, 4) }, "at most 128"),
        (Tile { group: 1, ..Tile::new(192, 4) }, "64, 128 or 256 rows"),
        (Tile { group: 1, ..Tile::new(128, 2) }, "3 to 16 stages"),
        (Tile { group: 8, k_rows: 1, ..Tile::new(128, 12) }, "exceed the shared memory"),
    ] {
        s.tile = Some(tile);
        let e = specialize(&s).unwrap_err().to_string();
        assert!(e.contains(needle), "{tile:?}: {e}");
    }
    s.tile = None;
    s.dtype = Dtype::F32;
    assert!(specialize(&s).unwrap_err().to_string().contains("f16 or bf16"));
}

#[test]
fn layernorm_work_keeps_the_staged_epilogue_at_any_tile() {
    // 256 rows × 4 block columns of 32 fill the 128 accumulator registers: the epilogue works
    // in place, which cannot add a residual or row sums, so with that work the item takes the
    // 3 block columns that stay below them.
    let mut s = f16_spec(vec![(1, 2), (0, 0), (3, 1)]);
    s.engine = Engine::WgmmaWs;
    s.tile = Some(Tile { group: 4, k_rows: 1, ..Tile::new(256, 0) });
    assert!(specialize(&s).unwrap().source.contains("#define G 4"));
    s.row_norm = crate::codegen::RowNorm {
        input: None,
        residual: true,
        residual_affine: Some(crate::codegen::RowStatsIn { eps: 1e-5 }),
        stats: true,
    };
    let normed = specialize(&s).unwrap();
    assert!(normed.source.contains("#define G 3"), "{}", normed.name);
    assert!(normed.source.contains("atomicAdd(out_sums"));
    let staging = 2 * 128 * (3 * 64 + 16) + 16 + 2 * 128 * 8;
    let stage = 16384 + 3 * 2048;
    let stages = (SMEM_PER_CTA_MAX - 1024 - staging) / (stage + 16);
    assert_eq!(normed.launch.smem_bytes as usize, stages.min(12) * (stage + 16) + 1024 + staging);
    // An explicit ring deeper than fits is cut to fit with the work (without it, an error).
    s.tile = Some(Tile { group: 3, k_rows: 1, ..Tile::new(256, 16) });
    let cut = specialize(&s).unwrap();
    assert_eq!(cut.launch.smem_bytes as usize, stages * (stage + 16) + 1024 + staging);
    s.row_norm = crate::codegen::RowNorm::default();
    let e = specialize(&s).unwrap_err().to_string();
    assert!(e.contains("exceed the shared memory"), "{e}");
}

#[test]
fn weight_is_packed_transposed_per_block() {
    let mut s = f16_spec(vec![(1, 2), (0, 0), (1, 0)]);
    s.engine = Engine::Wgmma;
    let k = specialize(&s).unwrap();
    assert_eq!(k.ptr, vec![0, 2, 2, 3]);
    let w: Vec<f32> = (0..128 * 96).map(|i| i as f32).collect();
    let p = k.pack_weight(&w);
    assert_eq!(p.len(), 3 * 1024);
    // Block (0, 0): element [n = 1][k = 0] is W[0][1]; block (1, 0) second, [n = 0][k = 1] = W[33][0].
    assert_eq!(p[32], w[1]);
    assert_eq!(p[1024 + 1], w[33 * 96]);
    // The warp-specialized kernel packs each block as its shared-memory image (one bulk
    // copy lands it): element [n][k] at the swizzled offset of chunk k / 8 of row n.
    s.engine = Engine::WgmmaWs;
    let k = specialize(&s).unwrap();
    assert!(k.w_smem_image);
    let p = k.pack_weight(&w);
    let layout = CoreLayout { k_chunks: 4 };
    let mut e = 0;
    for j in 0..3 {
        for &kb in &k.idx[k.ptr[j] as usize..k.ptr[j + 1] as usize] {
            for n in 0..32 {
                for kk in 0..32 {
                    let at = e * 1024 + layout.offset(n, kk / 8) / 2 + kk % 8;
                    assert_eq!(p[at], w[(kb as usize * 32 + kk) * 96 + j * 32 + n], "block {e} [{n}][{kk}]");
                }
            }
            e += 1;
        }
    }
    // The 64-byte swizzle: row 2 of the first block starts with its k = 8..15 chunk.
    assert_eq!(p[64], w[8 * 96 + 2]);
}

/// A `k_blocks × n_blocks` block grid with every `keep`-th block live (row-major order).
fn every_nth(k_blocks: usize, n_blocks: usize, keep: usize) -> Vec<(usize, usize)> {
    (0..k_blocks * n_blocks).filter(|i| i % keep == 0).map(|i| (i / n_blocks, i % n_blocks)).collect()
}

#[test]
fn few_live_blocks_run_two_ctas_per_sm_and_many_one() {
    // MiniLM's output projection shape: 4096 × 384 × 384 in 32×32 blocks (12 × 12).
    let sparse = SpmmSpec::new(4096, 384, 384, Dtype::F16, (32, 32), every_nth(12, 12, 10));
    let k = specialize(&sparse).unwrap();
    assert_eq!(k.family, Family::BlockWgmma);
    assert!(k.source.contains("__launch_bounds__(THREADS, 2)"), "{}", &k.source[..400]);
    // 128-row items × 1 column: 32 × 12 items on 2 × 132 CTAs; two CTAs' shared memory fit an SM.
    assert_eq!(k.launch.grid, (264, 1, 1));
    assert!(2 * (k.launch.smem_bytes as usize + SMEM_RESERVED_PER_CTA) <= SMEM_PER_SM);
    // Half the blocks live: one CTA per SM with the deep ring.
    let half = SpmmSpec::new(4096, 384, 384, Dtype::F16, (32, 32), every_nth(12, 12, 2));
    let k = specialize(&half).unwrap();
    assert!(k.source.contains("__launch_bounds__(THREADS, 1)"));
    assert!(k.launch.grid.0 as usize <= TARGET_SMS && k.launch.smem_bytes > 150_000);
    // An explicit tile keeps one CTA per SM unless it asks for two.
    let mut forced = sparse.clone();
    forced.tile = Some(Tile::new(128, 4));
    assert!(specialize(&forced).unwrap().source.contains("__launch_bounds__(THREADS, 1)"));
    forced.tile = Some(Tile { per_sm: 2, ..Tile::new(128, 3) });
    assert!(specialize(&forced).unwrap().source.contains("__launch_bounds__(THREADS, 2)"));
    forced.tile = Some(Tile { per_sm: 3, ..Tile::new(128, 3) });
    assert!(specialize(&forced).unwrap_err().to_string().contains("1 or 2 CTAs per SM"));
}
