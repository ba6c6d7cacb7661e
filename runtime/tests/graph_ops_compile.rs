//! Every graph-op kernel generator (`spartac::codegen::graph_ops`) over representative cases,
//! compiled without a GPU: rendered, NVRTC to PTX for sm_90a, ptxas to a cubin, registers and
//! spills recorded in a snapshot. NVRTC and ptxas come from the pinned PyPI wheels under
//! `.cuda/` (tests/run-all.sh installs them); a missing NVRTC fails the test.

use spartac::codegen::graph_ops::{
    attention, concat, conv_nhwc, conv_nhwc_with, elementwise, elementwise_inputs, gather, layer_norm,
    layer_norm_fused, matmul, reduce, reduce_kernels, softmax, Binary, ConcatRead, ConvEngine, ConvShape, EwInput,
    Expr, GatherRows, NormPrologue, OpKernel, Reduce, ReduceKernels, TensorDesc, Unary,
};
use spartac::codegen::Activation;
use spartac::ir::DType;
mod common;

use common::{nvrtc, ptxas};
use spartac_runtime::cuda::compile_ptx;

fn c(dtype: DType, shape: &[usize]) -> TensorDesc {
    TensorDesc::contiguous(dtype, shape)
}

fn input(i: usize) -> Expr {
    Expr::input(i)
}

fn k(v: f64, d: DType) -> Expr {
    Expr::constant(v, d)
}

fn un(op: Unary, x: Expr) -> Expr {
    Expr::unary(op, x)
}

fn bin(op: Binary, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}

/// BERT's GELU on input 0: `0.5 · x · (1 + erf(x / √2))` in type `d`.
fn gelu(d: DType) -> Expr {
    let x = input(0);
    let inner = bin(Binary::Div, x.clone(), k(std::f64::consts::SQRT_2, d));
    let one_plus = bin(Binary::Add, k(1.0, d), un(Unary::Erf, inner));
    bin(Binary::Mul, bin(Binary::Mul, k(0.5, d), x), one_plus)
}

/// Every unary and binary float operator in one expression over inputs 0 and 1 of type `d`.
fn every_float_op(d: DType) -> Expr {
    let (x, y) = (input(0), input(1));
    let mut e = x.clone();
    for op in [
        Unary::Neg,
        Unary::Abs,
        Unary::Exp,
        Unary::Log,
        Unary::Sqrt,
        Unary::Reciprocal,
        Unary::Erf,
        Unary::Tanh,
        Unary::Sigmoid,
        Unary::Relu,
        Unary::Floor,
        Unary::Ceil,
        Unary::Identity,
    ] {
        e = bin(Binary::Add, e, un(op, y.clone()));
    }
    for op in [Binary::Sub, Binary::Mul, Binary::Div, Binary::Pow, Binary::Max, Binary::Min] {
        e = bin(op, e, x.clone());
    }
    let cmp = [Binary::Equal, Binary::Less, Binary::Greater, Binary::LessOrEqual, Binary::GreaterOrEqual]
        .into_iter()
        .map(|op| bin(op, x.clone(), y.clone()))
        .reduce(|a, b| bin(Binary::Or, bin(Binary::And, a.clone(), b), un(Unary::Not, a)))
        .unwrap();
    Expr::select(cmp, e, k(f64::NEG_INFINITY, d))
}

/// Every integer operator over inputs 0 and 1 of type `d`.
fn every_int_op(d: DType) -> Expr {
    let (x, y) = (input(0), input(1));
    let mut e = bin(Binary::Add, un(Unary::Neg, x.clone()), un(Unary::Abs, y.clone()));
    e = bin(Binary::Add, e, un(Unary::Relu, x.clone()));
    for op in [Binary::Sub, Binary::Mul, Binary::Div, Binary::Pow, Binary::Max, Binary::Min] {
        e = bin(op, e, y.clone());
    }
    Expr::select(bin(Binary::Less, x, k(3.0, d)), e, k(-7.0, d))
}

/// The cases: a label and the kernel.
fn cases() -> Vec<(String, OpKernel)> {
    use DType::*;
    let mut out: Vec<(String, OpKernel)> = vec![];
    let mut add = |label: &str, k: Result<OpKernel, spartac::codegen::CodegenError>| {
        let k = k.unwrap_or_else(|e| panic!("{label}: {e}"));
        out.push((label.to_string(), k));
    };
    // ---- elementwise ----
    let big = [4096, 1536];
    add(
        "ew add f32 4096x1536",
        elementwise("ew_add", &[c(F32, &big), c(F32, &big)], &c(F32, &big), &bin(Binary::Add, input(0), input(1))),
    );
    let act = [32, 128, 384];
    add(
        "ew bias add f32",
        elementwise("ew_bias", &[c(F32, &act), c(F32, &[384])], &c(F32, &act), &bin(Binary::Add, input(0), input(1))),
    );
    add("ew gelu f32", elementwise("ew_gelu", &[c(F32, &big)], &c(F32, &big), &gelu(F32)));
    add("ew gelu f16", elementwise("ew_gelu16", &[c(F16, &big)], &c(F16, &big), &gelu(F16)));
    add("ew gelu bf16", elementwise("ew_gelu_bf", &[c(BF16, &big)], &c(BF16, &big), &gelu(BF16)));
    add(
        "ew f16 row scale",
        elementwise(
            "ew_rowscale",
            &[c(F16, &act), c(F16, &[32, 128, 1])],
            &c(F16, &act),
            &bin(Binary::Mul, input(0), input(1)),
        ),
    );
    add(
        "ew bf16 sub",
        elementwise(
            "ew_sub_bf",
            &[c(BF16, &act), c(BF16, &act)],
            &c(BF16, &act),
            &bin(Binary::Sub, input(0), input(1)),
        ),
    );
    let scores = [32, 12, 128, 128];
    let mask = bin(Binary::Mul, bin(Binary::Sub, k(1.0, F32), input(1)), k(-10000.0, F32));
    add(
        "ew attention mask",
        elementwise(
            "ew_mask",
            &[c(F32, &scores), c(F32, &[32, 1, 1, 128])],
            &c(F32, &scores),
            &bin(Binary::Add, input(0), mask),
        ),
    );
    let scale = bin(Binary::Mul, input(0), k(0.125, F32));
    add(
        "ew transposed read",
        elementwise("ew_tr", &[c(F32, &[128, 384]).permuted(&[1, 0])], &c(F32, &[384, 128]), &scale),
    );
    add("ew transposed odd", elementwise("ew_tr_odd", &[c(F32, &[7, 6]).permuted(&[1, 0])], &c(F32, &[6, 7]), &scale));
    let where_ = Expr::select(input(0), input(1), bin(Binary::Max, input(1), k(0.0, F32)));
    add(
        "ew where bool",
        elementwise("ew_where", &[c(Bool, &[4096, 384]), c(F32, &[4096, 384])], &c(F32, &[4096, 384]), &where_),
    );
    add(
        "ew compare to bool",
        elementwise(
            "ew_cmp",
            &[c(F32, &[4096, 384]), c(F32, &[1])],
            &c(Bool, &[4096, 384]),
            &bin(Binary::GreaterOrEqual, input(0), input(1)),
        ),
    );
    add(
        "ew bool logic",
        elementwise(
            "ew_logic",
            &[c(Bool, &[8, 33]), c(Bool, &[33])],
            &c(Bool, &[8, 33]),
            &bin(Binary::And, input(0), un(Unary::Not, input(1))),
        ),
    );
    add(
        "ew every float op f32",
        elementwise("ew_all_f32", &[c(F32, &[64, 64]), c(F32, &[64])], &c(F32, &[64, 64]), &every_float_op(F32)),
    );
    add(
        "ew every float op f16",
        elementwise("ew_all_f16", &[c(F16, &[64, 64]), c(F16, &[64])], &c(F16, &[64, 64]), &every_float_op(F16)),
    );
    add(
        "ew every float op f64",
        elementwise("ew_all_f64", &[c(F64, &[64, 64]), c(F64, &[64])], &c(F64, &[64, 64]), &every_float_op(F64)),
    );
    add(
        "ew every int op i64",
        elementwise("ew_all_i64", &[c(I64, &[5]), c(I64, &[1])], &c(I64, &[5]), &every_int_op(I64)),
    );
    add(
        "ew every int op i32",
        elementwise("ew_all_i32", &[c(I32, &[16, 4]), c(I32, &[16, 1])], &c(I32, &[16, 4]), &every_int_op(I32)),
    );
    add(
        "ew every int op u8",
        elementwise("ew_all_u8", &[c(U8, &[16, 4]), c(U8, &[4])], &c(U8, &[16, 4]), &every_int_op(U8)),
    );
    let casts = Expr::cast(F32, bin(Binary::Add, Expr::cast(I64, input(0)), Expr::cast(I64, Expr::cast(I8, input(0)))));
    add("ew casts", elementwise("ew_casts", &[c(F32, &[1000])], &c(F32, &[1000]), &casts));
    add("ew cast to f16", elementwise("ew_to_f16", &[c(F32, &big)], &c(F16, &big), &Expr::cast(F16, input(0))));
    add("ew cast bool to u8", elementwise("ew_b2u8", &[c(Bool, &[3, 5])], &c(U8, &[3, 5]), &Expr::cast(U8, input(0))));
    add(
        "ew scalar + odd",
        elementwise(
            "ew_scalar",
            &[c(F32, &[]), c(F32, &[7, 3])],
            &c(F32, &[7, 3]),
            &bin(Binary::Pow, input(1), input(0)),
        ),
    );
    add("ew expand", elementwise("ew_expand", &[c(I64, &[1, 128])], &c(I64, &[32, 128]), &input(0)));
    add(
        "ew unused input",
        elementwise("ew_unused", &[c(F32, &[8]), c(I64, &[1])], &c(F32, &[8]), &un(Unary::Sqrt, input(0))),
    );
    // ---- gather ----
    let ids = c(I64, &[32, 128]);
    add("gather embedding f32", gather("gather_emb", &c(F32, &[30522, 384]), &ids, 0));
    add("gather embedding f16", gather("gather_emb16", &c(F16, &[30522, 384]), &ids, 0));
    add("gather i32 axis 1", gather("gather_ax1", &c(F32, &[4, 10, 3]), &c(I32, &[2, 5]), 1));
    add("gather scalar index", gather("gather_one", &c(I64, &[4]), &c(I64, &[]), 0));
    add("gather transposed indices", gather("gather_tr", &c(BF16, &[100, 8]), &c(I64, &[6, 4]).permuted(&[1, 0]), 0));
    // ---- layer_norm ----
    add("layernorm 4096x384 f32", layer_norm("ln384", 4096, 384, 1e-12, F32, Some(F32), Some(F32), F32));
    add("layernorm 4096x384 f16", layer_norm("ln384h", 4096, 384, 1e-5, F16, Some(F16), Some(F16), F16));
    add("layernorm bf16 no affine", layer_norm("ln_bf", 512, 768, 1e-5, BF16, None, None, BF16));
    add("layernorm ragged 1000", layer_norm("ln_1000", 100, 1002, 1e-5, F32, Some(F32), None, F32));
    add("layernorm 4096x4096 block", layer_norm("ln4096", 4096, 4096, 1e-5, F32, Some(F32), Some(F32), F32));
    add("layernorm 3000 block ragged", layer_norm("ln3001", 64, 3001, 1e-5, F32, None, Some(F32), F32));
    add("layernorm 32768 block 1024 cached", layer_norm("ln32k", 16, 32768, 1e-5, BF16, Some(BF16), Some(BF16), BF16));
    add("softmax 30000 block 1024 cached", softmax("sm30k", 16, 30000, F32, false));
    add("layernorm 100000 streaming", layer_norm("ln_long", 8, 100000, 1e-5, F32, Some(F32), Some(F32), F32));
    // ---- layer_norm with a prologue: the residual Add (and a bias row, a scalar) computed
    // in the kernel, with and without the sum written out ----
    for (d, tag) in [(F32, "f32"), (F16, "f16"), (BF16, "bf16")] {
        for (cols, write_x) in [(384, false), (768, true), (1024, false), (1024, true)] {
            let shape = [32, 128, cols];
            let inputs = [c(d, &shape), c(d, &shape), c(d, &[cols])];
            let expr = bin(Binary::Add, bin(Binary::Add, input(0), input(1)), input(2));
            let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x, gathers: &[], y_rounded: None };
            let name = format!("ln_res_{tag}_{cols}_{}", if write_x { "sum" } else { "nosum" });
            let kernel = layer_norm_fused(&name, &shape, 2, 1e-12, &prologue, Some(d), Some(d), d);
            add(&format!("layernorm residual {tag} {cols} write_x={write_x}"), kernel);
        }
        // BERT's embedding LayerNorm: word and token-type rows gathered from their tables by
        // i64 ids, the position rows broadcast over the batch.
        {
            let shape = [32, 128, 384];
            let inputs = [c(d, &[30522, 384]), c(d, &[2, 384]), c(d, &[1, 128, 384])];
            let gathers = [GatherRows { input: 0, index: I64 }, GatherRows { input: 1, index: I64 }];
            let expr = bin(Binary::Add, bin(Binary::Add, input(0), input(1)), input(2));
            let prologue =
                NormPrologue { inputs: &inputs, expr: &expr, write_x: false, gathers: &gathers, y_rounded: None };
            let kernel = layer_norm_fused(&format!("ln_emb_{tag}"), &shape, 2, 1e-12, &prologue, Some(d), Some(d), d);
            add(&format!("layernorm embedding lookups {tag}"), kernel);
        }
        // A 16-bit model's last LayerNorm stored through its Cast to the fp32 output.
        if d != F32 {
            let shape = [32, 128, 384];
            let inputs = [c(d, &shape), c(d, &shape)];
            let expr = bin(Binary::Add, input(0), input(1));
            let prologue =
                NormPrologue { inputs: &inputs, expr: &expr, write_x: false, gathers: &[], y_rounded: Some(d) };
            let kernel =
                layer_norm_fused(&format!("ln_res_{tag}_to_f32"), &shape, 2, 1e-12, &prologue, Some(d), Some(d), F32);
            add(&format!("layernorm residual {tag} stored as f32"), kernel);
        }
    }
    let inputs = [c(F16, &[64, 3001]), c(F16, &[])];
    let expr = bin(Binary::Mul, input(0), input(1));
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: true, gathers: &[], y_rounded: None };
    add(
        "layernorm prologue block ragged f16 with sum",
        layer_norm_fused("ln_res_3001", &[64, 3001], 1, 1e-5, &prologue, None, Some(F16), F16),
    );
    let inputs = [c(F32, &[8, 100000]), c(F32, &[8, 100000])];
    let expr = bin(Binary::Sub, input(0), input(1));
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: true, gathers: &[], y_rounded: None };
    add(
        "layernorm prologue streaming with sum",
        layer_norm_fused("ln_res_long", &[8, 100000], 1, 1e-5, &prologue, Some(F32), None, F32),
    );
    // ---- layer_norm with a prologue reading rows at strided starts: ViT's attention output in
    // [seq, batch] order through Transpose[1, 0, 2] (8 at a time), a position embedding
    // broadcast over the batch; a ragged block-walk row (1 at a time) ----
    let inputs = [c(F16, &[197, 32, 768]).permuted(&[1, 0, 2]), c(F16, &[32, 197, 768])];
    let expr = bin(Binary::Add, input(0), input(1));
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: true, gathers: &[], y_rounded: None };
    add(
        "layernorm prologue transposed rows f16 (ViT)",
        layer_norm_fused("ln_vit_t", &[32, 197, 768], 2, 1e-6, &prologue, Some(F16), Some(F16), F16),
    );
    let inputs = [c(F32, &[7, 4, 3001]).permuted(&[1, 0, 2]), c(BF16, &[1, 7, 3001])];
    let expr = bin(Binary::Add, input(0), Expr::cast(F32, input(1)));
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: false, gathers: &[], y_rounded: None };
    add(
        "layernorm prologue transposed and broadcast rows, block ragged",
        layer_norm_fused("ln_strided_3001", &[4, 7, 3001], 2, 1e-5, &prologue, Some(F32), None, F32),
    );
    // ---- softmax ----
    add("softmax 49152x128 f32", softmax("sm128", 49152, 128, F32, false));
    add("softmax 49152x128 f16", softmax("sm128h", 49152, 128, F16, false));
    add("logsoftmax 1000x77", softmax("lsm77", 1000, 77, F32, true));
    add("softmax 100 guarded", softmax("sm100", 1000, 100, BF16, false));
    add("softmax 3000 block", softmax("sm3000", 100, 3000, F32, false));
    add("logsoftmax 70000 streaming", softmax("lsm_long", 10, 70000, F32, true));
    // ---- reduce ----
    let r = c(F32, &act);
    add("reduce sum axis 1", reduce("rsum1", &r, &[1], Reduce::Sum, F32));
    add("reduce mean axis 2", reduce("rmean2", &r, &[2], Reduce::Mean, F32));
    add("reduce max all", reduce("rmax_all", &c(F32, &[4096, 4096]), &[0, 1], Reduce::Max, F32));
    add("reduce l2 f16", reduce("rl2", &c(F16, &[64, 1000]), &[1], Reduce::L2, F16));
    add("reduce sumsquare bf16 to f32", reduce("rss", &c(BF16, &[64, 10, 3]), &[0, 2], Reduce::SumSquare, F32));
    add("reduce prod i32", reduce("rprod", &c(I32, &[10, 7]), &[1], Reduce::Prod, I32));
    // A squeeze-excitation block's global pooling (NHWC, 1024 outputs of 12,544): split in two.
    match reduce_kernels("rse", &c(F16, &[32, 112, 112, 32]), &[1, 2], Reduce::Mean, F16) {
        Ok(ReduceKernels::Split { partial, finish, .. }) => {
            add("reduce se mean split (partials)", Ok(partial));
            add("reduce se mean split (finish)", Ok(finish));
        }
        other => panic!("the SE pooling splits: {other:?}"),
    }
    add("reduce min i64", reduce("rmin64", &c(I64, &[100, 300]), &[0], Reduce::Min, I64));
    add("reduce max bool", reduce("rmaxb", &c(Bool, &[100, 300]), &[1], Reduce::Max, Bool));
    add("reduce mean i8", reduce("rmean8", &c(I8, &[100, 3]), &[1], Reduce::Mean, I8));
    add("reduce f64 sum transposed", reduce("rsum64", &c(F64, &[300, 200]).permuted(&[1, 0]), &[1], Reduce::Sum, F64));
    add("reduce nothing", reduce("rnone", &c(F32, &[10, 3]), &[], Reduce::Sum, F32));
    // ---- matmul ----
    let q = c(F32, &[32, 12, 128, 32]);
    let kt = c(F32, &[32, 12, 128, 32]).permuted(&[0, 1, 3, 2]);
    add("matmul Q·Kᵀ", matmul("mm_qk", &q, &kt, &c(F32, &[32, 12, 128, 128])));
    add("matmul P·V", matmul("mm_pv", &c(F32, &[32, 12, 128, 128]), &q, &c(F32, &[32, 12, 128, 32])));
    add("matmul ragged", matmul("mm_ragged", &c(F32, &[100, 37]), &c(F32, &[37, 70]), &c(F32, &[100, 70])));
    add(
        "matmul transposed a",
        matmul("mm_ta", &c(F32, &[37, 100]).permuted(&[1, 0]), &c(F32, &[37, 70]), &c(F32, &[100, 70])),
    );
    add(
        "matmul broadcast batch",
        matmul("mm_bcast", &c(F32, &[1, 5, 30, 20]), &c(F32, &[4, 1, 20, 9]), &c(F32, &[4, 5, 30, 9])),
    );
    add("matmul rank 2 × batched", matmul("mm_2b", &c(F16, &[30, 20]), &c(F16, &[3, 20, 64]), &c(F16, &[3, 30, 64])));
    add("matmul bf16 small m", matmul("mm_bf", &c(BF16, &[8, 1536]), &c(BF16, &[1536, 384]), &c(BF16, &[8, 384])));
    add("matmul f64", matmul("mm_f64", &c(F64, &[65, 65]), &c(F64, &[65, 65]), &c(F64, &[65, 65])));
    add(
        "matmul folded batch",
        matmul("mm_fold", &c(F32, &[70000, 4, 4]), &c(F32, &[70000, 4, 4]), &c(F32, &[70000, 4, 4])),
    );
    // ---- fused attention ----
    // MiniLM's: heads split out of [32, 128, 384] projections, Kᵀ folded, scale and the
    // [32, 1, 128, 128] additive mask, heads merged back through the output strides.
    let heads = |d: DType| c(d, &[32, 128, 12, 32]).permuted(&[0, 2, 1, 3]);
    let merged = |d: DType| c(d, &[32, 128, 12, 32]).permuted(&[0, 2, 1, 3]);
    let masked = |d: DType| bin(Binary::Add, bin(Binary::Mul, input(0), k(0.17677669529663687, d)), input(1));
    for (label, d) in [("attention MiniLM f32", F32), ("attention MiniLM f16", F16)] {
        let kt = c(d, &[32, 128, 12, 32]).permuted(&[0, 2, 3, 1]);
        let mask = c(d, &[32, 1, 128, 128]);
        add(label, attention("attn_minilm", &heads(d), &kt, &heads(d), d, &[mask], &masked(d), &merged(d)));
    }
    // Ragged everything: 50 queries, 45 keys, 20-wide q/k, 30-wide v, broadcast batch, no extra.
    add(
        "attention ragged",
        attention(
            "attn_ragged",
            &c(F32, &[3, 50, 20]),
            &c(F32, &[1, 20, 45]),
            &c(F32, &[3, 45, 30]),
            F32,
            &[],
            &input(0),
            &c(F32, &[3, 50, 30]),
        ),
    );
    // ---- concat ----
    // An elementwise step reading a Concat never formed (DenseNet's BatchNorm + ReLU): four at
    // a time from one part (NHWC parts of 64 and 32 channels), element by element (parts of 3),
    // the scalar path (an odd total), a middle axis (inner 4).
    let cat = |parts: &[&[usize]], axis: usize| {
        EwInput::Concat(ConcatRead { axis, parts: parts.iter().map(|p| c(F16, p)).collect() })
    };
    let affine_relu = un(Unary::Relu, bin(Binary::Add, bin(Binary::Mul, input(0), input(1)), input(2)));
    for (label, parts, axis, out) in [
        (
            "ew concat nhwc f16 vec",
            vec![&[32usize, 56, 56, 64][..], &[32, 56, 56, 32], &[32, 56, 56, 32]],
            3,
            vec![32usize, 56, 56, 128],
        ),
        ("ew concat nhwc f16 each", vec![&[2usize, 6, 6, 8][..], &[2, 6, 6, 3], &[2, 6, 6, 3]], 3, vec![2, 6, 6, 14]),
        ("ew concat nhwc f16 odd", vec![&[1usize, 3, 3, 5][..], &[1, 3, 3, 2]], 3, vec![1, 3, 3, 7]),
        ("ew concat middle axis f16", vec![&[2usize, 3, 4][..], &[2, 5, 4]], 1, vec![2, 8, 4]),
    ] {
        let ch = *out.last().unwrap();
        let bias_shape: Vec<usize> = if axis == 3 { vec![ch] } else { vec![out[1], 1] };
        let inputs = [cat(&parts, axis), EwInput::Tensor(c(F16, &bias_shape)), EwInput::Tensor(c(F16, &bias_shape))];
        let name = label.replace(' ', "_");
        add(label, elementwise_inputs(&name, &inputs, &c(F16, &out), &affine_relu));
    }
    add("concat axis 1", concat("cat1", &[c(F32, &[2, 3, 4]), c(F32, &[2, 5, 4])], 1, &c(F32, &[2, 8, 4])));
    add(
        "concat transposed",
        concat("cat_tr", &[c(F16, &[4, 3]).permuted(&[1, 0]), c(F16, &[3, 2])], 1, &c(F16, &[3, 6])),
    );
    add("concat i64 shapes", concat("cat_shape", &[c(I64, &[1]), c(I64, &[0]), c(I64, &[2])], 0, &c(I64, &[3])));
    // ---- conv (EfficientNet-Lite0 at batch 32, channels-last) ----
    let relu6 = Activation::Clip { lo: 0.0, hi: 6.0 };
    for (h, ch, k, s) in [
        (112, 32, 3, 1),
        (112, 96, 3, 2),
        (56, 144, 3, 1),
        (56, 144, 5, 2),
        (28, 240, 5, 1),
        (28, 240, 3, 2),
        (14, 480, 3, 1),
        (14, 672, 5, 1),
        (14, 672, 5, 2),
        (7, 1152, 5, 1),
        (7, 1152, 3, 1),
    ] {
        let shape = dw(32, h, ch, k, s);
        add(
            &format!("conv dw {k}x{k} s{s} {h}x{h}x{ch} relu6"),
            conv_nhwc(&format!("dw{k}s{s}_{h}_{ch}"), &shape, F32, true, relu6),
        );
    }
    add("conv dw 3x3 s1 no bias", conv_nhwc("dw_plain", &dw(32, 56, 144, 3, 1), F32, false, Activation::None));
    add("conv dw 5x5 s2 no bias", conv_nhwc("dw5_plain", &dw(32, 28, 240, 5, 2), F32, false, Activation::None));
    add("conv dw 3x3 scalar c=6", conv_nhwc("dw_c6", &dw(2, 15, 6, 3, 1), F32, true, Activation::Relu));
    let dilated = ConvShape { dilation: (2, 3), pads: [2, 3, 2, 3], ..dw(2, 17, 8, 3, 1) };
    add("conv dw dilated gelu", conv_nhwc("dw_dil", &dilated, F32, true, Activation::GeluErf));
    let stem = stem_shape();
    // The direct kernel (automatically, the stem is an implicit GEMM gathered element by element).
    let direct = ConvEngine::Direct;
    add("conv stem 3x3 s2 relu6", conv_nhwc_with("stem", &stem, F32, true, relu6, direct));
    add("conv stem no bias", conv_nhwc_with("stem_plain", &stem, F32, false, Activation::None, direct));
    add("conv grouped 4", conv_nhwc("grp4", &conv_shape(32, 28, 64, 96, 4, 3, 1), F32, true, relu6));
    add("conv depth multiplier 3", conv_nhwc("mult3", &conv_shape(8, 28, 16, 48, 16, 3, 2), F32, false, relu6));
    add(
        "conv dense big c_in",
        conv_nhwc("dense512", &conv_shape(32, 14, 512, 512, 1, 3, 1), F32, true, Activation::Gelu),
    );
    // Implicit GEMMs (ResNet-50's dense convolutions at batch 32), every tile shape, f32 (3xTF32)
    // and 16-bit; the f32 "dense big c_in" above is one too.
    for (d, t) in [(F32, "f32"), (F16, "f16"), (BF16, "bf16")] {
        let s2 = |s: ConvShape| ConvShape { stride: (2, 2), ..s };
        for (label, name, shape) in [
            ("3x3 56x56x64 (128x64 tiles)", "ig64", conv_shape(32, 56, 64, 64, 1, 3, 1)),
            ("3x3 56x56 128 to 32 (128x32 tiles, DenseNet)", "ig32", conv_shape(32, 56, 128, 32, 1, 3, 1)),
            ("3x3 7x7 128 to 32 (64x32 tiles)", "ig32s", conv_shape(32, 7, 128, 32, 1, 3, 1)),
            ("3x3 28x28x128 (128x128 tiles)", "ig128", conv_shape(32, 28, 128, 128, 1, 3, 1)),
            ("3x3 7x7x512 (64x128 tiles)", "ig512", conv_shape(32, 7, 512, 512, 1, 3, 1)),
            ("3x3 s2 28x28x256", "ig256s2", s2(conv_shape(32, 28, 256, 256, 1, 3, 1))),
            (
                "1x1 s2 56x56 256->512",
                "ig1x1s2",
                ConvShape { pads: [0; 4], ..s2(conv_shape(32, 56, 256, 512, 1, 1, 1)) },
            ),
            ("3x3 c_in 8, K padded, c_out 37", "igodd", conv_shape(4, 20, 8, 37, 1, 3, 1)),
            ("7x7 s2 stem, 3 channels gathered", "igstem", s2(conv_shape(32, 224, 3, 64, 1, 7, 1))),
            ("3x3 s2 stem 3 to 32 gathered (128x32 tiles)", "igstem32", s2(conv_shape(32, 224, 3, 32, 1, 3, 1))),
            ("3x3 groups of 16, 14x14x784 (ragged)", "iggrp", conv_shape(32, 14, 784, 784, 49, 3, 1)),
        ] {
            add(
                &format!("conv igemm {t} {label}"),
                conv_nhwc(&format!("{name}_{t}"), &shape, d, true, Activation::Relu),
            );
        }
    }
    // 16-bit x and y, f32 weights, bias and math.
    for (d, t) in [(F16, "f16"), (BF16, "bf16")] {
        let mut add16 = |label: &str, name: &str, shape: &ConvShape| {
            let k = conv_nhwc_with(&format!("{name}_{t}"), shape, d, true, relu6, ConvEngine::Direct);
            add(&format!("conv {t} {label} relu6"), k);
        };
        add16("dw 3x3 s1 112x112x32", "dw3s1", &dw(32, 112, 32, 3, 1));
        add16("dw 3x3 s2 112x112x96", "dw3s2", &dw(32, 112, 96, 3, 2));
        add16("dw 5x5 s1 14x14x672", "dw5s1", &dw(32, 14, 672, 5, 1));
        add16("dw 5x5 s2 56x56x144", "dw5s2", &dw(32, 56, 144, 5, 2));
        add16("dw 3x3 scalar c=6", "dw_c6", &dw(2, 15, 6, 3, 1));
        // The shared-memory tile (7×7): 32-, 8- and 4-channel slabs, stride 2, dilated.
        add16("dw 7x7 s1 56x56x96 (ConvNeXt, tiled)", "dw7s1", &dw(32, 56, 96, 7, 1));
        add16("dw 7x7 s2 14x14x40 (tiled, 8-channel slabs)", "dw7s2_40", &dw(32, 14, 40, 7, 2));
        add16("dw 7x7 c=12 (tiled, 4-channel slabs)", "dw7_c12", &dw(2, 9, 12, 7, 1));
        let dilated = ConvShape { dilation: (2, 3), pads: [6, 9, 6, 9], ..dw(2, 17, 8, 7, 1) };
        add16("dw 7x7 dilated (tiled)", "dw7_dil", &dilated);
        add16("stem 3x3 s2", "stem", &stem);
        add16("grouped 4", "grp4", &conv_shape(32, 28, 64, 96, 4, 3, 1));
        add16("depth multiplier 3", "mult3", &conv_shape(8, 28, 16, 48, 16, 3, 2));
    }
    out
}

/// A `k × k` channels-last convolution of `n` images `h × h × c_in` with stride `s`, padded by `k / 2`.
fn conv_shape(n: usize, h: usize, c_in: usize, c_out: usize, groups: usize, k: usize, s: usize) -> ConvShape {
    ConvShape { n, h, w: h, c_in, c_out, groups, kh: k, kw: k, stride: (s, s), dilation: (1, 1), pads: [k / 2; 4] }
}

/// EfficientNet-Lite0's stem at batch 32: 224 × 224 × 3 → 112 × 112 × 32, padded bottom and right.
fn stem_shape() -> ConvShape {
    ConvShape { pads: [0, 0, 1, 1], ..conv_shape(32, 224, 3, 32, 1, 3, 2) }
}

/// A depthwise `k × k` convolution, stride `s`, padded by `k / 2`.
fn dw(n: usize, h: usize, c: usize, k: usize, s: usize) -> ConvShape {
    conv_shape(n, h, c, c, c, k, s)
}

#[test]
fn every_graph_op_compiles_with_nvrtc_and_ptxas_for_sm_90a() {
    nvrtc();
    let dir = tempfile::tempdir().unwrap();
    let mut table = String::from("case | kernel | grid | block | registers | spill st/ld B\n");
    for (i, (label, kernel)) in cases().iter().enumerate() {
        let ptx = compile_ptx(&kernel.name, &kernel.source, "sm_90a").unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(ptx.ptx.contains(&format!(".entry {}(", kernel.name)), "{label}: no entry {} in PTX", kernel.name);
        let (regs, st, ld) = ptxas(&format!("g{i}"), &ptx.ptx, dir.path());
        assert_eq!((st, ld), (0, 0), "{label} ({}) spills: {st} B stored, {ld} B loaded", kernel.name);
        table.push_str(&format!(
            "{label} | {} | {:?} | {:?} | {regs} | {st}/{ld}\n",
            kernel.name, kernel.grid, kernel.block
        ));
    }
    insta::assert_snapshot!("graph_ops_ptxas", table);
}

/// The matmul kernels keep their tiles in registers, coalesce transposed operands and never
/// touch TF32; the elementwise fast paths are the plain ones.
#[test]
fn generated_ptx_has_the_expected_instructions() {
    nvrtc();
    let ptx = |k: &OpKernel| compile_ptx(&k.name, &k.source, "sm_90a").unwrap().ptx;
    let q = c(DType::F32, &[384, 128, 32]);
    let kt = q.permuted(&[0, 2, 1]);
    let mm = matmul("mm", &q, &kt, &c(DType::F32, &[384, 128, 128])).unwrap();
    let text = ptx(&mm);
    assert!(text.contains("fma.rn.f32"), "no f32 FMA in the matmul");
    assert!(!text.contains("tf32"), "TF32 in the matmul");
    assert!(text.contains("ld.shared.v4.f32"), "the register block is not loaded four at a time");
    let big = [4096, 1536];
    let add = elementwise(
        "ew",
        &[c(DType::F32, &big), c(DType::F32, &[1536])],
        &c(DType::F32, &big),
        &Expr::binary(Binary::Add, Expr::input(0), Expr::input(1)),
    )
    .unwrap();
    let text = ptx(&add);
    assert!(text.contains("ld.global.nc.v4.f32") || text.contains("ld.global.nc.v4.u32"), "no vector loads:\n{text}");
    assert!(text.contains("st.global.v4"), "no vector stores");
    let sm = softmax("sm", 49152, 128, DType::F32, false).unwrap();
    let text = ptx(&sm);
    assert!(text.contains("shfl.sync.bfly"), "softmax without warp shuffles");
    // The fp16 residual LayerNorm: 16-byte loads of both operands and stores of y and the sum,
    // statistics by warp shuffles.
    let shape = [4096, 768];
    let inputs = [c(DType::F16, &shape), c(DType::F16, &shape)];
    let expr = Expr::binary(Binary::Add, Expr::input(0), Expr::input(1));
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: true, gathers: &[], y_rounded: None };
    let f16 = Some(DType::F16);
    let text = ptx(&layer_norm_fused("ln", &shape, 1, 1e-5, &prologue, f16, f16, DType::F16).unwrap());
    assert!(text.contains("ld.global.nc.v4.u32"), "the fp16 LayerNorm does not load 16 bytes at once:\n{text}");
    assert!(text.contains("st.global.v4.u32"), "the fp16 LayerNorm does not store 16 bytes at once");
    assert!(text.contains("shfl.sync.bfly"), "the LayerNorm without warp shuffles");
    // ViT's: the transposed operand's rows are read 16 bytes at once as well, as many loads.
    let in_place = text.matches("ld.global.nc.v4.u32").count();
    let inputs = [c(DType::F16, &[197, 32, 768]).permuted(&[1, 0, 2]), c(DType::F16, &[32, 197, 768])];
    let prologue = NormPrologue { inputs: &inputs, expr: &expr, write_x: true, gathers: &[], y_rounded: None };
    let text = ptx(&layer_norm_fused("ln_t", &[32, 197, 768], 2, 1e-6, &prologue, f16, f16, DType::F16).unwrap());
    assert_eq!(text.matches("ld.global.nc.v4.u32").count(), in_place, "16-byte loads as in place:\n{text}");
    let relu6 = Activation::Clip { lo: 0.0, hi: 6.0 };
    let text = ptx(&conv_nhwc("dw", &dw(32, 112, 96, 3, 2), DType::F32, true, relu6).unwrap());
    assert!(text.contains("ld.global.nc.v4.f32"), "the depthwise conv does not load 4 channels at once");
    assert!(text.contains("st.global.v4.f32"), "the depthwise conv does not store 4 channels at once");
    // The 7×7 one through its shared tile: copied in 4 channels at once, read back 4 at once
    // (input and weights), stored 4 at once.
    for (d, v) in [(DType::F32, "v4.f32"), (DType::F16, "v2.u32"), (DType::BF16, "v2.u32")] {
        let text = ptx(&conv_nhwc("dw7", &dw(32, 56, 96, 7, 1), d, true, Activation::None).unwrap());
        assert!(text.contains(&format!("ld.global.nc.{v}")), "the {d} 7x7 conv does not load 4 channels at once");
        assert!(text.contains(&format!("ld.shared.{v}")), "the {d} 7x7 conv does not read its tile 4 at once");
        assert!(text.contains("ld.shared.v4.f32"), "the {d} 7x7 conv does not read 4 weights at once");
        assert!(text.contains("bar.sync"), "the {d} 7x7 conv does not wait for its tile");
        assert!(text.contains(&format!("st.global.{v}")), "the {d} 7x7 conv does not store 4 channels at once");
    }
    let text = ptx(&conv_nhwc_with("stem", &stem_shape(), DType::F32, true, relu6, ConvEngine::Direct).unwrap());
    assert!(text.contains("ld.shared.v4.f32"), "the stem does not read its weights 4 channels at a time");
    assert!(text.contains("st.global.v4.f32"), "the stem does not store 4 channels at once");
    for d in [DType::F16, DType::BF16] {
        let text = ptx(&conv_nhwc("dw", &dw(32, 112, 96, 3, 2), d, true, relu6).unwrap());
        assert!(text.contains("ld.global.nc.v2.u32"), "the {d} depthwise conv does not load 4 channels at once");
        assert!(text.contains("ld.global.nc.v4.f32"), "the {d} depthwise conv does not load 4 f32 weights at once");
        assert!(text.contains("st.global.v2.u32"), "the {d} depthwise conv does not store 4 channels at once");
        assert!(text.contains(&format!("cvt.rn.{d}.f32")), "the {d} depthwise conv does not round its output");
        let text = ptx(&conv_nhwc_with("stem", &stem_shape(), d, true, relu6, ConvEngine::Direct).unwrap());
        assert!(text.contains("ld.shared.v4.f32"), "the {d} stem does not read its weights 4 channels at a time");
        assert!(text.contains("st.global.v2.u32"), "the {d} stem does not store 4 channels at once");
    }
    // Implicit GEMMs: tensor-core math on ldmatrix fragments; 16-byte cp.async gathers, or
    // element loads for the stem's 3 channels.
    let conv3 = conv_shape(32, 28, 128, 128, 1, 3, 1);
    for (d, mma) in
        [(DType::F32, "m16n8k8.row.col.f32.tf32.tf32.f32"), (DType::F16, "m16n8k16.row.col.f32.f16.f16.f32")]
    {
        let text = ptx(&conv_nhwc("ig", &conv3, d, true, relu6).unwrap());
        assert!(text.contains(&format!("mma.sync.aligned.{mma}")), "the {d} implicit GEMM without {mma}");
        assert!(text.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"), "the {d} implicit GEMM without ldmatrix");
        assert!(text.contains("cp.async.cg.shared.global"), "the {d} implicit GEMM does not gather by cp.async");
        let stem = ptx(&conv_nhwc("igs", &stem_shape(), d, true, relu6).unwrap());
        assert!(stem.contains(&format!("mma.sync.aligned.{mma}")), "the {d} stem is not an implicit GEMM");
        assert!(stem.contains("ld.global.nc"), "the {d} stem does not gather through registers");
    }
}

/// Small rendered kernels as snapshots of the exact source.
#[test]
fn rendered_graph_op_snapshots() {
    use DType::*;
    let bias = elementwise("ew_bias_gelu", &[c(F32, &[8, 16]), c(F32, &[16])], &c(F32, &[8, 16]), &{
        let mut g = gelu(F32);
        // gelu(x + b): substitute the sum for input 0.
        fn subst(e: &Expr, with: &Expr) -> Expr {
            match e {
                Expr::Input(0) => with.clone(),
                Expr::Unary(op, x) => Expr::unary(*op, subst(x, with)),
                Expr::Binary(op, a, b) => Expr::binary(*op, subst(a, with), subst(b, with)),
                other => other.clone(),
            }
        }
        g = subst(&g, &bin(Binary::Add, input(0), input(1)));
        g
    })
    .unwrap();
    insta::assert_snapshot!("ew_bias_gelu", bias.source);
    let mask = elementwise(
        "ew_mask",
        &[c(F16, &[2, 4, 8, 8]), c(Bool, &[2, 1, 1, 8]), c(F16, &[8, 8]).permuted(&[1, 0])],
        &c(F16, &[2, 4, 8, 8]),
        &Expr::select(input(1), bin(Binary::Add, input(0), input(2)), k(f64::NEG_INFINITY, F16)),
    )
    .unwrap();
    insta::assert_snapshot!("ew_mask_f16", mask.source);
    insta::assert_snapshot!(
        "gather_embedding",
        gather("gather_emb", &c(F32, &[100, 8]), &c(I64, &[2, 3]), 0).unwrap().source
    );
    insta::assert_snapshot!(
        "layernorm_warp",
        layer_norm("ln", 64, 384, 1e-12, F32, Some(F32), Some(F32), F32).unwrap().source
    );
    insta::assert_snapshot!("softmax_block", softmax("sm", 16, 2000, F16, false).unwrap().source);
    insta::assert_snapshot!(
        "reduce_column",
        reduce("rs", &c(F32, &[4, 128, 32]), &[1], Reduce::Sum, F32).unwrap().source
    );
    let q = c(F32, &[6, 128, 32]);
    insta::assert_snapshot!(
        "matmul_qk",
        matmul("mm_qk", &q, &q.permuted(&[0, 2, 1]), &c(F32, &[6, 128, 128])).unwrap().source
    );
    insta::assert_snapshot!(
        "concat_axis1",
        concat("cat", &[c(F32, &[2, 3]), c(F32, &[2, 1])], 1, &c(F32, &[2, 4])).unwrap().source
    );
}

/// Every case of `spartac kernels attention` (f32, f16, bf16; 1 to 4096 keys; heads 32, 64,
/// 128 and a ragged 40/24; with and without a mask; BERT's transposed operands) compiles, with
/// registers and spills in a snapshot. The kernel of one type and head width is the same code
/// for any number of keys (only `#define`s change), so spills would show at every length.
#[test]
fn every_attention_case_compiles_without_spills() {
    use rayon::prelude::*;
    use spartac_runtime::cuda::attention::attention_cases;
    nvrtc();
    let dir = tempfile::tempdir().unwrap();
    let cases = attention_cases();
    let rows: Vec<String> = cases
        .par_iter()
        .enumerate()
        .map(|(i, case)| {
            let label = case.label();
            let kernel = case.kernel().unwrap_or_else(|e| panic!("{label}: {e}"));
            let ptx = compile_ptx(&kernel.name, &kernel.source, "sm_90a").unwrap_or_else(|e| panic!("{label}: {e}"));
            let (regs, st, ld) = ptxas(&format!("a{i}"), &ptx.ptx, dir.path());
            assert_eq!((st, ld), (0, 0), "{label} spills: {st} B stored, {ld} B loaded");
            format!("{label} | {:?} | {:?} | {} | {regs} | {st}/{ld}\n", kernel.grid, kernel.block, kernel.smem_bytes)
        })
        .collect();
    let table = String::from("case | grid | block | smem B | registers | spill st/ld B\n") + &rows.concat();
    insta::assert_snapshot!("attention_ptxas", table);
}
