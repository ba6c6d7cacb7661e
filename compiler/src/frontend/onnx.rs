//! ModelProto -> Graph: opsets, inputs with pinned dims, initializers (dense and
//! sparse), nodes in topological order, shape inference and constant folding.
//!
//! Every value ends with a static dtype and shape. Symbolic input dims are pinned at load
//! (`--input-shape NAME=D1,D2,...`, `--dim SYMBOL=SIZE`, or inputs frozen into constants);
//! anything left unknown is refused with a message that says how to pin it. Folding evaluates
//! every node whose inputs are all constant, and `Shape` of a static shape, so the
//! Shape/Gather/Concat/Unsqueeze chains exporters emit disappear at load.

use super::tensor_proto::{sparse_from_proto, tensor_from_proto, DataDir};
use super::LoadOptions;
use crate::ir::{verify, Attr, Attrs, DType, Graph, Initializer, Node, NodeId, Tensor, ValueFact, ValueId, ValueKind};
use crate::ops::{registry, InferInput, NodeCtx};
use crate::Error;
use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::tensor_shape_proto::dimension::Value as DimValue;
use onnx_protobuf::type_proto::Value as TypeValue;
use onnx_protobuf::{AttributeProto, ModelProto, NodeProto, ValueInfoProto};
use std::collections::{BTreeMap, HashMap};

/// Outputs of a foldable node may hold at most this many elements in total.
const FOLD_LIMIT_ELEMENTS: usize = 1 << 24;

pub(super) fn convert(model: &ModelProto, dir: DataDir, opts: &LoadOptions) -> Result<Graph, Error> {
    let proto = model.graph.as_ref().ok_or_else(|| Error::Invalid("the model has no graph".into()))?;
    let mut graph = Graph { name: proto.name.clone(), ..Graph::default() };
    for o in &model.opset_import {
        let domain = if o.domain == "ai.onnx" { String::new() } else { o.domain.clone() };
        graph.opsets.insert(domain, o.version);
    }
    if model.opset_import.is_empty() {
        // IR version 2 models had no opset_import: opset 1 is implied.
        graph.opsets.insert(String::new(), 1);
    }

    // Constants first, so that graph inputs that shadow initializers (old exporters list
    // weights as inputs too) are treated as constants.
    let mut init_tensors: Vec<(String, Initializer)> = vec![];
    for t in &proto.initializer {
        if t.name.is_empty() {
            return Err(Error::Invalid("an initializer has no name".into()));
        }
        init_tensors.push((t.name.clone(), Initializer::Dense(tensor_from_proto(t, dir)?)));
    }
    for s in &proto.sparse_initializer {
        let name = s.values.name.clone();
        if name.is_empty() {
            return Err(Error::Invalid("a sparse initializer has no name (values.name)".into()));
        }
        init_tensors.push((name, Initializer::Sparse(sparse_from_proto(s, dir)?)));
    }
    for (name, value) in &opts.frozen_inputs {
        let info = proto
            .input
            .iter()
            .find(|i| &i.name == name)
            .ok_or_else(|| Error::input(name, "cannot be frozen: it is not a graph input"))?;
        let declared = input_fact(
            info,
            &LoadOptions {
                input_shapes: BTreeMap::from([(name.clone(), value.shape().to_vec())]),
                ..LoadOptions::default()
            },
            &HashMap::new(),
        )?;
        if declared.dtype != value.dtype() {
            return Err(Error::input(
                name,
                format!("expects {} but the frozen value is {}", declared.dtype, value.dtype()),
            ));
        }
        init_tensors.retain(|(n, _)| n != name);
        init_tensors.push((name.clone(), Initializer::Dense(value.clone())));
    }
    let init_names: std::collections::HashSet<&str> = init_tensors.iter().map(|(n, _)| n.as_str()).collect();

    let mut by_name: HashMap<String, ValueId> = HashMap::new();
    let real_inputs: Vec<&ValueInfoProto> =
        proto.input.iter().filter(|i| !init_names.contains(i.name.as_str())).collect();
    for pinned in opts.input_shapes.keys() {
        if !real_inputs.iter().any(|i| &i.name == pinned) {
            let names: Vec<&str> = real_inputs.iter().map(|i| i.name.as_str()).collect();
            return Err(Error::input(
                pinned,
                format!("--input-shape names no graph input (inputs: {})", names.join(", ")),
            ));
        }
    }
    let symbols = bind_symbols(&real_inputs, opts)?;
    for info in &real_inputs {
        let fact = input_fact(info, opts, &symbols)?;
        fact.fits(opts.memory_budget).map_err(|e| Error::input(&info.name, e))?;
        let id = graph.add_value(info.name.clone(), fact, ValueKind::Input);
        if by_name.insert(info.name.clone(), id).is_some() {
            return Err(Error::input(&info.name, "is declared twice"));
        }
        graph.inputs.push(id);
    }
    for (name, init) in init_tensors {
        let id = graph.add_value(name.clone(), init.fact(), ValueKind::Initializer);
        if by_name.insert(name.clone(), id).is_some() {
            return Err(Error::tensor(&name, "is defined twice"));
        }
        graph.initializers.insert(id, init);
    }

    let order = topological_order(&proto.node, &by_name)?;
    for (position, &k) in order.iter().enumerate() {
        add_node(&mut graph, &mut by_name, &proto.node[k], position, opts)?;
    }

    for out in &proto.output {
        let id = *by_name
            .get(&out.name)
            .ok_or_else(|| Error::Invalid(format!("graph output {:?} is not produced by any node", out.name)))?;
        check_declared(&out.name, graph.fact(id), out)?;
        graph.outputs.push(id);
    }
    verify(&graph)?;
    Ok(graph)
}

/// Symbolic dim name -> size, from inputs pinned with `--input-shape`.
fn bind_symbols(inputs: &[&ValueInfoProto], opts: &LoadOptions) -> Result<HashMap<String, usize>, Error> {
    // A --dim for a symbol no input uses would silently do nothing: say so.
    let used: std::collections::BTreeSet<String> = inputs
        .iter()
        .filter_map(|i| declared_dims(i))
        .flatten()
        .filter_map(|d| match d {
            Some(DimValue::DimParam(sym)) if !sym.is_empty() => Some(sym),
            _ => None,
        })
        .collect();
    for sym in opts.dim_params.keys() {
        if !used.contains(sym) {
            let known: Vec<&str> = used.iter().map(String::as_str).collect();
            return Err(Error::Unsupported(format!(
                "--dim {sym}: no graph input has a symbolic dim of that name (symbols: {})",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )));
        }
    }
    let mut symbols: HashMap<String, usize> = opts.dim_params.clone().into_iter().collect();
    for info in inputs {
        let (Some(pinned), Some(dims)) = (opts.input_shapes.get(&info.name), declared_dims(info)) else { continue };
        if dims.len() != pinned.len() {
            continue; // reported by input_fact
        }
        for (d, &p) in dims.iter().zip(pinned) {
            if let Some(DimValue::DimParam(sym)) = d {
                if !sym.is_empty() {
                    symbols.entry(sym.clone()).or_insert(p);
                }
            }
        }
    }
    Ok(symbols)
}

fn declared_elem_type(info: &ValueInfoProto) -> Option<i32> {
    match info.type_.as_ref()?.value.as_ref()? {
        TypeValue::TensorType(t) => Some(t.elem_type),
        _ => None,
    }
}

/// The declared dims (each a value, a symbol, or unknown); `None` when no shape is given.
fn declared_dims(info: &ValueInfoProto) -> Option<Vec<Option<DimValue>>> {
    match info.type_.as_ref()?.value.as_ref()? {
        TypeValue::TensorType(t) => t.shape.as_ref().map(|s| s.dim.iter().map(|d| d.value.clone()).collect()),
        _ => None,
    }
}

fn input_fact(info: &ValueInfoProto, opts: &LoadOptions, symbols: &HashMap<String, usize>) -> Result<ValueFact, Error> {
    let name = &info.name;
    let code = declared_elem_type(info).ok_or_else(|| Error::input(name, "is not a tensor input"))?;
    let dtype = DType::from_onnx(code)
        .ok_or_else(|| Error::input(name, format!("element type {} is not supported", DType::onnx_code_name(code))))?;
    let declared = declared_dims(info);
    if let Some(pinned) = opts.input_shapes.get(name) {
        if let Some(dims) = &declared {
            if dims.len() != pinned.len() {
                return Err(Error::input(
                    name,
                    format!("model declares rank {} but --input-shape gives {pinned:?}", dims.len()),
                ));
            }
            for (axis, (d, &p)) in dims.iter().zip(pinned).enumerate() {
                if let Some(DimValue::DimValue(v)) = d {
                    if *v != p as i64 {
                        return Err(Error::input(
                            name,
                            format!("model fixes dim {axis} to {v} but --input-shape gives {p}"),
                        ));
                    }
                }
            }
        }
        return Ok(ValueFact::new(dtype, pinned.clone()));
    }
    let dims = declared.ok_or_else(|| {
        Error::input(name, "has no declared shape; pin it with --input-shape NAME=D1,D2,...".to_string())
    })?;
    let mut shape = vec![];
    for (axis, d) in dims.iter().enumerate() {
        match d {
            Some(DimValue::DimValue(v)) if *v >= 0 => shape.push(*v as usize),
            Some(DimValue::DimParam(sym)) if symbols.contains_key(sym) => shape.push(symbols[sym]),
            other => {
                let what = match other {
                    Some(DimValue::DimParam(sym)) if !sym.is_empty() => format!("symbolic dim {sym:?}"),
                    _ => "an unknown dim".to_string(),
                };
                return Err(Error::input(
                    name,
                    format!("dim {axis} is {what}; pin it with --input-shape {name}=D1,D2,..."),
                ));
            }
        }
    }
    Ok(ValueFact::new(dtype, shape))
}

/// Declared output type must agree with the inferred one where it is given statically.
fn check_declared(name: &str, fact: &ValueFact, info: &ValueInfoProto) -> Result<(), Error> {
    if let Some(code) = declared_elem_type(info) {
        if code != 0 && DType::from_onnx(code) != Some(fact.dtype) {
            return Err(Error::tensor(
                name,
                format!("model declares {} but the graph computes {}", DType::onnx_code_name(code), fact.dtype),
            ));
        }
    }
    if let Some(dims) = declared_dims(info) {
        let mismatch = dims.len() != fact.shape.len()
            || dims.iter().zip(&fact.shape).any(|(d, &s)| matches!(d, Some(DimValue::DimValue(v)) if *v != s as i64));
        if mismatch {
            let shown: Vec<String> = dims
                .iter()
                .map(|d| match d {
                    Some(DimValue::DimValue(v)) => v.to_string(),
                    Some(DimValue::DimParam(s)) => s.clone(),
                    _ => "?".into(),
                })
                .collect();
            return Err(Error::tensor(
                name,
                format!("shape mismatch: model declares [{}] but the graph computes {}", shown.join(","), fact),
            ));
        }
    }
    Ok(())
}

/// Kahn's algorithm, ties broken by the model's node order (so an already sorted model
/// keeps its order). Names no node produces must be graph inputs or initializers.
fn topological_order(nodes: &[NodeProto], known: &HashMap<String, ValueId>) -> Result<Vec<usize>, Error> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (k, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if known.contains_key(o.as_str()) || producer.insert(o.as_str(), k).is_some() {
                return Err(Error::Invalid(format!("value {o:?} is produced twice (node {:?})", n.name)));
            }
        }
    }
    let mut indegree = vec![0usize; nodes.len()];
    let mut users: Vec<Vec<usize>> = vec![vec![]; nodes.len()];
    for (k, n) in nodes.iter().enumerate() {
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            if let Some(&p) = producer.get(i.as_str()) {
                indegree[k] += 1;
                users[p].push(k);
            } else if !known.contains_key(i.as_str()) {
                return Err(Error::Invalid(format!(
                    "node {:?} ({}) reads {i:?}, which is no graph input, initializer or node output",
                    n.name,
                    n.op_type.escape_debug()
                )));
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..nodes.len()).filter(|&k| indegree[k] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(k) = ready.pop_first() {
        order.push(k);
        for &u in &users[k] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != nodes.len() {
        let stuck = (0..nodes.len()).find(|&k| indegree[k] > 0).map(|k| nodes[k].name.clone()).unwrap_or_default();
        return Err(Error::Invalid(format!("the graph has a cycle (through node {stuck:?})")));
    }
    Ok(order)
}

/// Converts one attribute. Tensor and list attributes (a Constant's `value`, `sparse_value`,
/// `value_floats`, ...) are held to the memory budget as initializers are: a sparse tensor is
/// checked before it is made dense.
fn attr_from_proto(a: &AttributeProto, node: &NodeProto, dir: DataDir, budget: usize) -> Result<Attr, Error> {
    let ty = a.type_.enum_value().unwrap_or(AttributeType::UNDEFINED);
    let bad = |what: &str| Error::Op {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        message: format!("attribute '{}': {what}", a.name),
    };
    let fits = |dtype: DType, shape: Vec<usize>| ValueFact::new(dtype, shape).fits(budget).map_err(|e| bad(&e));
    let dense = |t: Tensor| -> Result<Attr, Error> {
        fits(t.dtype(), t.shape().to_vec())?;
        Ok(Attr::Tensor(t))
    };
    // Lists are in memory already (the file held them), but a node must not hold more than a tensor may.
    fits(DType::F32, vec![a.floats.len()])?;
    fits(DType::I64, vec![a.ints.len()])?;
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| bad("string is not UTF-8"));
    Ok(match ty {
        AttributeType::FLOAT => Attr::Float(a.f),
        AttributeType::INT => Attr::Int(a.i),
        AttributeType::STRING => Attr::String(text(&a.s)?),
        AttributeType::TENSOR => dense(tensor_from_proto(&a.t, dir)?)?,
        AttributeType::SPARSE_TENSOR => {
            let s = sparse_from_proto(&a.sparse_tensor, dir)?;
            fits(s.values.dtype(), s.shape.clone())?;
            Attr::Tensor(s.to_dense())
        }
        AttributeType::FLOATS => Attr::Floats(a.floats.clone()),
        AttributeType::INTS => Attr::Ints(a.ints.clone()),
        AttributeType::STRINGS => Attr::Strings(a.strings.iter().map(|s| text(s)).collect::<Result<_, _>>()?),
        AttributeType::GRAPH | AttributeType::GRAPHS => return Err(bad("subgraphs are not supported")),
        AttributeType::UNDEFINED => {
            // Very old models leave the type out: infer it from the field that is set.
            if !a.ints.is_empty() {
                Attr::Ints(a.ints.clone())
            } else if !a.floats.is_empty() {
                Attr::Floats(a.floats.clone())
            } else if !a.s.is_empty() {
                Attr::String(text(&a.s)?)
            } else if a.t.is_some() {
                dense(tensor_from_proto(&a.t, dir)?)?
            } else if a.f != 0.0 {
                Attr::Float(a.f)
            } else {
                Attr::Int(a.i)
            }
        }
        other => return Err(bad(&format!("attribute type {other:?} is not supported"))),
    })
}

/// Adds one node (or folds it into constants). Returns whether it was folded.
fn add_node(
    graph: &mut Graph,
    by_name: &mut HashMap<String, ValueId>,
    np: &NodeProto,
    position: usize,
    opts: &LoadOptions,
) -> Result<bool, Error> {
    let domain = if np.domain == "ai.onnx" { String::new() } else { np.domain.clone() };
    let opset = graph.opsets.get(&domain).copied().unwrap_or(0);
    let name = if np.name.is_empty() { format!("{}_{position}", np.op_type) } else { np.name.clone() };
    let unknown =
        || Error::UnknownOp { node: name.clone(), op_type: np.op_type.clone(), domain: np.domain.clone(), opset };
    if !domain.is_empty() {
        return Err(unknown());
    }
    let def = registry().get(&np.op_type).ok_or_else(unknown)?;
    let mut attrs = Attrs::new();
    for a in &np.attribute {
        attrs.insert(a.name.clone(), attr_from_proto(a, np, opts.data_dir(), opts.memory_budget)?);
    }
    let inputs: Vec<Option<ValueId>> =
        np.input.iter().map(|i| if i.is_empty() { None } else { Some(by_name[i.as_str()]) }).collect();
    // Trailing omitted outputs are dropped; omitted outputs in the middle get made-up names.
    let n_outputs = np.output.iter().rposition(|o| !o.is_empty()).map_or(0, |p| p + 1);
    let node = Node { name, op_type: np.op_type.clone(), domain, opset, attrs, inputs, outputs: vec![] };
    let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset, n_outputs };

    // Sparse initializers are made dense only for a node that may fold (every input constant),
    // and only within the budget; other nodes see their facts alone, so a large sparse weight
    // is never materialized to describe or plan it.
    let foldable = node.inputs.iter().flatten().all(|id| graph.initializers.contains_key(id));
    let mut dense_consts: BTreeMap<ValueId, Tensor> = BTreeMap::new();
    for &id in node.inputs.iter().flatten() {
        if let (true, Some(Initializer::Sparse(s))) = (foldable, graph.initializers.get(&id)) {
            let fact = graph.fact(id);
            fact.fits(opts.memory_budget).map_err(|e| {
                Error::tensor(
                    &graph.values[id.index()].name,
                    format!("sparse initializer made dense for node {:?}: {e}", node.name),
                )
            })?;
            dense_consts.insert(id, s.to_dense());
        }
    }
    let const_of = |id: ValueId| -> Option<&Tensor> {
        match graph.initializers.get(&id) {
            Some(Initializer::Dense(t)) => Some(t),
            Some(Initializer::Sparse(_)) => dense_consts.get(&id),
            None => None,
        }
    };
    let infer_inputs: Vec<Option<InferInput>> =
        node.inputs.iter().map(|i| i.map(|id| InferInput { fact: graph.fact(id), value: const_of(id) })).collect();
    let facts = (def.infer)(&ctx, &infer_inputs).map_err(|e| Error::op(&node, e))?;
    if facts.len() < n_outputs {
        return Err(Error::op(
            &node,
            crate::ops::OpError::new(format!("declares {n_outputs} outputs but the op has {}", facts.len())),
        ));
    }
    // Every output's size is checked before anything folds or runs it.
    for (k, fact) in facts.iter().take(n_outputs).enumerate() {
        fact.fits(opts.memory_budget)
            .map_err(|e| Error::op(&node, crate::ops::OpError::new(format!("output {:?}: {e}", np.output[k]))))?;
    }

    // Fold when every input is constant (Shape only needs a static input shape).
    let all_const = node.inputs.iter().flatten().all(|&id| const_of(id).is_some());
    let small = facts.iter().take(n_outputs).map(|f| f.numel()).sum::<usize>() <= FOLD_LIMIT_ELEMENTS;
    let values: Option<Vec<Tensor>> = if opts.fold_constants && small && node.op_type == "Shape" {
        let x = node
            .inputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| Error::op(&node, crate::ops::OpError::new("missing input 0")))?;
        Some(vec![crate::ops::shape_of_fact(&ctx, graph.fact(x)).map_err(|e| Error::op(&node, e))?])
    } else if opts.fold_constants && small && all_const {
        let ins: Vec<Option<&Tensor>> = node.inputs.iter().map(|i| i.and_then(const_of)).collect();
        Some((def.eval)(&ctx, &ins).map_err(|e| Error::op(&node, e))?)
    } else {
        None
    };
    drop(infer_inputs);

    let node_id = NodeId(graph.nodes.len() as u32);
    let mut outputs = vec![];
    for (k, fact) in facts.into_iter().take(n_outputs).enumerate() {
        let out_name = if np.output[k].is_empty() { format!("{}:out{k}", node.name) } else { np.output[k].clone() };
        let kind = if values.is_some() { ValueKind::Initializer } else { ValueKind::NodeOutput(node_id) };
        let id = graph.add_value(out_name.clone(), fact.clone(), kind);
        by_name.insert(out_name.clone(), id);
        if let Some(vals) = &values {
            let t = vals[k].clone();
            if ValueFact::of(&t) != fact {
                return Err(Error::Invalid(format!(
                    "node {:?} ({}): folding computed {} but inference said {fact}",
                    node.name,
                    node.op_type,
                    ValueFact::of(&t)
                )));
            }
            graph.initializers.insert(id, Initializer::Dense(t));
        }
        outputs.push(id);
    }
    if values.is_some() {
        return Ok(true);
    }
    graph.nodes.push(Node { outputs, ..node });
    Ok(false)
}
