//! Kernels of the ONNX ops that are not matmuls with constant weights: fused elementwise
//! expressions ([`elementwise`]), [`gather`], [`layer_norm`] (with an elementwise prologue:
//! [`layer_norm_fused`]), [`softmax`] (and LogSoftmax),
//! [`reduce`], batched [`matmul`] of two activations, fused [`attention`], [`concat`] and channels-last convolution
//! ([`conv_nhwc`], with its weight packing [`pack_conv_weight`]). Each is one Tera template
//! (`templates/op_*.cu.tera`, helpers in `templates/ops.cuh`; conv has two and
//! `templates/op_conv.cuh`) rendered from a typed context.
//!
//! Every shape is static and baked into the source as constants; a tensor is described by a
//! [`TensorDesc`] (element type, logical shape, element strides), so that transposes and
//! broadcasts that are only views fold into the reading kernel. Every kernel takes only pointer
//! parameters: the inputs in the documented order, then the output. The caller names the kernel
//! (`extern "C" __global__ void <name>(...)`) and must give distinct sources distinct names.
//!
//! Element types in the source: `Bool` and `U8` are `unsigned char`, `I8` `signed char`, `I16`
//! `short`, `U16` `unsigned short`, `I32` `int`, `U32` `unsigned`, `I64` `long long`, `U64`
//! `unsigned long long`, `F32` `float`, `F64` `double`, and `F16` / `BF16` raw 16-bit storage
//! (`half_t` / `bf16_t`, both `unsigned short`: the same ABI as `__half` / `__nv_bfloat16`, with
//! no CUDA header needed). Four-element (vector) paths check the pointers' alignment at run time
//! and fall back to element accesses, so any pointer works.
//!
//! Zero-element tensors give a kernel that does nothing (grid of one block).

mod attention;
mod conv;
mod conv_igemm;
mod copy;
mod elementwise;
mod expr;
mod matmul;
mod pool;
mod reduce;
mod rows;
#[cfg(test)]
mod tests;

pub use attention::{
    attention, attention_fits, attention_smem, attention_with, AttentionEngine, MASKED_BELOW,
    MAX_HEAD_DIM as ATTENTION_MAX_HEAD_DIM, RAW_SCORE_BOUND, SETTLED_ABOVE,
};
pub use conv::{
    conv_kernel_label, conv_nhwc, conv_nhwc_with, conv_weight, pack_conv_weight, ConvEngine, ConvShape, ConvWeight,
};
pub use conv_igemm::{eligible as conv_igemm_eligible, tiles as conv_igemm_tiles};
pub use copy::{concat, gather};
pub use elementwise::{elementwise, elementwise_inputs, ConcatRead, EwInput};
pub use expr::{Binary, Expr, Unary};
pub use matmul::matmul;
pub use pool::pool;
pub use reduce::{reduce, reduce_kernels, Reduce, ReduceKernels};
pub use rows::{layer_norm, layer_norm_fused, row_operand, softmax, GatherRows, NormPrologue, RowOperand};

use super::CodegenError;
use crate::ir::DType;
use serde::Serialize;

/// A tensor as a kernel reads it: element type, logical shape and element strides (row-major
/// contiguous unless a transpose or broadcast view was folded into it; a stride may be 0).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDesc {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

impl TensorDesc {
    /// A row-major contiguous tensor of `shape`.
    pub fn contiguous(dtype: DType, shape: &[usize]) -> TensorDesc {
        TensorDesc { dtype, shape: shape.to_vec(), strides: crate::ir::strides(shape) }
    }

    /// Number of elements (the product of the shape; 1 for a scalar).
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the elements lie row-major and dense from the base pointer on. The stride of a
    /// dimension of size 1 does not matter; an empty tensor is contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.shape.len() != self.strides.len() {
            return false;
        }
        if self.is_empty() {
            return true;
        }
        let mut expected = 1;
        for (&size, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if size != 1 && stride != expected {
                return false;
            }
            expected *= size;
        }
        true
    }

    /// The same memory viewed through a permutation (ONNX Transpose `perm`):
    /// `shape[i] = self.shape[perm[i]]`, strides likewise.
    ///
    /// # Panics
    /// When `perm` is not a permutation of `0..rank` (Transpose's shape inference rules that out).
    pub fn permuted(&self, perm: &[usize]) -> TensorDesc {
        let rank = self.shape.len();
        let mut seen = vec![false; rank];
        for &p in perm {
            assert!(p < rank && !seen[p], "{perm:?} is not a permutation of 0..{rank}");
            seen[p] = true;
        }
        assert_eq!(perm.len(), rank, "{perm:?} is not a permutation of 0..{rank}");
        TensorDesc {
            dtype: self.dtype,
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
        }
    }

    /// Strides to read this tensor as if broadcast (numpy rules, aligned right) to `shape`: 0
    /// along the dimensions it repeats. `None` when it does not broadcast to `shape`.
    pub fn broadcast_strides(&self, shape: &[usize]) -> Option<Vec<usize>> {
        let rank = shape.len();
        if self.shape.len() > rank {
            return None;
        }
        let lead = rank - self.shape.len();
        (0..rank)
            .map(|i| {
                if i < lead {
                    return Some(0);
                }
                match (self.shape[i - lead], self.strides[i - lead]) {
                    (d, s) if d == shape[i] && d != 1 => Some(s),
                    (1, _) => Some(0),
                    _ => None,
                }
            })
            .collect()
    }

    /// The largest element offset the tensor reaches (0 for an empty one).
    fn max_offset(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        self.shape.iter().zip(&self.strides).map(|(&d, &s)| (d - 1) * s).sum()
    }

    fn check(&self, what: &str) -> Result<(), String> {
        if self.shape.len() != self.strides.len() {
            return Err(format!("{what} has {} dimensions but {} strides", self.shape.len(), self.strides.len()));
        }
        Ok(())
    }
}

/// One generated kernel and its launch geometry (no dynamic shared memory unless `smem_bytes`).
#[derive(Clone, Debug, PartialEq)]
pub struct OpKernel {
    pub name: String,
    pub source: String,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem_bytes: u32,
}

/// Threads per CTA of the one-dimensional kernels.
const THREADS: usize = 256;
/// Most CTAs of a grid-stride kernel: 8 per SM of an H100 (132 SMs).
const MAX_STRIDE_CTAS: usize = 132 * 8;

/// CTAs of a grid-stride loop over `work` items, `per_cta` per CTA per step.
fn stride_grid(work: usize, per_cta: usize) -> u32 {
    work.div_ceil(per_cta).clamp(1, MAX_STRIDE_CTAS) as u32
}

/// C type of a flat index that runs up to `max` (plus a grid's worth of stride): 32-bit
/// arithmetic when it surely fits, which makes the constant divisions cheap.
fn index_type(max: usize) -> &'static str {
    if max < 1 << 31 {
        "unsigned"
    } else {
        "unsigned long long"
    }
}

/// How a kernel holds one element type: storage type, compute type, the load conversion
/// (a function name, empty for none) and the store conversion (a function or a C cast).
#[derive(Clone, Debug, Serialize)]
struct TypeCtx {
    st: &'static str,
    ct: &'static str,
    ld: &'static str,
    store: String,
}

fn storage_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool | DType::U8 => "unsigned char",
        DType::I8 => "signed char",
        DType::U16 => "unsigned short",
        DType::I16 => "short",
        DType::U32 => "unsigned",
        DType::I32 => "int",
        DType::U64 => "unsigned long long",
        DType::I64 => "long long",
        DType::F16 => "half_t",
        DType::BF16 => "bf16_t",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The type expressions over `dtype` compute in: f32 for the 16-bit floats, `bool` for Bool.
fn compute_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::F16 | DType::BF16 => "float",
        d => storage_type(d),
    }
}

fn type_ctx(dtype: DType) -> TypeCtx {
    let (ld, store) = match dtype {
        DType::F16 => ("ld_f16", "st_f16".to_string()),
        DType::BF16 => ("ld_bf16", "st_bf16".to_string()),
        DType::Bool => ("ld_bool", "(unsigned char)".to_string()),
        d => ("", format!("({})", storage_type(d))),
    };
    TypeCtx { st: storage_type(dtype), ct: compute_type(dtype), ld, store }
}

/// Accumulator of float math over `dtype`: `double` for F64, else `float`; `None` for non-floats.
fn float_acc(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F64 => Some("double"),
        DType::F16 | DType::BF16 | DType::F32 => Some("float"),
        _ => None,
    }
}

/// Refuses names that are not C identifiers.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("kernel name {name:?} is not a C identifier"))
    }
}

/// The error of generator `op` for kernel `name`.
fn spec_error(op: &str, name: &str, message: impl std::fmt::Display) -> CodegenError {
    CodegenError::Spec(format!("{op} kernel {name}: {message}"))
}

/// Drops the dimensions of size 1 and merges neighbours that every stride list walks as one
/// (`stride[i] == stride[i + 1] * size[i + 1]` for each list). `sizes` and every list in
/// `strides` have one entry per dimension; the result is `(sizes, strides)` collapsed alike
/// (no dimensions at all for a single element).
fn collapse(sizes: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_sizes: Vec<usize> = vec![];
    let mut out_strides: Vec<Vec<usize>> = vec![vec![]; strides.len()];
    for (i, &size) in sizes.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let merges = !out_sizes.is_empty()
            && strides.iter().zip(&out_strides).all(|(s, o)| *o.last().expect("same length") == s[i] * size);
        if merges {
            *out_sizes.last_mut().expect("nonempty") *= size;
            for (s, o) in strides.iter().zip(&mut out_strides) {
                *o.last_mut().expect("nonempty") = s[i];
            }
        } else {
            out_sizes.push(size);
            for (s, o) in strides.iter().zip(&mut out_strides) {
                o.push(s[i]);
            }
        }
    }
    (out_sizes, out_strides)
}

/// C expression of the element offset of the flat row-major position `var` over `sizes`,
/// read through `strides`: e.g. `e`, `e % 384`, `(e / 128 % 12) * 32 + (e % 128) * 384`, or `0`.
/// Dimensions are collapsed first, so a contiguous walk is just `var`.
fn offset_expr(var: &str, sizes: &[usize], strides: &[usize]) -> String {
    if sizes.contains(&0) {
        return "0".into();
    }
    let (sizes, strides) = collapse(sizes, &[strides.to_vec()]);
    let strides = &strides[0];
    let mut terms = vec![];
    for (i, (&size, &stride)) in sizes.iter().zip(strides).enumerate() {
        if stride == 0 {
            continue;
        }
        let div: usize = sizes[i + 1..].iter().product();
        let mut coord = var.to_string();
        if div != 1 {
            coord = format!("{coord} / {div}");
        }
        if i != 0 {
            coord = format!("{coord} % {size}");
        }
        terms.push((coord, stride));
    }
    let lone = terms.len() == 1;
    let text: Vec<String> = terms
        .into_iter()
        .map(|(coord, stride)| match (stride, coord == var || lone) {
            (1, true) => coord,
            (1, false) => format!("({coord})"),
            (s, true) if coord == var => format!("{coord} * {s}"),
            (s, _) => format!("({coord}) * {s}"),
        })
        .collect();
    if text.is_empty() {
        "0".into()
    } else {
        text.join(" + ")
    }
}

/// Shape as text for the kernels' header comments, e.g. `32x128x384`.
fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}
