//! Convolution generator tests: output sizes, path choice, refusals, the packed weight, and
//! the kernels' walks replayed on the CPU against a reference convolution.

use super::*;

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
    assert!(
        dw.source.contains("acc = acc < 0e0f ? 0e0f : acc;") && dw.source.contains("acc = acc > 6e0f ? 6e0f : acc;")
    );
    assert!(dw.source.contains("load_v<V, A>(bv, bias + c)"));
    assert!(dw.source.contains("typedef unsigned idx_t;"), "32-bit indices");
    // 32 · 112 rows · 14 blocks of 8 · 8 channel groups.
    assert_eq!((dw.grid, dw.block, dw.smem_bytes), ((32 * 112 * 14 * 8 / 256, 1, 1), (256, 1, 1), 0));
    let plain = conv_nhwc("dw_plain", &effnet_dw(112, 32, 3, 1), F32, false, Activation::None).unwrap();
    assert!(!plain.source.contains("bias + c") && !plain.source.contains("acc > 6e0f"), "no bias read, no activation");
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

    let st = conv_nhwc_with("stem", &stem(), F32, true, clip, ConvEngine::Direct).unwrap();
    assert!(st.source.contains("direct convolution") && st.source.contains("__shared__ __align__(16) float ws[864];"));
    assert!(st.source.contains("#define COT 8") && st.source.contains("reinterpret_cast<const float4*>(wp"));
    assert_eq!(st.grid, (132 * 8, 1, 1), "grid-stride");
    assert_eq!(params(&st.source, "stem"), params(&dw.source, "dw"), "one parameter list for every path");
    let grouped =
        conv_nhwc("grp", &conv(32, (28, 28), 64, 96, 4, (3, 3), (1, 1), (1, 1), [1; 4]), F32, false, clip).unwrap();
    assert!(grouped.source.contains("#define CIG 16") && grouped.source.contains("#define COT 8"));
    let mult = conv_nhwc("mult", &conv(2, (9, 9), 8, 24, 8, (3, 3), (1, 1), (1, 1), [1; 4]), F32, true, clip).unwrap();
    assert!(mult.source.contains("#define COT 3") && mult.source.contains("st_act(yp + j, epilogue("), "multiplier 3");
    let big_shape = conv(1, (14, 14), 512, 512, 1, (3, 3), (1, 1), (1, 1), [1; 4]);
    let big = conv_nhwc_with("big", &big_shape, F32, true, clip, ConvEngine::Direct).unwrap();
    assert!(!big.source.contains("__shared__") && big.source.contains("__ldg(wp + ci * C_OUT + j)"), "9 MB weight");
    assert!(big.source.contains("#pragma unroll 4"));
    // Automatically, a dense convolution whose channels come in 16-byte runs is an implicit GEMM:
    // 196 pixels in 64-row tiles (4 tiles of 128 would be under one wave) × 4 channel tiles.
    let auto = conv_nhwc("big", &big_shape, F32, true, clip).unwrap();
    assert!(auto.source.contains("implicit-GEMM") && auto.source.contains("products 3xTF32"), "{}", auto.source);
    assert_eq!((auto.grid, auto.block, auto.smem_bytes), ((4 * 4, 1, 1), (256, 1, 1), 4 * (64 + 128) * 80));
    assert!(auto.source.contains("#define K_PAD 4608") && auto.source.contains("#define BK 16"));
    let huge = conv_nhwc("huge", &effnet_dw(1024, 1024, 3, 1), F32, false, Activation::None).unwrap();
    assert!(huge.source.contains("typedef unsigned long long idx_t;"), "2^35 elements take 64-bit indices");
}

#[test]
fn conv_16_bit_activations_keep_f32_weights_and_math_on_the_direct_kernels() {
    let clip = Activation::Clip { lo: 0.0, hi: 6.0 };
    let grouped = conv(32, (28, 28), 64, 96, 4, (3, 3), (1, 1), (1, 1), [1; 4]);
    let odd = conv(1, (9, 9), 6, 6, 6, (3, 3), (1, 1), (1, 1), [1; 4]);
    for (d, st, ld, store) in [(F16, "half_t", "ld_f16", "st_f16"), (BF16, "bf16_t", "ld_bf16", "st_bf16")] {
        let fp32 = [effnet_dw(112, 32, 3, 1), stem(), grouped.clone(), odd.clone()]
            .map(|s| conv_nhwc_with("cv", &s, F32, true, clip, ConvEngine::Direct).unwrap());
        let half = [effnet_dw(112, 32, 3, 1), stem(), grouped.clone(), odd.clone()]
            .map(|s| conv_nhwc_with("cv", &s, d, true, clip, ConvEngine::Direct).unwrap());
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

/// The implicit GEMM's math on the CPU, from its packed weight: output pixel `m` and channel
/// `co` sum over `k < k_pad` the gathered `X̃[m, k]` (the template's index math: tap
/// `k / window`, input channel `ch_base + k % window` with `ch_base` the first channel of the
/// groups of `co`'s `bn`-channel tile; zero outside the image, past `K` or past `c_in`) times
/// `packed[co · k_pad + k]`.
fn igemm_conv(s: &ConvShape, dtype: DType, x: &[f32], packed: &[f32], bias: &[f32], epi: Epilogue) -> Vec<f64> {
    let (oh, ow) = (s.oh(), s.ow());
    let m_rows = s.n * oh * ow;
    let bn = conv_igemm_tiles(s).bn;
    let (cog, cig) = (s.c_out / s.groups, s.c_in / s.groups);
    let window = if s.groups == 1 { s.c_in } else { bn / cog * cig };
    let k = s.kh * s.kw * window;
    let bk = 64 / dtype.size_bytes();
    let k_pad = k.div_ceil(bk) * bk;
    assert_eq!(packed.len() % k_pad, 0, "whole padded rows");
    assert!(packed.len() / k_pad >= s.c_out);
    let mut out = vec![0.0; m_rows * s.c_out];
    for m in 0..m_rows {
        let (ox, oy, n) = (m % ow, m / ow % oh, m / (ow * oh));
        for co in 0..s.c_out {
            let ch_base = (co / bn * bn / cog) * cig;
            let mut acc = 0.0f64;
            for kc in 0..k_pad {
                let (tap, ci) = (kc / window, ch_base + kc % window);
                let (ky, kx) = (tap / s.kw, tap % s.kw);
                let iy = (oy * s.stride.0 + ky * s.dilation.0) as isize - s.pads[0] as isize;
                let ix = (ox * s.stride.1 + kx * s.dilation.1) as isize - s.pads[1] as isize;
                let inside = kc < k && ci < s.c_in && iy >= 0 && iy < s.h as isize && ix >= 0 && ix < s.w as isize;
                let xv =
                    if inside { x[((n * s.h + iy as usize) * s.w + ix as usize) * s.c_in + ci] as f64 } else { 0.0 };
                acc += xv * packed[co * k_pad + kc] as f64;
            }
            out[m * s.c_out + co] = epi.apply(acc, bias[co] as f64);
        }
    }
    out
}

#[test]
fn implicit_gemm_gather_and_packed_weight_match_the_reference_conv() {
    let relu = Epilogue { bias: true, activation: Activation::Relu };
    let plain = Epilogue { bias: true, activation: Activation::None };
    let cases = [
        ("3x3 s1, K padded (f16)", conv(2, (7, 6), 8, 12, 1, (3, 3), (1, 1), (1, 1), [1; 4]), F16, relu),
        ("3x3 s2 asymmetric pads (f32)", conv(1, (9, 8), 8, 6, 1, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]), F32, plain),
        ("1x1 s2 (ResNet downsample)", conv(2, (8, 8), 16, 8, 1, (1, 1), (2, 2), (1, 1), [0; 4]), F16, plain),
        ("dilated 2x3 (bf16)", conv(1, (9, 10), 16, 5, 1, (2, 3), (1, 2), (2, 2), [2, 1, 2, 1]), BF16, relu),
        ("7x1 conv1d-like", conv(2, (1, 12), 4, 7, 1, (1, 7), (1, 1), (1, 1), [0, 3, 0, 3]), F32, relu),
        ("stem 7x7 s2, 3 channels (f16)", conv(2, (13, 11), 3, 8, 1, (7, 7), (2, 2), (1, 1), [3; 4]), F16, relu),
        ("3 channels (f32)", conv(1, (9, 9), 3, 5, 1, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]), F32, plain),
        // RegNet-like groups of 16: four per 64-channel tile, the last tile ragged (9 groups).
        (
            "grouped 16 wide, ragged last tile (f16)",
            conv(1, (6, 5), 144, 144, 9, (3, 3), (1, 1), (1, 1), [1; 4]),
            F16,
            relu,
        ),
        ("grouped 8 wide, s2 (f32)", conv(2, (7, 7), 32, 64, 4, (3, 3), (2, 2), (1, 1), [1; 4]), F32, plain),
        (
            "grouped 128 wide in 128 tiles (bf16)",
            conv(1, (4, 4), 128, 256, 2, (3, 3), (1, 1), (1, 1), [1; 4]),
            BF16,
            plain,
        ),
        (
            "grouped, narrow window: 4 inputs per group (f16)",
            conv(1, (5, 5), 12, 48, 3, (3, 3), (1, 1), (1, 1), [1; 4]),
            F16,
            relu,
        ),
    ];
    let mut rng = crate::rng::SplitMix64::new(11);
    for (label, s, dtype, epi) in cases {
        assert!(conv_igemm_eligible(&s, dtype), "{label}");
        let x = random_values(s.n * s.h * s.w * s.c_in, &mut rng);
        let oihw = random_values(s.weight_len(), &mut rng);
        let bias = random_values(s.c_out, &mut rng);
        let packed = match conv_weight(&s, dtype, ConvEngine::Auto, &oihw).unwrap() {
            ConvWeight::F32(v) => v,
            ConvWeight::F16(v) => v.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect(),
            ConvWeight::BF16(v) => v.iter().map(|&b| half::bf16::from_bits(b).to_f32()).collect(),
        };
        // The reference on the weight as stored (rounded to the activation type).
        let stored: Vec<f32> = oihw
            .iter()
            .map(|&v| match dtype {
                F16 => half::f16::from_f32(v).to_f32(),
                BF16 => half::bf16::from_f32(v).to_f32(),
                _ => v,
            })
            .collect();
        let want = reference_conv(&s, &x, &stored, &bias, epi);
        let got = igemm_conv(&s, dtype, &x, &packed, &bias, epi);
        assert_eq!(got.len(), want.len(), "{label}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-5, "{label} [{i}]: {g} vs {w}");
        }
        let k = conv_nhwc("cv", &s, dtype, true, epi.activation).unwrap();
        assert!(k.source.contains("implicit-GEMM"), "{label}: the automatic choice");
    }
}

#[test]
fn implicit_gemm_is_refused_where_it_does_not_apply() {
    // Groups of 24 output channels tile neither 64 nor 128; a depth multiplier reads one input.
    let grouped = conv(1, (8, 8), 16, 48, 2, (3, 3), (1, 1), (1, 1), [1; 4]);
    let multiplier = conv(1, (8, 8), 16, 32, 16, (3, 3), (1, 1), (1, 1), [1; 4]);
    for (label, s, dtype) in [
        ("groups of 24", &grouped, F16),
        ("depthwise", &effnet_dw(14, 32, 3, 1), F32),
        ("multiplier 2", &multiplier, F32),
    ] {
        assert!(!conv_igemm_eligible(s, dtype), "{label}");
        let e = error(conv_nhwc_with("cv", s, dtype, false, Activation::None, ConvEngine::ImplicitGemm));
        assert!(e.contains("implicit GEMM needs one group or groups that tile"), "{label}: {e}");
        let w = vec![0.0; s.weight_len()];
        assert!(conv_weight(s, dtype, ConvEngine::ImplicitGemm, &w).is_err(), "{label}");
        // Automatically they stay on the direct or depthwise kernel, with its f32 weight.
        assert!(matches!(conv_weight(s, dtype, ConvEngine::Auto, &w).unwrap(), ConvWeight::F32(_)), "{label}");
    }
}

#[test]
fn narrow_input_channels_gather_element_by_element() {
    // The stem's 3 channels (and 12 in 16 bits) are no whole 16-byte run: the register gather.
    let odd = conv(1, (8, 8), 12, 16, 1, (3, 3), (1, 1), (1, 1), [1; 4]);
    for (s, dtype, narrow) in [(stem(), F16, true), (stem(), F32, true), (odd.clone(), F16, true), (odd, F32, false)] {
        let k = conv_nhwc("cv", &s, dtype, true, Activation::Relu).unwrap();
        assert!(k.source.contains("implicit-GEMM"), "{s:?} {dtype}");
        assert_eq!(k.source.contains("fetch_a(next)"), narrow, "{s:?} {dtype}");
        assert_eq!(k.source.contains("cp_async16(as + "), !narrow, "{s:?} {dtype}");
    }
    // Forced onto the direct kernel, the stem keeps its FFMA kernel and f32 weight.
    let direct = conv_nhwc_with("cv", &stem(), F16, true, Activation::Relu, ConvEngine::Direct).unwrap();
    assert!(direct.source.contains("direct convolution"));
}
