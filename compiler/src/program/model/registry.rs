//! The GPU op registry: each op type to how the lowering treats a node of it ([`GpuOp`]), one
//! entry per op type. Every family registers its entries in its own file, beside its lowering
//! (`register` in `views.rs`, `elementwise.rs`, `ops.rs`, `pool.rs`), so adding a GPU op is one
//! entry there. The fusions (attention, LayerNorm with its group, planned MatMuls, NHWC convs
//! and pools) are analyses over the graph and take their nodes before the registry is asked.

use super::elementwise::Ew;
use super::ops::Builder;
use std::collections::HashMap;
use std::sync::OnceLock;

/// How the lowering treats a node of one op type.
pub(super) enum GpuOp {
    /// The output is the input's buffer seen with another shape: no step.
    View,
    /// Computed inside an elementwise group's kernel, as this expression of its inputs'.
    Elementwise(Ew),
    /// Moves data with constant parameters: when only the data input is not constant, a gather
    /// through a source map traced at compile time with the op's own `eval`.
    Remap,
    /// One step; the builder makes its kernel (or emits the step itself).
    Kernel(Builder),
}

/// The op types with a GPU lowering (see the module docs).
#[derive(Default)]
pub(super) struct Registry {
    ops: HashMap<&'static str, GpuOp>,
}

impl Registry {
    /// Registers `op_type`; an op type is registered once.
    pub(super) fn insert(&mut self, op_type: &'static str, op: GpuOp) {
        let previous = self.ops.insert(op_type, op);
        assert!(previous.is_none(), "GPU op {op_type} registered twice");
    }

    pub(super) fn get(&self, op_type: &str) -> Option<&GpuOp> {
        self.ops.get(op_type)
    }
}

/// The registry, built once from every family's `register`.
pub(super) fn gpu_ops() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = Registry::default();
        super::views::register(&mut registry);
        super::elementwise::register(&mut registry);
        super::ops::register(&mut registry);
        super::pool::register(&mut registry);
        registry
    })
}

/// Whether `op_type` is a view (its output the input's buffer with another shape).
pub(super) fn is_view(op_type: &str) -> bool {
    matches!(gpu_ops().get(op_type), Some(GpuOp::View))
}

/// Whether `op_type` is computed inside an elementwise group.
pub(super) fn is_elementwise(op_type: &str) -> bool {
    matches!(gpu_ops().get(op_type), Some(GpuOp::Elementwise(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry builds (no op type twice) and holds each family's entries.
    #[test]
    fn every_family_registers_its_ops() {
        let registry = gpu_ops();
        assert!(matches!(registry.get("Reshape"), Some(GpuOp::View)));
        assert!(matches!(registry.get("Add"), Some(GpuOp::Elementwise(_))));
        assert!(matches!(registry.get("Transpose"), Some(GpuOp::Elementwise(_))));
        assert!(matches!(registry.get("Slice"), Some(GpuOp::Remap)));
        assert!(matches!(registry.get("Softmax"), Some(GpuOp::Kernel(_))));
        assert!(matches!(registry.get("MaxPool"), Some(GpuOp::Kernel(_))));
        assert!(registry.get("Conv").is_none());
    }
}
