//! The program: the GPU-free description of compiled work that the runtime executes.
//!
//! The compiler lowers a model (or an HPEC network, [`hpec`]) to a [`Program`]: typed
//! [`Buffer`]s (inputs, outputs, constants packed the way their kernels read them, host-resident
//! constants that stream in, scratch), the kernel sources ([`KernelCode`]) and an ordered list
//! of [`Step`]s. Every step has an [`Op`]: what it computes, in terms of buffers, which the
//! runtime's CPU executor simulates on the same buffers in the same order, and, for the GPU,
//! the [`Launch`]es (kernels of [`KernelCode`], vendor-library GEMMs, memcpys, memsets) that
//! realize it. Steps name
//! the steps they wait for (`after`); [`ProgramBuilder`] derives those edges from what each op
//! reads and writes, so the runtime can turn the list into a CUDA graph whose edges are exactly
//! the data dependencies (copies overlap kernels where nothing orders them).
//!
//! Per-run parameters ([`Param`], e.g. the first image of a batch) are named slots whose values
//! the runtime sets before each launch of the graph (graph-exec parameter updates, no rebuild).
//!
//! Invariants ([`Program::verify`]): every buffer and kernel reference is in range, every
//! access stays inside its buffer, and any two steps that touch one buffer, one of them
//! writing, are ordered by a path of `after` edges. The text form ([`Program::to_text`]) is
//! deterministic and is what the snapshot tests hold.

pub mod artifact;
pub mod hpec;
pub mod hpec_order;
pub mod model;
mod text;
mod verify;

use crate::codegen::{Epilogue, TmaBox};
use crate::ir::{Attrs, DType};
pub use crate::sparse::Csr;

/// Index of a buffer in [`Program::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferId(pub u32);

/// Index of a kernel in [`Program::kernels`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelId(pub u32);

/// Index of a per-run parameter in [`Program::params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParamId(pub u32);

/// Element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    F32,
    I32,
    U8,
    I64,
    F16,
    BF16,
    /// Scratch only (no constant holds it): the activations of an f64 HPEC program.
    F64,
}

impl Elem {
    pub fn bytes(self) -> usize {
        match self {
            Elem::F32 | Elem::I32 => 4,
            Elem::U8 => 1,
            Elem::I64 | Elem::F64 => 8,
            Elem::F16 | Elem::BF16 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::I32 => "i32",
            Elem::U8 => "u8",
            Elem::I64 => "i64",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::F64 => "f64",
        }
    }

    /// `x` rounded to the nearest value of this float element (ties to even; F64 and the integer
    /// elements keep it): what a kernel that stores `x` in this type writes, widened back.
    pub fn round(self, x: f64) -> f64 {
        match self {
            Elem::F16 => half::f16::from_f64(x).to_f64(),
            Elem::BF16 => half::bf16::from_f64(x).to_f64(),
            Elem::F32 => x as f32 as f64,
            Elem::F64 | Elem::I32 | Elem::I64 | Elem::U8 => x,
        }
    }

    /// The buffer element that holds a tensor of `dtype` (booleans as bytes); `None` for
    /// element types no kernel reads.
    pub fn of_dtype(dtype: DType) -> Option<Elem> {
        Some(match dtype {
            DType::F32 => Elem::F32,
            DType::I32 => Elem::I32,
            DType::I64 => Elem::I64,
            DType::Bool | DType::U8 => Elem::U8,
            DType::F16 => Elem::F16,
            DType::BF16 => Elem::BF16,
            _ => return None,
        })
    }
}

/// Contents of a constant buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U8(Vec<u8>),
    I64(Vec<i64>),
    /// IEEE half floats, as their bits.
    F16(Vec<u16>),
    /// bfloat16, as their bits.
    BF16(Vec<u16>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::F16(v) | Data::BF16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn elem(&self) -> Elem {
        match self {
            Data::F32(_) => Elem::F32,
            Data::I32(_) => Elem::I32,
            Data::U8(_) => Elem::U8,
            Data::I64(_) => Elem::I64,
            Data::F16(_) => Elem::F16,
            Data::BF16(_) => Elem::BF16,
        }
    }
    /// No elements, of the same element type.
    fn emptied(&self) -> Data {
        match self {
            Data::F32(_) => Data::F32(vec![]),
            Data::I32(_) => Data::I32(vec![]),
            Data::U8(_) => Data::U8(vec![]),
            Data::I64(_) => Data::I64(vec![]),
            Data::F16(_) => Data::F16(vec![]),
            Data::BF16(_) => Data::BF16(vec![]),
        }
    }
    /// The contents as little-endian bytes (what a device buffer holds).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::U8(v) => v.clone(),
            Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F16(v) | Data::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// The buffer contents of a tensor's data (booleans as bytes 0/1); `None` for element types
    /// with no [`Elem`].
    pub fn of_tensor(data: &crate::ir::Data) -> Option<Data> {
        use crate::ir::Data as T;
        Some(match data {
            T::F32(v) => Data::F32(v.clone()),
            T::I32(v) => Data::I32(v.clone()),
            T::I64(v) => Data::I64(v.clone()),
            T::U8(v) => Data::U8(v.clone()),
            T::Bool(v) => Data::U8(v.iter().map(|&b| b as u8).collect()),
            T::F16(v) => Data::F16(v.iter().map(|x| x.to_bits()).collect()),
            T::BF16(v) => Data::BF16(v.iter().map(|x| x.to_bits()).collect()),
            _ => return None,
        })
    }
    /// FNV-1a 64 of the bytes: how a copy's destination is checked against its source.
    pub fn checksum(&self) -> u64 {
        checksum(&self.to_bytes())
    }
}

pub use crate::hash::{checksum, Fnv64};

/// Where a buffer lives and what it starts as.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    /// Device memory the host fills before a run (`name` is the input's name).
    Input,
    /// Device memory the host reads after a run.
    Output,
    /// Device memory, uploaded once when the program is loaded.
    Constant(Data),
    /// Pinned host memory: constants too large to keep on the device, copied in by steps.
    Host(Data),
    /// Device memory with no defined contents until a step writes it.
    Scratch,
}

/// One buffer: `len` elements of `elem`.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub elem: Elem,
    pub len: usize,
    pub storage: Storage,
}

impl Buffer {
    pub fn bytes(&self) -> usize {
        self.len * self.elem.bytes()
    }
    pub fn on_device(&self) -> bool {
        !matches!(self.storage, Storage::Host(_))
    }
}

/// A kernel source and its entry point; the runtime compiles it (NVRTC) and caches it by the
/// hash of the source and the arch.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCode {
    pub name: String,
    pub source: String,
    /// Dynamic shared memory the kernel is launched with (the runtime raises the limit).
    pub smem_bytes: u32,
}

/// A per-run parameter: an `i32` the host sets before each launch of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub default: i32,
}

/// A kernel argument.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// The device address of element `offset` of a buffer.
    Buf(BufferId, usize),
    I32(i32),
    F32(f32),
    /// A per-run parameter.
    Param(ParamId),
    /// A TMA tensor map of a row-major `rows × cols` buffer of f32 (the runtime encodes it).
    TensorMap {
        buf: BufferId,
        rows: usize,
        cols: usize,
        tma: TmaBox,
    },
}

/// One GPU action of a step.
#[derive(Clone, Debug, PartialEq)]
pub enum Launch {
    Kernel {
        kernel: KernelId,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: Vec<Arg>,
    },
    /// `len` elements from `src[src_at..]` to `dst[dst_at..]` (same element type).
    Copy {
        src: BufferId,
        src_at: usize,
        dst: BufferId,
        dst_at: usize,
        len: usize,
    },
    /// Zero `len` elements of `dst` from `at`.
    Zero {
        dst: BufferId,
        at: usize,
        len: usize,
    },
    /// `c = a·w` (`+ c` when `accumulate`) on the vendor library (cuBLAS): `a` row-major
    /// `m × k`, `w` row-major `k × n`, `c` row-major `m × n`, all three of one float element
    /// type, products summed in fp32. The dense 16-bit sub-operators of a planned matmul run
    /// this way (`codegen::library_takes`). With `bias` (`n` elements of the same type) and
    /// `relu` the call applies them to the fp32 sum before rounding (cuBLASLt epilogues,
    /// `codegen::library_gemm_fused`): `c = relu(a·w + bias)`; other activations follow as a
    /// kernel. With `residual` (`m × n`, another buffer than `c`) the call adds it before the
    /// bias and ReLU: `c = relu(a·w + residual + bias)` (a ResNet block's sum).
    Gemm {
        a: BufferId,
        w: BufferId,
        c: BufferId,
        m: usize,
        k: usize,
        n: usize,
        accumulate: bool,
        bias: Option<BufferId>,
        relu: bool,
        residual: Option<BufferId>,
    },
}

/// Where a step finds the number of live rows of its operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Rows {
    /// All of them (a compile-time constant).
    All(usize),
    /// At most `max`; the count is element `at` of an i32 buffer written by an earlier step.
    Live { max: usize, count: BufferId, at: usize },
}

impl Rows {
    pub fn max(&self) -> usize {
        match self {
            Rows::All(m) => *m,
            Rows::Live { max, .. } => *max,
        }
    }
}

/// What a step computes, on buffers. The CPU executor runs exactly this; the step's
/// [`Launch`]es do it on the GPU.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `C[r, :] = epilogue(A[r, :] · W (+ C[r, :]))` for the live rows `r` of `rows`, `A` row-major
    /// `rows × k`, `W` = [`Program::matrices`]`[weight]` (`k × n`); the packed forms the kernels
    /// read are `packed` (buffer, elements used, checksum of those: checked against what the compiler packed, so a weight read
    /// before its copy landed is caught), bias `n` elements.
    Spmm {
        a: BufferId,
        c: BufferId,
        rows: Rows,
        weight: usize,
        packed: Vec<(BufferId, usize, u64)>,
        bias: Option<BufferId>,
        epilogue: Epilogue,
        accumulate: bool,
        /// LayerNorm work around the epilogue ([`SpmmNorm`]), one part's kernel doing it all.
        norm: Option<Box<SpmmNorm>>,
    },
    /// Several square `n × n` layers in one step (a batched network's converged tail): layer `l`
    /// multiplies the live rows of one buffer into the other (`a` into `c` for even `l`, `c` into
    /// `a` for odd), adds `bias` and applies `epilogue`; the result is in `c` when `layers` is odd,
    /// else in `a`. The weights are the ELL tables the kernel reads ([`rows::TailTables`]): `idx`
    /// (k per slot, -1 in pads) and `w`, each `layers × slots × n`.
    ///
    /// [`rows::TailTables`]: crate::codegen::rows::TailTables
    SpmmChain {
        a: BufferId,
        c: BufferId,
        rows: Rows,
        layers: usize,
        n: usize,
        slots: usize,
        idx: BufferId,
        w: BufferId,
        bias: BufferId,
        epilogue: Epilogue,
    },
    /// Rows `first .. first + count` (clamped to the `rows` of the CSR `images`: offsets, indices,
    /// values) scattered into dense rows `0..` of `dst` (`cols` wide; the rest of each row zero);
    /// `ids[r] = first + r`; `live[at] = ` the number of rows written; `live[at + 1..]` zeroed
    /// (`clear` counters: the compactions' counts start at zero); with `alias`, `alias[first + r]`
    /// zeroed (no image of the batch is merged yet, see [`Merge`]).
    LoadRows {
        offsets: BufferId,
        indices: BufferId,
        values: BufferId,
        images: usize,
        first: ParamId,
        count: usize,
        cols: usize,
        dst: BufferId,
        ids: BufferId,
        live: BufferId,
        at: usize,
        clear: usize,
        alias: Option<BufferId>,
    },
    /// The rows `r < live[at]` of `src` (`cols` wide) that hold any nonzero, with their `ids`,
    /// packed into `dst`/`dst_ids`; their count into `live[at + 1]` (which must start at zero).
    /// The order of the packed rows is unspecified (atomic slots on the GPU); each row's values
    /// do not depend on it. With `merge`, a row bitwise equal to another packed row may be
    /// dropped too, its image aliased to that row's image ([`Merge`]).
    CompactRows {
        src: BufferId,
        src_ids: BufferId,
        dst: BufferId,
        dst_ids: BufferId,
        cols: usize,
        live: BufferId,
        at: usize,
        merge: Option<Merge>,
    },
    /// `flags[i] = flags[root(i)]` for the images `i` of the batch (`first .. first + count`,
    /// clamped to `images`) that a compaction merged (`alias[i] != 0`); `root` follows
    /// `alias` (image `j` stands for image `alias[j] - 1`) to an image that was never merged,
    /// whose flag [`Op::MarkRows`] already set.
    ResolveAliases { alias: BufferId, flags: BufferId, first: ParamId, count: usize, images: usize },
    /// The rows `r < live[at]` of `buf` (`cols` wide) that hold any nonzero kept in place: their
    /// count into `live[at + 1]` (which must start at zero), the kept rows below it staying where
    /// they are and those above it moving, with their `ids`, into the places of the dropped rows
    /// below it (pairing unspecified). `scratch` holds per row a flag, the dropped places and the
    /// moved rows, and two counters (`3 · rows + 2` words, the counters zeroed first).
    DropRows { buf: BufferId, ids: BufferId, cols: usize, live: BufferId, at: usize, scratch: BufferId },
    /// `dst[r][p] = src[r][columns[p]]` for the rows `r < live[at]` of `src` (`cols` wide,
    /// 32-bit elements): the activations moved from the order one layer writes its neurons in
    /// to the order the next reads them in (HPEC, [`super::hpec_order`]). Rows keep their
    /// index, so their ids stay where they are.
    PermuteColumns { src: BufferId, dst: BufferId, cols: usize, columns: BufferId, live: BufferId, at: usize },
    /// `flags[ids[r]] = 1` for the rows `r < live[at]` of `src` that hold any nonzero.
    MarkRows { src: BufferId, ids: BufferId, cols: usize, live: BufferId, at: usize, flags: BufferId },
    /// Graph nodes run in order: what one generated kernel (or a fused group of elementwise
    /// nodes) computes. The CPU executor runs each node's reference semantics (`ops` eval);
    /// values inside a fused group are [`Operand::Temp`]s that never reach memory.
    Nodes(Vec<NodeOp>),
    /// A plain copy or fill ([`Launch::Copy`] / [`Launch::Zero`]): the op is its launch.
    Move,
}

/// The LayerNorm work of a planned product's step, so that a LayerNorm between two products
/// is no step of its own (`model/norm_defer.rs`). Row statistics pass between steps as each
/// row's sum and sum of squares (f64 pairs); a reader takes each row's mean and
/// 1/sqrt(var + eps) from them. In order, on the rows of the product:
/// 1. `input`: `a` holds a LayerNorm's input `s` (not its output), `W` (the step's weight) is
///    diag(γ)·W₀ and the bias βᵀW₀ + bias₀: the product is `rstd·(s·W − mean·colsum)` with
///    `s`'s statistics and `colsum` (f32, the column sums of `W`), then the epilogue (bias,
///    activation): the normalized rows times W₀ plus bias₀;
/// 2. `residual`: the epilogue's value rounded to C's type plus the residual (a buffer of C's
///    type, or, with `affine`, its rows normalized as read: `(r − mean)·rstd·γ + β`), rounded;
/// 3. `stats`: the sums of C's rows as stored (on the GPU, added into a range an earlier step
///    zeroed).
#[derive(Clone, Debug, PartialEq)]
pub struct SpmmNorm {
    pub input: Option<NormInput>,
    pub residual: Option<NormResidual>,
    pub stats: Option<NormStats>,
}

/// Row sums (see [`SpmmNorm`]): the buffer, the element the rows' pairs start at, and the
/// epsilon of the LayerNorm they serve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowStats {
    pub sums: BufferId,
    pub at: usize,
    pub eps: f32,
}

/// [`SpmmNorm::input`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormInput {
    pub stats: RowStats,
    pub colsum: BufferId,
}

/// [`SpmmNorm::residual`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormResidual {
    pub buf: BufferId,
    pub affine: Option<RowAffine>,
}

/// A LayerNorm applied as a value is read: its rows' statistics, γ and β (f32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowAffine {
    pub stats: RowStats,
    pub gamma: BufferId,
    pub beta: BufferId,
}

/// [`SpmmNorm::stats`]: where C's rows' sums go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormStats {
    pub sums: BufferId,
    pub at: usize,
}

/// Identical rows merged by a compaction: once the activations of a batched network converge,
/// many live rows hold the same values, and every layer computes each of them again. Rows are
/// bitwise equal or not merged, and equal rows give equal rows through every later layer, so
/// one of them carries the others' category (exact, no tolerance).
///
/// On the GPU: the step zeroes `table`, one kernel hashes every nonzero row into it (open
/// addressing; the slot keeps the smallest row index with that hash) and writes the row's slot
/// to `row_slot`, a second packs each row whose slot's representative is itself, or whose
/// representative differs from it (a hash collision: kept, never merged wrongly), and aliases
/// the rest: `alias[id] = 1 + ` the representative's id.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Merge {
    /// `slots` 64-bit keys (as pairs of i32) then `slots` representatives, i32.
    pub table: BufferId,
    /// A power of two, at least twice the rows.
    pub slots: usize,
    /// Per source row: its table slot, -1 for an all-zero row.
    pub row_slot: BufferId,
    /// Per image: 0, or 1 + the id of the image whose row stands for its own.
    pub alias: BufferId,
}

/// One graph node inside an [`Op::Nodes`] step.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeOp {
    pub name: String,
    pub op_type: String,
    pub opset: i64,
    pub attrs: Attrs,
    /// Inputs by position; `None` for an omitted optional input.
    pub inputs: Vec<Option<Operand>>,
    pub outputs: Vec<Operand>,
}

/// A tensor a node reads or writes: a whole buffer seen with a shape (row-major), a
/// temporary of a fused group, or a scalar constant folded into the code.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Buf { buf: BufferId, dtype: DType, shape: Vec<usize> },
    Temp { id: u32, dtype: DType, shape: Vec<usize> },
    Scalar { dtype: DType, value: f64 },
}

impl Operand {
    pub fn dtype(&self) -> DType {
        match self {
            Operand::Buf { dtype, .. } | Operand::Temp { dtype, .. } | Operand::Scalar { dtype, .. } => *dtype,
        }
    }
    pub fn shape(&self) -> &[usize] {
        match self {
            Operand::Buf { shape, .. } | Operand::Temp { shape, .. } => shape,
            Operand::Scalar { .. } => &[],
        }
    }
    pub fn buffer(&self) -> Option<BufferId> {
        match self {
            Operand::Buf { buf, .. } => Some(*buf),
            _ => None,
        }
    }
}

/// One step: its op, the GPU launches that realize it, and the steps it waits for.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub label: String,
    pub op: Op,
    pub launches: Vec<Launch>,
    /// Indices of earlier steps this one waits for (sorted, no duplicates).
    pub after: Vec<usize>,
}

/// A compiled program. See the module docs.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub name: String,
    pub buffers: Vec<Buffer>,
    pub kernels: Vec<KernelCode>,
    pub params: Vec<Param>,
    pub matrices: Vec<Csr>,
    pub steps: Vec<Step>,
}

/// A buffer range one step touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub buf: BufferId,
    pub at: usize,
    pub len: usize,
    pub write: bool,
}

impl Access {
    fn overlaps(&self, other: &Access) -> bool {
        self.buf == other.buf && self.at < other.at + other.len && other.at < self.at + self.len
    }
}

/// Errors of program construction and checking.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("program {program}: {message}")]
    Invalid { program: String, message: String },
}

impl Program {
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }

    /// A copy without the data: constant and host buffers keep their name, type and length
    /// but not their contents, and the CPU executor's matrices are gone. What an executor keeps
    /// once it has uploaded the constants (a 16384x1920 HPEC network's packed tables are ~45 GB,
    /// which host memory should not hold twice). It fails [`Program::verify`] and cannot run on
    /// the CPU.
    pub fn skeleton(&self) -> Program {
        let buffers = self
            .buffers
            .iter()
            .map(|b| Buffer {
                name: b.name.clone(),
                elem: b.elem,
                len: b.len,
                storage: match &b.storage {
                    Storage::Constant(d) => Storage::Constant(d.emptied()),
                    Storage::Host(d) => Storage::Host(d.emptied()),
                    other => other.clone(),
                },
            })
            .collect();
        Program {
            name: self.name.clone(),
            buffers,
            kernels: self.kernels.clone(),
            params: self.params.clone(),
            matrices: vec![],
            steps: self.steps.clone(),
        }
    }

    /// Bytes of device memory the buffers take (inputs, outputs, constants, scratch).
    pub fn device_bytes(&self) -> usize {
        self.buffers.iter().filter(|b| b.on_device()).map(|b| b.bytes()).sum()
    }

    /// Bytes of pinned host memory (streamed constants).
    pub fn host_bytes(&self) -> usize {
        self.buffers.iter().filter(|b| !b.on_device()).map(|b| b.bytes()).sum()
    }

    /// What step `i` reads and writes.
    pub fn accesses(&self, i: usize) -> Vec<Access> {
        let step = &self.steps[i];
        let mut out = vec![];
        let whole = |buf: BufferId, write: bool| Access { buf, at: 0, len: self.buffer(buf).len, write };
        let rows_of = |r: &Rows| match r {
            Rows::All(_) => None,
            Rows::Live { count, at, .. } => Some(Access { buf: *count, at: *at, len: 1, write: false }),
        };
        match &step.op {
            Op::Spmm { a, c, rows, weight, packed, bias, accumulate, norm, .. } => {
                let m = self.matrices[*weight].rows;
                let n = self.matrices[*weight].cols;
                let rmax = rows.max();
                if let Some(nm) = norm {
                    let read = |buf: BufferId, len: usize| Access { buf, at: 0, len, write: false };
                    let read_at = |buf: BufferId, at: usize, len: usize| Access { buf, at, len, write: false };
                    if let Some(i) = &nm.input {
                        out.extend([read_at(i.stats.sums, i.stats.at, 2 * rmax), read(i.colsum, n)]);
                    }
                    if let Some(r) = &nm.residual {
                        out.push(read(r.buf, rmax * n));
                        if let Some(af) = &r.affine {
                            let st = af.stats;
                            out.extend([read_at(st.sums, st.at, 2 * rmax), read(af.gamma, n), read(af.beta, n)]);
                        }
                    }
                    if let Some(st) = &nm.stats {
                        out.push(Access { buf: st.sums, at: st.at, len: 2 * rmax, write: true });
                    }
                }
                out.push(Access { buf: *a, at: 0, len: rmax * m, write: false });
                if *accumulate {
                    out.push(Access { buf: *c, at: 0, len: rmax * n, write: false });
                }
                out.push(Access { buf: *c, at: 0, len: rmax * n, write: true });
                out.extend(packed.iter().map(|&(buf, len, _)| Access { buf, at: 0, len, write: false }));
                out.extend(bias.iter().map(|b| Access { buf: *b, at: 0, len: n, write: false }));
                out.extend(rows_of(rows));
            }
            Op::SpmmChain { a, c, rows, layers, n, slots, idx, w, bias, .. } => {
                let len = rows.max() * n;
                // `c` is read only after this step wrote it; `a` is written from the second layer.
                out.push(Access { buf: *a, at: 0, len, write: false });
                out.push(Access { buf: *c, at: 0, len, write: true });
                if *layers > 1 {
                    out.push(Access { buf: *a, at: 0, len, write: true });
                }
                for t in [*idx, *w] {
                    out.push(Access { buf: t, at: 0, len: layers * slots * n, write: false });
                }
                out.push(Access { buf: *bias, at: 0, len: *n, write: false });
                out.extend(rows_of(rows));
            }
            Op::LoadRows { offsets, indices, values, count, cols, dst, ids, live, at, clear, alias, .. } => {
                out.extend([whole(*offsets, false), whole(*indices, false), whole(*values, false)]);
                out.push(Access { buf: *dst, at: 0, len: count * cols, write: true });
                out.push(Access { buf: *ids, at: 0, len: *count, write: true });
                out.push(Access { buf: *live, at: *at, len: 1 + clear, write: true });
                out.extend(alias.iter().map(|a| whole(*a, true)));
            }
            Op::CompactRows { src, src_ids, dst, dst_ids, live, at, merge, .. } => {
                out.extend([whole(*src, false), whole(*src_ids, false)]);
                out.push(Access { buf: *live, at: *at, len: 1, write: false });
                out.extend([whole(*dst, true), whole(*dst_ids, true)]);
                out.push(Access { buf: *live, at: at + 1, len: 1, write: true });
                if let Some(m) = merge {
                    out.extend([whole(m.table, true), whole(m.row_slot, true), whole(m.alias, true)]);
                }
            }
            Op::ResolveAliases { alias, flags, .. } => {
                out.extend([whole(*alias, false), whole(*flags, true)]);
            }
            Op::DropRows { buf, ids, live, at, scratch, .. } => {
                out.extend([whole(*buf, false), whole(*ids, false)]);
                out.push(Access { buf: *live, at: *at, len: 1, write: false });
                out.extend([whole(*buf, true), whole(*ids, true), whole(*scratch, true)]);
                out.push(Access { buf: *live, at: at + 1, len: 1, write: true });
            }
            Op::PermuteColumns { src, dst, columns, live, at, .. } => {
                out.extend([whole(*src, false), whole(*columns, false)]);
                out.push(Access { buf: *live, at: *at, len: 1, write: false });
                out.push(whole(*dst, true));
            }
            Op::MarkRows { src, ids, live, at, flags, .. } => {
                out.extend([whole(*src, false), whole(*ids, false)]);
                out.push(Access { buf: *live, at: *at, len: 1, write: false });
                out.push(whole(*flags, true));
            }
            Op::Nodes(nodes) => {
                // A buffer an earlier node of the step wrote is read from that write, not from
                // before the step (a fused LayerNorm reading the sum it also stores).
                let mut written: Vec<BufferId> = vec![];
                for n in nodes {
                    for o in n.inputs.iter().flatten() {
                        if let Operand::Buf { buf, .. } = o {
                            if !written.contains(buf) {
                                out.push(whole(*buf, false));
                            }
                        }
                    }
                    for o in &n.outputs {
                        if let Operand::Buf { buf, .. } = o {
                            out.push(whole(*buf, true));
                            written.push(*buf);
                        }
                    }
                }
            }
            Op::Move => {}
        }
        for l in &step.launches {
            match l {
                Launch::Copy { src, src_at, dst, dst_at, len } => {
                    out.push(Access { buf: *src, at: *src_at, len: *len, write: false });
                    out.push(Access { buf: *dst, at: *dst_at, len: *len, write: true });
                }
                Launch::Zero { dst, at, len } => out.push(Access { buf: *dst, at: *at, len: *len, write: true }),
                Launch::Gemm { a, w, c, m, k, n, bias, residual, .. } => {
                    if let Some(b) = bias {
                        out.push(Access { buf: *b, at: 0, len: *n, write: false });
                    }
                    if let Some(r) = residual {
                        out.push(Access { buf: *r, at: 0, len: m * n, write: false });
                    }
                    out.push(Access { buf: *a, at: 0, len: m * k, write: false });
                    out.push(Access { buf: *w, at: 0, len: k * n, write: false });
                    out.push(Access { buf: *c, at: 0, len: m * n, write: true });
                }
                Launch::Kernel { .. } => {}
            }
        }
        out
    }
}

/// Builds a [`Program`], deriving each step's `after` edges from the buffer ranges it touches:
/// a step waits for the last earlier writer of every range it reads or writes, and for every
/// earlier reader of a range it writes (since that writer). Redundant edges are kept out by
/// taking only the latest conflicting step per buffer range.
#[derive(Debug, Default)]
pub struct ProgramBuilder {
    program: Program,
    /// Per buffer, the accesses not yet hidden by a covering write, oldest first.
    history: std::collections::HashMap<BufferId, Vec<(usize, Access)>>,
}

impl ProgramBuilder {
    pub fn new(name: &str) -> ProgramBuilder {
        ProgramBuilder {
            program: Program { name: name.to_string(), ..Program::default() },
            history: Default::default(),
        }
    }

    pub fn buffer(&mut self, name: &str, elem: Elem, len: usize, storage: Storage) -> BufferId {
        self.program.buffers.push(Buffer { name: name.to_string(), elem, len, storage });
        BufferId(self.program.buffers.len() as u32 - 1)
    }

    /// A constant buffer holding `data` (device, or pinned host memory when `host`).
    pub fn constant(&mut self, name: &str, data: Data, host: bool) -> BufferId {
        let (elem, len) = (data.elem(), data.len());
        let storage = if host { Storage::Host(data) } else { Storage::Constant(data) };
        self.buffer(name, elem, len, storage)
    }

    /// The kernel with this source, added once (kernels are shared by identical source).
    pub fn kernel(&mut self, name: &str, source: &str, smem_bytes: u32) -> KernelId {
        if let Some(i) = self.program.kernels.iter().position(|k| k.source == source && k.smem_bytes == smem_bytes) {
            return KernelId(i as u32);
        }
        self.program.kernels.push(KernelCode { name: name.to_string(), source: source.to_string(), smem_bytes });
        KernelId(self.program.kernels.len() as u32 - 1)
    }

    /// Changes where a buffer lives (a scratch buffer that turns out to be an output).
    pub fn set_storage(&mut self, id: BufferId, storage: Storage) {
        self.program.buffers[id.0 as usize].storage = storage;
    }

    /// Lengthens a scratch buffer to `len` elements (a reused buffer that must hold a larger
    /// value next); earlier accesses stay in range.
    ///
    /// # Panics
    /// When the buffer is not scratch.
    pub fn grow(&mut self, id: BufferId, len: usize) {
        let b = &mut self.program.buffers[id.0 as usize];
        assert!(matches!(b.storage, Storage::Scratch), "only scratch buffers grow");
        b.len = b.len.max(len);
    }

    /// Renames a buffer (a reused one that ends up holding an output).
    pub fn rename(&mut self, id: BufferId, name: &str) {
        self.program.buffers[id.0 as usize].name = name.to_string();
    }

    pub fn param(&mut self, name: &str, default: i32) -> ParamId {
        self.program.params.push(Param { name: name.to_string(), default });
        ParamId(self.program.params.len() as u32 - 1)
    }

    pub fn matrix(&mut self, m: Csr) -> usize {
        self.program.matrices.push(m);
        self.program.matrices.len() - 1
    }

    /// Appends a step, waiting for exactly the earlier steps it conflicts with (see the type's
    /// docs); returns its index.
    pub fn step(&mut self, label: &str, op: Op, launches: Vec<Launch>) -> usize {
        let i = self.program.steps.len();
        self.program.steps.push(Step { label: label.to_string(), op, launches, after: vec![] });
        let mine = self.program.accesses(i);
        let mut after = vec![];
        for acc in &mine {
            let history = self.history.entry(acc.buf).or_default();
            // Newest first: the last overlapping writer orders everything before it; for a
            // write, every overlapping reader since that writer too.
            for (j, theirs) in history.iter().rev() {
                if !theirs.overlaps(acc) {
                    continue;
                }
                if theirs.write {
                    after.push(*j);
                    if theirs.at <= acc.at && acc.at + acc.len <= theirs.at + theirs.len {
                        break;
                    }
                    continue;
                }
                if acc.write {
                    after.push(*j);
                }
            }
        }
        for acc in mine {
            let history = self.history.entry(acc.buf).or_default();
            // A write hides every older access it covers completely.
            if acc.write {
                history.retain(|(_, h)| !(h.at >= acc.at && h.at + h.len <= acc.at + acc.len));
            }
            history.push((i, acc));
        }
        after.sort_unstable();
        after.dedup();
        after.retain(|&j| j != i);
        self.program.steps[i].after = after;
        i
    }

    pub fn finish(self) -> Result<Program, ProgramError> {
        self.program.verify()?;
        Ok(self.program)
    }

    pub fn program(&self) -> &Program {
        &self.program
    }
}

#[cfg(test)]
mod tests;
