//! Tests of the family: tables, packing and the rendered source.

use super::*;
use crate::codegen::{DenseCopy, Tile};
use crate::kernel_choice::fine_tf32::{auto_work, gathered_work, steps_of};

#[test]
fn steps_hold_every_k_once_and_quads_take_distinct_residues_while_they_can() {
    let ks: Vec<usize> = vec![0, 1, 2, 3, 4, 8, 12, 16, 5, 9, 6, 7, 11, 20, 24, 28, 29];
    let mut sorted = ks.clone();
    sorted.sort();
    let steps = steps_of(&sorted, 32);
    let mut seen: Vec<usize> = steps.iter().flatten().copied().filter(|&k| k < 32).collect();
    seen.sort();
    assert_eq!(seen, sorted);
    // 17 entries: 3 steps (24 slots), the rest padding at the zero columns 32..36.
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().flatten().all(|&k| k < 36));
    // The residue classes hold 8, 4, 2 and 3 entries: the first two quads deal four
    // distinct residues; a quad with padding holds four distinct residues too (padding
    // starts only when every class is empty).
    for quad in [&steps[0][..4], &steps[0][4..]] {
        let mut r: Vec<usize> = quad.iter().map(|k| k % 4).collect();
        r.sort();
        r.dedup();
        assert_eq!(r.len(), 4, "{quad:?}");
    }
    for quad in steps.iter().flat_map(|s| [&s[..4], &s[4..]]) {
        if quad.iter().any(|&k| k >= 32) {
            let mut r: Vec<usize> = quad.iter().map(|k| k % 4).collect();
            r.sort();
            r.dedup();
            assert_eq!(r.len(), 4, "{quad:?}");
        }
    }
    assert!(steps_of(&[], 64).is_empty());
}

#[test]
fn offsets_round_trip_and_a_quad_of_distinct_residues_loads_without_bank_conflicts() {
    let table = FineTable { chunk: 128, ld: 64, cols: 128, warps: 16 };
    for k in 0..132 {
        assert_eq!(chunk_k(table, stage_offset(64, 128, k)), k);
    }
    // Lane (g, t) reads row g (128 bytes apart) at the offset of k_t XOR its swizzle.
    let bank = |g: usize, k: usize| ((g * 128 + (stage_offset(64, 128, k) ^ (g << 4))) / 4) % 32;
    for quad in [[0, 5, 10, 15], [33, 64, 127, 2], [128, 129, 130, 131], [96, 1, 130, 7]] {
        let mut banks: Vec<usize> = (0..8).flat_map(|g| quad.iter().map(move |&k| bank(g, k))).collect();
        banks.sort();
        banks.dedup();
        assert_eq!(banks.len(), 32, "{quad:?}");
    }
    // Two k of one residue in a quad share a bank for some pair of rows.
    let banks: Vec<usize> = (0..8).flat_map(|g| [0, 4, 1, 2].map(|k| bank(g, k))).collect();
    let mut unique = banks.clone();
    unique.sort();
    unique.dedup();
    assert!(unique.len() < 32);
}

#[test]
fn auto_takes_the_tensor_cores_where_they_measured_faster() {
    // `n` nonzeros spread over a k × n weight (only their count matters to the rule).
    let spec = |m: usize, k: usize, n: usize, kept: f64| {
        let nnz = (kept * (k * n) as f64) as usize;
        let step = (k * n) / nnz;
        SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), (0..nnz).map(|i| (i * step / n, i * step % n)).collect())
    };
    assert!(auto_prefers(&spec(1024, 1024, 1024, 0.05)).unwrap());
    assert!(auto_prefers(&spec(1024, 1024, 1024, 0.01)).unwrap());
    // At 4096³ the scattered 5% gather ~7× their work: the SIMT kernel; 1% and 50% not.
    assert!(!auto_prefers(&spec(4096, 4096, 4096, 0.05)).unwrap());
    assert!(auto_prefers(&spec(4096, 4096, 4096, 0.01)).unwrap());
    assert!(auto_prefers(&spec(4096, 4096, 4096, 0.5)).unwrap());
    // 10% kept as whole 8-column rows gathers nothing extra: tensor cores.
    let rows: Vec<(usize, usize)> = (0..4096).step_by(10).flat_map(|k| (0..4096).map(move |n| (k, n))).collect();
    let banded = SpmmSpec::new(4096, 4096, 4096, Dtype::F32, (1, 1), rows);
    assert!((gathered_work(&banded) - 1.0).abs() < 1e-9);
    assert!(auto_prefers(&banded).unwrap());
    // Anything forced for the other fine kernels keeps them; so do K % 4 != 0 and fp16.
    let mut s = spec(1024, 1024, 1024, 0.05);
    s.tile = Some(crate::codegen::Tile::new(64, 4));
    assert!(!auto_prefers(&s).unwrap());
    s.tile = None;
    s.dense_copy = DenseCopy::Prepass;
    assert!(!auto_prefers(&s).unwrap());
    s.dense_copy = DenseCopy::Auto;
    s.mode = Mode::Unrolled;
    assert!(!auto_prefers(&s).unwrap());
    assert!(!auto_prefers(&spec(1024, 1026, 1024, 0.05)).unwrap());
    let mut h = spec(1024, 1024, 1024, 0.05);
    h.dtype = Dtype::F16;
    assert!(!auto_prefers(&h).unwrap());
    // And the engine decides before the rule.
    let mut small = spec(64, 64, 64, 0.1);
    assert_eq!(super::super::specialize(&small).unwrap().family, Family::FineTf32);
    small.engine = Engine::Simt;
    assert_eq!(super::super::specialize(&small).unwrap().family, Family::Fine);
}

/// The planner's count of the kernel's work is the kernel's: the steps in its table and
/// its CTA column tiles (grid x); `None` where Auto hands the spec on, and the left
/// orientation refuses the forced engine instead of running another kernel.
#[test]
fn auto_work_counts_what_the_kernel_does() {
    let (m, k, n) = (256, 1000, 300);
    let mut rng = crate::rng::SplitMix64::new(5);
    let live: Vec<bool> = (0..k * n).map(|_| rng.uniform(0.0, 1.0) < 0.05).collect();
    let blocks: Vec<(usize, usize)> = (0..k * n).filter(|&i| live[i]).map(|i| (i / n, i % n)).collect();
    let spec = SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), blocks.clone());
    let work = auto_work(&spec).unwrap().expect("auto takes it at this size");
    let kern = super::super::specialize(&spec).unwrap();
    assert_eq!(kern.family, Family::FineTf32);
    assert_eq!(Some(work.steps), kern.tensor_steps());
    assert!(work.steps > 0);
    assert_eq!(work.col_tiles, kern.launch.grid.0 as usize);
    assert_eq!((work.tile.0, work.tile.1, work.nt), (64, 128, 1));
    let mut simt = spec.clone();
    simt.engine = Engine::Simt;
    assert_eq!(auto_work(&simt).unwrap(), None);
    // W on the left is m × k: its nonzeros are (row < m, col < k).
    let left_blocks: Vec<(usize, usize)> = blocks.iter().filter(|&&(_, nn)| nn < m).map(|&(kk, nn)| (nn, kk)).collect();
    let mut left = SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), left_blocks);
    left.orientation = Orientation::Left;
    left.engine = Engine::Tf32x3;
    let err = super::super::specialize(&left).unwrap_err().to_string();
    assert!(err.contains("right orientation"), "{err}");
}

#[test]
fn tables_and_packing_round_trip_the_weight() {
    // 72 × 37 (ragged groups and chunks), about half live.
    let (m, k, n) = (40, 72, 37);
    let mut rng = crate::rng::SplitMix64::new(3);
    let live: Vec<bool> = (0..k * n).map(|_| rng.uniform(0.0, 1.0) < 0.5).collect();
    let blocks: Vec<(usize, usize)> = (0..k * n).filter(|&i| live[i]).map(|i| (i / n, i % n)).collect();
    let mut s = SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), blocks);
    s.engine = Engine::Tf32x3;
    let w: Vec<f32> = (0..k * n).map(|i| if live[i] { 1.0 + i as f32 } else { 0.0 }).collect();
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    // The default layout (at half kept, groups of 16: their k union is barely larger than
    // that of 8) and both widths forced.
    let forced = |nt: usize| Some(Tile { group: 2, k_rows: 1, n_tiles: nt, ..Tile::new(32, 0) });
    for (tile, want_nt) in [(None, 2), (forced(1), 1), (forced(2), 2)] {
        s.tile = tile;
        let kern = super::super::specialize(&s).unwrap();
        assert_eq!(kern.family, Family::FineTf32);
        assert!(kern.source.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
        let t = kern.fine.unwrap();
        let nt = t.cols / (8 * t.warps);
        assert_eq!(nt, want_nt, "{}", kern.name);
        let packed = kern.pack_weight(&w);
        assert_eq!(packed.len(), 16 * nt * kern.idx.len());
        // Every nonzero appears exactly once in the packing, and nothing else but zeros.
        let mut got: Vec<f32> = packed.iter().copied().filter(|&v| v != 0.0).collect();
        let mut want: Vec<f32> = w.iter().copied().filter(|&v| v != 0.0).collect();
        got.sort_by(f32::total_cmp);
        want.sort_by(f32::total_cmp);
        assert_eq!(got, want);
        // Multiplying through the tables gives the dense product: lane (g, t) of step st holds,
        // per n8 tile q, column 8 · (nt · j + q) + g at the k of its index word's halves.
        let gp = (kern.ptr.len() - 1) / k.div_ceil(t.chunk);
        let mut c = vec![0.0f32; m * n];
        for run in 0..kern.ptr.len() - 1 {
            let (ch, j) = (run / gp, run % gp);
            for st in kern.ptr[run] as usize..kern.ptr[run + 1] as usize {
                for lane in 0..32 {
                    let (g, tt) = (lane / 4, lane % 4);
                    let word = kern.idx[4 * st + tt] as u32;
                    for (h, off) in [word & 0xffff, word >> 16].into_iter().enumerate() {
                        let kk = chunk_k(t, off as usize);
                        for q in 0..nt {
                            let col = 8 * (nt * j + q) + g;
                            if kk < t.chunk && col < n {
                                let wv = packed[64 * nt * st + 2 * nt * lane + 2 * q + h];
                                for r in 0..m {
                                    c[r * n + col] += a[r * k + ch * t.chunk + kk] * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
        for r in 0..m {
            for col in 0..n {
                let want: f32 = (0..k).map(|kk| a[r * k + kk] * w[kk * n + col]).sum();
                assert_eq!(c[r * n + col], want, "({r}, {col}) {}", kern.name);
            }
        }
    }
    s.tile = None;
    // The unrolled mode, K not a multiple of 4 and other dtypes are refused.
    s.mode = Mode::Unrolled;
    assert!(super::super::specialize(&s).unwrap_err().to_string().contains("streams its tables"));
    let mut odd = SpmmSpec::new(8, 70, 8, Dtype::F32, (1, 1), vec![(3, 4)]);
    odd.engine = Engine::Tf32x3;
    assert!(super::super::specialize(&odd).unwrap_err().to_string().contains("K a multiple of 4"));
    odd.k = 72;
    odd.dtype = Dtype::F16;
    assert!(super::super::specialize(&odd).unwrap_err().to_string().contains("takes f32 weights"));
}

/// Weights that are TF32 numbers (the challenge's 1/16) give the two-product kernel: no split
/// of W and no product with its remainder; the tables do not change. Any other value keeps
/// the three products.
#[test]
fn tf32_exact_weights_leave_out_the_remainder_product() {
    assert!(crate::codegen::tf32_exact(&[0.0625, -1.0, 0.0, 1.5, -1023.0]));
    assert!(!crate::codegen::tf32_exact(&[1024.5]));
    assert!(!crate::codegen::tf32_exact(&[0.0625, 0.1]));
    let (m, k, n) = (128, 256, 64);
    let blocks: Vec<(usize, usize)> = (0..k).flat_map(|r| [(r, (r * 7) % n), (r, (r * 13 + 5) % n)]).collect();
    let mut s = SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), blocks);
    s.engine = Engine::Tf32x3;
    let three = super::super::specialize(&s).unwrap();
    s.w_tf32_exact = true;
    let two = super::super::specialize(&s).unwrap();
    assert!(three.name.starts_with("spmm_fine_tf32x3_") && two.name.starts_with("spmm_fine_tf32x2_"));
    assert_eq!((&two.ptr, &two.idx, two.launch.grid), (&three.ptr, &three.idx, three.launch.grid));
    let mma = |src: &str| src.matches("mma1688(part").count();
    assert_eq!((mma(&three.source), mma(&two.source)), (3, 2));
    assert!(three.source.contains("split(w_cur.x") && !two.source.contains("split(w_cur.x"));
}
