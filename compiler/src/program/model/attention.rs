//! Fused attention: where `softmax(f(Q·Kᵀ))·V` is found in the graph (an analysis over the
//! elementwise groups and the folded Transposes) and its one step (`codegen::graph_ops::attention`),
//! the score group as the kernel's expression, the folded Transposes and the in-place operands
//! (`strided_views.rs`) as its operand strides, every node kept for the CPU executor.
//!
//! A Q or K scaled by a one-element constant before the scores MatMul (`nn.MultiheadAttention`
//! exports `1/√d` as `1/⁴√d` on each of Q and Kᵀ) is not computed apart: `(c₁·q)·(c₂·k) =
//! c₁·c₂·(q·k)`, so the kernel reads the unscaled operands and its score expression multiplies
//! the raw scores by the constants (in f32). In a 16-bit model the reference rounds `c·q` and
//! `c·k` to the 16-bit type before the matmul and the kernel does not: the two differ by that
//! rounding (2⁻¹¹ relative in f16, within the 1e-2 normwise check of 16-bit models); the CPU
//! executor computes the graph's Muls as they are.

use super::{norm_axis, sanitize, scalar_constant, transpose_perm, Lowering};
use crate::codegen::graph_ops::{self, Binary, Expr, TensorDesc};
use crate::ir::{DType, ValueId};
use crate::program::{Arg, Op, Operand, ProgramError};
use std::collections::HashMap;

/// An attention that runs as one kernel ([`graph_ops::attention`]): node indices of the
/// scores MatMul, the elementwise group between it and the Softmax (empty when there is none),
/// the Softmax, the probabilities·V MatMul and the Transpose after it whose permutation the
/// kernel's output strides take; `scales`: the Muls by a one-element constant that make the
/// scores MatMul's Q and K operands, when they are absorbed (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct AttentionFusion {
    pub scores: usize,
    pub group: Vec<usize>,
    pub softmax: usize,
    pub pv: usize,
    pub out_transpose: Option<usize>,
    pub scales: [Option<Scale>; 2],
}

/// A Mul by a one-element constant absorbed into the score expression: the node, the position
/// of its data input, the constant's type and value.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scale {
    pub node: usize,
    pub data: usize,
    pub dtype: DType,
    pub value: f64,
}

impl Lowering<'_> {
    /// The attentions to fuse (see [`AttentionFusion`]): a Softmax over the last axis read only
    /// by an activation×activation MatMul as its left operand, whose input is an activation
    /// MatMul's output, directly or through an elementwise group (no Transpose in it) that
    /// reads it and other values; every value on the way read by the next node alone; heads
    /// the kernel takes ([`graph_ops::attention_fits`]: any number of keys); float types.
    pub(super) fn find_attention(&self, groups: &HashMap<usize, Vec<usize>>) -> Vec<AttentionFusion> {
        let graph = self.graph;
        let producer = |v: ValueId| graph.nodes.iter().position(|n| n.outputs.contains(&v));
        let act_matmul =
            |i: usize| graph.nodes[i].op_type == "MatMul" && !self.planned.contains_key(graph.nodes[i].name.as_str());
        let float = |v: ValueId| matches!(graph.fact(v).dtype, DType::F32 | DType::F16 | DType::BF16);
        let mut found = vec![];
        for (pv, node) in graph.nodes.iter().enumerate() {
            if !act_matmul(pv) {
                continue;
            }
            let (Some(p), Some(vv)) = (node.inputs.first().copied().flatten(), node.inputs.get(1).copied().flatten())
            else {
                continue;
            };
            let Some(sm) = producer(p) else { continue };
            let smn = &graph.nodes[sm];
            let rank = graph.fact(p).shape.len();
            let axis = smn.attrs.int("axis", if smn.opset >= 13 { -1 } else { 1 }).unwrap_or(0);
            if smn.op_type != "Softmax"
                || self.only_consumer(p) != Some(pv)
                || rank < 2
                || norm_axis(axis, rank) != Some(rank - 1)
            {
                continue;
            }
            let Some(x) = smn.inputs.first().copied().flatten() else { continue };
            let Some(g) = producer(x) else { continue };
            if self.only_consumer(x) != Some(sm) {
                continue;
            }
            let (scores, group) = if act_matmul(g) {
                (g, vec![])
            } else if let Some(members) = groups.get(&g) {
                if members.iter().any(|&m| graph.nodes[m].op_type == "Transpose") {
                    continue;
                }
                let inside: Vec<ValueId> = members.iter().flat_map(|&m| graph.nodes[m].outputs.clone()).collect();
                let mut matmuls: Vec<usize> = members
                    .iter()
                    .flat_map(|&m| graph.nodes[m].inputs.iter().flatten())
                    .filter(|v| !inside.contains(v))
                    .filter_map(|&v| producer(v).filter(|&pr| act_matmul(pr)))
                    .collect();
                matmuls.sort_unstable();
                matmuls.dedup();
                let [s] = matmuls[..] else { continue };
                (s, members.clone())
            } else {
                continue;
            };
            let sv = graph.nodes[scores].outputs[0];
            let readers_ok =
                self.consumers[sv.0 as usize].iter().all(|c| group.contains(c) || group.is_empty() && *c == sm);
            if self.is_output[sv.0 as usize] || !readers_ok {
                continue;
            }
            let snode = &graph.nodes[scores];
            let (Some(q), Some(k)) = (snode.inputs.first().copied().flatten(), snode.inputs.get(1).copied().flatten())
            else {
                continue;
            };
            // Q and K scaled by constants: the scale joins the score expression.
            let scales = if q == k { [None, None] } else { [q, k].map(|v| self.scale_of(v, scores, groups)) };
            let o = node.outputs[0];
            if ![q, k, vv, sv, x, p, o].into_iter().all(float) {
                continue;
            }
            let (kf, vf, of) = (graph.fact(k), graph.fact(vv), graph.fact(o));
            if kf.shape.len() < 2 || vf.shape.len() < 2 || of.shape.len() < 2 || graph.fact(q).shape.len() < 2 {
                continue;
            }
            let (d, sk) = (kf.shape[kf.shape.len() - 2], kf.shape[kf.shape.len() - 1]);
            let dv = vf.shape[vf.shape.len() - 1];
            let batch: usize = of.shape[..of.shape.len() - 2].iter().product();
            let sq = of.shape[of.shape.len() - 2];
            if [sq, sk, d, dv].contains(&0) || !graph_ops::attention_fits(batch, sq, d, dv) {
                continue;
            }
            // The Transpose after it, when nothing else reads the product, is the output's strides.
            let out_transpose = self
                .only_consumer(o)
                .filter(|&t| graph.nodes[t].op_type == "Transpose" && groups.get(&t).is_none_or(|m| m.len() == 1));
            found.push(AttentionFusion { scores, group, softmax: sm, pv, out_transpose, scales });
        }
        found
    }

    /// The Mul by a one-element constant that makes `v`, read by the scores MatMul `scores`
    /// alone, when it is an elementwise group of its own and keeps its data's shape and type.
    fn scale_of(&self, v: ValueId, scores: usize, groups: &HashMap<usize, Vec<usize>>) -> Option<Scale> {
        let graph = self.graph;
        let m = graph.nodes.iter().position(|n| n.outputs.contains(&v))?;
        let node = &graph.nodes[m];
        if node.op_type != "Mul"
            || node.inputs.len() != 2
            || self.only_consumer(v) != Some(scores)
            || groups.get(&m).map(Vec::as_slice) != Some(&[m][..])
        {
            return None;
        }
        let (a, b) = (node.inputs[0]?, node.inputs[1]?);
        let (data, (dtype, value)) = match (scalar_constant(graph, a), scalar_constant(graph, b)) {
            (None, Some(c)) => (0, c),
            (Some(c), None) => (1, c),
            _ => return None,
        };
        let (xf, vf) = (graph.fact(node.inputs[data]?), graph.fact(v));
        let same = xf.shape == vf.shape && xf.dtype == vf.dtype && dtype == vf.dtype;
        (same && dtype.is_float()).then_some(Scale { node: m, data, dtype, value })
    }

    /// One step for a fused attention: the [`graph_ops::attention`] kernel, its nodes (the
    /// folded Transposes, both MatMuls, the score group, the Softmax) for the CPU executor.
    pub(super) fn lower_attention(&mut self, f: &AttentionFusion) -> Result<(), ProgramError> {
        let graph = self.graph;
        let pv_node = &graph.nodes[f.pv];
        let s_node = &graph.nodes[f.scores];
        let mut nodes = vec![];
        let mut next_temp = 0u32;
        let mut temp = |v: ValueId| {
            let fact = graph.fact(v);
            next_temp += 1;
            Operand::Temp { id: next_temp - 1, dtype: fact.dtype, shape: fact.shape.clone() }
        };
        // q and k (the scores MatMul's operands) and v, each through its folded Transpose or
        // its absorbed scale.
        let mut descs = vec![];
        let mut args = vec![];
        let mut operands = vec![];
        for (slot, (at, pos)) in [(f.scores, 0), (f.scores, 1), (f.pv, 1)].into_iter().enumerate() {
            let node = &graph.nodes[at];
            let v = node.inputs[pos].ok_or_else(|| self.node_err(node, format!("input {pos} is missing")))?;
            let scale = f.scales.get(slot).copied().flatten();
            let transpose = self.folded.get(&at).and_then(|fs| fs.iter().find(|(p, _)| *p == pos)).map(|&(_, t)| t);
            let src = match (scale, transpose) {
                (Some(s), _) => {
                    let m = &graph.nodes[s.node];
                    m.inputs[s.data].ok_or_else(|| self.node_err(m, format!("input {} is missing", s.data)))?
                }
                (None, Some(t)) => {
                    graph.nodes[t].inputs[0].ok_or_else(|| self.node_err(&graph.nodes[t], "input 0 is missing"))?
                }
                (None, None) => v,
            };
            // The source as the kernel reads it, and as the CPU executor gets it.
            let (desc, arg, src_op) = match self.views.get(&src).cloned() {
                Some(chain) => {
                    let fact = graph.fact(src);
                    let desc =
                        TensorDesc { dtype: fact.dtype, shape: fact.shape.clone(), strides: chain.strides.clone() };
                    let mut op = self.operand(chain.base)?;
                    for (&n, &path) in chain.nodes.iter().zip(&chain.outs) {
                        let cn = &graph.nodes[n];
                        let mut inputs = vec![Some(op)];
                        for c in cn.inputs.iter().skip(1) {
                            inputs.push(c.map(|c| self.operand(c)).transpose()?);
                        }
                        // Every output of a Split gets a temporary; the chain goes on from one.
                        let temps: Vec<Operand> = cn.outputs.iter().map(|&o| temp(o)).collect();
                        let at = cn.outputs.iter().position(|&o| o == path).unwrap_or(0);
                        op = temps[at].clone();
                        nodes.push(self.node_op(cn, inputs, temps));
                    }
                    (desc, Arg::Buf(self.buf(chain.base)?, chain.offset), op)
                }
                None => (self.desc(src), Arg::Buf(self.buf(src)?, 0), self.operand(src)?),
            };
            match (scale, transpose) {
                (Some(s), _) => {
                    // The CPU executor scales; the kernel's score expression does (below).
                    descs.push(desc);
                    let mut inputs = vec![None, None];
                    inputs[s.data] = Some(src_op);
                    inputs[1 - s.data] = Some(Operand::Scalar { dtype: s.dtype, value: s.value });
                    let tmp = temp(v);
                    nodes.push(self.node_op(&graph.nodes[s.node], inputs, vec![tmp.clone()]));
                    operands.push(tmp);
                }
                (None, Some(t)) => {
                    let tnode = &graph.nodes[t];
                    descs.push(desc.permuted(&transpose_perm(graph, tnode)));
                    let tmp = temp(v);
                    nodes.push(self.node_op(tnode, vec![Some(src_op)], vec![tmp.clone()]));
                    operands.push(tmp);
                }
                (None, None) => {
                    descs.push(desc);
                    operands.push(src_op);
                }
            }
            args.push(arg);
        }
        let sv = s_node.outputs[0];
        let s_temp = temp(sv);
        nodes.push(self.node_op(
            s_node,
            vec![Some(operands[0].clone()), Some(operands[1].clone())],
            vec![s_temp.clone()],
        ));
        let sm_node = &graph.nodes[f.softmax];
        let x = sm_node.inputs[0].ok_or_else(|| self.node_err(sm_node, "input 0 is missing"))?;
        let mut ext: Vec<(ValueId, Option<Vec<usize>>)> = vec![(sv, None)];
        let (expr, x_op) = if f.group.is_empty() {
            (Expr::Input(0), s_temp.clone())
        } else {
            let x_temp = temp(x);
            let temps = HashMap::from([(sv, s_temp.clone())]);
            let (expr, group_nodes) = self.group_expr(&f.group, &mut ext, &temps, x_temp.clone(), 1000)?;
            nodes.extend(group_nodes);
            (expr, x_temp)
        };
        // (c₁·q)·(c₂·k) = c₁·c₂·(q·k): the raw score times the absorbed scales.
        let scaled = f.scales.iter().flatten().fold(Expr::Input(0), |e, s| {
            Expr::Binary(Binary::Mul, Box::new(e), Box::new(Expr::Const(s.value, s.dtype)))
        });
        let expr = expr.replace_input(0, &scaled);
        let p_temp = temp(sm_node.outputs[0]);
        nodes.push(self.node_op(sm_node, vec![Some(x_op)], vec![p_temp.clone()]));
        let o = pv_node.outputs[0];
        let (out_desc, out_v) = match f.out_transpose {
            Some(t) => {
                let tnode = &graph.nodes[t];
                let perm = transpose_perm(graph, tnode);
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                (self.desc(tnode.outputs[0]).permuted(&inverse), tnode.outputs[0])
            }
            None => (self.desc(o), o),
        };
        let o_op = if f.out_transpose.is_some() { temp(o) } else { self.operand(o)? };
        nodes.push(self.node_op(pv_node, vec![Some(p_temp), Some(operands[2].clone())], vec![o_op.clone()]));
        if let Some(t) = f.out_transpose {
            let final_op = self.operand(out_v)?;
            nodes.push(self.node_op(&graph.nodes[t], vec![Some(o_op)], vec![final_op]));
        }
        let extras: Vec<TensorDesc> = ext[1..].iter().map(|(v, _)| self.desc(*v)).collect();
        for (v, _) in &ext[1..] {
            args.push(Arg::Buf(self.buf(*v)?, 0));
        }
        args.push(Arg::Buf(self.buf(out_v)?, 0));
        let name = format!("attention_{}", sanitize(&pv_node.name));
        let score_t = graph.fact(sv).dtype;
        let key_ends = self.attention_key_ends(sv, &f.group, x);
        let k = graph_ops::attention_with(
            &name,
            &descs[0],
            &descs[1],
            &descs[2],
            score_t,
            &extras,
            &expr,
            &out_desc,
            graph_ops::AttentionEngine::Auto,
            key_ends.as_deref(),
        )
        .map_err(|e| self.node_err(pv_node, e))?;
        self.stats.fused_nodes += nodes.len();
        self.kernel_step_args(&pv_node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// The values a fused attention's Q, K and V are read from: each MatMul operand, the
    /// input of the Transpose folded into it, or the data input of its absorbed scale.
    pub(super) fn attention_sources(&self, f: &AttentionFusion) -> Vec<ValueId> {
        let graph = self.graph;
        let mut out = vec![];
        for (slot, (at, pos)) in [(f.scores, 0), (f.scores, 1), (f.pv, 1)].into_iter().enumerate() {
            let folded = self.folded.get(&at).and_then(|fs| fs.iter().find(|(p, _)| *p == pos));
            let v = match (f.scales.get(slot).copied().flatten(), folded) {
                (Some(s), _) => graph.nodes[s.node].inputs.get(s.data).copied().flatten(),
                (None, Some(&(_, t))) => graph.nodes[t].inputs.first().copied().flatten(),
                (None, None) => graph.nodes[at].inputs.get(pos).copied().flatten(),
            };
            // Read by the Transpose, the Mul or the MatMul alone (Q and K of one value are not
            // in place).
            out.extend(v.filter(|&v| self.only_consumer(v).is_some()));
        }
        out
    }
}
