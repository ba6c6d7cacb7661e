use super::*;

fn zero(dst: BufferId, len: usize) -> Vec<Launch> {
    vec![Launch::Zero { dst, at: 0, len }]
}

fn copy(src: BufferId, dst: BufferId, len: usize) -> Vec<Launch> {
    vec![Launch::Copy { src, src_at: 0, dst, dst_at: 0, len }]
}

/// An `n x n` layer whose row `r` holds the (column, value) pairs `row(r)`, columns sorted.
fn layer_of_rows(n: usize, row: impl Fn(usize) -> Vec<(u32, f32)>) -> Csr {
    let mut offsets = vec![0u32];
    let (mut indices, mut values) = (vec![], vec![]);
    for r in 0..n {
        let mut entries = row(r);
        entries.sort_unstable_by_key(|e| e.0);
        indices.extend(entries.iter().map(|e| e.0));
        values.extend(entries.iter().map(|e| e.1));
        offsets.push(indices.len() as u32);
    }
    Csr { rows: n, cols: n, offsets, indices, values }
}

#[test]
fn builder_orders_each_step_after_exactly_its_conflicts() {
    let mut b = ProgramBuilder::new("t");
    let host = b.constant("h", Data::F32(vec![1.0; 8]), true);
    let x = b.buffer("x", Elem::F32, 8, Storage::Scratch);
    let y = b.buffer("y", Elem::F32, 8, Storage::Scratch);
    let s0 = b.step("fill x", Op::Move, copy(host, x, 8)); // writes x
    let s1 = b.step("x to y", Op::Move, copy(x, y, 8)); // reads x (after s0), writes y
    let s2 = b.step("h to y?", Op::Move, copy(host, y, 4)); // writes y: after s1 (WAW)
    let s3 = b.step("zero x", Op::Move, zero(x, 8)); // writes x: after s1 (WAR) and s0 (WAW)
    let p = b.finish().unwrap();
    assert_eq!(p.steps[s0].after, Vec::<usize>::new());
    assert_eq!(p.steps[s1].after, vec![s0]);
    assert_eq!(p.steps[s2].after, vec![s1]);
    assert_eq!(p.steps[s3].after, vec![s0, s1]);
}

#[test]
fn disjoint_ranges_of_one_buffer_stay_unordered() {
    let mut b = ProgramBuilder::new("t");
    let x = b.buffer("x", Elem::F32, 8, Storage::Scratch);
    b.step("lo", Op::Move, vec![Launch::Zero { dst: x, at: 0, len: 4 }]);
    let hi = b.step("hi", Op::Move, vec![Launch::Zero { dst: x, at: 4, len: 4 }]);
    let p = b.finish().unwrap();
    assert!(p.steps[hi].after.is_empty());
}

#[test]
fn verify_rejects_unordered_conflicts_and_out_of_range_access() {
    let mut b = ProgramBuilder::new("t");
    let x = b.buffer("x", Elem::F32, 8, Storage::Scratch);
    b.step("a", Op::Move, zero(x, 8));
    b.step("b", Op::Move, zero(x, 8));
    let mut p = b.finish().unwrap();
    p.steps[1].after.clear();
    let e = p.verify().unwrap_err().to_string();
    assert!(e.contains("not ordered"), "{e}");
    p.steps[1].after = vec![0];
    p.steps[1].launches = zero(x, 9);
    let e = p.verify().unwrap_err().to_string();
    assert!(e.contains("touches 0..9 of x"), "{e}");
}

#[test]
fn verify_rejects_writes_to_constants() {
    let mut b = ProgramBuilder::new("t");
    let c = b.constant("w", Data::F32(vec![0.5; 4]), false);
    b.step("clobber", Op::Move, zero(c, 4));
    let e = b.finish().unwrap_err().to_string();
    assert!(e.contains("writes constant w"), "{e}");
}

#[test]
fn compiled_layers_round_trip_their_bytes_and_reject_damage() {
    use crate::program::hpec::{compile_layer, HpecOptions, LayerKernels};
    // A 64x64 layer with 4 nonzeros per row at scattered columns.
    let n = 64;
    let layer =
        layer_of_rows(n, |r| (0..4).map(|j| (((r * 7 + j * 13) % n) as u32, 0.0625 * (j + 1) as f32)).collect());
    let k = compile_layer(&layer, 256, true, &HpecOptions { batch: 256, ..HpecOptions::default() }).unwrap();
    assert!(!k.parts.is_empty() && k.parts.iter().all(|p| p.source.contains(&p.name)));
    let bytes = k.to_bytes();
    assert_eq!(LayerKernels::from_bytes(&bytes), Some(k.clone()));
    // Truncated, one bit flipped anywhere, or trailing bytes: never read as a layer.
    for cut in [0, 7, 8, bytes.len() / 2, bytes.len() - 1] {
        assert_eq!(LayerKernels::from_bytes(&bytes[..cut]), None, "cut at {cut}");
    }
    for at in [0, 9, bytes.len() / 3, bytes.len() - 9, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        assert_eq!(LayerKernels::from_bytes(&bad), None, "flip at {at}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(LayerKernels::from_bytes(&longer), None);
}

#[test]
fn fine_only_plans_element_sparse_parts_where_blocks_would_win() {
    use crate::program::hpec::{compile_layer, HpecOptions};
    // A 128x128 layer of full 16x16 blocks on the diagonal: the planner covers it with blocks,
    // and with `fine_only` with element-sparse parts only, which hold just the nonzeros.
    let layer = layer_of_rows(128, |r| ((r / 16) * 16..(r / 16 + 1) * 16).map(|c| (c as u32, 0.0625)).collect());
    let opts = HpecOptions { batch: 256, few_rows: None, ..HpecOptions::default() };
    let planned = compile_layer(&layer, 256, true, &opts).unwrap();
    let fine = compile_layer(&layer, 256, true, &HpecOptions { fine_only: true, ..opts }).unwrap();
    assert!(!planned.summary.contains("1x1"), "{}", planned.summary);
    assert!(fine.parts.len() == 1 && fine.summary.contains(":1x1:"), "{}", fine.summary);
}
