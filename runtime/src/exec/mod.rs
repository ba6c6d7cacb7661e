//! Executors of compiled [`Program`](spartac::program::Program)s: [`cpu`] runs the steps on
//! the host (the simulation every program is tested with), [`cuda`] turns them into one CUDA
//! graph (kernel, memcpy and memset nodes, edges = the steps' `after` lists), instantiated once
//! and relaunched with updated per-run parameters.

pub mod cpu;
pub mod cuda;

/// Errors of program execution.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("step {step} ({label}): {message}")]
    Step { step: usize, label: String, message: String },
    #[error("{0}")]
    Shape(String),
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
}
