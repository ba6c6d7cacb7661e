//! spartac: a sparsity-aware deep-learning compiler.
//!
//! Data flow: ONNX (`frontend`) -> [`ir::Graph`] -> passes -> plan -> kernels -> runtime.
//! This crate holds the IR, the ONNX frontend, the operator registry with the reference
//! semantics of every op, and the CPU reference executor that is the correctness oracle.
//! It never links CUDA.

pub mod codegen;
pub mod error;
pub mod frontend;
pub mod ir;
pub mod npy;
pub mod ops;
pub mod output;
pub mod plan;
pub mod program;
pub mod propagate;
pub mod reference;
pub mod rng;
pub mod tesa;

pub use error::Error;
