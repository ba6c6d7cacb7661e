//! The propagation cache: the TeSA of every value after the attrs file is applied and the
//! pass has run, kept between runs (`spartac compile` and `spartac tune` re-propagate a model
//! only when something it depends on changed).
//!
//! Applying the attrs and propagating change nothing in a graph but its values' TeSAs, so an
//! entry is one `Option<Tesa>` per value ([`Tesa::encode`]: run lengths or bits, overrides),
//! and putting it back gives exactly the graph a fresh run gives. The key ([`cache_key`])
//! hashes what the result depends on: the loaded graph ([`graph_fingerprint`]: the model
//! file's bytes, the graph as loaded, its pinned shapes included, and every initializer's
//! data, external data included), the parsed attrs ([`attrs_fingerprint`]: `.npy` masks by
//! content), whether the pass runs, its options, and the spartac version.
//!
//! An entry is `DIR/<key>.tesa`: a magic, the key, the values, and the FNV-1a 64 of all that
//! last. It is written atomically (`output::write_atomic`); a file that is truncated, damaged
//! or does not fit the graph is [`Lookup::Damaged`], never used: the caller recomputes and
//! overwrites it.

use super::PropagateOptions;
use crate::hash::Fnv64;
use crate::ir::Graph;
use crate::tesa::attrs::{KeepMask, PruneSpec, TesaAttrs};
use crate::tesa::codec::{put_varint, take, take_varint};
use crate::tesa::Tesa;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Bumped when the meaning or layout of an entry changes: old entries then miss.
const KEY_FORMAT: &str = "spartac-propagate-3";
/// The first bytes of an entry.
const MAGIC: &[u8; 8] = b"SPTAPROP";

/// A 64-bit hash of `bytes` for keys (not a checksum): FNV-1a over 8-byte words (rotated, so
/// high bits mix down), in 1 MiB pieces hashed in parallel, then FNV-1a over the pieces'
/// hashes; a model's weights hash in milliseconds.
pub fn content_hash(bytes: &[u8]) -> u64 {
    let piece = |p: &[u8]| {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let words = p.chunks_exact(8);
        let tail = words.remainder();
        for w in words {
            h = (h ^ u64::from_le_bytes(w.try_into().expect("eight bytes")))
                .wrapping_mul(0x0100_0000_01b3)
                .rotate_left(29);
        }
        for b in tail {
            h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let pieces: Vec<u64> = bytes.par_chunks(1 << 20).map(piece).collect();
    let mut h = Fnv64::new();
    h.add(&(bytes.len() as u64).to_le_bytes());
    pieces.iter().for_each(|p| h.add(&p.to_le_bytes()));
    h.finish()
}

/// What identifies a loaded graph: `model_bytes` (the ONNX file), the graph's text form (its
/// shapes as pinned at load) and each initializer's name and data.
pub fn graph_fingerprint(model_bytes: &[u8], graph: &Graph) -> u64 {
    let inits: Vec<_> = graph.initializers.iter().collect();
    let data: Vec<u64> = inits
        .par_iter()
        .map(|(id, init)| {
            let t = init.to_dense();
            let mut h = Fnv64::new();
            h.add(graph.value(**id).name.as_bytes());
            h.add(format!("{}{:?}", t.dtype(), t.shape()).as_bytes());
            h.add(&content_hash(&t.data().to_le_bytes()).to_le_bytes());
            h.finish()
        })
        .collect();
    let mut h = Fnv64::new();
    h.add(&content_hash(model_bytes).to_le_bytes());
    h.add(crate::ir::print_graph(graph).as_bytes());
    data.iter().for_each(|d| h.add(&d.to_le_bytes()));
    h.finish()
}

/// A hash of a parsed attrs file: its tensor specs with their masks (so a changed `.npy`
/// mask changes it, the JSON unchanged).
pub fn attrs_fingerprint(attrs: &TesaAttrs) -> u64 {
    let mut h = Fnv64::new();
    let mask = |h: &mut Fnv64, m: &KeepMask| {
        h.add(format!("{:?}", m.shape).as_bytes());
        let bits: Vec<u8> =
            m.keep.chunks(8).map(|c| c.iter().enumerate().fold(0u8, |a, (j, k)| a | (u8::from(*k) << j))).collect();
        h.add(&content_hash(&bits).to_le_bytes());
    };
    for (name, spec) in &attrs.tensors {
        h.add(format!("{name:?}").as_bytes());
        for p in &spec.prune {
            match p {
                PruneSpec::Mask(m) => {
                    h.add(b"mask");
                    mask(&mut h, m);
                }
                PruneSpec::BlockMask { block, grid } => {
                    h.add(format!("block_mask{block:?}").as_bytes());
                    mask(&mut h, grid);
                }
                other => h.add(format!("{other:?}").as_bytes()),
            }
        }
        h.add(format!("{:?}{:?}{:?}{:?}", spec.bits, spec.format, spec.block_bits, spec.element_bits).as_bytes());
    }
    h.finish()
}

/// The key of the propagation of the graph of `graph_fingerprint` under `attrs` (`None`: no
/// attrs file), run or not (`propagate`) with `opts`: 16 hex digits.
pub fn cache_key(
    graph_fingerprint: u64,
    attrs: Option<&TesaAttrs>,
    propagate: bool,
    opts: &PropagateOptions,
) -> String {
    let text = format!(
        "{KEY_FORMAT} {} graph {graph_fingerprint:016x} attrs {} propagate {propagate} {opts:?}",
        crate::VERSION,
        attrs.map_or("none".to_string(), |a| format!("{:016x}", attrs_fingerprint(a))),
    );
    format!("{:016x}", crate::hash::checksum(text.as_bytes()))
}

/// The bytes of the entry of `key` for `graph`'s TeSAs.
pub fn encode(key: &str, graph: &Graph) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(key.as_bytes());
    put_varint(&mut out, graph.values.len() as u64);
    for v in &graph.values {
        match &v.tesa {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                t.encode(&mut out);
            }
        }
    }
    let sum = crate::hash::checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The TeSA of every value of `graph` from the entry `bytes` of `key`, or what is wrong with it.
pub fn decode(bytes: &[u8], key: &str, graph: &Graph) -> Result<Vec<Option<Tesa>>, String> {
    let body_len = bytes.len().checked_sub(8).ok_or("truncated")?;
    let (body, sum) = bytes.split_at(body_len);
    if crate::hash::checksum(body).to_le_bytes() != sum {
        return Err("checksum does not match its content".into());
    }
    let mut rest = body;
    if take(&mut rest, MAGIC.len())? != MAGIC {
        return Err("not a propagation cache entry".into());
    }
    if take(&mut rest, key.len())? != key.as_bytes() {
        return Err("holds the entry of another key".into());
    }
    if take_varint(&mut rest)? != graph.values.len() as u64 {
        return Err(format!("not for this graph (it has {} values)", graph.values.len()));
    }
    let mut out = Vec::with_capacity(graph.values.len());
    for v in &graph.values {
        out.push(match take(&mut rest, 1)?[0] {
            0 => None,
            1 => Some(Tesa::decode(&mut rest, &v.fact.shape).map_err(|e| format!("value {:?}: {e}", v.name))?),
            tag => return Err(format!("value {:?}: unknown tag {tag}", v.name)),
        });
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes past the last value", rest.len()));
    }
    Ok(out)
}

/// What [`PropagationCache::load`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The entry was put into the graph.
    Hit,
    /// No entry of the key.
    Miss,
    /// The entry cannot be used (why); the graph is untouched.
    Damaged(String),
}

/// The cache folder (`propagate/` under the cache root, by the CLI's choice).
#[derive(Clone, Debug)]
pub struct PropagationCache {
    dir: PathBuf,
}

impl PropagationCache {
    pub fn new(dir: impl Into<PathBuf>) -> PropagationCache {
        PropagationCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry of `key` lives.
    pub fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.tesa"))
    }

    /// Sets every value's TeSA of `graph` from the entry of `key`, when there is one that fits.
    /// Only a regular file is opened: a FIFO or a device in its place would block the read or
    /// never end, and is [`Lookup::Damaged`] without being opened.
    pub fn load(&self, key: &str, graph: &mut Graph) -> Lookup {
        let path = self.path_of(key);
        match std::fs::metadata(&path) {
            // A folder that is not there or cannot be searched holds nothing, nor does a folder
            // in the entry's place.
            Err(_) => return Lookup::Miss,
            Ok(m) if m.is_dir() => return Lookup::Miss,
            Ok(m) if !m.is_file() => return Lookup::Damaged("not a regular file".into()),
            Ok(_) => {}
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => return Lookup::Damaged(e.to_string()),
        };
        match decode(&bytes, key, graph) {
            Ok(tesas) => {
                for (v, t) in graph.values.iter_mut().zip(tesas) {
                    v.tesa = t;
                }
                Lookup::Hit
            }
            Err(why) => Lookup::Damaged(why),
        }
    }

    /// Writes the entry of `key` for `graph`'s TeSAs atomically (creating the folder); the
    /// error names the path.
    pub fn store(&self, key: &str, graph: &Graph) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot create {}: {e}", self.dir.display())))?;
        crate::output::write_atomic(&self.path_of(key), &encode(key, graph))
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
