//! spartac-runtime: engines that run what the compiler produces.
//!
//! Today one graph engine exists, `cpu`, which runs a graph with the reference semantics
//! and frees every intermediate after its last use. The CUDA engine (cudarc with dynamic
//! loading, so that building needs no CUDA) joins it behind the same [`Engine`] trait;
//! `Backend::Auto` picks the best engine that is present on the machine. `hpec` holds the
//! HPEC Sparse DNN Challenge: data formats, generator and its own CPU engine.

pub mod cuda;
pub mod engine;
pub mod exec;
pub mod host_memory;
pub mod hpec;
pub mod npz;

pub use engine::{available_engines, select_engine, Backend, CpuEngine, Engine, RunOutput, RuntimeError};
