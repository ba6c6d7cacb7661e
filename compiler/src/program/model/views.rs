//! Views: ops whose output is their input seen with another shape (Reshape, Squeeze,
//! Unsqueeze, Flatten, Identity, Dropout) take no step; the output shares the input's buffer.

use super::registry::{GpuOp, Registry};
use super::*;

/// Registers the views.
pub(super) fn register(registry: &mut Registry) {
    for op in ["Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"] {
        registry.insert(op, GpuOp::View);
    }
}

impl Lowering<'_> {
    pub(super) fn lower_view(&mut self, node: &Node) -> Result<(), ProgramError> {
        let src = node.inputs.first().copied().flatten().ok_or_else(|| self.node_err(node, "no input"))?;
        let out = node.outputs[0];
        if self.graph.fact(src).numel() != self.graph.fact(out).numel() {
            return Err(self.node_err(node, "a view must keep the element count"));
        }
        let buf = self.buf(src)?;
        self.bufs.insert(out, buf);
        self.note_use(out, buf);
        self.stats.views += 1;
        Ok(())
    }
}
