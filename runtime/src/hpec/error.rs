//! Errors of the HPEC Sparse DNN Challenge readers, cache and engines.
//!
//! Parse errors always name the file (or archive member) and the 1-based line.

use std::path::Path;

/// Everything that can go wrong while reading, caching, generating or running HPEC networks.
#[derive(Debug, thiserror::Error)]
pub enum HpecError {
    /// A line of a TSV file could not be accepted.
    #[error("{file}:{line}: {message}")]
    Parse { file: String, line: u64, message: String },

    /// An operating-system error on a named path.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// The set of layer files is not `n{N}-l1.tsv` .. `n{N}-l{L}.tsv`.
    #[error("{source_name}: {message}")]
    LayerSet { source_name: String, message: String },

    /// A layer or image file names a neuron count different from the network's.
    #[error("neuron count mismatch: {message}")]
    NeuronMismatch { message: String },

    /// Arguments that do not describe a valid network, generator run or inference.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A relabelling file could not be accepted.
    #[error("{file}: invalid relabellings: {message}")]
    Relabellings { file: String, message: String },
}

/// Result type of the `hpec` module.
pub type HpecResult<T> = Result<T, HpecError>;

impl HpecError {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> HpecError {
        HpecError::Io { path: path.as_ref().display().to_string(), source }
    }

    pub fn parse(file: &str, line: u64, message: impl Into<String>) -> HpecError {
        HpecError::Parse { file: file.to_string(), line, message: message.into() }
    }

    pub fn layer_set(source_name: impl Into<String>, message: impl Into<String>) -> HpecError {
        HpecError::LayerSet { source_name: source_name.into(), message: message.into() }
    }
}
