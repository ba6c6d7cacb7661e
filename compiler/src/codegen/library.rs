//! Dense sub-operators on the vendor library (cuBLAS on NVIDIA GPUs).
//!
//! A sparse kernel cannot beat a tuned dense GEMM once the weight is dense enough, and our
//! own dense kernel is far from cuBLAS (6.8× slower in fp16 on the H200, run 6). So the
//! planner's dense fallback runs on the library: this module describes the call (shape,
//! dtype, whether it adds into the output) and generates the one thing the library call
//! cannot fuse, the elementwise epilogue (bias, activation), as a small kernel of its own.
//! Models call the library through cuBLASLt ([`library_gemm_fused`]), which applies a bias and
//! a ReLU itself; only other activations still take a pass after it. The runtime makes the
//! call; this crate never links CUDA.

use super::render::{render, EpiRowsCtx};
use super::spmm::kernel::{Family, Kernel, Launch};
use super::spmm::shared::epilogue_ctx;
use super::{Activation, CodegenError, Dtype, Mode, Orientation, SpmmSpec};

/// A dense GEMM for the library, with the kernels around it: `prefill` before it, `epilogue`
/// after it.
#[derive(Clone, Debug)]
pub struct LibraryGemm {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub dtype: Dtype,
    pub orientation: Orientation,
    /// Add into the output (`beta = 1`) instead of overwriting it (`beta = 0`).
    pub accumulate: bool,
    /// `C[r, :] = bias` for every row, launched before the GEMM, which then adds into it: the
    /// product and the bias are summed in fp32 and rounded once, as our kernels' epilogues do
    /// (adding the bias to an fp16 product already rounded loses a bit where they cancel). Set
    /// for a part with a bias that writes the output first.
    pub prefill: Option<Kernel>,
    /// The rest of the epilogue (the bias unless prefilled or fused, the activation unless
    /// fused) as an in-place kernel; `None` when nothing is left.
    pub epilogue: Option<Kernel>,
    /// What the library call applies itself ([`library_gemm_fused`]).
    pub fused: LibraryEpilogue,
}

/// The epilogue a library call applies to its fp32 product before the one rounding to the
/// output type (cuBLASLt's `BIAS`, `RELU`, `RELU_BIAS`): no prefill and no pass after it. GELU
/// is not among them: the library's is the tanh approximation, and the models' is erf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LibraryEpilogue {
    #[default]
    None,
    Bias,
    Relu,
    BiasRelu,
}

impl LibraryEpilogue {
    pub fn bias(self) -> bool {
        matches!(self, LibraryEpilogue::Bias | LibraryEpilogue::BiasRelu)
    }

    pub fn relu(self) -> bool {
        matches!(self, LibraryEpilogue::Relu | LibraryEpilogue::BiasRelu)
    }
}

/// Whether a model runs `spec` on the library rather than on a generated kernel: a 16-bit
/// sub-operator with every weight block present. The cost model prices a dense GEMM at the
/// library's rate (`costdb`, fitted from cuBLAS), and on these dtypes our own dense kernel is
/// far from it. fp32 stays on the 3xTF32 dense kernel: it keeps fp32 accuracy and beats the
/// library's true-fp32 GEMM (dense MiniLM-L6: 2.18 ms against 2.93 ms for torch, which runs
/// cuBLAS). int8 has no library path (see [`library_gemm`]). Skinny products the streaming
/// kernel takes ([`crate::kernel_choice::stream::auto_takes`]: memory bound, K ≤ 256) stay on
/// it: one pass over A and C with the epilogue fused, where the library writes C three times.
///
/// With `fused_epilogue` (the model's library call applies a bias and a ReLU itself,
/// [`library_gemm_fused`]) a product whose epilogue it fuses and whose K and N are both at least
/// 64 goes to the library too: ResNet-50 f16 on the H200 (session 7, call 19) ran 1.888 ms with
/// its 64/256-wide 1×1 convolutions on the streaming kernel (61 µs each for 100352 × 64 × 256)
/// and 1.629 ms with them on cuBLASLt. Narrower products (EfficientNet's and MobileNet's
/// 16-40-wide projections) and other activations stay on the streaming kernel (not measured
/// against cuBLASLt yet).
pub fn library_takes(spec: &SpmmSpec, fused_epilogue: bool) -> bool {
    let lt_wide = fused_epilogue
        && !spec.accumulate
        && spec.orientation == Orientation::Right
        && matches!(spec.epilogue.activation, Activation::None | Activation::Relu)
        && spec.k >= 64
        && spec.n >= 64;
    library_takes_dense(spec)
        && (lt_wide
            || !(spec.engine == super::Engine::Auto
                && !spec.accumulate
                && crate::kernel_choice::stream::auto_takes(spec.dtype, spec.orientation, spec.k, spec.n)))
}

/// [`library_takes`] without the streaming kernel: every 16-bit sub-operator with every weight
/// block present (`compile --no-stream`, for ablations).
pub fn library_takes_dense(spec: &SpmmSpec) -> bool {
    // Every block of the weight's grid present; the last block row or column may be ragged (a
    // 1000-class head in 32-wide blocks), so count grid cells, not elements. A plan of single
    // elements with every element present (what the planner gives a dense weight whose shape no
    // block tiles: SqueezeNet's 512 × 1000 head) is dense too.
    let (rows, cols) = if spec.orientation == Orientation::Left { (spec.m, spec.k) } else { (spec.k, spec.n) };
    let cells = rows.div_ceil(spec.block.0.max(1)) * cols.div_ceil(spec.block.1.max(1));
    matches!(spec.dtype, Dtype::F16 | Dtype::Bf16) && spec.blocks.len() == cells
}

/// The library call for `spec`, whose weight is used densely (its pattern is ignored: a
/// dense fallback multiplies the stored zeros too).
pub fn library_gemm(spec: &SpmmSpec) -> Result<LibraryGemm, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if m == 0 || k == 0 || n == 0 {
        return Err(CodegenError::Spec(format!("empty matmul {m}x{k}x{n}")));
    }
    if [m, k, n].iter().any(|&d| d > i32::MAX as usize) {
        return Err(CodegenError::Spec(format!("matmul {m}x{k}x{n} exceeds the library's 32-bit dimensions")));
    }
    if spec.dtype == Dtype::I8 {
        // cuBLAS int8 GEMMs give int32; the dequantizing epilogue for that is not built.
        return Err(CodegenError::Spec(
            "the int8 dense fallback on cuBLAS is not built; use the int8 dense kernel".into(),
        ));
    }
    let prefilled = spec.epilogue.bias && !spec.accumulate;
    let prefill = if prefilled { Some(rows_kernel(spec, RowsPass::Bias)?) } else { None };
    let rest = if prefilled {
        spec.epilogue.activation != Activation::None
    } else {
        spec.epilogue.bias || spec.epilogue.activation != Activation::None
    };
    let pass = if prefilled { RowsPass::Activation } else { RowsPass::Epilogue };
    let epilogue = if rest { Some(rows_kernel(spec, pass)?) } else { None };
    Ok(LibraryGemm {
        m,
        k,
        n,
        dtype: spec.dtype,
        orientation: spec.orientation,
        accumulate: spec.accumulate || prefilled,
        prefill,
        epilogue,
        fused: LibraryEpilogue::None,
    })
}

/// [`library_gemm`] with the bias and a ReLU applied by the library call itself (cuBLASLt),
/// one rounding as the prefill gives: a part that writes C then needs no prefill, and a pass
/// after it only for another activation (GELU, clips), in place. A part that adds into C (the
/// second part of a mixed pattern) keeps [`library_gemm`]'s kernels, as does the left
/// orientation (the bias runs along the other axis of the library's output).
pub fn library_gemm_fused(spec: &SpmmSpec) -> Result<LibraryGemm, CodegenError> {
    let plain = library_gemm(spec)?;
    if spec.accumulate || spec.orientation != Orientation::Right {
        return Ok(plain);
    }
    let relu = spec.epilogue.activation == Activation::Relu;
    let fused = match (spec.epilogue.bias, relu) {
        (true, true) => LibraryEpilogue::BiasRelu,
        (true, false) => LibraryEpilogue::Bias,
        (false, true) => LibraryEpilogue::Relu,
        (false, false) => LibraryEpilogue::None,
    };
    let rest = !relu && spec.epilogue.activation != Activation::None;
    let epilogue = if rest {
        let mut after = spec.clone();
        after.epilogue.bias = false;
        Some(rows_kernel(&after, RowsPass::Activation)?)
    } else {
        None
    };
    Ok(LibraryGemm { accumulate: false, prefill: None, epilogue, fused, ..plain })
}

/// What a kernel over the rows of C does.
#[derive(Clone, Copy, PartialEq)]
enum RowsPass {
    /// `C = bias` (no read of C).
    Bias,
    /// `C = act(C + bias)` in place.
    Epilogue,
    /// `C = act(C)` in place (the bias was prefilled).
    Activation,
}

/// One pass over the `m × n` output, 16 bytes per thread when rows allow.
fn rows_kernel(spec: &SpmmSpec, pass: RowsPass) -> Result<Kernel, CodegenError> {
    let (m, n) = (spec.m, spec.n);
    let per16 = 16 / spec.dtype.bytes();
    let vec = if n % per16 == 0 { per16 } else { 1 };
    let threads = 256usize;
    let groups = (m * n / vec).max(1);
    // Enough CTAs to fill an H100/H200 several times over; the loop strides past the rest.
    let grid = groups.div_ceil(threads).min(132 * 16);
    let mut ep = epilogue_ctx(spec);
    // The library already added the previous output (beta = 1).
    ep.accumulate = false;
    match pass {
        RowsPass::Bias => ep.activation = "none".into(),
        RowsPass::Activation => ep.bias = false,
        RowsPass::Epilogue => {}
    }
    let fill = pass == RowsPass::Bias;
    let name = format!("{}_rows_{}", if fill { "bias" } else { "epilogue" }, spec.dtype.name());
    let ctx = EpiRowsCtx {
        kernel_name: name.clone(),
        dtype: spec.dtype.name().into(),
        m,
        n,
        vec,
        threads,
        fill,
        epilogue: ep,
    };
    let launch = Launch { grid: (grid as u32, 1, 1), block: (threads as u32, 1, 1), smem_bytes: 0 };
    Ok(Kernel {
        source: render("epilogue_rows.cu.tera", &ctx)?,
        // Elementwise over C: the same for either side the weight sat on.
        orientation: spec.orientation,
        ..Kernel::new(name, Family::Epilogue, Mode::IndexStream, launch, (m, spec.k, n), spec.dtype, (1, 1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::Epilogue;

    fn spec(n: usize, dtype: Dtype, epilogue: Epilogue) -> SpmmSpec {
        let mut s = SpmmSpec::new(64, 128, n, dtype, (32, 32), vec![]);
        s.epilogue = epilogue;
        s
    }

    #[test]
    fn kernels_only_when_needed_and_vectorized_when_rows_allow() {
        let plain = library_gemm(&spec(96, Dtype::F32, Epilogue::NONE)).unwrap();
        assert!(plain.epilogue.is_none() && plain.prefill.is_none() && !plain.accumulate);
        // A bias is prefilled (the GEMM adds into it); the activation follows in place.
        let relu = Epilogue { bias: true, activation: Activation::Relu };
        let g = library_gemm(&spec(96, Dtype::F32, relu)).unwrap();
        assert!(g.accumulate, "the GEMM adds its product to the prefilled bias");
        let fill = g.prefill.unwrap();
        assert!(fill.source.contains("bias[col]") && !fill.source.contains("acc < 0.0f"), "{}", fill.source);
        assert!(!fill.source.contains("= *reinterpret_cast<const uint4*>(C + e)"), "the fill reads no C");
        let f32k = g.epilogue.unwrap();
        assert_eq!(f32k.family, Family::Epilogue);
        assert!(f32k.source.contains("#define VEC 4") && f32k.source.contains("acc = acc < 0.0f ? 0.0f : acc;"));
        assert!(!f32k.source.contains("bias[col]"), "the bias is added once");
        let f16k = library_gemm(&spec(96, Dtype::F16, relu)).unwrap().epilogue.unwrap();
        assert!(f16k.source.contains("#define VEC 8"));
        // 100 columns of fp16: rows are not 16-byte multiples, one element per thread; a bias
        // alone leaves nothing after the GEMM.
        let odd = library_gemm(&spec(100, Dtype::F16, Epilogue { bias: true, activation: Activation::None })).unwrap();
        assert!(odd.epilogue.is_none());
        let odd = odd.prefill.unwrap();
        assert!(odd.source.contains("#define VEC 1") && !odd.source.contains("uint4"));
        // A part that adds into C gets the whole epilogue after the library's sum, which must
        // not add the previous value again.
        let mut acc = spec(96, Dtype::F32, relu);
        acc.accumulate = true;
        let g = library_gemm(&acc).unwrap();
        assert!(g.prefill.is_none());
        let k = g.epilogue.unwrap();
        assert!(g.accumulate && !k.source.contains("acc += prev") && k.source.contains("bias[col]"));
    }

    #[test]
    fn the_fused_call_takes_bias_and_relu_and_leaves_other_activations_to_a_pass() {
        let relu = Epilogue { bias: true, activation: Activation::Relu };
        let g = library_gemm_fused(&spec(96, Dtype::F16, relu)).unwrap();
        assert_eq!(g.fused, LibraryEpilogue::BiasRelu);
        assert!(g.prefill.is_none() && g.epilogue.is_none() && !g.accumulate);
        let gelu = Epilogue { bias: true, activation: Activation::GeluErf };
        let g = library_gemm_fused(&spec(96, Dtype::F16, gelu)).unwrap();
        assert_eq!(g.fused, LibraryEpilogue::Bias);
        let pass = g.epilogue.unwrap();
        assert!(!pass.source.contains("bias[col]"), "the library added the bias");
        assert!(g.prefill.is_none() && !g.accumulate);
        let g =
            library_gemm_fused(&spec(96, Dtype::F16, Epilogue { bias: false, activation: Activation::Relu })).unwrap();
        assert_eq!(g.fused, LibraryEpilogue::Relu);
        assert!(g.epilogue.is_none());
        assert_eq!(library_gemm_fused(&spec(96, Dtype::F16, Epilogue::NONE)).unwrap().fused, LibraryEpilogue::None);
        // A part adding into C keeps the kernels: the epilogue applies to the sum.
        let mut acc = spec(96, Dtype::F16, relu);
        acc.accumulate = true;
        let g = library_gemm_fused(&acc).unwrap();
        assert_eq!(g.fused, LibraryEpilogue::None);
        assert!(g.accumulate && g.epilogue.is_some());
    }

    #[test]
    fn a_dense_weight_with_ragged_edge_blocks_goes_to_the_library() {
        // SqueezeNet's head: K 512, N 1000 in 32×32 blocks; the last block column holds 8 of
        // 32 columns. Every grid cell present is a dense weight.
        let all: Vec<(usize, usize)> = (0..16).flat_map(|r| (0..32).map(move |c| (r, c))).collect();
        let mut s = SpmmSpec::new(5408, 512, 1000, Dtype::F16, (32, 32), all.clone());
        assert!(library_takes_dense(&s));
        s.blocks.pop();
        assert!(!library_takes_dense(&s), "one block pruned is not dense");
        // The same weight planned element by element, every element present.
        let elems: Vec<(usize, usize)> = (0..512).flat_map(|r| (0..1000).map(move |c| (r, c))).collect();
        let mut fine = SpmmSpec::new(5408, 512, 1000, Dtype::F16, (1, 1), elems);
        assert!(library_takes_dense(&fine));
        fine.blocks.pop();
        assert!(!library_takes_dense(&fine));
        s.blocks = all;
        s.dtype = Dtype::F32;
        assert!(!library_takes_dense(&s), "fp32 stays on our 3xTF32 kernel");
    }

    #[test]
    fn empty_shapes_are_errors() {
        let mut s = spec(96, Dtype::F32, Epilogue::NONE);
        s.m = 0;
        assert!(library_gemm(&s).is_err());
    }
}
