//! Operators: one registry entry per ONNX op type, grouped by family (one file each).
//!
//! An entry has two hooks: `infer` computes output types from input types (and from
//! input values when they are constants, e.g. Reshape's target shape), and `eval` is
//! the reference semantics, exact ONNX behaviour on host tensors (f64 accumulation where it
//! matters). The reference executor, constant folding, tensor scrambling and source tracing
//! all call `eval`.
//!
//! Sparsity propagation rules are not a hook here: they live in `propagate::rules`, a registry
//! keyed by op type, so the op families stay untouched. Two families expose their geometry to
//! those rules: `pool_taps` (pooling windows) and `reduce_target_of_each_input` (reductions).

use crate::ir::{Attrs, Tensor, ValueFact};
use std::collections::BTreeMap;
use std::sync::OnceLock;

mod activation;
mod arith;
mod constant;
mod conv;
mod index;
mod linalg;
mod logic;
mod norm;
mod pool;
mod reduce;
mod shape;

pub(crate) use pool::{pool_taps, pool_windows};
pub(crate) use reduce::reduce_target_of_each_input;

pub use constant::shape_of_fact;

pub use crate::ir::OpError;

pub type OpResult<T> = Result<T, OpError>;

/// Returns early with an `OpError` built like `format!`.
#[macro_export]
macro_rules! bail_op {
    ($($arg:tt)*) => { return Err($crate::ops::OpError::new(format!($($arg)*))) };
}

/// What an op hook knows about the node it runs for.
#[derive(Clone, Copy, Debug)]
pub struct NodeCtx<'a> {
    pub name: &'a str,
    pub attrs: &'a Attrs,
    /// Opset version of the node's domain.
    pub opset: i64,
    /// Number of outputs the node declares (optional trailing outputs may be absent).
    pub n_outputs: usize,
}

/// An input as shape inference sees it: its type, and its value when constant.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    pub fact: &'a ValueFact,
    pub value: Option<&'a Tensor>,
}

pub type InferFn = fn(&NodeCtx, &[Option<InferInput>]) -> OpResult<Vec<ValueFact>>;
pub type EvalFn = fn(&NodeCtx, &[Option<&Tensor>]) -> OpResult<Vec<Tensor>>;

/// One registered operator.
#[derive(Clone, Copy)]
pub struct OpDef {
    pub op_type: &'static str,
    /// The family (file) it belongs to, for reports such as conformance per family.
    pub family: &'static str,
    pub infer: InferFn,
    pub eval: EvalFn,
}

/// All known ops of the default ONNX domain, by op type.
pub struct Registry {
    ops: BTreeMap<&'static str, OpDef>,
}

impl Registry {
    fn insert(&mut self, family: &'static str, op_type: &'static str, infer: InferFn, eval: EvalFn) {
        let previous = self.ops.insert(op_type, OpDef { op_type, family, infer, eval });
        assert!(previous.is_none(), "op {op_type} registered twice");
    }

    pub fn get(&self, op_type: &str) -> Option<&OpDef> {
        self.ops.get(op_type)
    }

    pub fn iter(&self) -> impl Iterator<Item = &OpDef> {
        self.ops.values()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Helper a family file uses to add its ops under its family name.
/// An op family: its name and the function that registers its ops.
type FamilyEntry = (&'static str, fn(&mut FamilyRegistrar));

pub struct FamilyRegistrar<'a> {
    registry: &'a mut Registry,
    family: &'static str,
}

impl FamilyRegistrar<'_> {
    pub fn op(&mut self, op_type: &'static str, infer: InferFn, eval: EvalFn) -> &mut Self {
        self.registry.insert(self.family, op_type, infer, eval);
        self
    }
}

/// The process-wide registry (built once).
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = Registry { ops: BTreeMap::new() };
        let families: [FamilyEntry; 11] = [
            ("activation", activation::register),
            ("arith", arith::register),
            ("constant", constant::register),
            ("conv", conv::register),
            ("index", index::register),
            ("linalg", linalg::register),
            ("logic", logic::register),
            ("norm", norm::register),
            ("pool", pool::register),
            ("reduce", reduce::register),
            ("shape", shape::register),
        ];
        for (family, register) in families {
            register(&mut FamilyRegistrar { registry: &mut registry, family });
        }
        registry
    })
}

// ---- helpers shared by the families ----

/// The required input at `index`.
pub fn required<T>(inputs: &[Option<T>], index: usize) -> OpResult<&T> {
    match inputs.get(index) {
        Some(Some(t)) => Ok(t),
        _ => Err(OpError::new(format!("missing required input {index}"))),
    }
}

/// The optional input at `index` (absent when omitted or beyond the list).
pub fn optional<T: Copy>(inputs: &[Option<T>], index: usize) -> Option<T> {
    inputs.get(index).copied().flatten()
}

/// The constant value of an input that shape inference needs (e.g. a target shape).
pub fn constant_input<'a>(inputs: &'a [Option<InferInput<'a>>], index: usize, what: &str) -> OpResult<&'a Tensor> {
    let input = required(inputs, index)?;
    input.value.ok_or_else(|| {
        OpError::new(format!("input {index} ({what}) must be a constant or computable from static shapes"))
    })
}

/// Checks that an input tensor has a floating-point type.
pub fn expect_float(t: &ValueFact, what: &str) -> OpResult<()> {
    if !t.dtype.is_float() {
        bail_op!("{what} must be a float tensor, got {}", t.dtype);
    }
    Ok(())
}

/// Shared by the families' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{registry, InferInput, NodeCtx, OpResult};
    use crate::ir::{Attrs, Tensor, ValueFact};

    /// Runs one op through `infer` and `eval` and checks that they agree.
    pub(crate) fn run_op(op: &str, opset: i64, attrs: &Attrs, inputs: &[&Tensor]) -> OpResult<Tensor> {
        let ctx = NodeCtx { name: "n", attrs, opset, n_outputs: 1 };
        let def = registry().get(op).unwrap();
        let facts: Vec<ValueFact> = inputs.iter().map(|t| ValueFact::of(t)).collect();
        let infer_in: Vec<Option<InferInput>> =
            facts.iter().map(|f| Some(InferInput { fact: f, value: None })).collect();
        let want = (def.infer)(&ctx, &infer_in)?;
        let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        let out = (def.eval)(&ctx, &ins)?.remove(0);
        assert_eq!(ValueFact::of(&out), want[0], "{op}: eval disagrees with infer");
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_holds_every_op_the_foundation_claims() {
        let claimed = [
            "MatMul",
            "Gemm",
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Pow",
            "Sqrt",
            "Reciprocal",
            "Neg",
            "Abs",
            "Exp",
            "Log",
            "Relu",
            "LeakyRelu",
            "Clip",
            "Min",
            "Max",
            "Sigmoid",
            "Tanh",
            "Erf",
            "Gelu",
            "HardSigmoid",
            "HardSwish",
            "Softmax",
            "LogSoftmax",
            "LayerNormalization",
            "ReduceMean",
            "ReduceSum",
            "ReduceMax",
            "ReduceL2",
            "Transpose",
            "Reshape",
            "Flatten",
            "Squeeze",
            "Unsqueeze",
            "Expand",
            "Concat",
            "Split",
            "Slice",
            "Gather",
            "GatherND",
            "Cast",
            "Where",
            "Equal",
            "Less",
            "Greater",
            "GreaterOrEqual",
            "And",
            "Not",
            "Constant",
            "ConstantOfShape",
            "Shape",
            "Identity",
            "Dropout",
            "Conv",
            "BatchNormalization",
            "MaxPool",
            "AveragePool",
            "GlobalAveragePool",
            "Pad",
        ];
        let missing: Vec<&str> = claimed.iter().copied().filter(|op| registry().get(op).is_none()).collect();
        assert!(missing.is_empty(), "ops missing from the registry: {missing:?}");
    }
}
