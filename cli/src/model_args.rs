//! Arguments shared by subcommands: every one that loads a model ([`ModelArgs`]), and
//! `compile` and `hpec run`'s `--fine-tile` ([`FineTile`]).

use anyhow::{anyhow, Result};
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
    /// Most GiB any one tensor may take (inputs, node outputs, sparse weights made dense); a
    /// model or shape over it is an error at load, before anything is allocated. Default: the
    /// machine's memory.
    #[arg(long = "memory-budget-gib", value_name = "GIB")]
    pub memory_budget_gib: Option<f64>,
}

impl ModelArgs {
    /// Loads the model for a command that computes with it: every sparse initializer must fit
    /// the memory budget once made dense (the executor, propagation and planning densify them).
    pub fn load(&self) -> Result<Graph> {
        let (graph, budget) = self.load_with_budget()?;
        spartac::frontend::check_dense_initializers(&graph, budget).map_err(|e| anyhow!(e))?;
        Ok(graph)
    }

    /// Loads the model to describe it (`inspect`): sparse initializers stay sparse and are not
    /// held to the budget.
    pub fn load_to_describe(&self) -> Result<Graph> {
        Ok(self.load_with_budget()?.0)
    }

    fn load_with_budget(&self) -> Result<(Graph, usize)> {
        let mut opts = LoadOptions::default();
        if let Some(gib) = self.memory_budget_gib {
            if !(gib.is_finite() && gib > 0.0) {
                return Err(anyhow!("--memory-budget-gib {gib}: must be a positive number of GiB"));
            }
            opts.memory_budget = (gib * (1u64 << 30) as f64).min(usize::MAX as f64) as usize;
        }
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
        // The model's path once: added only when the error does not name it already.
        let shown = self.model.display().to_string();
        let budget = opts.memory_budget;
        let graph = load_model(&self.model, &opts).map_err(|e| {
            if e.to_string().contains(&shown) {
                anyhow!(e)
            } else {
                anyhow!(e).context(format!("loading {shown}"))
            }
        })?;
        Ok((graph, budget))
    }
}

/// `--fine-tile`: a forced tile, or `None` for the specializer's choice.
#[derive(Clone, Copy, Debug)]
pub struct FineTile(pub Option<spartac::codegen::Tile>);

pub(crate) fn parse_tile(s: &str) -> Result<FineTile, String> {
    if s == "auto" {
        return Ok(FineTile(None));
    }
    parse_tile4(s).map(|t| FineTile(Some(t)))
}

fn parse_tile4(s: &str) -> Result<spartac::codegen::Tile, String> {
    let v: Vec<usize> =
        s.split(',').map(|x| x.trim().parse::<usize>()).collect::<Result<_, _>>().map_err(|e| format!("{s:?}: {e}"))?;
    match v[..] {
        [rows, group, k_rows, n_tiles] => {
            let tile = spartac::codegen::Tile { group, k_rows, n_tiles, ..spartac::codegen::Tile::new(rows, 0) };
            // Checked here, whatever the model: a forced tile that only some layers would refuse.
            spartac::kernel_choice::fine_tf32::check_forced_tile(&tile).map_err(|e| format!("{s:?}: {}", e.0))?;
            Ok(tile)
        }
        _ => Err(format!("{s:?}: expected ROWS,GROUPS,K_ROWS,N_TILES, e.g. 32,8,6,1")),
    }
}
