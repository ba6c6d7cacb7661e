//! Elementwise groups: an elementwise node whose input an elementwise node with no other reader
//! produces joins that node's group; a group is one step and one generated kernel over an
//! expression tree (`node_expr`: each ONNX op as an [`Expr`]).

use super::*;

/// Ops one elementwise kernel computes (Transpose through permuted strides).
pub(super) const ELEMENTWISE: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Neg",
    "Abs",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Not",
    "Floor",
    "Ceil",
    "Cast",
    "Where",
    "Clip",
    "Expand",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Transpose",
];

pub(super) fn is_elementwise(op: &str) -> bool {
    ELEMENTWISE.contains(&op)
}

/// `0.5·x·(1 + erf(x/√2))` in element type `t`.
pub(super) fn gelu_erf_expr(x: Expr, t: DType) -> Expr {
    let c = |v: f64| Box::new(Expr::Const(v, t));
    let erf = Expr::Unary(
        Unary::Erf,
        Box::new(Expr::Binary(Binary::Mul, Box::new(x.clone()), c(std::f64::consts::FRAC_1_SQRT_2))),
    );
    let one_plus = Expr::Binary(Binary::Add, c(1.0), Box::new(erf));
    Expr::Binary(Binary::Mul, Box::new(Expr::Binary(Binary::Mul, c(0.5), Box::new(x))), Box::new(one_plus))
}

/// The expression of one elementwise node over its inputs' expressions.
pub(super) fn node_expr(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let arg = |i: usize| -> Result<Expr, String> {
        args.get(i).cloned().flatten().ok_or_else(|| format!("input {i} is missing"))
    };
    let un = |u: Unary| -> Result<Expr, String> { Ok(Expr::Unary(u, Box::new(arg(0)?))) };
    let bin = |b: Binary| -> Result<Expr, String> {
        let mut e = arg(0)?;
        for i in 1..args.len() {
            e = Expr::Binary(b, Box::new(e), Box::new(arg(i)?));
        }
        Ok(e)
    };
    let dtype = |i: usize| node.inputs.get(i).copied().flatten().map(|v| graph.fact(v).dtype);
    Ok(match node.op_type.as_str() {
        "Add" => bin(Binary::Add)?,
        "Sub" => bin(Binary::Sub)?,
        "Mul" => bin(Binary::Mul)?,
        "Div" => bin(Binary::Div)?,
        "Pow" => {
            // ONNX lets the exponent have another type: it is cast to the base's.
            let base = dtype(0).ok_or("input 0 is missing")?;
            let mut e = arg(1)?;
            if dtype(1) != Some(base) {
                e = Expr::Cast(base, Box::new(e));
            }
            Expr::Binary(Binary::Pow, Box::new(arg(0)?), Box::new(e))
        }
        "Max" => bin(Binary::Max)?,
        "Min" => bin(Binary::Min)?,
        "Equal" => bin(Binary::Equal)?,
        "Less" => bin(Binary::Less)?,
        "Greater" => bin(Binary::Greater)?,
        "LessOrEqual" => bin(Binary::LessOrEqual)?,
        "GreaterOrEqual" => bin(Binary::GreaterOrEqual)?,
        "And" => bin(Binary::And)?,
        "Or" => bin(Binary::Or)?,
        "Neg" => un(Unary::Neg)?,
        "Abs" => un(Unary::Abs)?,
        "Exp" => un(Unary::Exp)?,
        "Log" => un(Unary::Log)?,
        "Sqrt" => un(Unary::Sqrt)?,
        "Reciprocal" => un(Unary::Reciprocal)?,
        "Erf" => un(Unary::Erf)?,
        "Tanh" => un(Unary::Tanh)?,
        "Sigmoid" => un(Unary::Sigmoid)?,
        "Relu" => un(Unary::Relu)?,
        "Not" => un(Unary::Not)?,
        "Floor" => un(Unary::Floor)?,
        "Ceil" => un(Unary::Ceil)?,
        // The permutation is in the input's description (see `lower_group`).
        "Transpose" => arg(0)?,
        // The broadcast to the output shape happens at the inputs.
        "Expand" => un(Unary::Identity)?,
        "Cast" => {
            let to = node.attrs.int("to", 0).map_err(|e| e.to_string())?;
            let to = DType::from_onnx(to as i32).ok_or_else(|| format!("Cast to type {to} is not built"))?;
            Expr::Cast(to, Box::new(arg(0)?))
        }
        "Where" => Expr::Where(Box::new(arg(0)?), Box::new(arg(1)?), Box::new(arg(2)?)),
        "Clip" => {
            let t = dtype(0).ok_or("input 0 is missing")?;
            let mut e = arg(0)?;
            let (lo, hi) = if node.opset < 11 {
                let lo = node.attrs.float("min", f32::MIN).map_err(|e| e.to_string())?;
                let hi = node.attrs.float("max", f32::MAX).map_err(|e| e.to_string())?;
                (Some(Expr::Const(lo as f64, t)), Some(Expr::Const(hi as f64, t)))
            } else {
                (args.get(1).cloned().flatten(), args.get(2).cloned().flatten())
            };
            if let Some(lo) = lo {
                e = Expr::Binary(Binary::Max, Box::new(e), Box::new(lo));
            }
            if let Some(hi) = hi {
                e = Expr::Binary(Binary::Min, Box::new(e), Box::new(hi));
            }
            e
        }
        "Gelu" => {
            let t = dtype(0).ok_or("input 0 is missing")?;
            let x = arg(0)?;
            if node.attrs.string("approximate", "none").map_err(|e| e.to_string())? != "none" {
                return Err("Gelu with approximate=tanh is not built".into());
            }
            gelu_erf_expr(x, t)
        }
        // The reference's formulas, op for op: clamp(α·x + β, 0, 1), x · clamp(x / 6 + 1/2, 0, 1),
        // x < 0 ? α·x : x (Max / Min propagate NaN as the reference's clamp does).
        "HardSigmoid" | "HardSwish" => {
            let t = dtype(0).ok_or("input 0 is missing")?;
            let c = |v: f64| Box::new(Expr::Const(v, t));
            let x = arg(0)?;
            let (lin, scale) = if node.op_type == "HardSigmoid" {
                let alpha = node.attrs.float("alpha", 0.2).map_err(|e| e.to_string())? as f64;
                let beta = node.attrs.float("beta", 0.5).map_err(|e| e.to_string())? as f64;
                (
                    Expr::Binary(
                        Binary::Add,
                        Box::new(Expr::Binary(Binary::Mul, c(alpha), Box::new(x.clone()))),
                        c(beta),
                    ),
                    None,
                )
            } else {
                (
                    Expr::Binary(Binary::Add, Box::new(Expr::Binary(Binary::Div, Box::new(x.clone()), c(6.0))), c(0.5)),
                    Some(x),
                )
            };
            let clamped = Expr::Binary(Binary::Min, Box::new(Expr::Binary(Binary::Max, Box::new(lin), c(0.0))), c(1.0));
            match scale {
                Some(x) => Expr::Binary(Binary::Mul, Box::new(x), Box::new(clamped)),
                None => clamped,
            }
        }
        "LeakyRelu" => {
            let t = dtype(0).ok_or("input 0 is missing")?;
            let alpha = node.attrs.float("alpha", 0.01).map_err(|e| e.to_string())? as f64;
            let x = arg(0)?;
            let neg = Expr::Binary(Binary::Less, Box::new(x.clone()), Box::new(Expr::Const(0.0, t)));
            let scaled = Expr::Binary(Binary::Mul, Box::new(Expr::Const(alpha, t)), Box::new(x.clone()));
            Expr::Where(Box::new(neg), Box::new(scaled), Box::new(x))
        }
        other => return Err(format!("{other} is not an elementwise op")),
    })
}

impl Lowering<'_> {
    /// Elementwise groups, keyed by the index of their last node; each lists its nodes in
    /// graph order.
    pub(super) fn elementwise_groups(&self, absorbed: &[bool]) -> HashMap<usize, Vec<usize>> {
        let graph = self.graph;
        // group[i] = index of the last node of node i's group so far.
        let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut group_of: HashMap<usize, usize> = HashMap::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            if !is_elementwise(&node.op_type) || self.planned.contains_key(node.name.as_str()) || absorbed[i] {
                continue;
            }
            let mut mine = vec![];
            // A Transpose reads its input from memory (through permuted strides).
            let inputs = if node.op_type == "Transpose" { &[][..] } else { &node.inputs[..] };
            for v in inputs.iter().flatten() {
                let Some(p) = graph.nodes.iter().position(|n| n.outputs.contains(v)) else { continue };
                let Some(&head) = group_of.get(&p) else { continue };
                if self.only_consumer(*v) == Some(i) && graph.nodes[p].outputs.len() == 1 && !mine.contains(&head) {
                    mine.push(head);
                }
            }
            let mut list: Vec<usize> = mine.iter().flat_map(|h| members.remove(h).unwrap_or_default()).collect();
            list.push(i);
            list.sort_unstable();
            for &m in &list {
                group_of.insert(m, i);
            }
            members.insert(i, list);
        }
        members
    }

    /// One step for the group `members` (graph order, the last one's output leaves the group).
    pub(super) fn lower_group(&mut self, members: &[usize]) -> Result<(), ProgramError> {
        let graph = self.graph;
        let last = *members.last().expect("a group has a node");
        let out_v = graph.nodes[last].outputs[0];
        let mut ext = vec![];
        let out_operand = self.operand(out_v)?;
        let (expr, nodes) = self.group_expr(members, &mut ext, &HashMap::new(), out_operand, 0)?;
        // A Transpose reads its input through permuted strides; a Concat never formed, its parts.
        let inputs: Vec<_> = ext.iter().map(|(v, perm)| self.ew_input(*v, perm.as_deref())).collect();
        let out_desc = self.desc(out_v);
        let name = format!("ew_{}", sanitize(&graph.nodes[last].name));
        let k = graph_ops::elementwise_inputs(&name, &inputs, &out_desc, &expr)
            .map_err(|e| self.node_err(&graph.nodes[last], e))?;
        let mut args: Vec<BufferId> = vec![];
        for (v, _) in &ext {
            args.extend(self.ew_buffers(*v)?);
        }
        args.push(self.buf(out_v)?);
        let label = graph.nodes[last].name.clone();
        self.kernel_step(&label, Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// The expression of the group `members` (graph order) and its nodes for the CPU
    /// executor. `ext` lists the kernel inputs, distinct outside values that are not
    /// one-element constants, each with the permutation it is read through (a Transpose's
    /// input); values already in it keep their position (`Expr::Input(i)` is `ext[i]`), new
    /// ones are appended. `temps` gives the operand of outside values that are temporaries of
    /// an enclosing fused step; the values made inside are temporaries numbered from
    /// `temp_base`, but for the last node's output, which is `out`.
    pub(super) fn group_expr(
        &mut self,
        members: &[usize],
        ext: &mut Vec<(ValueId, Option<Vec<usize>>)>,
        temps: &HashMap<ValueId, Operand>,
        out: Operand,
        temp_base: u32,
    ) -> Result<(Expr, Vec<NodeOp>), ProgramError> {
        let graph = self.graph;
        let last = *members.last().expect("a group has a node");
        let inside: Vec<ValueId> = members.iter().flat_map(|&m| graph.nodes[m].outputs.clone()).collect();
        let out_v = graph.nodes[last].outputs[0];
        let temp_id = |v: ValueId| temp_base + inside.iter().position(|&x| x == v).expect("inside value") as u32;
        let mut exprs: HashMap<ValueId, Expr> = HashMap::new();
        let mut nodes = vec![];
        let mut concat_temps: HashMap<ValueId, Operand> = HashMap::new();
        for &m in members {
            let node = &graph.nodes[m];
            let mut args = vec![];
            let mut operands = vec![];
            let perm = (node.op_type == "Transpose").then(|| transpose_perm(graph, node));
            for (pos, v) in node.inputs.iter().enumerate() {
                let Some(v) = *v else {
                    args.push(None);
                    operands.push(None);
                    continue;
                };
                if node.op_type == "Expand" && pos == 1 {
                    // The target shape: the broadcast happens at the inputs.
                    args.push(None);
                    operands.push(Some(self.operand(v)?));
                } else if let Some(e) = exprs.get(&v) {
                    args.push(Some(e.clone()));
                    let f = graph.fact(v);
                    operands.push(Some(Operand::Temp { id: temp_id(v), dtype: f.dtype, shape: f.shape.clone() }));
                } else if let Some((dtype, value)) = scalar_constant(graph, v).filter(|_| node.op_type != "Expand") {
                    args.push(Some(Expr::Const(value, dtype)));
                    operands.push(Some(Operand::Scalar { dtype, value }));
                } else {
                    let key = (v, perm.clone());
                    let at = match ext.iter().position(|x| *x == key) {
                        Some(at) => at,
                        None => {
                            ext.push(key);
                            ext.len() - 1
                        }
                    };
                    args.push(Some(Expr::Input(at)));
                    let operand = match temps.get(&v) {
                        Some(t) => t.clone(),
                        // A Concat never formed: the CPU executor computes it into a temporary.
                        None if self.concat_reads.contains_key(&v) => {
                            let base = temp_base + inside.len() as u32;
                            self.concat_temp(v, base, &mut concat_temps, &mut nodes)?
                        }
                        None => self.operand(v)?,
                    };
                    operands.push(Some(operand));
                }
            }
            let expr = node_expr(graph, node, &args).map_err(|e| self.node_err(node, e))?;
            let o = node.outputs[0];
            let f = graph.fact(o);
            let operand = if o == out_v {
                out.clone()
            } else {
                Operand::Temp { id: temp_id(o), dtype: f.dtype, shape: f.shape.clone() }
            };
            exprs.insert(o, expr);
            let op = self.node_op(node, operands, vec![operand]);
            nodes.push(op);
        }
        let expr = exprs.remove(&out_v).expect("group output");
        Ok((expr, nodes))
    }

    /// A non-elementwise node that reduces to an elementwise identity (e.g. a reduction over
    /// no axis): its own one-node group with the input read as is.
    pub(super) fn lower_group_single(&mut self, node: &Node) -> Result<(), ProgramError> {
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let out = node.outputs[0];
        let expr = match node.op_type.as_str() {
            "ReduceSumSquare" => Expr::Binary(Binary::Mul, Box::new(Expr::Input(0)), Box::new(Expr::Input(0))),
            "ReduceL2" => Expr::Unary(Unary::Abs, Box::new(Expr::Input(0))),
            _ => Expr::Unary(Unary::Identity, Box::new(Expr::Input(0))),
        };
        let name = format!("ew_{}", sanitize(&node.name));
        let k = graph_ops::elementwise(&name, &[self.desc(x)], &self.desc(out), &expr)
            .map_err(|e| self.node_err(node, e))?;
        let operands =
            node.inputs.iter().map(|v| v.map(|v| self.operand(v)).transpose()).collect::<Result<Vec<_>, _>>()?;
        let outs = vec![self.operand(out)?];
        let op = self.node_op(node, operands, outs);
        let args = vec![self.buf(x)?, self.buf(out)?];
        self.kernel_step(&node.name.clone(), Op::Nodes(vec![op]), k, args);
        Ok(())
    }
}
