//! The graph IR: tensors, attributes, the graph itself, its text form and its checks.

mod attrs;
mod graph;
mod print;
mod tensor;
pub mod tesa;
mod verify;

pub use attrs::{format_float, Attr, Attrs, OpError};
pub use graph::{Graph, Initializer, Node, NodeId, SparseTensor, Value, ValueFact, ValueId, ValueKind};
pub use print::print_graph;
pub use tensor::{
    broadcast_all, broadcast_index_map, broadcast_shapes, checked_numel, normalize_axis, numel, strides, DType, Data,
    Element, Tensor,
};
pub use verify::verify;
