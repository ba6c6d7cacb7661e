//! Arguments shared by every subcommand that loads a model.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use spartac::frontend::{load_model, parse_input_shape, LoadOptions};
use spartac::ir::Graph;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// The ONNX model file.
    pub model: PathBuf,
    /// Pin an input's shape: NAME=D1,D2,... (repeatable). Symbolic dims it fixes apply to
    /// every input using the same symbol. Example: --input-shape input_ids=32,128
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shape: Vec<String>,
    /// Give a symbolic dim a value: SYMBOL=SIZE (repeatable). Example: --dim batch=32
    #[arg(long = "dim", value_name = "SYMBOL=SIZE")]
    pub dim: Vec<String>,
}

impl ModelArgs {
    pub fn load(&self) -> Result<Graph> {
        let mut opts = LoadOptions::default();
        for spec in &self.input_shape {
            let (name, dims) = parse_input_shape(spec).map_err(|e| anyhow!(e))?;
            opts.input_shapes.insert(name, dims);
        }
        for spec in &self.dim {
            let (sym, size) =
                spec.split_once('=').ok_or_else(|| anyhow!("--dim {spec:?} must look like SYMBOL=SIZE"))?;
            let size: usize = size.trim().parse().map_err(|_| anyhow!("--dim {spec:?}: {size:?} is not a size"))?;
            opts.dim_params.insert(sym.trim().to_string(), size);
        }
        load_model(&self.model, &opts).with_context(|| format!("loading {}", self.model.display()))
    }
}
