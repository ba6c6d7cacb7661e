//! The lowering's public types: what it may choose ([`ModelOptions`]), what it returns
//! ([`ModelProgram`] with its input and output [`Signature`]s and [`LoweringStats`]), and the
//! check of a run's inputs against the signature.

use crate::codegen::Tile;
use crate::ir::{DType, Tensor};
use crate::program::{BufferId, Program};
use std::collections::BTreeMap;

/// What the lowering may choose.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// Fuse bias and activation chains into planned matmul epilogues.
    pub fuse_epilogues: bool,
    /// Fuse chains of elementwise nodes into one kernel.
    pub fuse_elementwise: bool,
    /// The tile of every 3xTF32 fine kernel (`None`: the specializer's choice).
    pub fine_tile: Option<Tile>,
    /// Run dense 16-bit sub-operators on the vendor library ([`Launch::Gemm`](crate::program::Launch::Gemm), see
    /// `codegen::library_takes`) instead of our dense kernel.
    pub library_dense: bool,
    /// Let the library call apply a bias and a ReLU itself (cuBLASLt epilogues,
    /// `codegen::library_gemm_fused`); off, a bias prefill kernel before it and an activation
    /// pass after it (for ablations).
    pub library_epilogue: bool,
    /// Keep skinny dense 16-bit sub-operators on the streaming kernel
    /// (`kernel_choice::stream::auto_takes`); off, the library takes them too when
    /// `library_dense` is on (`codegen::library_takes_dense`; for ablations).
    pub stream_dense: bool,
    /// Run dense convolutions whose channels allow it as implicit GEMMs on tensor cores
    /// (`codegen::graph_ops::ConvEngine::Auto`); off, on the direct kernel (for ablations).
    pub implicit_gemm_conv: bool,
    /// Let an elementwise step read a Concat's parts in place instead of the Concat being a
    /// step of its own (`model/concat_reads.rs`; off for ablations).
    pub concat_reads: bool,
    /// Let planned 16-bit block products do the LayerNorms between them
    /// (`model/norm_defer.rs`); off, each LayerNorm is a step (for ablations).
    pub defer_norms: bool,
}

impl Default for ModelOptions {
    fn default() -> ModelOptions {
        ModelOptions {
            fuse_epilogues: true,
            fuse_elementwise: true,
            fine_tile: None,
            library_dense: true,
            library_epilogue: true,
            stream_dense: true,
            implicit_gemm_conv: true,
            concat_reads: true,
            defer_norms: true,
        }
    }
}

/// One model input or output: its name, type and buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub buf: BufferId,
    /// Integer inputs: the exclusive bound of valid values (the rows of the table they index;
    /// 2 for masks), what random inputs are drawn below. 0 for floats and outputs.
    pub bound: u64,
}

/// Counts of what the lowering did, for the compile summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoweringStats {
    pub graph_nodes: usize,
    pub planned_ops: usize,
    /// Planned operators with a pruned weight element.
    pub sparse_ops: usize,
    pub fused_epilogues: usize,
    /// Nodes that run inside a fused step of two or more (elementwise groups, attentions,
    /// folded transposes, LayerNorms with their input's group).
    pub fused_nodes: usize,
    /// LayerNormalizations whose input (an elementwise group, e.g. a residual Add) is computed
    /// in their kernel.
    pub fused_norms: usize,
    /// Concats never formed: the elementwise step after each reads its parts.
    pub fused_concats: usize,
    /// Chains of data movement lowered as one gather each.
    pub fused_movements: usize,
    pub views: usize,
    /// Bytes of the planned weights as dense f32, and as packed for the kernels (values and
    /// index tables).
    pub dense_weight_bytes: usize,
    pub packed_weight_bytes: usize,
    /// Sub-operators that run on the vendor library ([`Launch::Gemm`](crate::program::Launch::Gemm)).
    pub library_gemms: usize,
    /// LayerNorms done by the planned products around them (`model/norm_defer.rs`).
    pub deferred_norms: usize,
}

/// A lowered model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelProgram {
    pub program: Program,
    pub inputs: Vec<Signature>,
    pub outputs: Vec<Signature>,
    pub stats: LoweringStats,
}

/// Inputs of a lowered model by name, checked against its signature.
pub fn check_model_inputs(inputs: &[Signature], given: &BTreeMap<String, Tensor>) -> Result<(), String> {
    check_signature("input", inputs, given, |t| (t.dtype(), t.shape()))
}

/// Checks that `given` names exactly the tensors of `sig` (`what`: "input" or "output") with
/// their types and shapes, `type_of` reading a given value's element type and shape (a host
/// tensor, an `.npy` header, a caller's device tensor).
pub fn check_signature<T>(
    what: &str,
    sig: &[Signature],
    given: &BTreeMap<String, T>,
    type_of: impl Fn(&T) -> (DType, &[usize]),
) -> Result<(), String> {
    let dims = |shape: &[usize]| shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    if let Some(name) = given.keys().find(|n| !sig.iter().any(|s| &s.name == *n)) {
        let names: Vec<&str> = sig.iter().map(|s| s.name.as_str()).collect();
        return Err(format!("unknown {what} {name:?} (the model's {what}s: {})", names.join(", ")));
    }
    for s in sig {
        let t = given.get(&s.name).ok_or_else(|| format!("{what} {:?} is missing", s.name))?;
        let (dtype, shape) = type_of(t);
        if dtype != s.dtype || shape != s.shape.as_slice() {
            return Err(format!(
                "{what} {:?}: expects {}[{}] but got {}[{}]",
                s.name,
                s.dtype.name(),
                dims(&s.shape),
                dtype.name(),
                dims(shape)
            ));
        }
    }
    Ok(())
}
