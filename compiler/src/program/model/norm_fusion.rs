//! An elementwise group folded into the LayerNormalization that reads it: one step and one
//! kernel (`codegen::graph_ops::layer_norm_fused`) where a transformer has a residual `Add`
//! (with any other elementwise nodes in its group) before each LayerNorm, so the sum never
//! goes through memory. When the group's output is read elsewhere too (a pre-LN transformer's
//! residual stream) or is a graph output, the kernel also writes it, in the same pass.
//!
//! A group qualifies when it has no Expand, every Transpose in it reads a value from outside
//! the group (as every elementwise group's Transpose does: the kernel reads that value through
//! the permuted strides, as a plain group's kernel does), and every tensor it reads (other
//! than one-element constants, which are literals) is float and reads as whole rows (in place
//! or at strided row starts), one row or one element of the normalized tensor
//! ([`graph_ops::row_operand`], on the strides as read: a Transpose qualifies when it moves
//! only row axes, the normalized axes staying dense, last and in order, as ViT's
//! `[seq, batch] → [batch, seq]` before its residual `Add`), and when every other reader of
//! its output comes after the LayerNorm in graph order (the output is made at the LayerNorm's
//! step), unless it reads a Concat in place (`concat_reads.rs`), which a prologue does not.
//! The step's nodes are the group's (the Transposes included) and the LayerNorm, so
//! the CPU executor computes exactly the graph's ops.
//!
//! A Gather along axis 0 of a 2-D table whose output only the group reads (BERT's word and
//! token-type embedding lookups before the embedding LayerNorm) joins the step as well: the
//! kernel reads the table row each index names (`graph_ops::GatherRows`), so the looked-up
//! rows never go through memory.
//!
//! A Cast of the LayerNorm's output to another float type, when it is that output's only
//! reader and a step of its own (a 16-bit model's last LayerNorm before its fp32 output), joins
//! the step too: the kernel rounds each value to the LayerNorm's type and stores it in the
//! Cast's, which is what the two nodes compute.

use super::{norm_axis, sanitize, scalar_constant, transpose_perm, Lowering};
use crate::codegen::graph_ops::{self, NormPrologue, TensorDesc};
use crate::ir::{DType, Graph, Node, ValueId};
use crate::program::{Op, Operand, ProgramError};
use std::collections::HashMap;

/// A LayerNormalization whose input an elementwise group computes inside its kernel.
#[derive(Clone, Debug)]
pub(super) struct NormFusion {
    /// The LayerNormalization node.
    pub norm: usize,
    /// The group's nodes, in graph order; the last one's output is the LayerNorm's input.
    pub group: Vec<usize>,
    /// The group's output is read elsewhere too (or is a graph output): the kernel writes it.
    pub write_x: bool,
    /// A Cast node the kernel stores the LayerNorm's output through (see the module docs).
    pub cast: Option<usize>,
    /// Gathers the kernel folds in: each group input a Gather makes, and that Gather node.
    pub gathers: Vec<(ValueId, usize)>,
}

/// The normalized tensor's shape, the first normalized axis and epsilon of LayerNorm `node`,
/// or why its kernel is not built.
pub(super) fn norm_geometry(lowering: &Lowering, node: &Node) -> Result<(Vec<usize>, usize, f32), String> {
    let graph = lowering.graph;
    if node.outputs[1..].iter().any(|v| lowering.is_output[v.index()] || !lowering.consumers[v.index()].is_empty()) {
        return Err("the Mean and InvStdDev outputs are not built".into());
    }
    let x = node.inputs.first().copied().flatten().ok_or("input 0 is missing")?;
    let shape = graph.fact(x).shape.clone();
    let axis = norm_axis(node.attrs.int("axis", -1).unwrap_or(-1), shape.len()).ok_or("axis out of range")?;
    let cols: usize = shape[axis..].iter().product();
    for (i, what) in [(1, "scale"), (2, "bias")] {
        if let Some(v) = node.inputs.get(i).copied().flatten() {
            if graph.fact(v).numel() != cols {
                return Err(format!("{what} broadcasting is not built (needs {cols} elements)"));
            }
        }
    }
    Ok((shape, axis, node.attrs.float("epsilon", 1e-5).unwrap_or(1e-5)))
}

/// The distinct values the group `members` reads from outside, but for one-element constants,
/// each with the permutation it is read through (a Transpose's input), as
/// `Lowering::group_expr` lists the kernel's inputs.
fn outside_inputs(graph: &Graph, members: &[usize]) -> Vec<(ValueId, Option<Vec<usize>>)> {
    let inside: Vec<ValueId> = members.iter().flat_map(|&m| graph.nodes[m].outputs.clone()).collect();
    let mut out = vec![];
    for &m in members {
        let node = &graph.nodes[m];
        let perm = (node.op_type == "Transpose").then(|| transpose_perm(graph, node));
        for &v in node.inputs.iter().flatten() {
            let key = (v, perm.clone());
            if !inside.contains(&v) && scalar_constant(graph, v).is_none() && !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// Whether the group `members` has only nodes a prologue computes: one output each, no
/// Expand, and Transposes only of values from outside (read through their permutation).
fn prologue_nodes(graph: &Graph, members: &[usize]) -> bool {
    let inside: Vec<ValueId> = members.iter().flat_map(|&m| graph.nodes[m].outputs.clone()).collect();
    members.iter().all(|&m| {
        let node = &graph.nodes[m];
        let leaf_transpose = node.op_type != "Transpose" || node.inputs.iter().flatten().all(|v| !inside.contains(v));
        node.op_type != "Expand" && leaf_transpose && node.outputs.len() == 1
    })
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

impl Lowering<'_> {
    /// The LayerNorms that take the group computing their input (see the module docs);
    /// `groups` are the elementwise groups keyed by their last node.
    pub(super) fn find_norm_fusions(&self, groups: &HashMap<usize, Vec<usize>>) -> Vec<NormFusion> {
        let graph = self.graph;
        let mut found = vec![];
        for (i, node) in graph.nodes.iter().enumerate() {
            if node.op_type != "LayerNormalization" {
                continue;
            }
            let Ok((shape, axis, _)) = norm_geometry(self, node) else { continue };
            let Some(x) = node.inputs.first().copied().flatten() else { continue };
            let Some(last) = graph.nodes.iter().position(|n| n.outputs.contains(&x)) else { continue };
            let Some(members) = groups.get(&last) else { continue };
            let affine_float = node.inputs.iter().flatten().all(|&v| is_float(graph.fact(v).dtype));
            if !affine_float || !is_float(graph.fact(node.outputs[0]).dtype) {
                continue;
            }
            let mut gathers = vec![];
            let reads_rows = outside_inputs(graph, members).into_iter().all(|(v, perm)| {
                if let Some(g) = self.gathered_rows(v, &shape, axis, members, groups).filter(|_| perm.is_none()) {
                    gathers.push((v, g));
                    return true;
                }
                is_float(graph.fact(v).dtype)
                    && graph_ops::row_operand(&self.desc_through(v, perm.as_deref()), &shape, axis).is_some()
            });
            // A Concat the group would read in place (ViT's class token and patches before the
            // position embedding) saves more as such than the LayerNorm's pass over x does.
            let reads_concat = self.options.concat_reads
                && members
                    .iter()
                    .any(|&m| graph.nodes[m].inputs.iter().flatten().any(|&v| self.concat_read(v, m, last).is_some()));
            let others_later = self.consumers[x.index()].iter().all(|&c| c >= i);
            if prologue_nodes(graph, members) && reads_rows && !reads_concat && others_later {
                let write_x = self.is_output[x.index()] || self.consumers[x.index()].len() > 1;
                let cast = self.norm_cast(i, groups);
                found.push(NormFusion { norm: i, group: members.clone(), write_x, cast, gathers });
            }
        }
        found
    }

    /// The Gather node that makes `v` when the LayerNorm kernel can read its rows from the
    /// table (see the module docs): axis 0 of a contiguous float `[rows, cols]` table by
    /// contiguous i64/i32 indices with one index per normalized row, its output read by one
    /// member of the group alone and not a graph output, the Gather in no group of its own.
    fn gathered_rows(
        &self,
        v: ValueId,
        shape: &[usize],
        axis: usize,
        members: &[usize],
        groups: &HashMap<usize, Vec<usize>>,
    ) -> Option<usize> {
        let graph = self.graph;
        let g = graph.nodes.iter().position(|n| n.outputs.first() == Some(&v))?;
        let node = &graph.nodes[g];
        let (table, idx) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
        let (tf, xf) = (graph.fact(table), graph.fact(idx));
        let cols: usize = shape[axis..].iter().product();
        let rows: usize = shape[..axis].iter().product();
        let fits = node.op_type == "Gather"
            && node.attrs.int("axis", 0).unwrap_or(0) == 0
            && tf.shape.len() == 2
            && tf.shape[1] == cols
            && is_float(tf.dtype)
            && matches!(xf.dtype, DType::I64 | DType::I32)
            && xf.numel() == rows
            && graph.fact(v).shape == shape
            && self.desc(table).strides == [cols, 1]
            && self.desc(idx).strides == crate::ir::strides(&xf.shape);
        let sole_reader = matches!(self.consumers[v.index()][..], [c] if members.contains(&c));
        let grouped = groups.values().any(|ms| ms.contains(&g));
        (fits && sole_reader && !grouped && !self.is_output[v.index()]).then_some(g)
    }

    /// The Cast after LayerNorm `norm` that its kernel may store through: its output's only
    /// reader, a float-to-float Cast that is an elementwise group of its own.
    fn norm_cast(&self, norm: usize, groups: &HashMap<usize, Vec<usize>>) -> Option<usize> {
        let graph = self.graph;
        let y = graph.nodes[norm].outputs[0];
        let [c] = self.consumers[y.index()][..] else { return None };
        let cast = &graph.nodes[c];
        let alone = groups.get(&c).is_some_and(|g| g == &[c]);
        let floats = is_float(graph.fact(y).dtype) && is_float(graph.fact(cast.outputs[0]).dtype);
        (cast.op_type == "Cast" && alone && floats && !self.is_output[y.index()]).then_some(c)
    }

    /// One step for a [`NormFusion`]: the group's nodes and the LayerNorm, one kernel.
    pub(super) fn lower_norm_fusion(&mut self, f: &NormFusion) -> Result<(), ProgramError> {
        let graph = self.graph;
        let node = &graph.nodes[f.norm];
        let (shape, axis, eps) = norm_geometry(self, node).map_err(|e| self.node_err(node, e))?;
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let xf = graph.fact(x).clone();
        // The group's values are temporaries 0.., x is one past them unless it is written out.
        let n_temps = f.group.len() as u32;
        // No group: the LayerNorm reads its stored input (a deferred residual's producer wrote
        // it, `model/norm_defer.rs`).
        let x_op = if f.write_x || f.group.is_empty() {
            self.operand(x)?
        } else {
            Operand::Temp { id: n_temps, dtype: xf.dtype, shape: xf.shape.clone() }
        };
        // A folded Gather's output is a temporary after the group's, x's, the LayerNorm's
        // outputs and its own (when stored through a Cast).
        let mut temps = HashMap::new();
        let mut gather_ops = vec![];
        for (j, &(v, g)) in f.gathers.iter().enumerate() {
            let vf = graph.fact(v);
            let t = Operand::Temp {
                id: n_temps + node.outputs.len() as u32 + 1 + j as u32,
                dtype: vf.dtype,
                shape: vf.shape.clone(),
            };
            let gnode = &graph.nodes[g];
            let inputs =
                gnode.inputs.iter().map(|i| i.map(|i| self.operand(i)).transpose()).collect::<Result<_, _>>()?;
            gather_ops.push(self.node_op(gnode, inputs, vec![t.clone()]));
            temps.insert(v, t);
        }
        let mut ext: Vec<(ValueId, Option<Vec<usize>>)> = vec![];
        let (expr, group_nodes) = if f.group.is_empty() {
            ext.push((x, None));
            (graph_ops::Expr::Input(0), vec![])
        } else {
            self.group_expr(&f.group, &mut ext, &temps, x_op.clone(), 0)?
        };
        let mut nodes = gather_ops;
        nodes.extend(group_nodes);
        // A Transpose's input is read through its permutation; a gathered input is its table.
        let gathered = |v: ValueId| f.gathers.iter().find(|(w, _)| *w == v).map(|&(_, g)| &graph.nodes[g]);
        let mut descs: Vec<TensorDesc> = vec![];
        let mut gathers = vec![];
        let mut args = vec![];
        for (i, (v, perm)) in ext.iter().enumerate() {
            match gathered(*v) {
                Some(g) => {
                    let (table, idx) = (g.inputs[0].expect("a table"), g.inputs[1].expect("indices"));
                    descs.push(self.desc(table));
                    gathers.push(graph_ops::GatherRows { input: i, index: graph.fact(idx).dtype });
                    args.push(self.buf(table)?);
                    args.push(self.buf(idx)?);
                }
                None => {
                    descs.push(self.desc_through(*v, perm.as_deref()));
                    args.push(self.buf(*v)?);
                }
            }
        }
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let (scale, bias) = (input(1), input(2));
        for v in [scale, bias].into_iter().flatten() {
            args.push(self.buf(v)?);
        }
        if f.write_x {
            args.push(self.buf(x)?);
        }
        let y = node.outputs[0];
        // Through a Cast: the kernel writes the Cast's output, the LayerNorm's is a temporary.
        let stored = f.cast.map_or(y, |c| graph.nodes[c].outputs[0]);
        args.push(self.buf(stored)?);
        let name = format!("layernorm_fused_{}", sanitize(&node.name));
        let y_rounded = f.cast.map(|_| graph.fact(y).dtype);
        let prologue = NormPrologue { inputs: &descs, expr: &expr, write_x: f.write_x, gathers: &gathers, y_rounded };
        let dtype = |v: Option<ValueId>| v.map(|v| graph.fact(v).dtype);
        let k = graph_ops::layer_norm_fused(
            &name,
            &shape,
            axis,
            eps,
            &prologue,
            dtype(scale),
            dtype(bias),
            graph.fact(stored).dtype,
        )
        .map_err(|e| self.node_err(node, e))?;
        let mut inputs = vec![Some(x_op)];
        for v in &node.inputs[1..] {
            inputs.push(v.map(|v| self.operand(v)).transpose()?);
        }
        let yf = graph.fact(y);
        let y_temp =
            Operand::Temp { id: n_temps + node.outputs.len() as u32, dtype: yf.dtype, shape: yf.shape.clone() };
        let mut outputs = vec![if f.cast.is_some() { y_temp.clone() } else { self.operand(y)? }];
        for (j, v) in node.outputs[1..].iter().enumerate() {
            let vf = graph.fact(*v);
            outputs.push(Operand::Temp { id: n_temps + 1 + j as u32, dtype: vf.dtype, shape: vf.shape.clone() });
        }
        let op = self.node_op(node, inputs, outputs);
        nodes.push(op);
        if let Some(c) = f.cast {
            let cast = &graph.nodes[c];
            let out = self.operand(stored)?;
            let op = self.node_op(cast, vec![Some(y_temp)], vec![out]);
            nodes.push(op);
        }
        self.stats.fused_nodes += nodes.len();
        self.stats.fused_norms += 1;
        self.kernel_step(&node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }
}
