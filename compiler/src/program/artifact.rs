//! The compiled-model artifact (`MODEL.sparta`): one file holding a lowered model
//! ([`super::model::ModelProgram`]) — its I/O signature, the program (buffers with the packed
//! weights, kernel sources, steps with their launches and edges) and the lowering's counts —
//! plus PTX per arch when the compiler had NVRTC.
//!
//! Layout: the magic `SPARTAC\0`, the format version (u32 LE), the body length (u64 LE), the
//! body (a prost message, written by hand like the plan artifact), and the FNV-1a 64 checksum of
//! the body (u64 LE). A reader refuses another magic or version, a short or long file and a
//! checksum mismatch, each with one line, before decoding; decoding then checks every index
//! (buffers, kernels, matrices, params) and the program's invariants ([`Program::verify`]).
//! Only the ops a model lowers to are stored ([`Op::Spmm`] with all rows, [`Op::Nodes`],
//! [`Op::Move`]); HPEC programs are built in memory and not written.

use super::model::{LoweringStats, ModelProgram, Signature};
use super::{
    checksum, Arg, Buffer, BufferId, Csr, Data, Elem, KernelCode, KernelId, Launch, NodeOp, NormInput, NormResidual,
    NormStats, Op, Operand, Param, ParamId, Program, RowAffine, RowStats, Rows, SpmmNorm, Step, Storage,
};
use crate::codegen::{Activation, Epilogue, TmaBox};
use crate::ir::{Attr, Attrs, DType, Tensor};
use prost::Message;

pub const ARTIFACT_MAGIC: &[u8; 8] = b"SPARTAC\0";
pub const ARTIFACT_VERSION: u32 = 4;

/// PTX of one kernel for one arch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PtxProto {
    #[prost(uint32, tag = "1")]
    pub kernel: u32,
    #[prost(string, tag = "2")]
    pub arch: String,
    #[prost(string, tag = "3")]
    pub ptx: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ArtifactProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    inputs: Vec<SignatureProto>,
    #[prost(message, repeated, tag = "3")]
    outputs: Vec<SignatureProto>,
    #[prost(message, repeated, tag = "4")]
    buffers: Vec<BufferProto>,
    #[prost(message, repeated, tag = "5")]
    kernels: Vec<KernelProto>,
    #[prost(message, repeated, tag = "6")]
    params: Vec<ParamProto>,
    #[prost(message, repeated, tag = "7")]
    matrices: Vec<MatrixProto>,
    #[prost(message, repeated, tag = "8")]
    steps: Vec<StepProto>,
    #[prost(uint64, repeated, tag = "9")]
    stats: Vec<u64>,
    #[prost(message, repeated, tag = "10")]
    ptx: Vec<PtxProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SignatureProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    dtype: i32,
    #[prost(uint64, repeated, tag = "3")]
    shape: Vec<u64>,
    #[prost(uint32, tag = "4")]
    buf: u32,
    #[prost(uint64, tag = "5")]
    bound: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BufferProto {
    #[prost(string, tag = "1")]
    name: String,
    /// Index into [`ELEMS`].
    #[prost(uint32, tag = "2")]
    elem: u32,
    #[prost(uint64, tag = "3")]
    len: u64,
    /// 0 input, 1 output, 2 constant, 3 host, 4 scratch.
    #[prost(uint32, tag = "4")]
    storage: u32,
    #[prost(bytes = "vec", tag = "5")]
    data: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct KernelProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    source: String,
    #[prost(uint32, tag = "3")]
    smem_bytes: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ParamProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    default: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MatrixProto {
    #[prost(uint64, tag = "1")]
    rows: u64,
    #[prost(uint64, tag = "2")]
    cols: u64,
    #[prost(uint32, repeated, tag = "3")]
    offsets: Vec<u32>,
    #[prost(uint32, repeated, tag = "4")]
    indices: Vec<u32>,
    #[prost(float, repeated, tag = "5")]
    values: Vec<f32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StepProto {
    #[prost(string, tag = "1")]
    label: String,
    #[prost(uint32, repeated, tag = "2")]
    after: Vec<u32>,
    /// 0 move, 1 spmm, 2 nodes.
    #[prost(uint32, tag = "3")]
    op: u32,
    #[prost(message, optional, tag = "4")]
    spmm: Option<SpmmProto>,
    #[prost(message, repeated, tag = "5")]
    nodes: Vec<NodeProto>,
    #[prost(message, repeated, tag = "6")]
    launches: Vec<LaunchProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SpmmProto {
    #[prost(uint32, tag = "1")]
    a: u32,
    #[prost(uint32, tag = "2")]
    c: u32,
    #[prost(uint64, tag = "3")]
    rows: u64,
    #[prost(uint32, tag = "4")]
    weight: u32,
    #[prost(uint32, repeated, tag = "5")]
    packed_buf: Vec<u32>,
    #[prost(uint64, repeated, tag = "6")]
    packed_len: Vec<u64>,
    #[prost(uint64, repeated, tag = "7")]
    packed_sum: Vec<u64>,
    #[prost(uint32, optional, tag = "8")]
    bias: Option<u32>,
    #[prost(bool, tag = "9")]
    epilogue_bias: bool,
    /// 0 none, 1 relu, 2 clip, 3 gelu (tanh), 4 gelu (erf).
    #[prost(uint32, tag = "10")]
    activation: u32,
    #[prost(float, tag = "11")]
    clip_lo: f32,
    #[prost(float, tag = "12")]
    clip_hi: f32,
    #[prost(bool, tag = "13")]
    accumulate: bool,
    /// The LayerNorm work around the epilogue (`SpmmNorm`), when there is any.
    #[prost(message, optional, tag = "14")]
    norm: Option<SpmmNormProto>,
}

/// `SpmmNorm`: each part present when its buffers are.
#[derive(Clone, PartialEq, prost::Message)]
struct SpmmNormProto {
    #[prost(message, optional, tag = "1")]
    input: Option<RowStatsProto>,
    #[prost(uint32, optional, tag = "2")]
    input_colsum: Option<u32>,
    #[prost(uint32, optional, tag = "3")]
    residual: Option<u32>,
    #[prost(message, optional, tag = "4")]
    residual_stats: Option<RowStatsProto>,
    #[prost(uint32, optional, tag = "5")]
    residual_gamma: Option<u32>,
    #[prost(uint32, optional, tag = "6")]
    residual_beta: Option<u32>,
    #[prost(uint32, optional, tag = "7")]
    stats: Option<u32>,
    #[prost(uint64, tag = "8")]
    stats_at: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RowStatsProto {
    #[prost(uint32, tag = "1")]
    sums: u32,
    #[prost(uint64, tag = "2")]
    at: u64,
    #[prost(float, tag = "3")]
    eps: f32,
}

fn row_stats_proto(s: RowStats) -> RowStatsProto {
    RowStatsProto { sums: s.sums.0, at: s.at as u64, eps: s.eps }
}

fn norm_proto(nm: &SpmmNorm) -> SpmmNormProto {
    let af = nm.residual.and_then(|r| r.affine);
    SpmmNormProto {
        input: nm.input.map(|i| row_stats_proto(i.stats)),
        input_colsum: nm.input.map(|i| i.colsum.0),
        residual: nm.residual.map(|r| r.buf.0),
        residual_stats: af.map(|a| row_stats_proto(a.stats)),
        residual_gamma: af.map(|a| a.gamma.0),
        residual_beta: af.map(|a| a.beta.0),
        stats: nm.stats.map(|s| s.sums.0),
        stats_at: nm.stats.map_or(0, |s| s.at as u64),
    }
}

/// `SpmmNorm` from its record: a part is present when all its buffers are, and a part with
/// some of them only is an error.
fn norm_of(
    p: &SpmmNormProto,
    buf_id: impl Fn(u32) -> Result<BufferId, ArtifactError>,
) -> Result<SpmmNorm, ArtifactError> {
    let incomplete = |what: &str| bad(format!("a LayerNorm record's {what} is incomplete"));
    let stats_of = |s: &RowStatsProto| -> Result<RowStats, ArtifactError> {
        Ok(RowStats { sums: buf_id(s.sums)?, at: usize_of(s.at, "row sums offset")?, eps: s.eps })
    };
    let input = match (&p.input, p.input_colsum) {
        (None, None) => None,
        (Some(s), Some(c)) => Some(NormInput { stats: stats_of(s)?, colsum: buf_id(c)? }),
        _ => return Err(incomplete("input")),
    };
    let affine = match (&p.residual_stats, p.residual_gamma, p.residual_beta) {
        (None, None, None) => None,
        (Some(s), Some(g), Some(b)) => Some(RowAffine { stats: stats_of(s)?, gamma: buf_id(g)?, beta: buf_id(b)? }),
        _ => return Err(incomplete("residual")),
    };
    let residual = match p.residual {
        Some(r) => Some(NormResidual { buf: buf_id(r)?, affine }),
        None if affine.is_some() => return Err(incomplete("residual")),
        None => None,
    };
    let stats = match p.stats {
        Some(s) => Some(NormStats { sums: buf_id(s)?, at: usize_of(p.stats_at, "row sums offset")? }),
        None => None,
    };
    Ok(SpmmNorm { input, residual, stats })
}

#[derive(Clone, PartialEq, prost::Message)]
struct NodeProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    op_type: String,
    #[prost(int64, tag = "3")]
    opset: i64,
    #[prost(message, repeated, tag = "4")]
    attrs: Vec<AttrProto>,
    #[prost(message, repeated, tag = "5")]
    inputs: Vec<OperandProto>,
    #[prost(message, repeated, tag = "6")]
    outputs: Vec<OperandProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OperandProto {
    /// 0 absent, 1 buffer, 2 temporary, 3 scalar.
    #[prost(uint32, tag = "1")]
    kind: u32,
    #[prost(uint32, tag = "2")]
    id: u32,
    #[prost(int32, tag = "3")]
    dtype: i32,
    #[prost(uint64, repeated, tag = "4")]
    shape: Vec<u64>,
    #[prost(double, tag = "5")]
    value: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct AttrProto {
    #[prost(string, tag = "1")]
    name: String,
    /// 0 int, 1 float, 2 string, 3 tensor, 4 ints, 5 floats, 6 strings.
    #[prost(uint32, tag = "2")]
    kind: u32,
    #[prost(int64, tag = "3")]
    i: i64,
    #[prost(float, tag = "4")]
    f: f32,
    #[prost(string, tag = "5")]
    s: String,
    #[prost(int64, repeated, tag = "6")]
    ints: Vec<i64>,
    #[prost(float, repeated, tag = "7")]
    floats: Vec<f32>,
    #[prost(string, repeated, tag = "8")]
    strings: Vec<String>,
    #[prost(int32, tag = "9")]
    tensor_dtype: i32,
    #[prost(uint64, repeated, tag = "10")]
    tensor_shape: Vec<u64>,
    #[prost(bytes = "vec", tag = "11")]
    tensor_data: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LaunchProto {
    /// 0 kernel, 1 copy, 2 zero, 3 library GEMM (`src` = A, `dst` = C).
    #[prost(uint32, tag = "1")]
    kind: u32,
    #[prost(uint32, tag = "2")]
    kernel: u32,
    #[prost(uint32, repeated, tag = "3")]
    grid_block: Vec<u32>,
    #[prost(message, repeated, tag = "4")]
    args: Vec<ArgProto>,
    #[prost(uint32, tag = "5")]
    src: u32,
    #[prost(uint64, tag = "6")]
    src_at: u64,
    #[prost(uint32, tag = "7")]
    dst: u32,
    #[prost(uint64, tag = "8")]
    dst_at: u64,
    #[prost(uint64, tag = "9")]
    len: u64,
    /// GEMM: the weight buffer, `[m, k, n]`, and whether it adds into C.
    #[prost(uint32, tag = "10")]
    w: u32,
    #[prost(uint64, repeated, tag = "11")]
    mkn: Vec<u64>,
    #[prost(bool, tag = "12")]
    accumulate: bool,
    /// GEMM: the bias buffer its call adds, and whether it applies a ReLU.
    #[prost(uint32, optional, tag = "13")]
    gemm_bias: Option<u32>,
    #[prost(bool, tag = "14")]
    gemm_relu: bool,
    /// GEMM: the `m × n` buffer its call adds before the bias (beta 1, C ≠ D).
    #[prost(uint32, optional, tag = "15")]
    gemm_residual: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ArgProto {
    /// 0 buffer, 1 i32, 2 f32, 3 param, 4 tensor map.
    #[prost(uint32, tag = "1")]
    kind: u32,
    #[prost(uint32, tag = "2")]
    buf: u32,
    #[prost(uint64, tag = "3")]
    at: u64,
    #[prost(int32, tag = "4")]
    i: i32,
    #[prost(float, tag = "5")]
    f: f32,
    #[prost(uint64, tag = "6")]
    rows: u64,
    #[prost(uint64, tag = "7")]
    cols: u64,
    #[prost(uint32, repeated, tag = "8")]
    tma: Vec<u32>,
}

const ELEMS: [Elem; 7] = [Elem::F32, Elem::I32, Elem::U8, Elem::I64, Elem::F16, Elem::BF16, Elem::F64];

/// Why an artifact could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("not a spartac artifact (no SPARTAC magic at the start)")]
    Magic,
    #[error("artifact format version {found}, this spartac reads version {ARTIFACT_VERSION}: compile the model again")]
    Version { found: u32 },
    #[error("artifact is truncated or has extra bytes ({found} bytes, the header says {expected})")]
    Length { found: usize, expected: usize },
    #[error("artifact is corrupted (checksum mismatch)")]
    Checksum,
    #[error("artifact is inconsistent: {0}")]
    Invalid(String),
}

fn bad(m: impl Into<String>) -> ArtifactError {
    ArtifactError::Invalid(m.into())
}

/// A model as read from an artifact, with the PTX it carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    pub model: ModelProgram,
    pub ptx: Vec<PtxProto>,
}

fn stats_vec(s: &LoweringStats) -> Vec<u64> {
    [
        s.graph_nodes,
        s.planned_ops,
        s.sparse_ops,
        s.fused_epilogues,
        s.fused_nodes,
        s.views,
        s.dense_weight_bytes,
        s.packed_weight_bytes,
        s.library_gemms,
        s.fused_norms,
        s.fused_concats,
        s.fused_movements,
        s.deferred_norms,
    ]
    .iter()
    .map(|&x| x as u64)
    .collect()
}

fn sig_proto(s: &Signature) -> SignatureProto {
    SignatureProto {
        name: s.name.clone(),
        dtype: s.dtype.to_onnx(),
        shape: s.shape.iter().map(|&d| d as u64).collect(),
        buf: s.buf.0,
        bound: s.bound,
    }
}

fn operand_proto(o: Option<&Operand>) -> OperandProto {
    let shape = |s: &[usize]| s.iter().map(|&d| d as u64).collect();
    match o {
        None => OperandProto::default(),
        Some(Operand::Buf { buf, dtype, shape: s }) => {
            OperandProto { kind: 1, id: buf.0, dtype: dtype.to_onnx(), shape: shape(s), value: 0.0 }
        }
        Some(Operand::Temp { id, dtype, shape: s }) => {
            OperandProto { kind: 2, id: *id, dtype: dtype.to_onnx(), shape: shape(s), value: 0.0 }
        }
        Some(Operand::Scalar { dtype, value }) => {
            OperandProto { kind: 3, id: 0, dtype: dtype.to_onnx(), shape: vec![], value: *value }
        }
    }
}

fn attr_proto(name: &str, a: &Attr) -> AttrProto {
    let mut p = AttrProto { name: name.to_string(), ..Default::default() };
    match a {
        Attr::Int(i) => p.i = *i,
        Attr::Float(f) => (p.kind, p.f) = (1, *f),
        Attr::String(s) => (p.kind, p.s) = (2, s.clone()),
        Attr::Tensor(t) => {
            p.kind = 3;
            p.tensor_dtype = t.dtype().to_onnx();
            p.tensor_shape = t.shape().iter().map(|&d| d as u64).collect();
            p.tensor_data = t.data().to_le_bytes();
        }
        Attr::Ints(v) => (p.kind, p.ints) = (4, v.clone()),
        Attr::Floats(v) => (p.kind, p.floats) = (5, v.clone()),
        Attr::Strings(v) => (p.kind, p.strings) = (6, v.clone()),
    }
    p
}

fn activation_code(a: Activation) -> (u32, f32, f32) {
    match a {
        Activation::None => (0, 0.0, 0.0),
        Activation::Relu => (1, 0.0, 0.0),
        Activation::Clip { lo, hi } => (2, lo, hi),
        Activation::Gelu => (3, 0.0, 0.0),
        Activation::GeluErf => (4, 0.0, 0.0),
    }
}

/// Writes a lowered model (and PTX, when given) as artifact bytes.
pub fn encode(model: &ModelProgram, ptx: &[PtxProto]) -> Result<Vec<u8>, ArtifactError> {
    let p = &model.program;
    let buffers = p
        .buffers
        .iter()
        .map(|b| {
            let (storage, data) = match &b.storage {
                Storage::Input => (0, vec![]),
                Storage::Output => (1, vec![]),
                Storage::Constant(d) => (2, d.to_bytes()),
                Storage::Host(d) => (3, d.to_bytes()),
                Storage::Scratch => (4, vec![]),
            };
            let elem = ELEMS.iter().position(|&e| e == b.elem).expect("every elem is listed") as u32;
            BufferProto { name: b.name.clone(), elem, len: b.len as u64, storage, data }
        })
        .collect();
    let mut steps = vec![];
    for s in &p.steps {
        let mut sp = StepProto {
            label: s.label.clone(),
            after: s.after.iter().map(|&a| a as u32).collect(),
            ..Default::default()
        };
        match &s.op {
            Op::Move => sp.op = 0,
            Op::Spmm { a, c, rows: Rows::All(m), weight, packed, bias, epilogue, accumulate, norm } => {
                let (activation, clip_lo, clip_hi) = activation_code(epilogue.activation);
                sp.op = 1;
                sp.spmm = Some(SpmmProto {
                    a: a.0,
                    c: c.0,
                    rows: *m as u64,
                    weight: *weight as u32,
                    packed_buf: packed.iter().map(|p| p.0 .0).collect(),
                    packed_len: packed.iter().map(|p| p.1 as u64).collect(),
                    packed_sum: packed.iter().map(|p| p.2).collect(),
                    bias: bias.map(|b| b.0),
                    epilogue_bias: epilogue.bias,
                    activation,
                    clip_lo,
                    clip_hi,
                    accumulate: *accumulate,
                    norm: norm.as_deref().map(norm_proto),
                });
            }
            Op::Nodes(nodes) => {
                sp.op = 2;
                sp.nodes = nodes
                    .iter()
                    .map(|n| NodeProto {
                        name: n.name.clone(),
                        op_type: n.op_type.clone(),
                        opset: n.opset,
                        attrs: n.attrs.0.iter().map(|(k, v)| attr_proto(k, v)).collect(),
                        inputs: n.inputs.iter().map(|o| operand_proto(o.as_ref())).collect(),
                        outputs: n.outputs.iter().map(|o| operand_proto(Some(o))).collect(),
                    })
                    .collect();
            }
            other => {
                return Err(bad(format!(
                    "step {}: op {:?} is not stored in artifacts",
                    s.label,
                    std::mem::discriminant(other)
                )))
            }
        }
        sp.launches = s.launches.iter().map(launch_proto).collect();
        steps.push(sp);
    }
    let proto = ArtifactProto {
        name: p.name.clone(),
        inputs: model.inputs.iter().map(sig_proto).collect(),
        outputs: model.outputs.iter().map(sig_proto).collect(),
        buffers,
        kernels: p
            .kernels
            .iter()
            .map(|k| KernelProto { name: k.name.clone(), source: k.source.clone(), smem_bytes: k.smem_bytes })
            .collect(),
        params: p.params.iter().map(|q| ParamProto { name: q.name.clone(), default: q.default }).collect(),
        matrices: p
            .matrices
            .iter()
            .map(|m| MatrixProto {
                rows: m.rows as u64,
                cols: m.cols as u64,
                offsets: m.offsets.clone(),
                indices: m.indices.clone(),
                values: m.values.clone(),
            })
            .collect(),
        steps,
        stats: stats_vec(&model.stats),
        ptx: ptx.to_vec(),
    };
    let body = proto.encode_to_vec();
    let mut out = Vec::with_capacity(body.len() + 28);
    out.extend_from_slice(ARTIFACT_MAGIC);
    out.extend_from_slice(&ARTIFACT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&checksum(&body).to_le_bytes());
    Ok(out)
}

fn launch_proto(l: &Launch) -> LaunchProto {
    match l {
        Launch::Kernel { kernel, grid, block, args } => LaunchProto {
            kind: 0,
            kernel: kernel.0,
            grid_block: vec![grid.0, grid.1, grid.2, block.0, block.1, block.2],
            args: args
                .iter()
                .map(|a| match a {
                    Arg::Buf(b, at) => ArgProto { kind: 0, buf: b.0, at: *at as u64, ..Default::default() },
                    Arg::I32(i) => ArgProto { kind: 1, i: *i, ..Default::default() },
                    Arg::F32(f) => ArgProto { kind: 2, f: *f, ..Default::default() },
                    Arg::Param(q) => ArgProto { kind: 3, buf: q.0, ..Default::default() },
                    Arg::TensorMap { buf, rows, cols, tma } => ArgProto {
                        kind: 4,
                        buf: buf.0,
                        rows: *rows as u64,
                        cols: *cols as u64,
                        tma: vec![tma.rows, tma.cols, tma.swizzle_bytes],
                        ..Default::default()
                    },
                })
                .collect(),
            ..Default::default()
        },
        Launch::Copy { src, src_at, dst, dst_at, len } => LaunchProto {
            kind: 1,
            src: src.0,
            src_at: *src_at as u64,
            dst: dst.0,
            dst_at: *dst_at as u64,
            len: *len as u64,
            ..Default::default()
        },
        Launch::Zero { dst, at, len } => {
            LaunchProto { kind: 2, dst: dst.0, dst_at: *at as u64, len: *len as u64, ..Default::default() }
        }
        Launch::Gemm { a, w, c, m, k, n, accumulate, bias, relu, residual } => LaunchProto {
            kind: 3,
            src: a.0,
            dst: c.0,
            w: w.0,
            mkn: vec![*m as u64, *k as u64, *n as u64],
            accumulate: *accumulate,
            gemm_bias: bias.map(|b| b.0),
            gemm_relu: *relu,
            gemm_residual: residual.map(|r| r.0),
            ..Default::default()
        },
    }
}

fn usize_of(x: u64, what: &str) -> Result<usize, ArtifactError> {
    usize::try_from(x).map_err(|_| bad(format!("{what} {x} does not fit this machine")))
}

fn dtype_of(code: i32) -> Result<DType, ArtifactError> {
    DType::from_onnx(code).ok_or_else(|| bad(format!("unknown element type code {code}")))
}

fn data_of(elem: Elem, bytes: &[u8], len: usize, name: &str) -> Result<Data, ArtifactError> {
    if bytes.len() != len * elem.bytes() {
        return Err(bad(format!("buffer {name}: {} bytes for {len} {}", bytes.len(), elem.name())));
    }
    let words4 = || bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    let words2 = || bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<u16>>();
    Ok(match elem {
        Elem::F32 => Data::F32(words4().map(f32::from_le_bytes).collect()),
        Elem::I32 => Data::I32(words4().map(i32::from_le_bytes).collect()),
        Elem::U8 => Data::U8(bytes.to_vec()),
        Elem::I64 => Data::I64(bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8"))).collect()),
        Elem::F16 => Data::F16(words2()),
        Elem::BF16 => Data::BF16(words2()),
        Elem::F64 => return Err(bad(format!("buffer {name}: f64 buffers are scratch, never stored"))),
    })
}

/// Bytes of an artifact's header: the magic, the version and the body length.
pub const ARTIFACT_HEADER_BYTES: usize = 20;

/// Checks an artifact's header (its first [`ARTIFACT_HEADER_BYTES`] bytes, or fewer when the
/// file is shorter) against `file_len`, the length of the whole file: the magic, the version,
/// and that the file is exactly header, body and checksum long. A reader calls it before it
/// reads the body, so a file with a multi-GiB tail is refused without being read.
pub fn check_header(head: &[u8], file_len: u64) -> Result<(), ArtifactError> {
    let found = usize::try_from(file_len).unwrap_or(usize::MAX);
    if head.len() < 8 || &head[..8] != ARTIFACT_MAGIC {
        return Err(ArtifactError::Magic);
    }
    if head.len() < ARTIFACT_HEADER_BYTES {
        return Err(ArtifactError::Length { found, expected: ARTIFACT_HEADER_BYTES + 8 });
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4"));
    if version != ARTIFACT_VERSION {
        return Err(ArtifactError::Version { found: version });
    }
    let body_len = u64::from_le_bytes(head[12..20].try_into().expect("8"));
    let expected = body_len.saturating_add(ARTIFACT_HEADER_BYTES as u64 + 8);
    if file_len != expected {
        return Err(ArtifactError::Length { found, expected: usize::try_from(expected).unwrap_or(usize::MAX) });
    }
    Ok(())
}

/// Reads artifact bytes back (see the module docs for what is checked).
pub fn decode(bytes: &[u8]) -> Result<Artifact, ArtifactError> {
    check_header(&bytes[..bytes.len().min(ARTIFACT_HEADER_BYTES)], bytes.len() as u64)?;
    let body = &bytes[ARTIFACT_HEADER_BYTES..bytes.len() - 8];
    let sum = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().expect("8"));
    if checksum(body) != sum {
        return Err(ArtifactError::Checksum);
    }
    let proto = ArtifactProto::decode(body).map_err(|e| bad(format!("body: {e}")))?;
    let nb = proto.buffers.len();
    let buf_id = |i: u32| -> Result<BufferId, ArtifactError> {
        if (i as usize) < nb {
            Ok(BufferId(i))
        } else {
            Err(bad(format!("buffer {i} of {nb}")))
        }
    };
    let mut buffers = vec![];
    for b in &proto.buffers {
        let elem =
            *ELEMS.get(b.elem as usize).ok_or_else(|| bad(format!("buffer {}: element code {}", b.name, b.elem)))?;
        let len = usize_of(b.len, "buffer length")?;
        let storage = match b.storage {
            0 => Storage::Input,
            1 => Storage::Output,
            2 => Storage::Constant(data_of(elem, &b.data, len, &b.name)?),
            3 => Storage::Host(data_of(elem, &b.data, len, &b.name)?),
            4 => Storage::Scratch,
            s => return Err(bad(format!("buffer {}: storage code {s}", b.name))),
        };
        buffers.push(Buffer { name: b.name.clone(), elem, len, storage });
    }
    let kernels: Vec<KernelCode> = proto
        .kernels
        .iter()
        .map(|k| KernelCode { name: k.name.clone(), source: k.source.clone(), smem_bytes: k.smem_bytes })
        .collect();
    let params: Vec<Param> = proto.params.iter().map(|q| Param { name: q.name.clone(), default: q.default }).collect();
    let mut matrices = vec![];
    for m in &proto.matrices {
        let (rows, cols) = (usize_of(m.rows, "rows")?, usize_of(m.cols, "cols")?);
        let ok = m.offsets.len() == rows + 1
            && m.offsets.windows(2).all(|w| w[0] <= w[1])
            && m.offsets.last().map(|&l| l as usize) == Some(m.indices.len())
            && m.indices.len() == m.values.len()
            && m.indices.iter().all(|&c| (c as usize) < cols);
        if !ok {
            return Err(bad("a weight matrix is not a valid CSR"));
        }
        matrices.push(Csr {
            rows,
            cols,
            offsets: m.offsets.clone(),
            indices: m.indices.clone(),
            values: m.values.clone(),
        });
    }
    let operand = |o: &OperandProto| -> Result<Option<Operand>, ArtifactError> {
        let shape = o.shape.iter().map(|&d| usize_of(d, "dim")).collect::<Result<Vec<_>, _>>();
        Ok(match o.kind {
            0 => None,
            1 => Some(Operand::Buf { buf: buf_id(o.id)?, dtype: dtype_of(o.dtype)?, shape: shape? }),
            2 => Some(Operand::Temp { id: o.id, dtype: dtype_of(o.dtype)?, shape: shape? }),
            3 => Some(Operand::Scalar { dtype: dtype_of(o.dtype)?, value: o.value }),
            k => return Err(bad(format!("operand kind {k}"))),
        })
    };
    let mut steps = vec![];
    for (i, s) in proto.steps.iter().enumerate() {
        let op = match s.op {
            0 => Op::Move,
            1 => {
                let p = s.spmm.as_ref().ok_or_else(|| bad(format!("step {i}: spmm without its fields")))?;
                let weight = p.weight as usize;
                if weight >= matrices.len() {
                    return Err(bad(format!("step {i}: matrix {weight} of {}", matrices.len())));
                }
                if p.packed_buf.len() != p.packed_len.len() || p.packed_buf.len() != p.packed_sum.len() {
                    return Err(bad(format!("step {i}: packed lists of different lengths")));
                }
                let mut packed = vec![];
                for j in 0..p.packed_buf.len() {
                    packed.push((buf_id(p.packed_buf[j])?, usize_of(p.packed_len[j], "length")?, p.packed_sum[j]));
                }
                let activation = match p.activation {
                    0 => Activation::None,
                    1 => Activation::Relu,
                    2 => Activation::Clip { lo: p.clip_lo, hi: p.clip_hi },
                    3 => Activation::Gelu,
                    4 => Activation::GeluErf,
                    a => return Err(bad(format!("step {i}: activation code {a}"))),
                };
                Op::Spmm {
                    a: buf_id(p.a)?,
                    c: buf_id(p.c)?,
                    rows: Rows::All(usize_of(p.rows, "rows")?),
                    weight,
                    packed,
                    bias: p.bias.map(buf_id).transpose()?,
                    epilogue: Epilogue { bias: p.epilogue_bias, activation },
                    accumulate: p.accumulate,
                    norm: match &p.norm {
                        Some(nm) => Some(Box::new(norm_of(nm, buf_id)?)),
                        None => None,
                    },
                }
            }
            2 => {
                let mut nodes = vec![];
                for n in &s.nodes {
                    let mut attrs = Attrs::new();
                    for a in &n.attrs {
                        attrs.insert(a.name.clone(), attr_of(a)?);
                    }
                    let inputs = n.inputs.iter().map(operand).collect::<Result<Vec<_>, _>>()?;
                    let outputs = n
                        .outputs
                        .iter()
                        .map(|o| operand(o)?.ok_or_else(|| bad(format!("node {}: absent output", n.name))))
                        .collect::<Result<Vec<_>, _>>()?;
                    nodes.push(NodeOp {
                        name: n.name.clone(),
                        op_type: n.op_type.clone(),
                        opset: n.opset,
                        attrs,
                        inputs,
                        outputs,
                    });
                }
                Op::Nodes(nodes)
            }
            o => return Err(bad(format!("step {i}: op code {o}"))),
        };
        let mut launches = vec![];
        for l in &s.launches {
            launches.push(match l.kind {
                0 => {
                    if l.kernel as usize >= kernels.len() || l.grid_block.len() != 6 {
                        return Err(bad(format!("step {i}: kernel {} or its geometry out of range", l.kernel)));
                    }
                    let g = &l.grid_block;
                    let mut args = vec![];
                    for a in &l.args {
                        args.push(match a.kind {
                            0 => Arg::Buf(buf_id(a.buf)?, usize_of(a.at, "offset")?),
                            1 => Arg::I32(a.i),
                            2 => Arg::F32(a.f),
                            3 if (a.buf as usize) < params.len() => Arg::Param(ParamId(a.buf)),
                            4 if a.tma.len() == 3 => Arg::TensorMap {
                                buf: buf_id(a.buf)?,
                                rows: usize_of(a.rows, "rows")?,
                                cols: usize_of(a.cols, "cols")?,
                                tma: TmaBox { rows: a.tma[0], cols: a.tma[1], swizzle_bytes: a.tma[2] },
                            },
                            k => return Err(bad(format!("step {i}: argument kind {k}"))),
                        });
                    }
                    Launch::Kernel {
                        kernel: KernelId(l.kernel),
                        grid: (g[0], g[1], g[2]),
                        block: (g[3], g[4], g[5]),
                        args,
                    }
                }
                1 => Launch::Copy {
                    src: buf_id(l.src)?,
                    src_at: usize_of(l.src_at, "offset")?,
                    dst: buf_id(l.dst)?,
                    dst_at: usize_of(l.dst_at, "offset")?,
                    len: usize_of(l.len, "length")?,
                },
                2 => Launch::Zero {
                    dst: buf_id(l.dst)?,
                    at: usize_of(l.dst_at, "offset")?,
                    len: usize_of(l.len, "length")?,
                },
                3 if l.mkn.len() == 3 => Launch::Gemm {
                    a: buf_id(l.src)?,
                    w: buf_id(l.w)?,
                    c: buf_id(l.dst)?,
                    m: usize_of(l.mkn[0], "GEMM rows")?,
                    k: usize_of(l.mkn[1], "GEMM depth")?,
                    n: usize_of(l.mkn[2], "GEMM columns")?,
                    accumulate: l.accumulate,
                    bias: l.gemm_bias.map(buf_id).transpose()?,
                    relu: l.gemm_relu,
                    residual: l.gemm_residual.map(buf_id).transpose()?,
                },
                k => return Err(bad(format!("step {i}: launch kind {k}"))),
            });
        }
        let after: Vec<usize> = s.after.iter().map(|&a| a as usize).collect();
        if after.iter().any(|&a| a >= i) {
            return Err(bad(format!("step {i} waits for a later step")));
        }
        steps.push(Step { label: s.label.clone(), op, launches, after });
    }
    let program = Program { name: proto.name.clone(), buffers, kernels, params, matrices, steps };
    program.verify().map_err(|e| bad(e.to_string()))?;
    let sig = |s: &SignatureProto| -> Result<Signature, ArtifactError> {
        Ok(Signature {
            name: s.name.clone(),
            dtype: dtype_of(s.dtype)?,
            shape: s.shape.iter().map(|&d| usize_of(d, "dim")).collect::<Result<_, _>>()?,
            buf: buf_id(s.buf)?,
            bound: s.bound,
        })
    };
    let inputs = proto.inputs.iter().map(sig).collect::<Result<Vec<_>, _>>()?;
    let outputs = proto.outputs.iter().map(sig).collect::<Result<Vec<_>, _>>()?;
    for s in inputs.iter().chain(&outputs) {
        let b = program.buffer(s.buf);
        let n: usize = s.shape.iter().product();
        if b.len != n || Elem::of_dtype(s.dtype) != Some(b.elem) {
            return Err(bad(format!(
                "signature {}: buffer {} does not hold {}{:?}",
                s.name,
                b.name,
                s.dtype.name(),
                s.shape
            )));
        }
    }
    let st = |i: usize| proto.stats.get(i).copied().unwrap_or(0) as usize;
    let stats = LoweringStats {
        graph_nodes: st(0),
        planned_ops: st(1),
        sparse_ops: st(2),
        fused_epilogues: st(3),
        fused_nodes: st(4),
        views: st(5),
        dense_weight_bytes: st(6),
        packed_weight_bytes: st(7),
        library_gemms: st(8),
        fused_norms: st(9),
        fused_concats: st(10),
        fused_movements: st(11),
        deferred_norms: st(12),
    };
    for p in &proto.ptx {
        if p.kernel as usize >= program.kernels.len() {
            return Err(bad(format!("PTX for kernel {} of {}", p.kernel, program.kernels.len())));
        }
    }
    Ok(Artifact { model: ModelProgram { program, inputs, outputs, stats }, ptx: proto.ptx })
}

fn attr_of(a: &AttrProto) -> Result<Attr, ArtifactError> {
    Ok(match a.kind {
        0 => Attr::Int(a.i),
        1 => Attr::Float(a.f),
        2 => Attr::String(a.s.clone()),
        3 => {
            let dtype = dtype_of(a.tensor_dtype)?;
            let shape = a.tensor_shape.iter().map(|&d| usize_of(d, "dim")).collect::<Result<Vec<_>, _>>()?;
            let data = crate::ir::Data::from_le_bytes(dtype, &a.tensor_data)
                .ok_or_else(|| bad(format!("attribute {}: tensor bytes", a.name)))?;
            Attr::Tensor(Tensor::new(shape, data).ok_or_else(|| bad(format!("attribute {}: tensor shape", a.name)))?)
        }
        4 => Attr::Ints(a.ints.clone()),
        5 => Attr::Floats(a.floats.clone()),
        6 => Attr::Strings(a.strings.clone()),
        k => return Err(bad(format!("attribute {}: kind {k}", a.name))),
    })
}
