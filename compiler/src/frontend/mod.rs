//! The ONNX frontend: reads a model file (protobuf via `onnx-protobuf`) and builds the IR;
//! `writer` turns an IR graph back into an ONNX file.

mod onnx;
pub mod tensor_proto;
mod writer;

pub use writer::{graph_to_model, save_model};

use crate::ir::Graph;
use crate::Error;
use onnx_protobuf::{Message, ModelProto};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tensor_proto::DataDir;

/// How to turn a model into a static graph.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Shapes that pin graph inputs (by input name); symbolic dims they fix apply to
    /// every input that uses the same symbol.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// Values for symbolic dim names (e.g. `batch=32`).
    pub dim_params: BTreeMap<String, usize>,
    /// Evaluate nodes whose inputs are all constant (and Shape of static shapes) at load.
    pub fold_constants: bool,
    /// Directory that external data locations are relative to (the model's directory).
    pub model_dir: Option<PathBuf>,
    /// Graph inputs to freeze into constants (e.g. a runtime shape input that must be
    /// static for compilation); each must match the input's declared type.
    pub frozen_inputs: BTreeMap<String, crate::ir::Tensor>,
    /// Most bytes any one tensor of the graph may take (inputs, initializers made dense,
    /// every node output); a model or flag over it is an error at load, before anything of
    /// that size is allocated. Default: the machine's memory ([`machine_memory`]).
    pub memory_budget: usize,
}

/// Every sparse initializer of `graph` fits `budget` bytes once made dense (the reference
/// executor, TeSA annotation, propagation and planning all densify them); else one error
/// naming the tensor.
pub fn check_dense_initializers(graph: &crate::ir::Graph, budget: usize) -> Result<(), Error> {
    for (id, init) in &graph.initializers {
        if let crate::ir::Initializer::Sparse(_) = init {
            graph.fact(*id).fits(budget).map_err(|e| {
                Error::tensor(&graph.values[id.index()].name, format!("sparse initializer made dense: {e}"))
            })?;
        }
    }
    Ok(())
}

/// The machine's physical memory in bytes (`MemTotal`, [`meminfo_bytes`]); where that cannot
/// be read, no limit.
pub fn machine_memory() -> usize {
    meminfo_bytes("MemTotal").unwrap_or(usize::MAX)
}

/// A field of `/proc/meminfo` (`MemTotal`, `MemAvailable`, ...) in bytes; `None` where it
/// cannot be read.
pub fn meminfo_bytes(field: &str) -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.split(':').next() == Some(field))?;
    line.split_whitespace().nth(1)?.parse::<usize>().ok()?.checked_mul(1024)
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            input_shapes: BTreeMap::new(),
            dim_params: BTreeMap::new(),
            fold_constants: true,
            model_dir: None,
            frozen_inputs: BTreeMap::new(),
            memory_budget: machine_memory(),
        }
    }
}

impl LoadOptions {
    fn data_dir(&self) -> DataDir<'_> {
        DataDir(self.model_dir.as_deref())
    }
}

/// Reads an ONNX file and builds the graph. External data is looked up next to the file.
pub fn load_model(path: &Path, opts: &LoadOptions) -> Result<Graph, Error> {
    let bytes =
        crate::contained::read_regular(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let mut opts = opts.clone();
    if opts.model_dir.is_none() {
        opts.model_dir = Some(path.parent().map(Path::to_path_buf).unwrap_or_default());
    }
    load_model_bytes(&bytes, &path.display().to_string(), &opts)
}

/// Decodes a serialized ModelProto and builds the graph; `origin` names it in errors.
pub fn load_model_bytes(bytes: &[u8], origin: &str, opts: &LoadOptions) -> Result<Graph, Error> {
    let model = decode_model(bytes, origin)?;
    onnx::convert(&model, opts.data_dir(), opts)
}

/// Decodes the protobuf only.
pub fn decode_model(bytes: &[u8], origin: &str) -> Result<ModelProto, Error> {
    if bytes.is_empty() {
        return Err(Error::Decode { path: origin.into(), reason: "the file is empty".into() });
    }
    let model = ModelProto::parse_from_bytes(bytes)
        .map_err(|e| Error::Decode { path: origin.into(), reason: e.to_string().to_lowercase() })?;
    if model.graph.is_none() {
        return Err(Error::Decode {
            path: origin.into(),
            reason: "no graph in the model (is this an ONNX file?)".into(),
        });
    }
    Ok(model)
}

/// Parses `name=d1,d2,...` as given to `--input-shape`.
pub fn parse_input_shape(spec: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = spec
        .rsplit_once('=')
        .ok_or_else(|| format!("--input-shape {spec:?} must look like NAME=D1,D2,... (e.g. input_ids=32,128)"))?;
    let dims = if dims.trim().is_empty() {
        vec![]
    } else {
        dims.split(',')
            .map(|d| d.trim().parse::<usize>().map_err(|_| format!("--input-shape {spec:?}: {d:?} is not a dimension")))
            .collect::<Result<Vec<_>, _>>()?
    };
    if name.is_empty() {
        return Err(format!("--input-shape {spec:?} has no input name"));
    }
    Ok((name.to_string(), dims))
}
