//! Tests of the dispatcher, the block kernels and the fine loop kernel.

use super::fine::*;
use super::kernel::*;
use super::*;
use crate::codegen::*;

/// `spec` on the SIMT fine kernels (the tests of their tables and tiles; `Engine::Auto`
/// may take the tensor cores for fp32).
fn simt(mut spec: SpmmSpec) -> SpmmSpec {
    spec.engine = Engine::Simt;
    spec
}
use crate::codegen::Tile;

/// An fp32 spec on the SIMT kernels (auto takes 3xTF32, see `spmm/tf32.rs`).
fn spec(blocks: Vec<(usize, usize)>) -> SpmmSpec {
    let mut s = SpmmSpec::new(64, 64, 96, Dtype::F32, (32, 32), blocks);
    s.engine = Engine::Simt;
    s
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
    let mut s = spec(all);
    assert_eq!(specialize(&s).unwrap().family, Family::Dense);
    s.engine = Engine::Auto;
    let tf = specialize(&s).unwrap();
    assert_eq!(tf.family, Family::BlockTf32);
    assert!(tf.name.starts_with("spmm_dense_tf32x3") && tf.ptr.len() == 4);
    let mut s = spec(vec![(0, 0)]);
    s.dtype = Dtype::F16;
    s.engine = Engine::Auto;
    assert_eq!(specialize(&s).unwrap().family, Family::BlockWgmma);
    s.engine = Engine::MmaSync;
    assert_eq!(specialize(&s).unwrap().family, Family::BlockMma);
    s.block = (1, 1);
    assert_eq!(specialize(&s).unwrap().family, Family::Fine);
}

/// The left orientation's tables and packed weight, read the way the kernels read them
/// (a CTA per block row of W, its live block columns as k-blocks, each packed block
/// `Wᵀ`-row-major), give `W·B`.
#[test]
fn left_tables_and_packed_weight_compute_w_times_b() {
    let (m, k, n) = (64, 96, 16);
    for (dtype, block, blocks) in [
        (Dtype::F32, (32, 32), vec![(0, 1), (1, 0), (1, 2)]),
        (Dtype::F16, (16, 32), vec![(3, 2), (0, 0), (2, 1), (1, 1)]),
        (Dtype::F32, (32, 16), (0..2).flat_map(|r| (0..6).map(move |c| (r, c))).collect()),
    ] {
        let (bh, bw) = block;
        let mut s = SpmmSpec::new(m, k, n, dtype, block, blocks.clone());
        s.orientation = Orientation::Left;
        let kern = specialize(&s).unwrap();
        assert_eq!(kern.orientation, Orientation::Left);
        assert!(kern.name.ends_with("_left"), "{}", kern.name);
        assert!(kern.source.contains("Left orientation"));
        assert_eq!(kern.launch.grid.0 as usize, m / bh);
        let w: Vec<f32> = (0..m * k)
            .map(|i| if blocks.contains(&(i / k / bh, (i % k) / bw)) { (i % 7) as f32 - 3.0 } else { 0.0 })
            .collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
        let packed = kern.pack_weight(&w);
        assert_eq!(packed.len(), blocks.len() * bh * bw);
        let mut got = vec![0.0f32; m * n];
        for jb in 0..kern.ptr.len() - 1 {
            for e in kern.ptr[jb] as usize..kern.ptr[jb + 1] as usize {
                let kb = kern.idx[e] as usize;
                for r in 0..bw {
                    for c in 0..bh {
                        let v = packed[e * bh * bw + r * bh + c];
                        for i in 0..n {
                            got[(jb * bh + c) * n + i] += v * b[(kb * bw + r) * n + i];
                        }
                    }
                }
            }
        }
        let mut want = vec![0.0f32; m * n];
        for r in 0..m {
            for kk in 0..k {
                for i in 0..n {
                    want[r * n + i] += w[r * k + kk] * b[kk * n + i];
                }
            }
        }
        assert_eq!(got, want, "{block:?}");
        assert_eq!(kern.flops(), 2.0 * n as f64 * (blocks.len() * bh * bw) as f64);
    }
}

#[test]
fn uniform_blocks_fold_to_one_literal_each() {
    let blocks = vec![(0, 0), (1, 1), (0, 2), (3, 2)];
    let mut s = SpmmSpec::new(64, 128, 96, Dtype::F32, (32, 32), blocks.clone());
    let mut w = vec![0.0f32; 128 * 96];
    for (i, &(r, c)) in blocks.iter().enumerate() {
        for rr in 0..32 {
            for cc in 0..32 {
                w[(r * 32 + rr) * 96 + c * 32 + cc] = 0.0625 * (i + 1) as f32;
            }
        }
    }
    s.values = Some(w.clone());
    let k = specialize(&s).unwrap();
    assert!(k.name.ends_with("_folded") && k.values_embedded, "{}", k.name);
    assert!(k.source.contains("BLOCK_VAL") && !k.source.contains("W_LIT[]"));
    // Block column order: (0,0); (1,1); (0,2), (3,2).
    assert!(k.source.contains("6.25e-2f,1.25e-1f,1.875e-1f,2.5e-1f,"), "{}", k.source);
    // One element off breaks that block's uniformity: the others still fold, it keeps its
    // W tile (NaN marks it in the literal table).
    w[(3 * 32 + 5) * 96 + 2 * 32 + 7] = 1.0;
    s.values = Some(w.clone());
    let k = specialize(&s).unwrap();
    assert!(k.name.ends_with("_partfolded") && k.source.contains("W_LIT[]"), "{}", k.name);
    let bits = [0.0625f32, 0.125, 0.1875].map(|v| format!("{}u,", v.to_bits())).concat() + "2147483647u,";
    assert!(k.source.contains(&bits), "{}", k.source);
    // No uniform block left: the general kernel.
    for (i, &(r, c)) in blocks.iter().enumerate() {
        w[(r * 32 + i) * 96 + c * 32] = 2.0;
    }
    s.values = Some(w.clone());
    let k = specialize(&s).unwrap();
    assert!(!k.name.contains("folded") && k.source.contains("W_LIT[]") && !k.source.contains("BLOCK_VAL"));
    // fp16 (tensor cores) and index-stream kernels do not fold.
    for (i, &(r, c)) in blocks.iter().enumerate() {
        w[(r * 32 + i) * 96 + c * 32] = 0.0625 * (i + 1) as f32;
    }
    w[(3 * 32 + 5) * 96 + 2 * 32 + 7] = 0.25;
    s.values = Some(w);
    s.mode = Mode::IndexStream;
    assert!(!specialize(&s).unwrap().name.contains("folded"));
    s.mode = Mode::Auto;
    s.dtype = Dtype::F16;
    assert!(!specialize(&s).unwrap().name.contains("folded"));
}

#[test]
fn fine_left_tables_are_rows_of_w_and_pack_weight_follows_them() {
    let mut s = SpmmSpec::new(4, 8, 12, Dtype::F32, (1, 1), vec![(2, 7), (0, 3), (2, 1), (3, 0)]);
    s.orientation = Orientation::Left;
    let k = specialize(&s).unwrap();
    assert_eq!(k.family, Family::FineLeft);
    // One 32-row tile of W over 16 warps: warp j owns rows j and j + 16, so the runs are in
    // the order of rows 0, 16, 1, 17, 2, 18, 3, ... (rows past 3 empty); each run padded to a
    // group of four; entries are k inside the chunk times the tile's row stride, pads point
    // at the zero row (k = chunk).
    let t = k.fine.unwrap();
    assert_eq!((0..8).map(|p| t.column(p)).collect::<Vec<_>>(), vec![0, 16, 1, 17, 2, 18, 3, 19]);
    assert_eq!(k.ptr.len(), 33);
    assert_eq!(k.ptr[..9], [0, 4, 4, 4, 4, 8, 8, 12, 12]);
    assert!(k.ptr[9..].iter().all(|&p| p == 12));
    let (ld, pad) = (t.ld as i32, (t.chunk * t.ld) as i32);
    assert_eq!(k.idx, vec![3 * ld, pad, pad, pad, ld, 7 * ld, pad, pad, 0, pad, pad, pad]);
    let w: Vec<f32> = (0..4 * 8).map(|i| i as f32).collect();
    let z = 0.0;
    assert_eq!(k.pack_weight(&w), vec![3.0, z, z, z, 17.0, 23.0, z, z, 24.0, z, z, z]);
    assert_eq!(k.flops(), 2.0 * 12.0 * 4.0);
    assert!(k.source.contains("C[4,12] = epilogue(W[4,8] · B[8,12])"));
    let mut s3 = s.clone();
    s3.blocks.pop();
    let k3 = specialize(&s3).unwrap();
    assert_eq!((k3.idx.len(), k3.live_instances), (8, 3));
    assert_eq!(k3.pack_weight(&w), vec![3.0, z, z, z, 17.0, 23.0, z, z]);
}

/// A right-orientation fp32 fine spec with every 20th element of the weight kept.
fn fine_spec(m: usize, k: usize, n: usize, dtype: Dtype) -> SpmmSpec {
    let blocks = (0..k * n).filter(|i| i % 20 == 7).map(|i| (i / n, i % n)).collect();
    simt(SpmmSpec::new(m, k, n, dtype, (1, 1), blocks))
}

#[test]
fn the_transpose_prepass_runs_from_eight_column_tiles_or_when_asked() {
    // 5% kept, 256 × 256 tiles: 2048 columns are 8 tiles (prepass), 1024 are 4 (none).
    let k = specialize(&fine_spec(256, 256, 2048, Dtype::F32)).unwrap();
    let pre = k.prepass.as_ref().expect("auto takes the prepass at 8 column tiles");
    assert_eq!((pre.scratch_bytes, pre.launch.grid), (4 * 256 * 256, (4, 4, 1)));
    assert!(k.name.ends_with("_at") && k.source.contains("#define D_ROW 256"));
    let k = specialize(&fine_spec(256, 256, 1024, Dtype::F32)).unwrap();
    assert!(k.prepass.is_none() && !k.source.contains("D_ROW"));
    // Asked for: ragged M pads At's rows to 4; asked off: none.
    let mut s = fine_spec(77, 256, 1024, Dtype::F32);
    s.dense_copy = DenseCopy::Prepass;
    let k = specialize(&s).unwrap();
    assert_eq!(k.prepass.as_ref().map(|p| p.scratch_bytes), Some(4 * 256 * 80));
    assert_eq!(k.fine.unwrap().ld, k.fine.unwrap().ld / 32 * 32, "At's tiles need no bank padding");
    let mut s = fine_spec(256, 256, 2048, Dtype::F32);
    s.dense_copy = DenseCopy::Transposing;
    assert!(specialize(&s).unwrap().prepass.is_none());
    // fp16: the prepass widens A to an fp32 At (4 bytes per element) and feeds the ring;
    // without it (asked off, or too few column tiles) the tiles come through registers.
    let mut s = fine_spec(256, 256, 2048, Dtype::F16);
    let k = specialize(&s).unwrap();
    assert_eq!(k.prepass.as_ref().map(|p| p.scratch_bytes), Some(4 * 256 * 256));
    assert!(k.source.contains("const float* __restrict__ D,") && k.source.contains("STAGE_WORDS"));
    s.dense_copy = DenseCopy::Transposing;
    let k = specialize(&s).unwrap();
    assert!(k.prepass.is_none() && !k.source.contains("STAGE_WORDS"), "fp16 without the prepass: registers");
    // 16-bit A takes it from 4 column tiles (the register path loses there), not at 2.
    let k = specialize(&fine_spec(256, 256, 1024, Dtype::Bf16)).unwrap();
    assert!(k.prepass.is_some());
    let k = specialize(&fine_spec(256, 256, 512, Dtype::Bf16)).unwrap();
    assert!(k.prepass.is_none() && !k.source.contains("STAGE_WORDS"));
    // Asked for, it also takes tilings whose very sparse tiles would prefetch through
    // registers (32 × 512 tiles leaving SMs idle) and 2-CTAs-per-SM tiles.
    let mut s = fine_spec(256, 256, 2048, Dtype::F32);
    s.blocks.truncate(s.blocks.len() / 4);
    s.tile = Some(crate::codegen::Tile { per_sm: 2, split: 1, ..crate::codegen::Tile::new(32, 4) });
    s.dense_copy = DenseCopy::Prepass;
    let k = specialize(&s).unwrap();
    assert!(k.prepass.is_some() && k.source.contains("STAGE_WORDS"));
    // The left orientation on 16-bit B widens it (Bw, N rounded up to 4) from 4 column tiles.
    let mut s = fine_spec(256, 256, 1026, Dtype::F16);
    s.orientation = Orientation::Left;
    s.m = 1024;
    s.n = 1026;
    s.blocks = (0..1024 * 256).filter(|i| i % 20 == 7).map(|i| (i / 256, i % 256)).collect();
    let k = specialize(&s).unwrap();
    let pre = k.prepass.as_ref().expect("16-bit B is widened");
    assert!(pre.name.starts_with("widen_f16") && k.name.ends_with("_wide"));
    assert_eq!(pre.scratch_bytes, 4 * 256 * 1028);
    assert!(k.source.contains("#define D_ROW 1028") && k.source.contains("const float* __restrict__ D,"));
    // The left orientation on fp32 B reads B's rows as they are: no prepass whatever is asked.
    let mut s = fine_spec(256, 256, 2048, Dtype::F32);
    s.orientation = Orientation::Left;
    s.blocks =
        s.blocks.iter().map(|&(r, c)| (c % 256, r)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    s.dense_copy = DenseCopy::Prepass;
    assert!(specialize(&s).unwrap().prepass.is_none());
}

#[test]
fn fine_tiling_follows_the_override_and_shrinks_chunks_to_fit() {
    let mut s = SpmmSpec::new(300, 512, 512, Dtype::F32, (1, 1), (0..512).map(|i| (i, i)).collect());
    s.tile = Some(Tile::new(128, 4));
    let k = specialize(&s).unwrap();
    assert_eq!(k.launch.grid, (4, 3, 1));
    assert!(k.source.contains("#define RPL 4") && k.source.contains("#define NC 128"));
    // Every element live: the entries of a 256-column tile do not fit one 256-deep chunk.
    let all: Vec<(usize, usize)> = (0..512).flat_map(|r| (0..512).map(move |c| (r, c))).collect();
    let mut d = SpmmSpec::new(64, 512, 512, Dtype::F32, (1, 1), all);
    d.tile = Some(Tile::new(64, 8));
    let k = specialize(&d).unwrap();
    let chunk = k.fine.unwrap().chunk;
    assert!(k.launch.smem_bytes <= 227 * 1024 && chunk < 256, "chunk {chunk} smem {}", k.launch.smem_bytes);
}

#[test]
fn fine_right_tables_are_columns_of_w_and_pack_weight_follows_them() {
    // W is K × N = 8 × 3; column 0 empty, column 1 holds k = 2 and 7, column 2 holds k = 0.
    let k = specialize(&simt(SpmmSpec::new(4, 8, 3, Dtype::F32, (1, 1), vec![(2, 1), (7, 1), (0, 2)]))).unwrap();
    assert_eq!(k.family, Family::Fine);
    // Run positions 0, 2, 4 hold columns 0, 1, 2 (warp j owns columns j and j + 16).
    assert_eq!(k.ptr[..6], [0, 0, 0, 4, 4, 8]);
    let t = k.fine.unwrap();
    assert_eq!((t.k_in_chunk(k.idx[0]), t.k_in_chunk(k.idx[1]), t.k_in_chunk(k.idx[2])), (Some(2), Some(7), None));
    let w: Vec<f32> = (0..8 * 3).map(|i| i as f32).collect();
    assert_eq!(k.pack_weight(&w), vec![7.0, 22.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
}

#[test]
fn fine_entry_loop_follows_the_run_length() {
    // 1% kept, 512-deep chunks: ~5 live entries per (chunk, column) run, the simple loop;
    // half kept: the software-pipelined one.
    let pattern = |keep: usize| -> Vec<(usize, usize)> {
        (0..512).flat_map(|r| (0..512).map(move |c| (r, c))).filter(|&(r, c)| (r * 31 + c * 17) % 100 < keep).collect()
    };
    let sparse = specialize(&simt(SpmmSpec::new(256, 512, 512, Dtype::F32, (1, 1), pattern(1)))).unwrap();
    let dense = specialize(&simt(SpmmSpec::new(256, 512, 512, Dtype::F32, (1, 1), pattern(50)))).unwrap();
    assert_eq!(sparse.family, Family::Fine);
    assert!(sparse.source.contains("Short runs") && !sparse.source.contains("DGroup dc, dn"));
    assert!(dense.source.contains("DGroup dc, dn") && !dense.source.contains("Short runs"));
    assert!(!runs_are_long(5, 512, 512, 512) && runs_are_long(512 * 512 / 20, 512, 512, 512));
}

#[test]
fn fine_offsets_go_to_the_device_in_bytes() {
    let mut s = SpmmSpec::new(4, 8, 12, Dtype::F32, (1, 1), vec![(2, 7), (0, 3), (2, 1), (3, 0)]);
    s.orientation = Orientation::Left;
    let k = specialize(&s).unwrap();
    let t = k.fine.unwrap();
    let d = k.device_idx();
    assert_eq!(d.len(), k.idx.len());
    for (&dev, &e) in d.iter().zip(&k.idx) {
        assert_eq!(dev, 4 * e);
        // Live entries address a row of the tile, padding the zero row after the chunk.
        assert_eq!(dev as usize % (4 * t.ld), 0);
        assert!(dev as usize <= 4 * t.chunk * t.ld);
    }
    // The padding entries (3 per run here) read the zero row.
    assert_eq!(d.iter().filter(|&&v| v as usize == 4 * t.chunk * t.ld).count(), d.len() - 4);
    // Block kernels take their table as it is.
    let b = specialize(&spec(vec![(1, 2), (0, 0)])).unwrap();
    assert_eq!(b.device_idx(), b.idx);
}

#[test]
fn fine_k_split_makes_a_cluster_and_bad_tiles_are_errors() {
    let pattern: Vec<(usize, usize)> = (0..1000).map(|i| (i % 700, (i * 7) % 300)).collect();
    let mut s = SpmmSpec::new(200, 700, 300, Dtype::F32, (1, 1), pattern);
    s.blocks.sort();
    s.blocks.dedup();
    s.tile = Some(Tile { per_sm: 1, split: 2, ..Tile::new(64, 4) });
    let k = specialize(&s).unwrap();
    assert_eq!(k.launch.grid, (3, 4, 2));
    assert!(k.source.contains("__cluster_dims__(1, 1, 2)") && k.source.contains("barrier.cluster.arrive.release"));
    for (tile, needle) in [
        (Tile { per_sm: 1, split: 3, ..Tile::new(64, 4) }, "1, 2 or 4 CTAs"),
        (Tile { per_sm: 2, split: 1, ..Tile::new(64, 2) }, "2 fine CTAs per SM"),
        (Tile { per_sm: 2, split: 1, ..Tile::new(32, 16) }, "2 fine CTAs per SM"),
    ] {
        s.tile = Some(tile);
        let e = specialize(&s).unwrap_err().to_string();
        assert!(e.contains(needle), "{tile:?}: {e}");
    }
}

/// fp32 fine kernels stage D through the cp.async ring; sparse ones take the tile measured
/// in session 5 (64 × 256 from 2% kept, split over 2 CTAs when the tiles leave SMs idle, or,
/// left, 64 × 128 unsplit when those are enough (session 7);
/// 32 × 512 under 2%, or the register prefetch when those tiles would leave SMs idle); fp16
/// keeps the register prefetch and one row per lane.
#[test]
fn fine_ring_and_its_sparse_tiles() {
    // Every column holds `per_col` entries spread over K (a deterministic scatter).
    let pattern = |k: usize, n: usize, per_col: usize| -> Vec<(usize, usize)> {
        let mut b: Vec<(usize, usize)> =
            (0..n).flat_map(|c| (0..per_col).map(move |j| ((c * 7 + j * (k / per_col)) % k, c))).collect();
        b.sort();
        b.dedup();
        b
    };
    let tile = |s: &SpmmSpec| {
        let k = specialize(&simt(s.clone())).unwrap();
        let src = &k.source;
        let def = |name: &str| -> usize {
            let at = src.find(&format!("#define {name} ")).unwrap() + name.len() + 9;
            src[at..].split_whitespace().next().unwrap().parse().unwrap()
        };
        (def("BM"), def("NC"), k.launch.grid.2, src.contains("#define STAGE_WORDS"), def("D_LD"))
    };
    // 5% kept at 1024³: 16 × 4 tiles of 64 × 256 leave SMs idle, so K splits over 2.
    let s = SpmmSpec::new(1024, 1024, 1024, Dtype::F32, (1, 1), pattern(1024, 1024, 51));
    // The right orientation transposes A into a tile of stride 66 ≡ 2 (mod 32): a warp's
    // copies of 16 k × 2 rows hit 32 banks.
    assert_eq!(tile(&s), (64, 256, 2, true, 66));
    // The left orientation streams B's rows as they are, in 64 × 128 tiles (128 of them,
    // no split).
    let mut l = s.clone();
    l.orientation = Orientation::Left;
    assert_eq!(tile(&l), (64, 128, 1, true, 64));
    // 1% kept at 2048³: 32 × 512, 64 × 4 tiles, no split.
    let s = SpmmSpec::new(2048, 2048, 2048, Dtype::F32, (1, 1), pattern(2048, 2048, 20));
    assert_eq!(tile(&s), (32, 512, 1, true, 33));
    // 1% kept at 1024³: 32 × 512 would leave SMs idle, so the register prefetch stays.
    let s = SpmmSpec::new(1024, 1024, 1024, Dtype::F32, (1, 1), pattern(1024, 1024, 10));
    let (bm, _, _, ring, _) = tile(&s);
    assert_eq!((bm, ring), (32, false));
    // fp16 at 4 column tiles: the prepass widens A into an fp32 At, which the ring takes in
    // the fp32 tiling (64 × 256, stride 64: no transposing copies).
    let mut h = SpmmSpec::new(1024, 1024, 1024, Dtype::F16, (1, 1), pattern(1024, 1024, 51));
    assert_eq!(tile(&h), (64, 256, 2, true, 64));
    // Without it (asked): the register prefetch, one row per lane.
    h.dense_copy = DenseCopy::Transposing;
    let (bm, _, _, ring, _) = tile(&h);
    assert_eq!((bm, ring), (32, false));
}

#[test]
fn bad_specs_are_errors_not_panics() {
    let cases: Vec<(SpmmSpec, &str)> = vec![
        ({ spec(vec![(2, 0)]) }, "outside"),
        ({ spec(vec![(0, 0), (0, 0)]) }, "twice"),
        ({ SpmmSpec::new(64, 60, 96, Dtype::F32, (32, 32), vec![]) }, "does not tile"),
        (
            {
                let mut s = SpmmSpec::new(64, 64, 12, Dtype::F32, (32, 32), vec![]);
                s.orientation = Orientation::Left;
                s
            },
            "multiple of 8",
        ),
        (
            {
                let mut s = SpmmSpec::new(64, 96, 64, Dtype::F16, (128, 16), vec![]);
                s.orientation = Orientation::Left;
                s
            },
            "left orientation",
        ),
        (
            {
                let mut s = SpmmSpec::new(64, 96, 64, Dtype::F32, (32, 32), vec![(0, 3)]);
                s.orientation = Orientation::Left;
                s
            },
            "outside",
        ),
        (
            {
                let mut s = spec(vec![]);
                s.tile = Some(Tile::new(100, 3));
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
        (
            {
                let mut s = SpmmSpec::new(64, 64, 96, Dtype::F32, (1, 1), vec![]);
                s.tile = Some(Tile::new(48, 2));
                s
            },
            "fine tiles",
        ),
        (
            {
                let mut s = SpmmSpec::new(8, 16, 96, Dtype::F32, (1, 1), vec![(8, 0)]);
                s.orientation = Orientation::Left;
                s
            },
            "outside the 8x16 weight",
        ),
    ];
    for (s, want) in cases {
        let e = match specialize(&s) {
            Ok(_) => panic!("spec accepted, expected an error mentioning {want:?}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(want), "{e:?} should mention {want:?}");
    }
}
