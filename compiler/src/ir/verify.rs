//! Structural checks of a graph: ids in range, single definitions, topological order,
//! every read value defined before use, and constants that match their declared type.

use super::{Graph, ValueKind};
use crate::Error;

/// Checks the graph's invariants; the first violation comes back as `Error::Invalid`.
pub fn verify(graph: &Graph) -> Result<(), Error> {
    let n_values = graph.values.len();
    let bad = |msg: String| Err(Error::Invalid(msg));
    let mut defined = vec![false; n_values];
    for &id in &graph.inputs {
        if id.index() >= n_values {
            return bad(format!("graph input {id} out of range"));
        }
        if graph.value(id).kind != ValueKind::Input {
            return bad(format!("graph input {id} is not marked as an input"));
        }
        defined[id.index()] = true;
    }
    for (id, init) in &graph.initializers {
        if id.index() >= n_values {
            return bad(format!("initializer {id} out of range"));
        }
        if graph.value(*id).kind != ValueKind::Initializer {
            return bad(format!("initializer {id} is not marked as an initializer"));
        }
        if init.fact() != graph.value(*id).fact {
            return bad(format!("initializer {id} holds {} but is declared {}", init.fact(), graph.value(*id).fact));
        }
        if std::mem::replace(&mut defined[id.index()], true) {
            return bad(format!("value {id} is defined twice"));
        }
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        for input in node.inputs.iter().flatten() {
            if input.index() >= n_values || !defined[input.index()] {
                return bad(format!(
                    "node {:?} ({}) reads {input} before it is defined",
                    node.name,
                    node.op_type.escape_debug()
                ));
            }
        }
        for out in &node.outputs {
            if out.index() >= n_values {
                return bad(format!("node {:?} writes {out} out of range", node.name));
            }
            if graph.value(*out).kind != ValueKind::NodeOutput(super::NodeId(i as u32)) {
                return bad(format!("value {out} is not marked as output of node {:?}", node.name));
            }
            if std::mem::replace(&mut defined[out.index()], true) {
                return bad(format!("value {out} is defined twice"));
            }
        }
    }
    for out in &graph.outputs {
        if out.index() >= n_values || !defined[out.index()] {
            return bad(format!("graph output {out} is never defined"));
        }
    }
    let mut names = std::collections::HashSet::new();
    for v in &graph.values {
        if !names.insert(v.name.as_str()) {
            return bad(format!("value name {:?} is used twice", v.name));
        }
    }
    Ok(())
}
