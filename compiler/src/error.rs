//! The compiler's error type. Messages are lowercase, one line, and name the node and
//! op type wherever a node is involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("not a valid ONNX model ({reason})")]
    Decode { path: String, reason: String },
    #[error("node {node:?}: unsupported op {op_type} (domain {domain:?}, opset {opset})")]
    UnknownOp { node: String, op_type: String, domain: String, opset: i64 },
    #[error("node {node:?} ({op_type}): {message}")]
    Op { node: String, op_type: String, message: String },
    #[error("tensor {name:?}: {message}")]
    Tensor { name: String, message: String },
    #[error("input {name:?}: {message}")]
    Input { name: String, message: String },
    #[error("invalid graph: {0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(String),
    /// A bad TeSA attrs file (`--tesa attrs.json`).
    #[error("tesa attrs: {0}")]
    TesaAttrs(String),
}

impl Error {
    pub fn op(node: &crate::ir::Node, err: crate::ops::OpError) -> Error {
        Error::Op { node: node.name.clone(), op_type: node.op_type.clone(), message: err.0 }
    }

    pub fn tensor(name: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Tensor { name: name.into(), message: message.into() }
    }

    pub fn input(name: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Input { name: name.into(), message: message.into() }
    }
}
