//! Elementwise groups: an elementwise node whose input an elementwise node with no other reader
//! produces joins that node's group; a group is one step and one generated kernel over an
//! expression tree (`node_expr`: each ONNX op as an [`Expr`]).

use super::registry::{gpu_ops, GpuOp, Registry};
use super::*;

/// How an elementwise op is computed: an [`Expr`] operator over its inputs, or an expression
/// a function builds from the node (its attributes, its inputs' types).
pub(super) enum Ew {
    /// The inputs folded left by the operator (`a ∘ b ∘ c`).
    Binary(Binary),
    /// The operator on input 0.
    Unary(Unary),
    /// The node's expression over its inputs' expressions.
    Custom(ExprFn),
}

/// The expression of a node over its inputs' expressions (`None`: an input that is not an
/// expression, an absent optional input or an Expand's target shape).
pub(super) type ExprFn = fn(&Graph, &Node, &[Option<Expr>]) -> Result<Expr, String>;

/// Registers the ops one elementwise kernel computes (Transpose through permuted strides).
pub(super) fn register(registry: &mut Registry) {
    use Binary as B;
    use Unary as U;
    let ops = [
        ("Add", Ew::Binary(B::Add)),
        ("Sub", Ew::Binary(B::Sub)),
        ("Mul", Ew::Binary(B::Mul)),
        ("Div", Ew::Binary(B::Div)),
        ("Pow", Ew::Custom(pow)),
        ("Max", Ew::Binary(B::Max)),
        ("Min", Ew::Binary(B::Min)),
        ("Equal", Ew::Binary(B::Equal)),
        ("Less", Ew::Binary(B::Less)),
        ("Greater", Ew::Binary(B::Greater)),
        ("LessOrEqual", Ew::Binary(B::LessOrEqual)),
        ("GreaterOrEqual", Ew::Binary(B::GreaterOrEqual)),
        ("And", Ew::Binary(B::And)),
        ("Or", Ew::Binary(B::Or)),
        ("Neg", Ew::Unary(U::Neg)),
        ("Abs", Ew::Unary(U::Abs)),
        ("Exp", Ew::Unary(U::Exp)),
        ("Log", Ew::Unary(U::Log)),
        ("Sqrt", Ew::Unary(U::Sqrt)),
        ("Reciprocal", Ew::Unary(U::Reciprocal)),
        ("Erf", Ew::Unary(U::Erf)),
        ("Tanh", Ew::Unary(U::Tanh)),
        ("Sigmoid", Ew::Unary(U::Sigmoid)),
        ("Relu", Ew::Unary(U::Relu)),
        ("Not", Ew::Unary(U::Not)),
        ("Floor", Ew::Unary(U::Floor)),
        ("Ceil", Ew::Unary(U::Ceil)),
        ("Cast", Ew::Custom(cast)),
        (
            "Where",
            Ew::Custom(|_, _, args| {
                Ok(Expr::Where(Box::new(arg(args, 0)?), Box::new(arg(args, 1)?), Box::new(arg(args, 2)?)))
            }),
        ),
        ("Clip", Ew::Custom(clip)),
        // The broadcast to the output shape happens at the inputs.
        ("Expand", Ew::Unary(U::Identity)),
        ("Gelu", Ew::Custom(gelu)),
        ("HardSigmoid", Ew::Custom(hard_sigmoid)),
        ("HardSwish", Ew::Custom(hard_swish)),
        ("LeakyRelu", Ew::Custom(leaky_relu)),
        // The permutation is in the input's description (see `lower_group`).
        ("Transpose", Ew::Custom(|_, _, args| arg(args, 0))),
    ];
    for (op, ew) in ops {
        registry.insert(op, GpuOp::Elementwise(ew));
    }
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

/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`: GELU's tanh form, in `t`.
pub(super) fn gelu_tanh_expr(x: Expr, t: DType) -> Expr {
    let c = |v: f64| Box::new(Expr::Const(v, t));
    let mul = |a: Box<Expr>, b: Box<Expr>| Box::new(Expr::Binary(Binary::Mul, a, b));
    let cube = mul(mul(Box::new(x.clone()), Box::new(x.clone())), Box::new(x.clone()));
    let inner = Expr::Binary(Binary::Add, Box::new(x.clone()), mul(c(0.044715), cube));
    let tanh = Expr::Unary(Unary::Tanh, mul(c((2.0 / std::f64::consts::PI).sqrt()), Box::new(inner)));
    let one_plus = Expr::Binary(Binary::Add, c(1.0), Box::new(tanh));
    Expr::Binary(Binary::Mul, mul(c(0.5), Box::new(x)), Box::new(one_plus))
}

/// The expression of one elementwise node over its inputs' expressions (its registry entry's).
pub(super) fn node_expr(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    match gpu_ops().get(&node.op_type) {
        Some(GpuOp::Elementwise(Ew::Binary(b))) => {
            let mut e = arg(args, 0)?;
            for i in 1..args.len() {
                e = Expr::Binary(*b, Box::new(e), Box::new(arg(args, i)?));
            }
            Ok(e)
        }
        Some(GpuOp::Elementwise(Ew::Unary(u))) => Ok(Expr::Unary(*u, Box::new(arg(args, 0)?))),
        Some(GpuOp::Elementwise(Ew::Custom(f))) => f(graph, node, args),
        _ => Err(format!("{} is not an elementwise op", node.op_type)),
    }
}

/// Input `i`'s expression.
fn arg(args: &[Option<Expr>], i: usize) -> Result<Expr, String> {
    args.get(i).cloned().flatten().ok_or_else(|| format!("input {i} is missing"))
}

/// Input `i`'s element type.
fn dtype(graph: &Graph, node: &Node, i: usize) -> Result<DType, String> {
    node.inputs.get(i).copied().flatten().map(|v| graph.fact(v).dtype).ok_or_else(|| format!("input {i} is missing"))
}

fn pow(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    // ONNX lets the exponent have another type: it is cast to the base's.
    let base = dtype(graph, node, 0)?;
    let mut e = arg(args, 1)?;
    if node.inputs.get(1).copied().flatten().map(|v| graph.fact(v).dtype) != Some(base) {
        e = Expr::Cast(base, Box::new(e));
    }
    Ok(Expr::Binary(Binary::Pow, Box::new(arg(args, 0)?), Box::new(e)))
}

fn cast(_: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let to = node.attrs.int("to", 0).map_err(|e| e.to_string())?;
    let to = DType::from_onnx(to as i32).ok_or_else(|| format!("Cast to type {to} is not built"))?;
    Ok(Expr::Cast(to, Box::new(arg(args, 0)?)))
}

fn clip(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let t = dtype(graph, node, 0)?;
    let mut e = arg(args, 0)?;
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
    Ok(e)
}

fn gelu(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let t = dtype(graph, node, 0)?;
    let x = arg(args, 0)?;
    match node.attrs.string("approximate", "none").map_err(|e| e.to_string())? {
        "none" => Ok(gelu_erf_expr(x, t)),
        "tanh" => Ok(gelu_tanh_expr(x, t)),
        other => Err(format!("Gelu with approximate={other} is not an ONNX form")),
    }
}

// The reference's formulas, op for op: clamp(α·x + β, 0, 1), x · clamp(x / 6 + 1/2, 0, 1),
// x < 0 ? α·x : x (Max / Min propagate NaN as the reference's clamp does).

/// `min(max(e, 0), 1)` in element type `t`.
fn clamp01(e: Expr, t: DType) -> Expr {
    let c = |v: f64| Box::new(Expr::Const(v, t));
    Expr::Binary(Binary::Min, Box::new(Expr::Binary(Binary::Max, Box::new(e), c(0.0))), c(1.0))
}

fn hard_sigmoid(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let t = dtype(graph, node, 0)?;
    let x = arg(args, 0)?;
    let alpha = node.attrs.float("alpha", 0.2).map_err(|e| e.to_string())? as f64;
    let beta = node.attrs.float("beta", 0.5).map_err(|e| e.to_string())? as f64;
    let c = |v: f64| Box::new(Expr::Const(v, t));
    let lin = Expr::Binary(Binary::Add, Box::new(Expr::Binary(Binary::Mul, c(alpha), Box::new(x))), c(beta));
    Ok(clamp01(lin, t))
}

fn hard_swish(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let t = dtype(graph, node, 0)?;
    let x = arg(args, 0)?;
    let c = |v: f64| Box::new(Expr::Const(v, t));
    let lin = Expr::Binary(Binary::Add, Box::new(Expr::Binary(Binary::Div, Box::new(x.clone()), c(6.0))), c(0.5));
    Ok(Expr::Binary(Binary::Mul, Box::new(x), Box::new(clamp01(lin, t))))
}

fn leaky_relu(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let t = dtype(graph, node, 0)?;
    let alpha = node.attrs.float("alpha", 0.01).map_err(|e| e.to_string())? as f64;
    let x = arg(args, 0)?;
    let neg = Expr::Binary(Binary::Less, Box::new(x.clone()), Box::new(Expr::Const(0.0, t)));
    let scaled = Expr::Binary(Binary::Mul, Box::new(Expr::Const(alpha, t)), Box::new(x.clone()));
    Ok(Expr::Where(Box::new(neg), Box::new(scaled), Box::new(x)))
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
