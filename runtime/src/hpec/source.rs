//! Where a network's layer files come from: a directory, a list of files or a `.tar.gz`,
//! and the streaming reader that turns `n{N}-l{k}.tsv` members into layers.
//!
//! Archives are read in one pass straight from the compressed stream (nothing is extracted);
//! members may come in any order. N comes from the file names and every index is checked
//! against it. With `layers = Some(L)` only `n{N}-l1.tsv` .. `n{N}-l{L}.tsv` are parsed.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use super::error::{HpecError, HpecResult};
use super::images::open_regular;
use super::network::{bias_for_neurons, Network};

/// Most neurons a layer file may name (its name sizes the layer before any line is read).
pub const MAX_NEURONS: usize = 1 << 24;
use super::sparse::LayerMatrix;
use super::tsv_reader::read_layer_tsv;

/// The files of one network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkSource {
    /// A directory holding `n{N}-l{k}.tsv` files.
    Directory(PathBuf),
    /// An explicit list of `n{N}-l{k}.tsv` files.
    Files(Vec<PathBuf>),
    /// A `.tar.gz` (or `.tgz`) archive whose members include `…/n{N}-l{k}.tsv`.
    TarGz(PathBuf),
}

impl NetworkSource {
    /// A directory, an archive (by its `.tar.gz`/`.tgz` name) or a single layer file.
    pub fn from_path(path: &Path) -> NetworkSource {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if path.is_dir() {
            NetworkSource::Directory(path.to_path_buf())
        } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
            NetworkSource::TarGz(path.to_path_buf())
        } else {
            NetworkSource::Files(vec![path.to_path_buf()])
        }
    }

    /// A short human name for messages.
    pub fn describe(&self) -> String {
        match self {
            NetworkSource::Directory(path) | NetworkSource::TarGz(path) => path.display().to_string(),
            NetworkSource::Files(paths) => match paths.first() {
                Some(first) if paths.len() == 1 => first.display().to_string(),
                Some(first) => format!("{} and {} more files", first.display(), paths.len() - 1),
                None => "an empty file list".to_string(),
            },
        }
    }

    /// The files whose size and modification time key the cache.
    pub fn fingerprint_files(&self) -> HpecResult<Vec<PathBuf>> {
        match self {
            NetworkSource::TarGz(path) => Ok(vec![path.clone()]),
            NetworkSource::Files(paths) => Ok(paths.clone()),
            NetworkSource::Directory(dir) => {
                let mut files: Vec<PathBuf> = list_layer_files(dir)?.into_iter().map(|(_, _, p)| p).collect();
                files.sort();
                Ok(files)
            }
        }
    }
}

/// Parses a base name `n{N}-l{k}.tsv` into `(N, k)`.
pub fn parse_layer_file_name(name: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix('n')?.strip_suffix(".tsv")?;
    let (neurons, layer) = rest.split_once("-l")?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(neurons) || !all_digits(layer) {
        return None;
    }
    Some((neurons.parse().ok()?, layer.parse().ok()?))
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn list_layer_files(dir: &Path) -> HpecResult<Vec<(usize, usize, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| HpecError::io(dir, e))? {
        let entry = entry.map_err(|e| HpecError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some((neurons, layer)) = parse_layer_file_name(&name) {
            found.push((neurons, layer, entry.path()));
        }
    }
    Ok(found)
}

/// Collects parsed layers keyed by layer number and checks the final set.
struct LayerCollector {
    source_name: String,
    wanted: Option<usize>,
    neurons: Option<usize>,
    layers: BTreeMap<usize, LayerMatrix>,
    highest_seen: usize,
}

impl LayerCollector {
    fn new(source_name: String, wanted: Option<usize>) -> LayerCollector {
        LayerCollector { source_name, wanted, neurons: None, layers: BTreeMap::new(), highest_seen: 0 }
    }

    /// Checks N and k of a file name; returns whether the file must be parsed.
    fn admit(&mut self, name: &str, neurons: usize, layer: usize) -> HpecResult<bool> {
        if layer == 0 {
            return Err(HpecError::layer_set(&self.source_name, format!("{name}: layers are numbered from 1")));
        }
        if neurons == 0 {
            return Err(HpecError::layer_set(&self.source_name, format!("{name}: zero neurons")));
        }
        if neurons > MAX_NEURONS {
            return Err(HpecError::layer_set(
                &self.source_name,
                format!("{name}: {neurons} neurons, at most {MAX_NEURONS} (the challenge's largest is 65536)"),
            ));
        }
        match self.neurons {
            Some(known) if known != neurons => {
                return Err(HpecError::NeuronMismatch {
                    message: format!(
                        "{name} names {neurons} neurons, other layers of {} have {known}",
                        self.source_name
                    ),
                })
            }
            _ => self.neurons = Some(neurons),
        }
        if self.layers.contains_key(&layer) {
            return Err(HpecError::layer_set(&self.source_name, format!("layer {layer} given twice ({name})")));
        }
        self.highest_seen = self.highest_seen.max(layer);
        Ok(self.wanted.is_none_or(|wanted| layer <= wanted))
    }

    fn finish(self) -> HpecResult<Network> {
        let neurons = self
            .neurons
            .ok_or_else(|| HpecError::layer_set(&self.source_name, "no layer files named n{N}-l{k}.tsv"))?;
        let count = self.wanted.unwrap_or(self.highest_seen);
        if count == 0 {
            return Err(HpecError::layer_set(&self.source_name, "zero layers requested"));
        }
        if let Some(missing) = (1..=count).find(|k| !self.layers.contains_key(k)) {
            return Err(HpecError::layer_set(
                &self.source_name,
                format!(
                    "wrong layer count: {count} layers needed but n{neurons}-l{missing}.tsv is missing ({} layer files found)",
                    self.layers.len()
                ),
            ));
        }
        let layers: Vec<LayerMatrix> = self.layers.into_values().take(count).collect();
        Ok(Network { neurons, bias: bias_for_neurons(neurons), layers })
    }
}

/// Reads the layer files of `source` (the first `layers` of them when given).
pub fn read_network(source: &NetworkSource, layers: Option<usize>) -> HpecResult<Network> {
    let mut collector = LayerCollector::new(source.describe(), layers);
    match source {
        NetworkSource::Directory(dir) => {
            let files = list_layer_files(dir)?;
            read_plain_files(&mut collector, files)?;
        }
        NetworkSource::Files(paths) => {
            let mut files = Vec::new();
            for path in paths {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let (neurons, layer) = parse_layer_file_name(&name).ok_or_else(|| {
                    HpecError::layer_set(path.display().to_string(), "layer files must be named n{N}-l{k}.tsv")
                })?;
                files.push((neurons, layer, path.clone()));
            }
            read_plain_files(&mut collector, files)?;
        }
        NetworkSource::TarGz(path) => read_tar_gz(&mut collector, path)?,
    }
    collector.finish()
}

fn read_plain_files(collector: &mut LayerCollector, files: Vec<(usize, usize, PathBuf)>) -> HpecResult<()> {
    let mut to_parse = Vec::new();
    for (neurons, layer, path) in files {
        if collector.admit(&path.display().to_string(), neurons, layer)? {
            to_parse.push((neurons, layer, path));
        }
    }
    use rayon::prelude::*;
    let parsed: Vec<HpecResult<(usize, LayerMatrix)>> = to_parse
        .par_iter()
        .map(|(neurons, layer, path)| {
            let file = open_regular(path)?;
            let reader = BufReader::with_capacity(1 << 16, file);
            Ok((*layer, read_layer_tsv(&path.display().to_string(), reader, *neurons)?))
        })
        .collect();
    for result in parsed {
        let (layer, matrix) = result?;
        collector.layers.insert(layer, matrix);
    }
    Ok(())
}

fn read_tar_gz(collector: &mut LayerCollector, path: &Path) -> HpecResult<()> {
    let file = open_regular(path)?;
    let decoder = flate2::read::GzDecoder::new(BufReader::with_capacity(1 << 16, file));
    let mut archive = tar::Archive::new(decoder);
    let archive_name = path.display().to_string();
    let entries = archive.entries().map_err(|e| HpecError::io(path, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| HpecError::io(path, e))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let member = entry.path().map_err(|e| HpecError::io(path, e))?.to_string_lossy().into_owned();
        let Some((neurons, layer)) = parse_layer_file_name(base_name(&member)) else { continue };
        let file_name = format!("{archive_name}:{member}");
        if collector.admit(&file_name, neurons, layer)? {
            let reader = BufReader::with_capacity(1 << 16, entry);
            let matrix = read_layer_tsv(&file_name, reader, neurons)?;
            collector.layers.insert(layer, matrix);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_file_names() {
        assert_eq!(parse_layer_file_name("n1024-l120.tsv"), Some((1024, 120)));
        assert_eq!(parse_layer_file_name("n1024-l.tsv"), None);
        assert_eq!(parse_layer_file_name("x1024-l1.tsv"), None);
        assert_eq!(parse_layer_file_name("n1024-l1.tsv.gz"), None);
    }
}
