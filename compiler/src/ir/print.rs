//! The one deterministic text form of the IR, used for debugging and insta snapshots.
//!
//! ```text
//! graph "tiny" opsets(ai.onnx=17)
//!   input  %0 "x" : f32[2,4]
//!   const  %1 "w" : f32[4,3] #tesa(density 0.5, bits 32) dense density=0.5
//!   %2 "y" = MatMul(%0, %1) : f32[2,3] #tesa(density 1, bits 32)   # node "mm"
//!   output %2
//! ```
//! Value ids are the graph's stable ids; attributes are sorted by name; floats have a
//! fixed precision. A value's TeSA, once annotated, is printed inside its type.

use super::{format_float, Graph, Initializer, Value, ValueKind};
use std::fmt::Write as _;

/// Renders the graph in its text form.
pub fn print_graph(graph: &Graph) -> String {
    let mut out = String::new();
    let opsets: Vec<String> =
        graph.opsets.iter().map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d })).collect();
    let _ = writeln!(out, "graph {:?} opsets({})", graph.name, opsets.join(", "));
    for &id in &graph.inputs {
        let v = graph.value(id);
        let _ = writeln!(out, "  input  {id} {:?} : {}{}", v.name, v.fact, tesa_suffix(v));
    }
    for (id, init) in &graph.initializers {
        let v = graph.value(*id);
        let form = match init {
            Initializer::Dense(_) => "dense".to_string(),
            Initializer::Sparse(s) => format!("sparse nnz={}", s.nnz()),
        };
        let _ = writeln!(
            out,
            "  const  {id} {:?} : {}{} {form} density={}",
            v.name,
            v.fact,
            tesa_suffix(v),
            format_float(round6(init.density())),
        );
    }
    for node in &graph.nodes {
        let outs: Vec<String> = node.outputs.iter().map(|o| format!("{o} {:?}", graph.value(*o).name)).collect();
        let ins: Vec<String> = node
            .inputs
            .iter()
            .map(|i| match i {
                Some(i) => i.to_string(),
                None => "_".to_string(),
            })
            .collect();
        let types: Vec<String> = node
            .outputs
            .iter()
            .map(|o| {
                let v = graph.value(*o);
                format!("{}{}", v.fact, tesa_suffix(v))
            })
            .collect();
        let attrs = if node.attrs.is_empty() { String::new() } else { format!(" {{{}}}", node.attrs.to_text()) };
        let op =
            if node.domain.is_empty() { node.op_type.clone() } else { format!("{}.{}", node.domain, node.op_type) };
        let _ = writeln!(
            out,
            "  {} = {op}({}){attrs} : {}   # node {:?}",
            outs.join(", "),
            ins.join(", "),
            types.join(", "),
            node.name
        );
    }
    let outs: Vec<String> = graph.outputs.iter().map(|o| o.to_string()).collect();
    let _ = writeln!(out, "  output {}", outs.join(", "));
    debug_assert!(graph
        .values
        .iter()
        .all(|v| !matches!(v.kind, ValueKind::NodeOutput(n) if n.index() >= graph.nodes.len())));
    out
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The value's TeSA inside its type, e.g. ` #tesa(density 0.25, bits 8)`.
fn tesa_suffix(v: &Value) -> String {
    match &v.tesa {
        None => String::new(),
        Some(t) => format!(" {t}"),
    }
}
