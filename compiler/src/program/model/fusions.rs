//! Which nodes run inside another node's step: epilogues absorbed by planned matmuls,
//! Transposes folded into activation MatMuls, NHWC convolutions and pools with their Transposes,
//! elementwise groups, attentions (with their constant Q and K scales and their operands read
//! in place), LayerNorms with their input's group and Concats read in place by the group after
//! them, chains of data movement from one tensor. The analysis the lowering loop then
//! follows; it also sets the loop iteration each node is computed at, from which buffer
//! lifetimes are counted.

use super::*;

impl Lowering<'_> {
    /// The fusions of the graph: records the attentions, NHWC convolutions, folded Transposes,
    /// in-place views and LayerNorm fusions in `self`, sets `self.last_use`, and returns the
    /// nodes already taken (`done`) and the elementwise groups keyed by their last node.
    pub(super) fn find_fusions(&mut self) -> (Vec<bool>, HashMap<usize, Vec<usize>>) {
        let graph = self.graph;
        // Nodes that planned matmuls' epilogues absorb stay out of the elementwise groups.
        // `emit_at[n]`: the loop iteration whose step computes node n.
        let mut emit_at: Vec<usize> = (0..graph.nodes.len()).collect();
        let mut absorbed = vec![false; graph.nodes.len()];
        if self.options.fuse_epilogues {
            for (i, node) in graph.nodes.iter().enumerate() {
                if let Some(op) = self.planned.get(node.name.as_str()) {
                    for a in self.epilogue_nodes(node, op) {
                        absorbed[a] = true;
                        emit_at[a] = i;
                    }
                }
            }
        }
        // Transposes read only by an activation×activation MatMul fold into its strides.
        let mut done = vec![false; graph.nodes.len()];
        if self.options.fuse_elementwise {
            for (i, node) in graph.nodes.iter().enumerate() {
                if node.op_type != "MatMul" || self.planned.contains_key(node.name.as_str()) {
                    continue;
                }
                for (pos, v) in node.inputs.iter().enumerate().take(2) {
                    let Some(v) = *v else { continue };
                    let Some(t) = graph.nodes.iter().position(|n| n.outputs.contains(&v)) else { continue };
                    if graph.nodes[t].op_type == "Transpose"
                        && self.only_consumer(v) == Some(i)
                        && graph.fact(v).shape.len() >= 2
                    {
                        self.folded.entry(i).or_default().push((pos, t));
                        absorbed[t] = true;
                        done[t] = true;
                        emit_at[t] = i;
                    }
                }
            }
        }
        // NHWC convolutions (as `rewrite::channels_last` leaves them): the Transposes around a
        // Conv, and an activation after it, run inside the one conv kernel.
        for i in 0..graph.nodes.len() {
            let Some((t_in, t_out)) = self.nhwc_conv(i) else { continue };
            let mut members = vec![t_in, t_out];
            if self.options.fuse_epilogues {
                if let Some((_, _, act)) = self.activation_after(graph.nodes[t_out].outputs[0]) {
                    members.extend(act);
                }
            }
            for m in members {
                absorbed[m] = true;
                done[m] = true;
                emit_at[m] = i;
            }
            self.convs.insert(i, (t_in, t_out));
        }
        // Channels-last pools, the same way (no epilogue).
        for i in 0..graph.nodes.len() {
            let Some((t_in, t_out)) = self.channels_last_pool(i) else { continue };
            for m in [t_in, t_out] {
                absorbed[m] = true;
                done[m] = true;
                emit_at[m] = i;
            }
            self.pools.insert(i, (t_in, t_out));
        }
        let mut groups =
            if self.options.fuse_elementwise { self.elementwise_groups(&absorbed) } else { HashMap::new() };
        // Attention (scores MatMul → score group → Softmax → ·V MatMul → Transpose) runs as one
        // kernel at its ·V MatMul, with the constant scales of Q and K.
        if self.options.fuse_elementwise {
            for f in self.find_attention(&groups) {
                let mut members = vec![f.scores, f.softmax];
                members.extend(&f.group);
                members.extend(self.folded.get(&f.scores).into_iter().flatten().map(|&(_, t)| t));
                members.extend(f.out_transpose);
                members.extend(f.scales.iter().flatten().map(|s| s.node));
                let scales = f.scales.iter().flatten().map(|s| &s.node);
                for g in f.group.last().into_iter().chain(&f.out_transpose).chain(scales) {
                    groups.remove(g);
                }
                // Q, K or V moved out of a wider value (sliced, heads split): read in place.
                let sources = self.attention_sources(&f);
                let chains = strided_views::attention_chains(self, &sources, &absorbed, &groups);
                for (v, chain) in sources.into_iter().zip(chains) {
                    let Some(chain) = chain else { continue };
                    for n in &chain.nodes {
                        groups.remove(n);
                    }
                    members.extend(&chain.nodes);
                    self.views.insert(v, chain);
                }
                for m in members {
                    absorbed[m] = true;
                    done[m] = true;
                    emit_at[m] = f.pv;
                }
                self.attention.insert(f.pv, f);
            }
        }
        // A group read by a LayerNorm alone (or before its other readers) runs in its kernel.
        if self.options.fuse_elementwise {
            for f in self.find_norm_fusions(&groups) {
                groups.remove(f.group.last().expect("a group has a node"));
                for &(_, g) in &f.gathers {
                    absorbed[g] = true;
                    done[g] = true;
                    emit_at[g] = f.norm;
                }
                if let Some(c) = f.cast {
                    groups.remove(&c);
                    absorbed[c] = true;
                    done[c] = true;
                    emit_at[c] = f.norm;
                }
                for &m in &f.group {
                    absorbed[m] = true;
                    done[m] = true;
                    emit_at[m] = f.norm;
                }
                self.norms.insert(f.norm, f);
            }
        }
        // LayerNorms between planned 16-bit block products: the products do their work
        // (`model/norm_defer.rs`); the residual Add, the LayerNorm and views of its output
        // are no step.
        let mut deferred = vec![];
        if self.options.fuse_epilogues && self.options.fuse_elementwise && self.options.defer_norms {
            deferred = self.find_deferred_norms(&groups, &emit_at);
            for d in &deferred {
                if !d.defer_ln && self.norms.contains_key(&d.ln) {
                    // The LayerNorm's step reads the sum the producer writes.
                    let f = self.norms.get_mut(&d.ln).expect("checked");
                    f.group.clear();
                    f.write_x = false;
                } else if self.norms.remove(&d.ln).is_none() {
                    for &m in &d.members {
                        if groups.get(&m).is_some_and(|g| g[..] == [m]) {
                            groups.remove(&m);
                        }
                    }
                }
                for &m in &d.members {
                    absorbed[m] = true;
                    done[m] = true;
                    emit_at[m] = d.producer;
                }
            }
        }
        // A residual Add (and a ReLU after it) that is a group of its own, after a planned
        // dense 16-bit MatMul, its other operand made by an earlier step: the MatMul's library
        // call adds it (`Lowering::residual_after`, `lower_planned`).
        if self.options.fuse_epilogues && self.options.fuse_elementwise {
            for (i, node) in graph.nodes.iter().enumerate() {
                let Some(op) = self.planned.get(node.name.as_str()).copied() else { continue };
                let Some(rf) = self.residual_after(i, op) else { continue };
                let key = *rf.members.last().expect("the Add");
                if groups.get(&key) != Some(&rf.members) {
                    continue;
                }
                let made_at = graph
                    .nodes
                    .iter()
                    .position(|n| n.outputs.contains(&rf.residual))
                    .map(|p| groups.iter().find(|(_, ms)| ms.contains(&p)).map_or(emit_at[p], |(&k, _)| k));
                if made_at.is_some_and(|at| at >= i) {
                    continue;
                }
                groups.remove(&key);
                for &m in &rf.members {
                    absorbed[m] = true;
                    emit_at[m] = i;
                }
                self.residuals.insert(i, rf);
            }
        }
        // Chains of data movement from one tensor: one gather (`model/movement.rs`); before the
        // Concats read in place, so that a chain ending in a Concat (Swin's reverse roll) is one
        // step rather than its Slices each a step of their own.
        if self.options.fuse_elementwise {
            for mv in self.find_movements(&groups, &absorbed) {
                let last = *mv.members.last().expect("a chain has a node");
                for &m in &mv.members {
                    groups.remove(&m);
                    absorbed[m] = true;
                    emit_at[m] = last;
                    done[m] = m != last;
                }
                self.movements.insert(last, mv);
            }
        }
        // A Concat read by one node of a plain group alone: the group's kernel reads its parts.
        if self.options.fuse_elementwise && self.options.concat_reads {
            for (&last, members) in &groups {
                for &m in members {
                    for &v in graph.nodes[m].inputs.iter().flatten() {
                        let Some(c) = self.concat_read(v, m, last) else { continue };
                        if done[c] || absorbed[c] {
                            continue;
                        }
                        absorbed[c] = true;
                        done[c] = true;
                        emit_at[c] = last;
                        self.concat_reads.insert(v, c);
                        self.stats.fused_concats += 1;
                    }
                }
            }
        }
        for (&last, members) in &groups {
            for &m in members {
                emit_at[m] = last;
            }
        }
        self.last_use = last_uses(graph, &emit_at);
        // A deferred LayerNorm's sum is read where its output is.
        for d in deferred {
            let last = d.outs.iter().map(|v| self.last_use[v.index()]).max().unwrap_or(0);
            let s = &mut self.last_use[d.sum.index()];
            *s = (*s).max(last);
            for &v in &d.outs {
                self.deferred_reads.insert(v, d.producer);
            }
            self.stats.deferred_norms += usize::from(d.defer_ln);
            self.deferred.insert(d.producer, d);
        }
        (done, groups)
    }
}

/// A value is last read in the iteration that emits its last consumer (graph outputs: never;
/// values nothing reads: right after they are made).
fn last_uses(graph: &Graph, emit_at: &[usize]) -> Vec<usize> {
    let mut last_use = vec![0usize; graph.values.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for v in &node.outputs {
            last_use[v.0 as usize] = last_use[v.0 as usize].max(emit_at[n]);
        }
        for v in node.inputs.iter().flatten() {
            last_use[v.0 as usize] = last_use[v.0 as usize].max(emit_at[n]);
        }
    }
    for v in &graph.outputs {
        last_use[v.0 as usize] = usize::MAX;
    }
    last_use
}
