//! spartac: a sparsity-aware deep-learning compiler.
//!
//! Data flow, one module per stage: ONNX ([`frontend`]) -> [`ir::Graph`] -> TeSA annotation
//! ([`tesa`]) -> [`propagate`] -> [`plan`] -> specialized kernels ([`codegen`]) -> a GPU-free
//! [`program::Program`], which the runtime crate executes. Beside them: the operator registry
//! with the reference semantics of every op ([`ops`]) and the CPU reference executor
//! ([`mod@reference`]) that is the correctness oracle.
//!
//! It never links CUDA (no cudarc in its dependency tree). Where a kernel needs a driver object
//! (a TMA tensor map), the compiler only describes it ([`codegen::TmaBox`]) and the runtime
//! builds it.
//!
//! Below `plan` and `codegen` sits [`kernel_choice`]: the matmul spec, the kernel families and
//! the rules that pick a family and count its work, which both use (`plan` never imports
//! `codegen`). Above both sits [`tune`], which plans, specializes and times candidates.

pub mod codegen;
pub mod contained;
pub mod error;
pub mod frontend;
pub mod hash;
pub mod ir;
pub mod kernel_choice;
pub mod npy;
pub mod ops;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod program;
pub mod propagate;
pub mod reference;
pub mod rewrite;
pub mod rng;
pub mod sparse;
pub mod tesa;
pub mod tune;

pub use error::Error;

/// The version of this build (caches keyed by it are rebuilt by a new spartac).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
