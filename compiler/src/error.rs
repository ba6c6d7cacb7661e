//! The compiler's error type. Messages are lowercase, one line, and name the node and
//! op type wherever a node is involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// A file or folder that could not be written (or created).
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("not a valid ONNX model ({reason})")]
    Decode { path: String, reason: String },
    #[error("node {node:?}: unsupported op {} (domain {domain:?}, opset {opset})", OneLine(.op_type))]
    UnknownOp { node: String, op_type: String, domain: String, opset: i64 },
    #[error("node {node:?} ({}): {message}", OneLine(.op_type))]
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

/// Text from the model (an op type) shown as is, with control characters escaped so the
/// message stays on one line whatever bytes the model holds.
struct OneLine<'a>(&'a str);

impl std::fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl Error {
    pub fn tensor(name: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Tensor { name: name.into(), message: message.into() }
    }

    pub fn input(name: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Input { name: name.into(), message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model's op type with a newline in it (a corrupted file) still gives a one-line error.
    #[test]
    fn op_types_with_control_characters_stay_on_one_line() {
        let e = Error::UnknownOp { node: "t".into(), op_type: "Tran\npose".into(), domain: String::new(), opset: 17 };
        assert_eq!(e.to_string(), "node \"t\": unsupported op Tran\\npose (domain \"\", opset 17)");
        let e = Error::Op { node: "n".into(), op_type: "A\tB".into(), message: "bad".into() };
        assert_eq!(e.to_string(), "node \"n\" (A\\tB): bad");
        let plain = Error::UnknownOp { node: "x".into(), op_type: "FancyOp".into(), domain: String::new(), opset: 19 };
        assert_eq!(plain.to_string(), "node \"x\": unsupported op FancyOp (domain \"\", opset 19)");
    }
}
