//! The engine interface, the CPU engine, and backend selection.
//!
//! An [`Engine`] runs a graph on named inputs; [`CpuEngine`] is the reference executor
//! (`spartac::reference`) on every core rayon gives it. [`Backend`] is `cpu` or `auto` (the
//! best engine present). Compiled programs do not go through here: see `crate::exec`.

use spartac::ir::{Graph, Tensor};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Compiler(#[from] spartac::Error),
    #[error("backend {0} is not available on this machine: {1}")]
    Unavailable(String, String),
}

/// Which engine to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    /// The fastest engine present on this machine.
    Auto,
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "cpu" => Ok(Backend::Cpu),
            "auto" => Ok(Backend::Auto),
            other => Err(format!("unknown backend {other:?} (choose cpu or auto)")),
        }
    }
}

/// Outputs of one run, in the graph's output order, and the time the run took.
#[derive(Clone, Debug)]
pub struct RunOutput {
    pub outputs: Vec<(String, Tensor)>,
    pub elapsed: Duration,
}

/// Something that runs a graph on named inputs.
pub trait Engine {
    /// Short name shown to users (`cpu`, `cuda:0 (H100)`, ...).
    fn name(&self) -> String;
    fn run(&self, graph: &Graph, inputs: &BTreeMap<String, Tensor>) -> Result<RunOutput, RuntimeError>;
}

/// Runs graphs on the host with the reference semantics, using every core rayon gives it.
#[derive(Clone, Debug, Default)]
pub struct CpuEngine;

impl Engine for CpuEngine {
    fn name(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn run(&self, graph: &Graph, inputs: &BTreeMap<String, Tensor>) -> Result<RunOutput, RuntimeError> {
        let started = Instant::now();
        let outputs = spartac::reference::execute(graph, inputs)?;
        Ok(RunOutput { outputs, elapsed: started.elapsed() })
    }
}

/// Engines present on this machine, best first.
pub fn available_engines() -> Vec<Box<dyn Engine>> {
    vec![Box::new(CpuEngine)]
}

/// The engine for a backend choice.
pub fn select_engine(backend: Backend) -> Result<Box<dyn Engine>, RuntimeError> {
    match backend {
        Backend::Cpu => Ok(Box::new(CpuEngine)),
        Backend::Auto => available_engines()
            .into_iter()
            .next()
            .ok_or_else(|| RuntimeError::Unavailable("auto".into(), "no engine found".into())),
    }
}
