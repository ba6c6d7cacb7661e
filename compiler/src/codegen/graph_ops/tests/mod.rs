//! Unit tests of the graph-op generators (convolutions in `conv_tests.rs`): tensor views, broadcasting and offset expressions,
//! refusals, parameter orders and deterministic sources. Compilation is checked by
//! `runtime/tests/graph_ops_compile.rs` (NVRTC + ptxas).

use super::*;
use crate::codegen::{Activation, Epilogue};
use crate::ir::DType::{self, *};

fn c(dtype: DType, shape: &[usize]) -> TensorDesc {
    TensorDesc::contiguous(dtype, shape)
}

fn add01() -> Expr {
    Expr::binary(Binary::Add, Expr::input(0), Expr::input(1))
}

/// The parameter list of `name` in `source`, e.g. `["const float* __restrict__ in0", ...]`.
fn params(source: &str, name: &str) -> Vec<String> {
    let start = source.find(&format!(" {name}(")).expect("kernel signature") + name.len() + 2;
    let end = start + source[start..].find(')').expect("end of the parameter list");
    source[start..end].split(',').map(|p| p.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

fn error(r: Result<OpKernel, CodegenError>) -> String {
    r.expect_err("the generator should refuse this").to_string()
}

#[test]
fn contiguous_descs_and_permuted_views() {
    let t = c(F32, &[2, 3, 4]);
    assert_eq!(t.strides, vec![12, 4, 1]);
    assert_eq!(t.len(), 24);
    assert!(t.is_contiguous());
    let p = t.permuted(&[0, 2, 1]);
    assert_eq!((p.shape.clone(), p.strides.clone()), (vec![2, 4, 3], vec![12, 1, 4]));
    assert!(!p.is_contiguous());
    assert_eq!(p.permuted(&[0, 2, 1]), t, "transposing back gives the original view");
    // Size-1 dimensions do not make a tensor non-contiguous; a scalar is contiguous.
    assert!(TensorDesc { dtype: F32, shape: vec![3, 1, 4], strides: vec![4, 99, 1] }.is_contiguous());
    assert!(c(I64, &[]).is_contiguous());
    assert_eq!(c(I64, &[]).len(), 1);
    assert!(c(F32, &[3, 0]).is_empty());
}

#[test]
#[should_panic(expected = "not a permutation")]
fn permuted_refuses_a_non_permutation() {
    c(F32, &[2, 3]).permuted(&[0, 0]);
}

#[test]
fn broadcast_strides_follow_numpy_rules() {
    let out = [32, 128, 384];
    assert_eq!(c(F32, &[384]).broadcast_strides(&out), Some(vec![0, 0, 1]));
    assert_eq!(c(F32, &[32, 128, 1]).broadcast_strides(&out), Some(vec![128, 1, 0]));
    assert_eq!(c(F32, &[]).broadcast_strides(&out), Some(vec![0, 0, 0]));
    assert_eq!(c(F32, &[128]).broadcast_strides(&out), None);
    assert_eq!(c(F32, &[1, 32, 128, 384]).broadcast_strides(&out), None, "more dimensions than the output");
    let transposed = c(F32, &[384, 128]).permuted(&[1, 0]);
    assert_eq!(transposed.broadcast_strides(&out), Some(vec![0, 1, 128]));
}

#[test]
fn offsets_collapse_to_the_cheapest_expression() {
    let out = [32, 128, 384];
    let s = |t: TensorDesc| t.broadcast_strides(&out).unwrap();
    assert_eq!(offset_expr("e", &out, &s(c(F32, &out))), "e");
    assert_eq!(offset_expr("e", &out, &s(c(F32, &[384]))), "e % 384");
    assert_eq!(offset_expr("e", &out, &s(c(F32, &[32, 128, 1]))), "e / 384");
    assert_eq!(offset_expr("e", &out, &s(c(F32, &[]))), "0");
    assert_eq!(offset_expr("e", &out, &s(c(F32, &[32, 1, 384]))), "(e / 49152) * 384 + (e % 384)");
    assert_eq!(offset_expr("e", &[6, 7], &[1, 6]), "(e / 7) + (e % 7) * 6");
    assert_eq!(offset_expr("e", &[3, 0], &[0, 1]), "0", "an empty walk reads nothing");
    let (sizes, strides) = collapse(&[4, 1, 8, 2], &[vec![16, 5, 2, 1], vec![0, 0, 0, 1]]);
    assert_eq!(sizes, vec![32, 2], "size-1 dropped, 4 × 8 walked as one by both lists");
    assert_eq!(strides, vec![vec![2, 1], vec![0, 1]]);
}

#[test]
fn elementwise_picks_the_vector_path_and_per_input_modes() {
    let act = [32, 128, 384];
    let k = elementwise("bias", &[c(F32, &act), c(F32, &[384])], &c(F32, &act), &add01()).unwrap();
    assert!(k.source.contains("ld_n<8>(in0 + (e), aligned)"), "eight at a time: {}", k.source);
    assert!(k.source.contains("ld_n<8>(in1 + (e % 384), aligned)"), "{}", k.source);
    assert_eq!(k.block, (256, 1, 1));
    assert_eq!(k.grid, (32 * 128 * 384 / 8 / 256, 1, 1), "one vector of eight per thread");
    let k = elementwise("by4", &[c(F16, &[6, 12]), c(F16, &[12])], &c(F16, &[6, 12]), &add01()).unwrap();
    assert!(k.source.contains("ld_n<4>(in1 + (e % 12), aligned)"), "rows of 12: four at a time: {}", k.source);
    let k = elementwise("f64", &[c(F64, &[4, 16])], &c(F64, &[4, 16]), &Expr::input(0)).unwrap();
    assert!(k.source.contains("ld_n<4>(in0 + (e), aligned)"), "8-byte elements: four at a time: {}", k.source);
    let k = elementwise("rowscale", &[c(F32, &act), c(F32, &[32, 128, 1])], &c(F32, &act), &add01()).unwrap();
    assert!(k.source.contains("const float v1 = (in1[e / 384]);"), "one load for the vector: {}", k.source);
    let k = elementwise("odd", &[c(F32, &[7, 3]), c(F32, &[])], &c(F32, &[7, 3]), &add01()).unwrap();
    assert!(!k.source.contains("ld_n<"), "21 elements take the scalar path");
    assert!(k.source.contains("const float v1 = (in1[0]);"), "the scalar is loaded once");
    assert_eq!(k.grid, (1, 1, 1));
    let t = c(F32, &[128, 384]).permuted(&[1, 0]);
    let k = elementwise("tr", &[t], &c(F32, &[384, 128]), &Expr::input(0)).unwrap();
    assert!(k.source.contains("p0[j * 384]"), "a transposed input is read element by element: {}", k.source);
}

#[test]
fn elementwise_parameters_are_the_inputs_then_the_output() {
    let k = elementwise(
        "ew",
        &[c(Bool, &[4, 4]), c(F16, &[4]), c(I64, &[1])],
        &c(F16, &[4, 4]),
        &Expr::select(Expr::input(0), Expr::input(1), Expr::constant(0.0, F16)),
    )
    .unwrap();
    assert_eq!(
        params(&k.source, "ew"),
        vec![
            "const unsigned char* __restrict__ in0",
            "const half_t* __restrict__ in1",
            "const long long* __restrict__ in2",
            "half_t* __restrict__ out"
        ]
    );
    assert!(!k.source.contains("in2["), "an unread input is never loaded");
}

#[test]
fn expressions_are_typed_like_onnx() {
    let types = [F32, F16, I64, Bool];
    let e = |op, a, b| Expr::binary(op, Expr::input(a), Expr::input(b));
    assert_eq!(e(Binary::Add, 0, 0).dtype(&types), Ok(F32));
    assert_eq!(e(Binary::Less, 2, 2).dtype(&types), Ok(Bool));
    assert!(e(Binary::Add, 0, 1).dtype(&types).unwrap_err().contains("differ"));
    assert!(e(Binary::Add, 3, 3).dtype(&types).unwrap_err().contains("bool"));
    assert!(e(Binary::And, 0, 0).dtype(&types).unwrap_err().contains("bool"));
    assert!(Expr::unary(Unary::Exp, Expr::input(2)).dtype(&types).unwrap_err().contains("float"));
    assert!(Expr::unary(Unary::Not, Expr::input(0)).dtype(&types).unwrap_err().contains("bool"));
    assert!(Expr::input(4).dtype(&types).unwrap_err().contains("input 4"));
    let w = Expr::select(Expr::input(0), Expr::input(0), Expr::input(0));
    assert!(w.dtype(&types).unwrap_err().contains("condition"));
    let w = Expr::select(Expr::input(3), Expr::input(0), Expr::input(1));
    assert!(w.dtype(&types).unwrap_err().contains("branch"));
    assert_eq!(Expr::cast(F16, Expr::input(2)).dtype(&types), Ok(F16));
    assert!(Expr::cast(F16, Expr::input(2)).reads(2) && !Expr::cast(F16, Expr::input(2)).reads(0));
}

#[test]
fn an_input_is_replaced_everywhere_it_is_read() {
    // exp(v0 - v1) with v0 := v0 · 0.5: the scale of an attention's raw scores.
    let e = Expr::unary(Unary::Exp, Expr::binary(Binary::Sub, Expr::input(0), Expr::input(1)));
    let scaled = Expr::binary(Binary::Mul, Expr::input(0), Expr::constant(0.5, F32));
    let want = Expr::unary(Unary::Exp, Expr::binary(Binary::Sub, scaled.clone(), Expr::input(1)));
    assert_eq!(e.replace_input(0, &scaled), want);
    assert_eq!(e.replace_input(2, &scaled), e, "an input not read leaves it as it was");
}

#[test]
fn literals_are_exact_in_their_type() {
    let lit = |v: f64, d: DType| expr::render(&Expr::constant(v, d), &[]).unwrap().0;
    assert_eq!(lit(0.5, F32), "(0.5f)");
    assert_eq!(lit(1e-12, F32), "(1e-12f)");
    assert_eq!(lit(0.1, F16), "(0.099975586f)", "rounded to f16 first");
    assert_eq!(lit(f64::NEG_INFINITY, F32), "__int_as_float(0xff800000)");
    assert_eq!(lit(f64::NAN, F64), format!("__longlong_as_double(0x{:016x}LL)", f64::NAN.to_bits()));
    assert_eq!(lit(-3.7, I64), "(-3LL)");
    assert_eq!(lit(-1e30, I64), "(-9223372036854775807LL - 1)");
    assert_eq!(lit(300.0, U8), "((unsigned char)(300LL))");
    assert_eq!(lit(2.0, Bool), "true");
}

#[test]
fn elementwise_refuses_bad_specs() {
    let x = c(F32, &[4, 4]);
    let e = error(elementwise("ew", &[x.clone(), c(F16, &[4])], &x, &add01()));
    assert!(e.contains("elementwise kernel ew") && e.contains("differ"), "{e}");
    let e = error(elementwise("ew", &[x.clone(), x.clone()], &c(F16, &[4, 4]), &add01()));
    assert!(e.contains("the expression is f32 but the output is f16"), "{e}");
    let e = error(elementwise("ew", &[x.clone(), c(F32, &[3])], &x, &add01()));
    assert!(e.contains("does not broadcast"), "{e}");
    let e = error(elementwise("ew", &[x.clone(), x.clone()], &x.permuted(&[1, 0]), &add01()));
    assert!(e.contains("contiguous"), "{e}");
    let e = error(elementwise("2ew", &[x.clone(), x.clone()], &x, &add01()));
    assert!(e.contains("not a C identifier"), "{e}");
    let bad = TensorDesc { dtype: F32, shape: vec![4, 4], strides: vec![1] };
    let e = error(elementwise("ew", &[bad, x.clone()], &x, &add01()));
    assert!(e.contains("strides"), "{e}");
}

#[test]
fn gather_shapes_indices_and_refusals() {
    let k = gather("emb", &c(F32, &[30522, 384]), &c(I64, &[32, 128]), 0).unwrap();
    assert_eq!(
        params(&k.source, "emb"),
        vec!["const float* __restrict__ data", "const long long* __restrict__ indices", "float* __restrict__ out"]
    );
    assert!(k.source.contains("indices[(e / 384)]"), "{}", k.source);
    assert!(k.source.contains("if (i < 0) i += 30522;"));
    let k = gather("mid", &c(F16, &[4, 10, 3]), &c(I32, &[2, 5]), 1).unwrap();
    assert!(k.source.contains("const int* __restrict__ indices"));
    assert!(k.source.contains("indices[(e / 3 % 10)]"), "{}", k.source);
    let e = error(gather("g", &c(F32, &[4, 3]), &c(I64, &[2]), 2));
    assert!(e.contains("axis 2"), "{e}");
    let e = error(gather("g", &c(F32, &[4, 3]), &c(F32, &[2]), 0));
    assert!(e.contains("i64 or i32"), "{e}");
    let e = error(gather("g", &c(F32, &[4, 3]).permuted(&[1, 0]), &c(I64, &[2]), 0));
    assert!(e.contains("contiguous"), "{e}");
}

#[test]
fn row_kernels_pick_warp_or_block_walks() {
    let k = layer_norm("ln", 4096, 384, 1e-12, F32, Some(F32), Some(F32), F32).unwrap();
    assert_eq!((k.grid, k.block), ((512, 1, 1), (256, 1, 1)), "eight rows (warps) per CTA");
    assert!(k.source.contains("lanes_fold<32>(") && !k.source.contains("block_fold<"));
    assert_eq!(
        params(&k.source, "ln"),
        vec![
            "const float* __restrict__ x",
            "const float* __restrict__ scale",
            "const float* __restrict__ bias",
            "float* __restrict__ y"
        ]
    );
    // 384 16-bit columns are 48 accesses of 8: 16 lanes × 3 of them, two rows a warp (32 lanes
    // would leave half of them idle in the second sweep); the affine rows load with the row.
    let k = layer_norm("ln16", 4096, 384, 1e-12, F16, Some(F16), Some(F16), F16).unwrap();
    assert_eq!((k.grid, k.block), ((256, 1, 1), (256, 1, 1)), "16 rows per CTA");
    assert!(k.source.contains("lanes_fold<16>(") && k.source.contains("g[k] = ldg_n<8>(scale + col(k), aligned);"));
    assert!(k.source.contains("if (row >= 4096) return;") && !k.source.contains("live"), "{}", k.source);
    // Swin's 96 columns: 4 lanes × 3 accesses, eight rows a warp; an odd row count walks the last
    // row again in the spare lanes and stores nothing there.
    let k = layer_norm("ln96", 1001, 96, 1e-5, F16, Some(F16), Some(F16), F16).unwrap();
    assert_eq!(k.grid, (16, 1, 1), "64 rows per CTA");
    assert!(k.source.contains("lanes_fold<4>(") && k.source.contains("const bool live = row < 1001;"), "{}", k.source);
    assert!(k.source.contains("if (!live) return;"));
    // 768 columns fill 32 lanes × 3 exactly; 1000 f32 columns (250 accesses of 4) keep the
    // whole warp (8 accesses a lane) rather than 16 lanes past the registers.
    let k = layer_norm("ln768", 3072, 768, 1e-12, F16, Some(F16), Some(F16), F16).unwrap();
    assert!(k.source.contains("lanes_fold<32>(") && k.grid == (384, 1, 1));
    let k = layer_norm("ln1000", 64, 1000, 1e-12, F32, Some(F32), Some(F32), F32).unwrap();
    assert!(k.source.contains("lanes_fold<32>("));
    assert!(!k.source.contains("g[k] = ldg_n"), "f32 affine rows load after the folds (their registers)");
    let k = layer_norm("ln_b", 8, 384, 1e-5, F16, None, Some(F16), F16).unwrap();
    assert_eq!(
        params(&k.source, "ln_b"),
        vec!["const half_t* __restrict__ x", "const half_t* __restrict__ bias", "half_t* __restrict__ y"]
    );
    let k = softmax("sm", 49152, 128, F32, false).unwrap();
    assert_eq!((k.grid, k.block), ((6144, 1, 1), (256, 1, 1)));
    let k = softmax("sm", 100, 3000, F32, true).unwrap();
    assert_eq!((k.grid, k.block), ((100, 1, 1), (256, 1, 1)), "a CTA per long row");
    assert!(k.source.contains("block_fold<8>") && k.source.contains("logf"));
    let k = softmax("sm", 10, 70000, BF16, false).unwrap();
    assert!(k.source.contains("reloaded by every pass"), "too long for registers");
    assert!(error(softmax("sm", 4, 0, F32, false)).contains("0 columns"));
    assert!(error(softmax("sm", 4, 8, I32, false)).contains("f32, f16 or bf16"));
    assert!(error(layer_norm("ln", 4, 8, f32::NAN, F32, None, None, F32)).contains("epsilon"));
}

/// A LayerNorm prologue input reads as whole rows in place, at strided row starts (ViT's
/// `[seq, batch, d]` read as `[batch, seq, d]`, a position embedding broadcast over the batch),
/// as one row or one element; anything whose rows are not dense and last is refused.
#[test]
fn layernorm_prologue_inputs_read_rows_at_their_own_starts() {
    let shape = [3, 5, 64];
    let vit = c(F16, &[5, 3, 64]).permuted(&[1, 0, 2]);
    let pos = c(F16, &[1, 5, 64]);
    assert_eq!(row_operand(&vit, &shape, 2), Some(RowOperand::StridedRows));
    assert_eq!(row_operand(&pos, &shape, 2), Some(RowOperand::StridedRows));
    assert_eq!(row_operand(&c(F16, &shape), &shape, 2), Some(RowOperand::Rows));
    // Moving an axis of size 1 keeps the rows in place.
    assert_eq!(row_operand(&c(F16, &[3, 1, 5, 64]).permuted(&[1, 0, 2, 3]), &[1, 3, 5, 64], 3), Some(RowOperand::Rows));
    assert_eq!(row_operand(&c(F16, &[64]), &shape, 2), Some(RowOperand::Cols));
    assert_eq!(row_operand(&c(F16, &[1, 1]), &shape, 2), Some(RowOperand::Scalar));
    // The normalized axis moved: its elements are not dense.
    assert_eq!(row_operand(&c(F16, &[3, 64, 5]).permuted(&[0, 2, 1]), &shape, 2), None);
    // Normalized over the last two axes: the leading axes may move, the normalized ones not.
    let shape4 = [2, 3, 5, 64];
    assert_eq!(row_operand(&c(F16, &[3, 2, 5, 64]).permuted(&[1, 0, 2, 3]), &shape4, 2), Some(RowOperand::StridedRows));
    assert_eq!(row_operand(&c(F16, &[2, 3, 64, 5]).permuted(&[0, 1, 3, 2]), &shape4, 2), None);
    // A row stride that is not a multiple of the row (no Transpose makes one) is refused:
    // rows would start off the vector boundaries.
    let padded = TensorDesc { dtype: F16, shape: shape.to_vec(), strides: vec![5 * 72, 72, 1] };
    assert_eq!(row_operand(&padded, &shape, 2), None);
    assert_eq!(row_operand(&c(F16, &shape), &shape, 4), None, "axis past the rank");

    // Row r = (b, s) of the ViT input starts at b * 64 + s * 192 and of the embedding at s * 64.
    let expr = Expr::binary(Binary::Add, Expr::binary(Binary::Add, Expr::input(0), Expr::input(1)), Expr::input(2));
    let inputs = [vit, c(F16, &shape), pos];
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: true, gathers: &[], y_rounded: None };
    let k = layer_norm_fused("ln", &shape, 2, 1e-6, &prologue, Some(F16), Some(F16), F16).unwrap();
    let src = &k.source;
    assert!(src.contains("const unsigned rw0 = (unsigned)row;"), "{src}");
    assert!(src.contains("const half_t* in0r = in0 + ((rw0 / 5) * 64 + (rw0 % 5) * 192);"), "{src}");
    assert!(src.contains("const half_t* in1r = in1 + row * 64;"), "{src}");
    assert!(src.contains("const half_t* in2r = in2 + ((rw2 % 5) * 64);"), "{src}");
    for i in 0..3 {
        assert!(src.contains(&format!("ld_n<8>(in{i}r + c, aligned)")), "input {i} reads its row 8 at a time:\n{src}");
        assert!(src.contains(&format!("aligned_n<8>(in{i})")), "input {i}'s base is checked for alignment");
    }
    // A tensor past 2^31 elements indexes in 64 bits.
    let big = [c(F32, &[40000, 1000, 64]).permuted(&[1, 0, 2])];
    let expr = Expr::input(0);
    let prologue = NormPrologue { inputs: &big, expr: &expr, write_x: false, gathers: &[], y_rounded: None };
    let k = layer_norm_fused("ln_big", &[1000, 40000, 64], 2, 1e-6, &prologue, None, None, F32).unwrap();
    assert!(k.source.contains("const unsigned long long rw0 = (unsigned long long)row;"), "{}", k.source);
    assert!(k.source.contains("in0r = in0 + ((rw0 / 40000) * 64 + (rw0 % 40000) * 64000);"), "{}", k.source);
    // Stored through a Cast to f32: each value rounded to fp16 first (what the LayerNorm then
    // the Cast compute); a Cast from f32 to fp16 needs no rounding of its own; bf16 to fp16
    // rounds twice, as the two nodes do.
    let rows16 = [c(F16, &shape)];
    let prologue = NormPrologue { inputs: &rows16, expr: &expr, write_x: false, gathers: &[], y_rounded: Some(F16) };
    let k = layer_norm_fused("ln_cast", &shape, 2, 1e-6, &prologue, Some(F16), None, F32).unwrap();
    assert!(k.source.contains("rnd_f16((w["), "{}", k.source);
    let rows32 = [c(F32, &shape)];
    let prologue = NormPrologue { inputs: &rows32, expr: &expr, write_x: false, gathers: &[], y_rounded: Some(F32) };
    let k = layer_norm_fused("ln_narrow", &shape, 2, 1e-6, &prologue, None, None, F16).unwrap();
    assert!(!k.source.contains("rnd_f16((w["), "{}", k.source);
    let prologue = NormPrologue { inputs: &rows16, expr: &expr, write_x: false, gathers: &[], y_rounded: Some(BF16) };
    let k = layer_norm_fused("ln_bf_to_h", &shape, 2, 1e-6, &prologue, None, None, F16).unwrap();
    assert!(k.source.contains("st_f16(rnd_bf16((w["), "{}", k.source);
    // What the kernel cannot read is an error, not a wrong kernel.
    let moved = [c(F32, &[3, 64, 5]).permuted(&[0, 2, 1])];
    let prologue = NormPrologue { inputs: &moved, expr: &expr, write_x: false, gathers: &[], y_rounded: None };
    let e = error(layer_norm_fused("ln_bad", &shape, 2, 1e-6, &prologue, None, None, F32));
    assert!(e.contains("does not read as rows"), "{e}");
}

#[test]
fn reduce_walks_follow_the_memory() {
    let x = c(F32, &[32, 128, 384]);
    let k = reduce("r1", &x, &[1], Reduce::Sum, F32).unwrap();
    assert_eq!(k.block, (32, 8, 1), "threads along the kept contiguous axis, the reduction split in 8");
    assert!(k.source.contains("x + ((o / 384) * 49152 + (o % 384))"), "{}", k.source);
    let k = reduce("r2", &x, &[2], Reduce::Mean, F32).unwrap();
    assert!(k.source.contains("warp_fold") && k.source.contains("acc / 384"), "{}", k.source);
    let k = reduce("r_all", &c(F32, &[4096, 4096]), &[0, 1], Reduce::Max, F32).unwrap();
    assert!(k.source.contains("block_fold") && k.source.contains("FoldMax"));
    assert_eq!(k.grid, (1, 1, 1));
    let e = error(reduce("r", &x, &[2, 1], Reduce::Sum, F32));
    assert!(e.contains("sorted"), "{e}");
    let e = error(reduce("r", &x, &[3], Reduce::Sum, F32));
    assert!(e.contains("rank 3"), "{e}");
    let e = error(reduce("r", &c(Bool, &[4]), &[0], Reduce::Sum, Bool));
    assert!(e.contains("bool"), "{e}");
    let k = reduce("r_i8", &c(I8, &[4, 3]), &[1], Reduce::Max, I8).unwrap();
    assert!(k.source.contains("int acc = (int)-128"), "{}", k.source);
}

#[test]
fn matmul_geometry_and_refusals() {
    let q = c(F32, &[384, 128, 32]);
    let k = matmul("qk", &q, &q.permuted(&[0, 2, 1]), &c(F32, &[384, 128, 128])).unwrap();
    assert_eq!((k.grid, k.block), ((2, 2, 384), (256, 1, 1)));
    assert!(k.source.contains("const int bk0 = t % BK, bn0 = t / BK;"), "Kᵀ is read down K");
    let k = matmul("pv", &c(F32, &[384, 128, 128]), &q, &c(F32, &[384, 128, 32])).unwrap();
    assert_eq!(k.grid, (1, 1, 384), "128 × 32 tiles for N = 32");
    assert!(k.source.contains("#define BM 128") && k.source.contains("#define BN 32"));
    let k = matmul("fold", &c(F32, &[70000, 4, 4]), &c(F32, &[70000, 4, 4]), &c(F32, &[70000, 4, 4])).unwrap();
    assert_eq!(k.grid, (70000, 1, 1), "more than 65535 batch entries fold onto grid.x");
    let k = matmul("bc", &c(F16, &[1, 5, 30, 20]), &c(F16, &[4, 1, 20, 9]), &c(F16, &[4, 5, 30, 9])).unwrap();
    assert!(k.source.contains("a + ((z % 5) * 600)") && k.source.contains("b + ((z / 5) * 180)"), "{}", k.source);
    assert_eq!(
        params(&k.source, "bc"),
        vec!["const half_t* __restrict__ a", "const half_t* __restrict__ b", "half_t* __restrict__ c"]
    );
    let e = error(matmul("m", &c(F32, &[4, 3]), &c(F32, &[4, 3]), &c(F32, &[4, 3])));
    assert!(e.contains("inner dimensions"), "{e}");
    let e = error(matmul("m", &c(I32, &[4, 3]), &c(I32, &[3, 4]), &c(I32, &[4, 4])));
    assert!(e.contains("float"), "{e}");
    let e = error(matmul("m", &c(F32, &[2, 4, 3]), &c(F32, &[3, 3, 4]), &c(F32, &[3, 4, 4])));
    assert!(e.contains("does not give"), "{e}");
    let e = error(matmul("m", &c(F32, &[4, 3]), &c(F32, &[3, 4]), &c(F32, &[4, 5])));
    assert!(e.contains("does not give"), "{e}");
}

#[test]
fn concat_offsets_and_refusals() {
    let k = concat("cat", &[c(F32, &[2, 3]), c(F32, &[2, 0]), c(F32, &[2, 2])], 1, &c(F32, &[2, 5])).unwrap();
    assert_eq!(params(&k.source, "cat").len(), 4, "empty inputs stay parameters");
    assert!(k.source.contains("out[(e / 3) * 5 + e % 3] = in0[e];"), "{}", k.source);
    assert!(k.source.contains("out[((e - 6) / 2) * 5 + (e - 6) % 2 + 3] = in2[(e - 6)];"), "{}", k.source);
    assert!(!k.source.contains("in1["));
    let e = error(concat("cat", &[c(F32, &[2, 3]), c(F32, &[3, 3])], 1, &c(F32, &[2, 6])));
    assert!(e.contains("does not fit"), "{e}");
    let e = error(concat("cat", &[c(F32, &[2, 3]), c(F32, &[2, 3])], 1, &c(F32, &[2, 7])));
    assert!(e.contains("add up to 6"), "{e}");
    let e = error(concat("cat", &[c(F32, &[2, 3]), c(I64, &[2, 3])], 1, &c(F32, &[2, 6])));
    assert!(e.contains("input 1 is i64"), "{e}");
}

#[test]
fn same_inputs_give_the_same_source() {
    let build = || {
        let act = [32, 128, 384];
        vec![
            elementwise("ew", &[c(F32, &act), c(F32, &[384])], &c(F32, &act), &add01()).unwrap(),
            gather("g", &c(F32, &[100, 8]), &c(I64, &[4]), 0).unwrap(),
            layer_norm("ln", 64, 384, 1e-5, F32, Some(F32), Some(F32), F32).unwrap(),
            softmax("sm", 64, 128, F16, false).unwrap(),
            reduce("r", &c(F32, &act), &[1], Reduce::Sum, F32).unwrap(),
            matmul("mm", &c(F32, &[4, 8, 8]), &c(F32, &[4, 8, 8]), &c(F32, &[4, 8, 8])).unwrap(),
            concat("cat", &[c(F32, &[2]), c(F32, &[3])], 0, &c(F32, &[5])).unwrap(),
        ]
    };
    let (a, b) = (build(), build());
    assert_eq!(a, b);
    for k in &a {
        assert!(
            k.source.contains("extern \"C\" __global__ void __launch_bounds__(")
                && k.source.contains(&format!(") {}(", k.name)),
            "{} is not declared as asked",
            k.name
        );
    }
    let other = softmax("sm", 64, 128, F16, true).unwrap();
    assert_ne!(other.source, a[3].source);
}

#[test]
fn attention_takes_strided_operands_and_refuses_what_does_not_fit() {
    let q = c(F32, &[2, 4, 40, 16]);
    let kt = c(F32, &[2, 4, 40, 16]).permuted(&[0, 1, 3, 2]);
    let out = c(F32, &[2, 40, 4, 16]).permuted(&[0, 2, 1, 3]);
    let mask = c(F32, &[2, 1, 1, 40]);
    let k = attention("attn", &q, &kt, &q, F32, std::slice::from_ref(&mask), &add01(), &out).unwrap();
    assert_eq!(k.grid, (8, 1, 1), "one CTA per 64 queries of each of the 8 batch entries, all in grid.x");
    assert_eq!(k.smem_bytes as usize, attention_smem(false, 16, 16));
    let ps = params(&k.source, "attn");
    assert_eq!(ps.len(), 5, "q, k, v, the mask, out: {ps:?}");
    // The mask broadcast over heads and queries: a batch entry's row (z / 4 heads) once, each
    // value read once for both of a lane's rows (no row pointer), one step a key.
    assert!(k.source.contains("in1 + ((z / 4) * 40)"), "{}", k.source);
    assert!(k.source.contains("const float xk1 = ") && k.source.contains("xb1[(unsigned)j * 1]"), "{}", k.source);
    assert!(!k.source.contains("xr1"), "{}", k.source);
    // A mask that varies along the queries is read through a row pointer a query.
    let rows = attention("attn", &q, &kt, &q, F32, &[c(F32, &[2, 1, 40, 40])], &add01(), &out).unwrap();
    assert!(
        rows.source.contains("xr1[h] = xb1 + (unsigned)(ROWS_RAGGED && gi >= SQ ? 0 : gi) * 40"),
        "{}",
        rows.source
    );
    assert!(rows.source.contains("xr1[h][(unsigned)j * 1]") && !rows.source.contains("xk1"), "{}", rows.source);
    // The output goes through the merged-heads strides.
    assert!(k.source.contains("(long long)gi * 64 + (long long)e * 1"), "{}", k.source);
    // A score expression that does not read the mask loads nothing from it.
    let plain = attention("attn", &q, &kt, &q, F32, &[mask], &Expr::input(0), &out).unwrap();
    assert!(!plain.source.contains("xb1") && !plain.source.contains("in1["));
    // Heads wider than the fragments in registers hold are refused, with the reason.
    let wide = c(F32, &[1, 64, 160]);
    let e = error(attention("attn", &wide, &wide.permuted(&[0, 2, 1]), &wide, F32, &[], &Expr::input(0), &wide));
    assert!(e.contains("160") && e.contains("at most 128"), "{e}");
    assert!(!attention_fits(1, 64, 160, 64) && !attention_fits(1, 64, 64, 129) && attention_fits(1, 64, 128, 128));
    // More CTAs than grid.x holds: refused here and by the fusion gate alike.
    assert!(!attention_fits(1 << 26, 4096, 64, 64) && attention_fits(1 << 20, 512, 64, 64));
    // Shapes that do not chain are refused.
    let e = error(attention("attn", &q, &q, &q, F32, &[], &Expr::input(0), &out));
    assert!(e.contains("does not give"), "{e}");
}

/// BERT-style heads: q and v split out of `[batch, s, heads · d]` projections, Kᵀ folded, the
/// output merged back, an additive `[batch, 1, 1, s]` mask.
fn bert_attention(dtype: DType, batch: usize, heads: usize, s: usize, d: usize, masked: bool) -> OpKernel {
    let split = c(dtype, &[batch, s, heads, d]).permuted(&[0, 2, 1, 3]);
    let kt = c(dtype, &[batch, s, heads, d]).permuted(&[0, 2, 3, 1]);
    let (extra, expr) = if masked { (vec![c(dtype, &[batch, 1, 1, s])], add01()) } else { (vec![], Expr::input(0)) };
    attention("attn", &split, &kt, &split, dtype, &extra, &expr, &split).unwrap()
}

#[test]
fn attention_cta_takes_several_query_tiles_where_the_keys_stay_in_shared_memory_and_the_grid_still_fills_the_gpu() {
    let qpc = |k: &OpKernel| {
        let line = k.source.lines().find(|l| l.starts_with("#define QPC ")).expect("QPC");
        line["#define QPC ".len()..].trim().parse::<usize>().unwrap()
    };
    // ViT-B/16: 32 × 12 heads, 197 keys in two tiles of 128: four query tiles a CTA, 384 CTAs.
    let k = bert_attention(F16, 32, 12, 197, 64, false);
    assert_eq!((qpc(&k), k.grid), (4, (384, 1, 1)));
    // MiniLM-L6: 128 keys, two query tiles a CTA.
    let k = bert_attention(F16, 32, 12, 128, 32, true);
    assert_eq!((qpc(&k), k.grid), (2, (384, 1, 1)));
    // Too few heads to fill the GPU at more than one tile a CTA: 16 × 8 heads of 256 keys.
    let k = bert_attention(F16, 16, 8, 256, 64, true);
    assert_eq!((qpc(&k), k.grid), (1, (512, 1, 1)));
    // Keys in three tiles or more are walked again by each query tile: one a CTA.
    let k = bert_attention(F16, 32, 12, 384, 64, true);
    assert_eq!((qpc(&k), k.grid), (1, (32 * 12 * 6, 1, 1)));
    // Only the wgmma kernel takes several; the grid always covers every query tile once.
    let k = bert_attention(F32, 32, 12, 197, 64, false);
    assert_eq!(k.grid, (32 * 12 * 4, 1, 1));
    assert!(!k.source.contains("QPC"));
}

#[test]
fn attention_takes_any_number_of_keys_in_shared_memory_independent_of_them() {
    for dtype in [F32, F16, BF16] {
        for d in [32, 64, 128] {
            let smem: Vec<u32> = [1, 64, 197, 256, 384, 512, 4096]
                .iter()
                .map(|&s| bert_attention(dtype, 2, 3, s, d, true).smem_bytes)
                .collect();
            // From 65 keys on the same; up to 64 (one tile) the 16-bit kernel's key tiles may be
            // smaller, never larger.
            assert!(
                smem[2..].iter().all(|&b| b == smem[2]),
                "{dtype} d={d}: shared memory depends on the keys: {smem:?}"
            );
            assert!(smem[..2].iter().all(|&b| b <= smem[2]), "{dtype} d={d}: {smem:?}");
            assert!(smem[2] as usize <= 100 * 1024, "{dtype} d={d}: {} bytes", smem[2]);
        }
        // Key tiles: 64 on the f32 kernel, 128 on the 16-bit wgmma kernel at d 64.
        let (bk, tiles_4096, tiles_197) = if dtype == F32 { (64, 64, 4) } else { (128, 32, 2) };
        let k = bert_attention(dtype, 2, 3, 4096, 64, false);
        assert_eq!(k.grid, (2 * 3 * 64, 1, 1), "64 query tiles of 64 rows for each of the 6 heads");
        assert!(k.source.contains(&format!("#define BK {bk}\n")), "{}", k.source);
        assert!(
            k.source.contains("#define SK 4096") && k.source.contains(&format!("#define NKT {tiles_4096}\n")),
            "{}",
            k.source
        );
        // 197 keys (ViT): the last tile ragged.
        let k = bert_attention(dtype, 1, 1, 197, 64, true);
        assert!(k.source.contains(&format!("#define NKT {tiles_197}\n")), "{}", k.source);
    }
    // Up to 64 keys (Swin-T's 49-key windows) the 16-bit kernel's key tile is 64, not 128.
    for dtype in [F16, BF16] {
        assert!(bert_attention(dtype, 2, 3, 49, 32, true).source.contains("#define BK 64\n"));
        assert!(bert_attention(dtype, 2, 3, 65, 32, true).source.contains("#define BK 128\n"));
    }
    // f32 heads wider than 64 take key tiles of 32 (two tiles of K and V in f32 stay under 70 KB).
    assert!(bert_attention(F32, 1, 1, 256, 128, false).source.contains("#define BK 32"));
    assert!(bert_attention(F32, 1, 1, 256, 64, false).source.contains("#define BK 64"));
    assert_eq!(attention_smem(true, 64, 64), 2 * 2 * 64 * (72 + 72));
    assert_eq!(attention_smem(false, 64, 64), 4 * 2 * 64 * (68 + 68));
    // f32 heads over 64 wide also stage Q (64 rows) in shared memory.
    assert_eq!(attention_smem(false, 128, 128), 4 * (2 * 32 * (132 + 132) + 64 * 132));
    assert!(bert_attention(F32, 1, 1, 256, 128, false).source.contains("float* Qs = Vs + 2 * BK * VS;"));
}

#[test]
fn auto_attention_caps_registers_for_three_ctas_only_on_bf16_heads_of_64() {
    let bounds = |k: &OpKernel| {
        let at = k.source.find("__launch_bounds__(").expect("launch bounds");
        k.source[at..].split(')').next().unwrap().to_string()
    };
    // bf16, 64-wide heads: capped (ptxas otherwise leaves it at two CTAs an SM).
    assert_eq!(bounds(&bert_attention(BF16, 2, 12, 384, 64, true)), "__launch_bounds__(128, 3");
    // fp16 at 64 (three CTAs an SM uncapped; capped it spills), bf16 at 32 and 128: no cap.
    for (dtype, d) in [(F16, 64), (BF16, 32), (BF16, 128)] {
        assert_eq!(bounds(&bert_attention(dtype, 2, 12, 384, d, true)), "__launch_bounds__(128", "{dtype} d={d}");
    }
    // A causal kernel that stops at the last visible key tile needs more registers: no cap.
    let split = c(BF16, &[2, 256, 4, 64]).permuted(&[0, 2, 1, 3]);
    let kt = c(BF16, &[2, 256, 4, 64]).permuted(&[0, 2, 3, 1]);
    let ends: Vec<usize> = (1..=256).collect();
    let causal = attention_with(
        "attn",
        &split,
        &kt,
        &split,
        BF16,
        &[c(BF16, &[2, 1, 256, 256])],
        &add01(),
        &split,
        AttentionEngine::Auto,
        Some(&ends),
    )
    .unwrap();
    assert!(causal.source.contains("KT_END"), "the causal kernel stops early");
    assert_eq!(bounds(&causal), "__launch_bounds__(128");
}

#[test]
fn attention_picks_the_tensor_core_kernel_by_element_types() {
    for (dtype, t) in [(F16, "f16"), (BF16, "bf16")] {
        let q = c(dtype, &[2, 4, 100, 32]);
        let kt = c(dtype, &[2, 4, 100, 32]).permuted(&[0, 1, 3, 2]);
        let run = |engine| attention_with("attn", &q, &kt, &q, dtype, &[], &Expr::input(0), &q, engine, None);
        let mma = run(AttentionEngine::MmaSync).unwrap();
        assert!(mma.source.contains(&format!("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32")), "{}", mma.source);
        assert!(mma.source.contains("ldmatrix.sync.aligned.m8n8.x4.trans"), "{}", mma.source);
        assert_eq!(mma.block, (128, 1, 1), "a warp per 16 of the 64 query rows");
        // d 32, dv 32 (padded to 16), rows padded by 8 halves, two tiles of 64 keys each.
        assert_eq!(mma.smem_bytes, 2 * 2 * 64 * (40 + 40));
        // Auto takes wgmma: S with 128 keys a tile, P·V with V read transposed (imm-trans-b 1),
        // 64-byte swizzled rows at d 32; two K and two V tiles plus the alignment slack.
        let wg = run(AttentionEngine::Auto).unwrap();
        assert_eq!(wg, run(AttentionEngine::Wgmma { bk: 128, ctas: 1 }).unwrap());
        assert!(wg.source.contains(&format!("wgmma.mma_async.sync.aligned.m64n128k16.f32.{t}.{t}")), "{}", wg.source);
        assert!(wg.source.contains(&format!("wgmma.mma_async.sync.aligned.m64n32k16.f32.{t}.{t}")), "{}", wg.source);
        assert!(wg.source.contains("#define K_ROW 64") && !wg.source.contains("mma.sync.aligned"), "{}", wg.source);
        assert_eq!(wg.block, (128, 1, 1), "one warpgroup");
        assert_eq!(wg.smem_bytes, 2 * 2 * 128 * (32 + 32) + 1024);
        let e = run(AttentionEngine::Wgmma { bk: 96, ctas: 1 }).unwrap_err().to_string();
        assert!(e.contains("64 or 128"), "{e}");
    }
    // f32, and mixed element types, take 3xTF32.
    let q = c(F16, &[1, 200, 32]);
    for score in [F32, F16] {
        let k = attention("attn", &q, &q.permuted(&[0, 2, 1]), &q, score, &[], &Expr::input(0), &q).unwrap();
        let tf32 = k.source.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32");
        assert_eq!(tf32, score == F32, "score type {score}");
    }
    let q = c(F32, &[1, 200, 32]);
    let k = attention("attn", &q, &q.permuted(&[0, 2, 1]), &q, F32, &[], &Expr::input(0), &q).unwrap();
    assert!(
        k.source.contains("#define QA(kk, i) qa[kk][i]") && k.source.contains("tf32.tf32"),
        "Q in registers at d = 32"
    );
}

#[test]
fn attention_stages_with_cp_async_only_where_the_operand_is_contiguous() {
    // BERT's layout: K is d-contiguous, V e-contiguous, strides whole 16-byte chunks.
    for dtype in [F32, F16, BF16] {
        let k = bert_attention(dtype, 2, 12, 128, 64, true);
        assert!(k.source.contains("const bool k_async = aligned16(kb);"), "{dtype}");
        assert!(k.source.contains("const bool v_async = aligned16(vb);"), "{dtype}");
    }
    // K stored [d, keys] (keys contiguous) and a head width of 20 (not whole chunks) load plainly.
    let q = c(F16, &[3, 50, 20]);
    let k = attention(
        "attn",
        &q,
        &c(F16, &[1, 20, 45]),
        &c(F16, &[3, 45, 30]),
        F16,
        &[],
        &Expr::input(0),
        &c(F16, &[3, 50, 30]),
    )
    .unwrap();
    assert!(!k.source.contains("cp_async16(kd") && !k.source.contains("cp_async16(vd"), "{}", k.source);
    // f16 operands widened for the TF32 kernel cannot be copied as they are.
    let q = c(F16, &[2, 64, 64]);
    let k =
        attention("attn", &q, &q.permuted(&[0, 2, 1]), &q, F32, &[], &Expr::input(0), &c(F32, &[2, 64, 64])).unwrap();
    assert!(!k.source.contains("cp_async16(kd"), "{}", k.source);
}

mod conv_tests;

/// A long float reduction with too few outputs splits into a partials kernel (grid y the
/// chunks) and a finish kernel; many outputs, integer accumulation or a short reduction do not.
#[test]
fn reductions_split_only_when_too_few_outputs_fill_the_gpu() {
    let se = c(F16, &[32, 112, 112, 32]);
    match reduce_kernels("se", &se, &[1, 2], Reduce::Mean, F16).unwrap() {
        ReduceKernels::Split { partial, finish, partials } => {
            let chunks = partial.grid.1 as usize;
            assert!((2..=64).contains(&chunks), "{:?}", partial.grid);
            assert!(partial.grid.0 as usize * chunks >= 264, "the GPU filled: {:?}", partial.grid);
            assert_eq!(partials, chunks * 32 * 32);
            assert!(partial.source.contains("float* __restrict__ part"), "{}", partial.source);
            assert!(finish.source.contains(&format!("s < {chunks}")), "{}", finish.source);
            assert!(finish.source.contains("/ 12544"), "the mean divides once, at the end: {}", finish.source);
        }
        other => panic!("{other:?}"),
    }
    let many = c(F16, &[32, 14, 14, 960]);
    assert!(matches!(reduce_kernels("many", &many, &[1, 2], Reduce::Mean, F16).unwrap(), ReduceKernels::One(_)));
    let int = c(I32, &[4, 100000]);
    assert!(matches!(reduce_kernels("int", &int, &[1], Reduce::Sum, I32).unwrap(), ReduceKernels::One(_)));
    let short = c(F32, &[8, 7, 7, 16]);
    assert!(matches!(reduce_kernels("short", &short, &[1, 2], Reduce::Mean, F32).unwrap(), ReduceKernels::One(_)));
}
