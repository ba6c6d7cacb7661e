//! Concats never formed: a Concat read by one node of a plain elementwise group (DenseNet's
//! concatenated features, read by the BatchNorm affine and ReLU after them) is not a step of
//! its own; the group's kernel reads each element from the part it falls in
//! ([`graph_ops::ConcatRead`]). This saves writing the concatenation and reading it back: two
//! passes over the largest activations of a dense block.

use super::*;
use crate::codegen::graph_ops::{ConcatRead, EwInput};

/// Most parts one elementwise kernel takes (each is a kernel parameter).
const MAX_PARTS: usize = 128;

impl Lowering<'_> {
    /// The Concat node whose output `v` node `reader` of the group ending at `last` can read
    /// in place: `v` is read by `reader` alone, is not a graph output, has the group output's
    /// shape (no broadcast), and every part is present; `reader` is not a Transpose (which
    /// reads its input through permuted strides).
    pub(super) fn concat_read(&self, v: ValueId, reader: usize, last: usize) -> Option<usize> {
        let graph = self.graph;
        if graph.nodes[reader].op_type == "Transpose" || self.only_consumer(v) != Some(reader) {
            return None;
        }
        let p = graph.nodes.iter().position(|n| n.outputs.contains(&v))?;
        let node = &graph.nodes[p];
        let shape = &graph.fact(v).shape;
        let parts = node.inputs.len();
        let fits = node.op_type == "Concat"
            && node.outputs.len() == 1
            && (1..=MAX_PARTS).contains(&parts)
            && node.inputs.iter().all(|i| i.is_some())
            && *shape == graph.fact(graph.nodes[last].outputs[0]).shape
            && norm_axis(node.attrs.int("axis", 0).unwrap_or(0), shape.len()).is_some();
        fits.then_some(p)
    }

    /// The kernel input for outside value `v` of a group: its parts when it is a Concat never
    /// formed, else `v` (through `perm`, a Transpose's).
    pub(super) fn ew_input(&self, v: ValueId, perm: Option<&[usize]>) -> EwInput {
        if let Some(&c) = self.concat_reads.get(&v) {
            let node = &self.graph.nodes[c];
            let rank = self.graph.fact(v).shape.len();
            let axis = norm_axis(node.attrs.int("axis", 0).unwrap_or(0), rank).expect("checked by concat_read");
            let parts = node.inputs.iter().flatten().map(|&p| self.desc(p)).collect();
            return EwInput::Concat(ConcatRead { axis, parts });
        }
        EwInput::Tensor(self.desc_through(v, perm))
    }

    /// The buffers a kernel input reads: a Concat's parts in order, else the value's own.
    pub(super) fn ew_buffers(&mut self, v: ValueId) -> Result<Vec<BufferId>, ProgramError> {
        match self.concat_reads.get(&v) {
            Some(&c) => {
                let parts: Vec<ValueId> = self.graph.nodes[c].inputs.iter().flatten().copied().collect();
                parts.into_iter().map(|p| self.buf(p)).collect()
            }
            None => Ok(vec![self.buf(v)?]),
        }
    }

    /// The temporary operand the CPU executor computes Concat-never-formed `v` into (numbered
    /// from `base` in the order first read), its node appended to `nodes` on first use.
    pub(super) fn concat_temp(
        &mut self,
        v: ValueId,
        base: u32,
        temps: &mut HashMap<ValueId, Operand>,
        nodes: &mut Vec<NodeOp>,
    ) -> Result<Operand, ProgramError> {
        if let Some(t) = temps.get(&v) {
            return Ok(t.clone());
        }
        let graph = self.graph;
        let node = &graph.nodes[self.concat_reads[&v]];
        let f = graph.fact(v);
        let temp = Operand::Temp { id: base + temps.len() as u32, dtype: f.dtype, shape: f.shape.clone() };
        let mut parts = vec![];
        for p in node.inputs.iter().flatten() {
            parts.push(Some(self.operand(*p)?));
        }
        nodes.push(self.node_op(node, parts, vec![temp.clone()]));
        temps.insert(v, temp.clone());
        Ok(temp)
    }
}
