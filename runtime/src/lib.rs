//! spartac-runtime: engines that run what the compiler produces.
//!
//! - [`engine`]: graph engines behind the [`Engine`] trait. One exists, `cpu`, which runs a
//!   graph with the reference semantics and frees every intermediate after its last use;
//!   `Backend::Auto` picks the best engine present on the machine.
//! - [`exec`]: the executors of a compiled `Program`: the CPU executor (the simulation every
//!   program is tested with) and one CUDA graph per program; [`exec::model`] runs a compiled
//!   model with named tensors in and out.
//! - [`cuda`]: the minimal CUDA runtime (cudarc with dynamic loading, so building needs no
//!   CUDA and a machine without a driver gets an error, not a panic), and the sparse-matmul
//!   cases the kernel tests and benchmarks run.
//! - [`hpec`]: the HPEC Sparse DNN Challenge: data formats, generator, its own exact CPU engine
//!   and the compiled task graph.
//! - [`npz`] (`.npz` files, written atomically), [`host_memory`] (allocator tuning).

pub mod cuda;
pub mod engine;
pub mod exec;
pub mod host_memory;
pub mod hpec;
pub mod npz;

pub use engine::{available_engines, select_engine, Backend, CpuEngine, Engine, RunOutput, RuntimeError};
