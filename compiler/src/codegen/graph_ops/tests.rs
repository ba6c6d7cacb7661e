//! Unit tests of the graph-op generators: tensor views, broadcasting and offset expressions,
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
    assert!(k.source.contains("ld4(in0 + (e), aligned)"), "{}", k.source);
    assert!(k.source.contains("ld4(in1 + (e % 384), aligned)"), "{}", k.source);
    assert_eq!(k.block, (256, 1, 1));
    assert_eq!(k.grid, (132 * 8, 1, 1));
    let k = elementwise("rowscale", &[c(F32, &act), c(F32, &[32, 128, 1])], &c(F32, &act), &add01()).unwrap();
    assert!(k.source.contains("const float v1 = (in1[e / 384]);"), "one load for four elements: {}", k.source);
    let k = elementwise("odd", &[c(F32, &[7, 3]), c(F32, &[])], &c(F32, &[7, 3]), &add01()).unwrap();
    assert!(!k.source.contains("ld4(in"), "21 elements take the scalar path");
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
    assert!(k.source.contains("warp_fold(") && !k.source.contains("block_fold<"));
    assert_eq!(
        params(&k.source, "ln"),
        vec![
            "const float* __restrict__ x",
            "const float* __restrict__ scale",
            "const float* __restrict__ bias",
            "float* __restrict__ y"
        ]
    );
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

// ---- conv ----

/// A convolution shape with square-ish parameters: `k` (kh, kw), `s` strides, `d` dilations.
#[allow(clippy::too_many_arguments)]
fn conv(
    n: usize,
    (h, w): (usize, usize),
    c_in: usize,
    c_out: usize,
    groups: usize,
    k: (usize, usize),
    s: (usize, usize),
    d: (usize, usize),
    pads: [usize; 4],
) -> ConvShape {
    ConvShape { n, h, w, c_in, c_out, groups, kh: k.0, kw: k.1, stride: s, dilation: d, pads }
}

/// EfficientNet-Lite0's depthwise convolution at batch 32: `h × h × c`, `k × k`, stride `s`.
fn effnet_dw(h: usize, c: usize, k: usize, s: usize) -> ConvShape {
    conv(32, (h, h), c, c, c, (k, k), (s, s), (1, 1), [k / 2; 4])
}

/// EfficientNet-Lite0's stem at batch 32: 224 × 224 × 3 → 112 × 112 × 32.
fn stem() -> ConvShape {
    conv(32, (224, 224), 3, 32, 1, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1])
}

fn conv_error(shape: &ConvShape) -> String {
    error(conv_nhwc("cv", shape, F32, true, Activation::None))
}

#[test]
fn conv_output_size_follows_onnx() {
    // ONNX's Conv examples on a 7 × 5 input with a 3 × 3 kernel.
    let ex = |s, pads| conv(1, (7, 5), 1, 1, 1, (3, 3), (s, s), (1, 1), pads);
    let size = |c: ConvShape| (c.oh(), c.ow());
    assert_eq!(size(ex(2, [1; 4])), (4, 3), "conv_with_strides_padding");
    assert_eq!(size(ex(2, [0; 4])), (3, 2), "conv_with_strides_no_padding");
    assert_eq!(size(ex(2, [1, 0, 1, 0])), (4, 2), "conv_with_strides_and_asymmetric_padding");
    assert_eq!(size(ex(1, [1; 4])), (7, 5), "same padding");
    assert_eq!(size(conv(1, (7, 7), 1, 1, 1, (3, 3), (1, 1), (2, 2), [0; 4])), (3, 3), "dilation 2: extent 5");
    assert_eq!(size(stem()), (112, 112));
    assert_eq!(size(effnet_dw(56, 144, 5, 2)), (28, 28));
    assert_eq!(size(effnet_dw(7, 1152, 3, 1)), (7, 7));
    assert_eq!(size(conv(1, (2, 2), 1, 1, 1, (5, 1), (1, 1), (1, 1), [0; 4])), (0, 2), "the window does not fit");
    assert_eq!(size(conv(1, (2, 2), 1, 1, 1, (1, 1), (0, 0), (1, 1), [0; 4])), (0, 0), "stride 0 gives nothing");
}

#[test]
fn conv_picks_the_path_by_shape() {
    let clip = Activation::Clip { lo: 0.0, hi: 6.0 };
    let dw = conv_nhwc("dw", &effnet_dw(112, 32, 3, 1), F32, true, clip).unwrap();
    assert_eq!(
        params(&dw.source, "dw"),
        vec![
            "const float* __restrict__ x",
            "const float* __restrict__ w",
            "const float* __restrict__ bias",
            "float* __restrict__ y"
        ]
    );
    assert!(dw.source.contains("depthwise 3x3") && dw.source.contains("#define PW 8"), "{}", dw.source);
    assert!(dw.source.contains("#define COLS 10") && dw.source.contains("#define V 4"));
    assert!(dw.source.contains("fminf(fmaxf(acc, 0e0f), 6e0f)") && dw.source.contains("load_v<V, A>(bv, bias + c)"));
    assert!(dw.source.contains("typedef unsigned idx_t;"), "32-bit indices");
    // 32 · 112 rows · 14 blocks of 8 · 8 channel groups.
    assert_eq!((dw.grid, dw.block, dw.smem_bytes), ((32 * 112 * 14 * 8 / 256, 1, 1), (256, 1, 1), 0));
    let plain = conv_nhwc("dw_plain", &effnet_dw(112, 32, 3, 1), F32, false, Activation::None).unwrap();
    assert!(!plain.source.contains("bias + c") && !plain.source.contains("fminf"), "no bias read, no activation");
    // Fewer pixels per thread where the grid would be small; ragged blocks are guarded.
    let pw = |s: ConvShape| {
        let src = conv_nhwc("dw", &s, F32, false, Activation::None).unwrap().source;
        let line = src.lines().find(|l| l.starts_with("#define PW ")).unwrap().to_string();
        (line["#define PW ".len()..].parse::<usize>().unwrap(), src.contains("if (ow0 + p >= OW) break;"))
    };
    assert_eq!(pw(effnet_dw(28, 240, 5, 1)), (7, false), "28 = 4 blocks of 7");
    assert_eq!(pw(effnet_dw(14, 672, 5, 1)), (7, false));
    assert_eq!(pw(effnet_dw(112, 96, 3, 2)), (4, false), "at most 4 at stride 2");
    assert_eq!(pw(effnet_dw(7, 1152, 5, 1)), (3, true), "7 = 3 + 3 + 1 keeps 193k threads");
    let odd = conv_nhwc("dw_odd", &conv(1, (9, 9), 6, 6, 6, (3, 3), (1, 1), (1, 1), [1; 4]), F32, true, clip).unwrap();
    assert!(odd.source.contains("#define V 1") && !odd.source.contains("dw_item<true>"), "6 channels: scalar path");

    let st = conv_nhwc("stem", &stem(), F32, true, clip).unwrap();
    assert!(st.source.contains("direct convolution") && st.source.contains("__shared__ __align__(16) float ws[864];"));
    assert!(st.source.contains("#define COT 8") && st.source.contains("reinterpret_cast<const float4*>(wp"));
    assert_eq!(st.grid, (132 * 8, 1, 1), "grid-stride");
    assert_eq!(params(&st.source, "stem"), params(&dw.source, "dw"), "one parameter list for every path");
    let grouped =
        conv_nhwc("grp", &conv(32, (28, 28), 64, 96, 4, (3, 3), (1, 1), (1, 1), [1; 4]), F32, false, clip).unwrap();
    assert!(grouped.source.contains("#define CIG 16") && grouped.source.contains("#define COT 8"));
    let mult = conv_nhwc("mult", &conv(2, (9, 9), 8, 24, 8, (3, 3), (1, 1), (1, 1), [1; 4]), F32, true, clip).unwrap();
    assert!(mult.source.contains("#define COT 3") && mult.source.contains("st_act(yp + j, epilogue("), "multiplier 3");
    let big =
        conv_nhwc("big", &conv(1, (14, 14), 512, 512, 1, (3, 3), (1, 1), (1, 1), [1; 4]), F32, true, clip).unwrap();
    assert!(!big.source.contains("__shared__") && big.source.contains("__ldg(wp + ci * C_OUT + j)"), "9 MB weight");
    assert!(big.source.contains("#pragma unroll 4"));
    let huge = conv_nhwc("huge", &effnet_dw(1024, 1024, 3, 1), F32, false, Activation::None).unwrap();
    assert!(huge.source.contains("typedef unsigned long long idx_t;"), "2^35 elements take 64-bit indices");
}

#[test]
fn conv_16_bit_activations_keep_f32_weights_and_math() {
    let clip = Activation::Clip { lo: 0.0, hi: 6.0 };
    let grouped = conv(32, (28, 28), 64, 96, 4, (3, 3), (1, 1), (1, 1), [1; 4]);
    let odd = conv(1, (9, 9), 6, 6, 6, (3, 3), (1, 1), (1, 1), [1; 4]);
    for (d, st, ld, store) in [(F16, "half_t", "ld_f16", "st_f16"), (BF16, "bf16_t", "ld_bf16", "st_bf16")] {
        let fp32 = [effnet_dw(112, 32, 3, 1), stem(), grouped.clone(), odd.clone()]
            .map(|s| conv_nhwc("cv", &s, F32, true, clip).unwrap());
        let half = [effnet_dw(112, 32, 3, 1), stem(), grouped.clone(), odd.clone()]
            .map(|s| conv_nhwc("cv", &s, d, true, clip).unwrap());
        for (f, h) in fp32.iter().zip(&half) {
            assert_eq!((f.grid, f.block, f.smem_bytes), (h.grid, h.block, h.smem_bytes), "{d}: the same geometry");
            assert_eq!(
                params(&h.source, "cv"),
                vec![
                    format!("const {st}* __restrict__ x"),
                    "const float* __restrict__ w".to_string(),
                    "const float* __restrict__ bias".to_string(),
                    format!("{st}* __restrict__ y"),
                ],
                "{d}: 16-bit x and y, f32 weight and bias"
            );
            assert!(h.source.contains(&format!("typedef {st} act_t;")), "{d}");
            assert!(h.source.contains(&format!("return {ld}(x);")) && h.source.contains(&format!("{store}(a)")));
            assert!(h.source.contains(&format!("x and y are {d}, the weights, bias and math float.")));
            assert!(h.source.contains("typedef float elem_t;"), "{d}: the epilogue reads an f32 bias");
            assert!(!f.source.contains("uint2") && !f.source.contains("half_t"), "f32: 16-byte path, no ops.cuh");
        }
        let [dw, st_k, grp, odd_k] = &half;
        // Four channels as one 8-byte access where x, y, w and bias are aligned to them.
        assert!(dw.source.contains("__ldg(reinterpret_cast<const uint2*>(p))"), "{}", dw.source);
        assert!(dw.source.contains("*reinterpret_cast<uint2*>(p) = make_uint2(pack2(r[0], r[1]), pack2(r[2], r[3]));"));
        assert!(dw.source.contains("if (aligned_v(x) && aligned_v(w) && aligned_v(y) && aligned_v(bias))"));
        assert!(dw.source.contains("dw_item<false>(x, w, bias, y, e);"), "scalar fallback");
        assert!(st_k.source.contains("const float xv = ld_act(__ldg(xp + ci));"));
        assert!(st_k.source.contains("const bool aligned = aligned_v(y);"));
        assert!(grp.source.contains("#define COT 8") && grp.source.contains("store_v<4, false>(yp + j, o);"));
        assert!(odd_k.source.contains("#define V 1") && !odd_k.source.contains("dw_item<true>"), "6 channels: scalar");
    }
    for d in [I32, F64, I8, Bool] {
        let e = error(conv_nhwc("cv", &stem(), d, true, clip));
        assert!(
            e.contains(&format!("conv kernel cv: x and y of type {d} are not supported (f32, f16 or bf16)")),
            "{e}"
        );
    }
}

#[test]
fn conv_refuses_bad_shapes() {
    let mut s = stem();
    s.groups = 2;
    let e = conv_error(&s);
    assert!(e.contains("conv kernel cv") && e.contains("2 groups do not divide c_in 3"), "{e}");
    let mut s = stem();
    s.kw = 0;
    assert!(conv_error(&s).contains("kw is 0"));
    let mut s = stem();
    s.dilation = (1, 0);
    assert!(conv_error(&s).contains("dilation w is 0"));
    let mut s = stem();
    s.h = 1;
    s.pads = [0; 4];
    assert!(conv_error(&s).contains("does not fit"), "{}", conv_error(&s));
    let mut s = stem();
    s.w = usize::MAX / 2;
    assert!(conv_error(&s).contains("too large"));
    assert!(error(conv_nhwc("9cv", &stem(), F32, false, Activation::None)).contains("not a C identifier"));
    let e = pack_conv_weight(&stem(), &[0.0; 10]).unwrap_err().to_string();
    assert!(e.contains("conv weight: expected 864 values ([32, 3, 3, 3]), got 10"), "{e}");
    let mut s = stem();
    s.c_out = 0;
    assert!(pack_conv_weight(&s, &[]).unwrap_err().to_string().contains("c_out is 0"));
}

#[test]
fn packed_weight_is_hwio_per_group() {
    let s = conv(1, (5, 5), 6, 4, 2, (2, 3), (1, 1), (1, 1), [0; 4]);
    let (cig, kh, kw) = (3, 2, 3);
    let oihw: Vec<f32> = (0..s.weight_len()).map(|i| i as f32).collect();
    let packed = pack_conv_weight(&s, &oihw).unwrap();
    let mut seen = vec![false; packed.len()];
    for co in 0..4 {
        for ci in 0..cig {
            for ky in 0..kh {
                for kx in 0..kw {
                    let at = ((ky * kw + kx) * cig + ci) * 4 + co;
                    assert_eq!(conv::packed_index(&s, co, ci, ky, kx), at);
                    assert_eq!(packed[at], oihw[((co * cig + ci) * kh + ky) * kw + kx]);
                    seen[at] = true;
                }
            }
        }
    }
    assert!(seen.iter().all(|&v| v), "every packed slot is written once");
}

/// The rounded-to-f32 random values of `len` elements.
fn random_values(len: usize, rng: &mut crate::rng::SplitMix64) -> Vec<f32> {
    (0..len).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
}

/// The reference: ONNX Conv of the CPU op registry on NCHW, with the epilogue, as NHWC.
fn reference_conv(s: &ConvShape, x_nhwc: &[f32], oihw: &[f32], bias: &[f32], epi: Epilogue) -> Vec<f64> {
    use crate::ir::{Attr, Attrs, Tensor};
    let (oh, ow) = (s.oh(), s.ow());
    let mut x_nchw = vec![0.0f32; x_nhwc.len()];
    for n in 0..s.n {
        for y in 0..s.h {
            for x in 0..s.w {
                for c in 0..s.c_in {
                    x_nchw[((n * s.c_in + c) * s.h + y) * s.w + x] = x_nhwc[((n * s.h + y) * s.w + x) * s.c_in + c];
                }
            }
        }
    }
    let mut a = Attrs::new();
    a.insert("group", Attr::Int(s.groups as i64));
    a.insert("strides", Attr::Ints(vec![s.stride.0 as i64, s.stride.1 as i64]));
    a.insert("dilations", Attr::Ints(vec![s.dilation.0 as i64, s.dilation.1 as i64]));
    a.insert("pads", Attr::Ints(s.pads.iter().map(|&p| p as i64).collect()));
    let ctx = crate::ops::NodeCtx { name: "conv", attrs: &a, opset: 11, n_outputs: 1 };
    let x = Tensor::from_vec(vec![s.n, s.c_in, s.h, s.w], x_nchw);
    let w = Tensor::from_vec(vec![s.c_out, s.c_in / s.groups, s.kh, s.kw], oihw.to_vec());
    let b = Tensor::from_vec(vec![s.c_out], bias.to_vec());
    let eval = crate::ops::registry().get("Conv").expect("Conv is registered").eval;
    let y = eval(&ctx, &[Some(&x), Some(&w), Some(&b)]).unwrap().remove(0);
    assert_eq!(y.shape(), &[s.n, s.c_out, oh, ow]);
    let y = y.to_f64_vec();
    let mut out = vec![0.0; y.len()];
    for n in 0..s.n {
        for c in 0..s.c_out {
            for i in 0..oh * ow {
                // The bias is already in: the epilogue adds none.
                let e = Epilogue { bias: false, ..epi };
                out[(n * oh * ow + i) * s.c_out + c] = e.apply(y[(n * s.c_out + c) * oh * ow + i], 0.0);
            }
        }
    }
    out
}

/// The direct kernel's math on the CPU: one output channel of one pixel at a time, the input
/// channels of the channel's group, the packed weight read at [`conv::packed_index`].
fn direct_conv(s: &ConvShape, x: &[f32], packed: &[f32], bias: &[f32], epi: Epilogue) -> Vec<f64> {
    let (oh, ow, cig, cog) = (s.oh(), s.ow(), s.c_in / s.groups, s.c_out / s.groups);
    let mut out = vec![0.0; s.n * oh * ow * s.c_out];
    for n in 0..s.n {
        for oy in 0..oh {
            for ox in 0..ow {
                for co in 0..s.c_out {
                    let mut acc = 0.0f64;
                    for ky in 0..s.kh {
                        let iy = (oy * s.stride.0 + ky * s.dilation.0) as isize - s.pads[0] as isize;
                        for kx in 0..s.kw {
                            let ix = (ox * s.stride.1 + kx * s.dilation.1) as isize - s.pads[1] as isize;
                            if iy < 0 || iy >= s.h as isize || ix < 0 || ix >= s.w as isize {
                                continue;
                            }
                            let pixel = (n * s.h + iy as usize) * s.w + ix as usize;
                            for ci in 0..cig {
                                let xv = x[pixel * s.c_in + co / cog * cig + ci] as f64;
                                acc += xv * packed[conv::packed_index(s, co, ci, ky, kx)] as f64;
                            }
                        }
                    }
                    out[((n * oh + oy) * ow + ox) * s.c_out + co] = epi.apply(acc, bias[co] as f64);
                }
            }
        }
    }
    out
}

/// The depthwise kernel's walk on the CPU: per thread, `pw` output pixels from `ow0` on; each
/// input column `j` of a window row goes into pixel `q / sw` through tap `kx` when
/// `q = j − kx · dw` is a non-negative multiple of `sw` below `pw · sw`, as in the template.
fn depthwise_walk(s: &ConvShape, pw: usize, x: &[f32], packed: &[f32], bias: &[f32], epi: Epilogue) -> Vec<f64> {
    let (oh, ow, c) = (s.oh(), s.ow(), s.c_in);
    let cols = (pw - 1) * s.stride.1 + (s.kw - 1) * s.dilation.1 + 1;
    let mut out = vec![f64::NAN; s.n * oh * ow * c];
    for n in 0..s.n {
        for oy in 0..oh {
            for ow0 in (0..ow).step_by(pw) {
                for ch in 0..c {
                    let mut acc = vec![0.0f64; pw];
                    let (iy0, ix0) = (
                        (oy * s.stride.0) as isize - s.pads[0] as isize,
                        (ow0 * s.stride.1) as isize - s.pads[1] as isize,
                    );
                    for ky in 0..s.kh {
                        let iy = iy0 + (ky * s.dilation.0) as isize;
                        if iy < 0 || iy >= s.h as isize {
                            continue;
                        }
                        for j in 0..cols {
                            let ix = ix0 + j as isize;
                            if ix < 0 || ix >= s.w as isize {
                                continue;
                            }
                            let xv = x[((n * s.h + iy as usize) * s.w + ix as usize) * c + ch] as f64;
                            for kx in 0..s.kw {
                                let q = j as isize - (kx * s.dilation.1) as isize;
                                if q < 0 || !(q as usize).is_multiple_of(s.stride.1) || q as usize / s.stride.1 >= pw {
                                    continue;
                                }
                                // The template's weight index: (ky * KW + kx) * C + c.
                                let wv = packed[(ky * s.kw + kx) * c + ch] as f64;
                                acc[q as usize / s.stride.1] += xv * wv;
                            }
                        }
                    }
                    for (p, a) in acc.iter().enumerate().filter(|(p, _)| ow0 + p < ow) {
                        out[((n * oh + oy) * ow + ow0 + p) * c + ch] = epi.apply(*a, bias[ch] as f64);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn packed_layout_matches_the_reference_conv() {
    let clip = Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: 6.0 } };
    let plain = Epilogue { bias: true, activation: Activation::None };
    let cases = [
        ("depthwise 3x3 s2", conv(2, (9, 8), 8, 8, 8, (3, 3), (2, 2), (1, 1), [1; 4]), clip),
        ("depthwise 5x5 s1", conv(1, (7, 7), 6, 6, 6, (5, 5), (1, 1), (1, 1), [2; 4]), plain),
        ("depthwise 5x5 s2", conv(1, (14, 14), 4, 4, 4, (5, 5), (2, 2), (1, 1), [2; 4]), plain),
        ("stem 3x3 s2", conv(2, (9, 10), 3, 8, 1, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]), clip),
        ("grouped", conv(1, (6, 7), 8, 12, 4, (3, 3), (1, 1), (1, 1), [1; 4]), plain),
        ("dilation 2", conv(2, (8, 9), 4, 6, 1, (3, 3), (1, 2), (2, 2), [2, 1, 2, 1]), plain),
        ("depth multiplier 2", conv(1, (5, 6), 4, 8, 4, (3, 3), (1, 1), (1, 1), [1; 4]), clip),
        ("depthwise dilated", conv(1, (9, 11), 4, 4, 4, (3, 3), (1, 2), (2, 3), [2, 3, 2, 3]), plain),
    ];
    let mut rng = crate::rng::SplitMix64::new(7);
    for (label, s, epi) in cases {
        let x = random_values(s.n * s.h * s.w * s.c_in, &mut rng);
        let oihw = random_values(s.weight_len(), &mut rng);
        let bias = random_values(s.c_out, &mut rng);
        let packed = pack_conv_weight(&s, &oihw).unwrap();
        let want = reference_conv(&s, &x, &oihw, &bias, epi);
        let mut got = vec![("direct", direct_conv(&s, &x, &packed, &bias, epi))];
        if s.groups == s.c_in && s.c_in == s.c_out {
            for pw in [1, 3, 4, 8] {
                got.push(("depthwise walk", depthwise_walk(&s, pw, &x, &packed, &bias, epi)));
            }
        }
        for (how, got) in got {
            assert_eq!(got.len(), want.len(), "{label}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() < 1e-5, "{label} ({how}) [{i}]: {g} vs {w}");
            }
        }
    }
}

#[test]
fn attention_takes_strided_operands_and_refuses_what_does_not_fit() {
    let q = c(F32, &[2, 4, 40, 16]);
    let kt = c(F32, &[2, 4, 40, 16]).permuted(&[0, 1, 3, 2]);
    let out = c(F32, &[2, 40, 4, 16]).permuted(&[0, 2, 1, 3]);
    let mask = c(F32, &[2, 1, 1, 40]);
    let k = attention("attn", &q, &kt, &q, F32, std::slice::from_ref(&mask), &add01(), &out).unwrap();
    assert_eq!(k.grid, (1, 8, 1), "one CTA per 64 queries of each of the 8 batch entries");
    assert_eq!(k.smem_bytes as usize, attention_smem(40, 16, 16));
    let ps = params(&k.source, "attn");
    assert_eq!(ps.len(), 5, "q, k, v, the mask, out: {ps:?}");
    // The mask broadcast over heads and queries: its offset depends on the key (e % 40) and the batch entry.
    assert!(k.source.contains("in1[(e / 6400) * 40 + (e % 40)]"), "{}", k.source);
    // The output goes through the merged-heads strides.
    assert!(k.source.contains("(long long)gi * 64 + (long long)e * 1"), "{}", k.source);
    // A score expression that does not read the mask loads nothing from it.
    let plain = attention("attn", &q, &kt, &q, F32, &[mask], &Expr::input(0), &out).unwrap();
    assert!(!plain.source.contains("in1["));
    // K and V of 4096 keys do not fit a CTA's shared memory.
    let big = c(F32, &[1, 4096, 128]);
    let e = error(attention("attn", &big, &big.permuted(&[0, 2, 1]), &big, F32, &[], &Expr::input(0), &big));
    assert!(e.contains("shared memory"), "{e}");
    // Shapes that do not chain are refused.
    let e = error(attention("attn", &q, &q, &q, F32, &[], &Expr::input(0), &out));
    assert!(e.contains("does not give"), "{e}");
}

#[test]
fn attention_on_16_bit_operands_takes_the_tensor_core_path() {
    for (dtype, mma) in [(F16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"), (BF16, ".f32.bf16.bf16.f32")] {
        let q = c(dtype, &[2, 4, 100, 32]);
        let kt = c(dtype, &[2, 4, 100, 32]).permuted(&[0, 1, 3, 2]);
        let k = attention("attn", &q, &kt, &q, dtype, &[], &Expr::input(0), &q).unwrap();
        assert!(k.source.contains(mma), "{}", k.source);
        assert_eq!(k.block, (128, 1, 1), "a warp per 16 of the 64 query rows");
        // 100 keys padded to 112, d 32 to 32, rows padded by 8 halves.
        assert_eq!(k.smem_bytes, 2 * ((64 + 112) * 40 + 32 * 120));
    }
    // Mixed types, or more keys than the fragments hold, stay on the FFMA path.
    let q = c(F16, &[1, 200, 32]);
    let k = attention("attn", &q, &q.permuted(&[0, 2, 1]), &q, F32, &[], &Expr::input(0), &q).unwrap();
    assert!(!k.source.contains("mma.sync"));
    let k = attention("attn", &q, &q.permuted(&[0, 2, 1]), &q, F16, &[], &Expr::input(0), &q).unwrap();
    assert!(!k.source.contains("mma.sync"), "200 keys");
}
