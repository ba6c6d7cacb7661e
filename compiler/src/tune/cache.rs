//! The tuning cache: one JSON file per operator signature and GPU (`DIR/<key>.json`), plus
//! the refitted cost DB (`DIR/costdb.json`).
//!
//! An entry holds every candidate measured for the operator (its alternative, kernel choice,
//! calibration sample and median time, or why it has none), so a tune that stops resumes
//! where it left off and a later plan under another cost DB finds its own alternatives among
//! them. Entries are written atomically after every measurement (`output::write_atomic`) and
//! checksummed: the file is `{"checksum": "<FNV-1a 64 of the entry's text>", "entry": {...}}`.
//! A damaged entry (not JSON, a checksum or key that does not match) is reported and treated
//! as absent: the next tune measures the operator again and overwrites it.

use super::key::{cache_key, Signature, Target};
use crate::plan::calibrate::Sample;
use crate::plan::egraph::SplitKind;
use crate::plan::KernelChoice;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One candidate of an operator and what measuring it gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The alternative's split kind (`SplitKind::name`) and label (its sub-operators).
    pub split: String,
    pub label: String,
    pub kernel: KernelChoice,
    /// The kernels it ran, as a calibration sample (`seconds`: the measured time, 0 without one).
    pub sample: Sample,
    /// The cost model's time for it when it was measured.
    pub predicted_s: f64,
    /// Median time over the timed runs; `None` when the check failed or it did not run.
    pub seconds: Option<f64>,
    /// ‖out − ref‖ / ‖ref‖ of the checked run.
    pub rel_err: Option<f64>,
    /// Why there is no time: `wrong: ...` (the check failed; not measured again) or the error of
    /// the run (measured again by the next tune).
    pub error: Option<String>,
}

impl Measured {
    /// Whether this candidate is done: timed, or checked wrong (a run error is retried).
    pub fn is_settled(&self) -> bool {
        self.seconds.is_some() || self.error.as_deref().is_some_and(|e| e.starts_with("wrong"))
    }

    /// Whether this is the candidate of `split`, `label` and `kernel`.
    pub fn is(&self, split: SplitKind, label: &str, kernel: KernelChoice) -> bool {
        self.split == split.name() && self.label == label && self.kernel == kernel
    }
}

/// Everything measured for one operator signature on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub signature: Signature,
    pub target: Target,
    /// The spartac version that measured it.
    pub version: String,
    /// The node it was first measured for (for people; the key does not depend on it).
    pub node: String,
    pub candidates: Vec<Measured>,
    /// Candidates the cost model put above the pruning factor times the best prediction, in
    /// the last enumeration (not measured).
    pub pruned: usize,
    /// Every candidate of the last enumeration that was not pruned is settled.
    pub complete: bool,
}

impl Entry {
    pub fn new(signature: Signature, target: Target, version: &str, node: &str) -> Entry {
        Entry {
            key: cache_key(&signature, &target, version),
            signature,
            target,
            version: version.to_string(),
            node: node.to_string(),
            candidates: vec![],
            pruned: 0,
            complete: false,
        }
    }

    /// The fastest timed candidate.
    pub fn winner(&self) -> Option<&Measured> {
        self.timed().min_by(|a, b| a.seconds.unwrap_or(f64::INFINITY).total_cmp(&b.seconds.unwrap_or(f64::INFINITY)))
    }

    /// The timed candidates.
    pub fn timed(&self) -> impl Iterator<Item = &Measured> {
        self.candidates.iter().filter(|c| c.seconds.is_some())
    }

    pub fn find(&self, split: SplitKind, label: &str, kernel: KernelChoice) -> Option<&Measured> {
        self.candidates.iter().find(|c| c.is(split, label, kernel))
    }

    /// Adds or replaces the record of a candidate.
    pub fn record(&mut self, m: Measured) {
        match self.candidates.iter_mut().find(|c| c.split == m.split && c.label == m.label && c.kernel == m.kernel) {
            Some(old) => *old = m,
            None => self.candidates.push(m),
        }
    }
}

/// The cache folder.
#[derive(Clone, Debug)]
pub struct TuneCache {
    dir: PathBuf,
}

/// The stored form of an entry, as read: the checksum and the entry's exact text.
#[derive(Deserialize)]
struct Stored<'a> {
    checksum: String,
    #[serde(borrow)]
    entry: &'a serde_json::value::RawValue,
}

/// File name of the refitted cost DB in the cache folder.
pub const COSTDB_FILE: &str = "costdb.json";

impl TuneCache {
    pub fn new(dir: impl Into<PathBuf>) -> TuneCache {
        TuneCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry of `key` lives.
    pub fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The refitted cost DB's path (it may not exist).
    pub fn costdb_path(&self) -> PathBuf {
        self.dir.join(COSTDB_FILE)
    }

    /// The entry of `key`: `Ok(None)` when there is none, `Err(why)` when the file is damaged.
    pub fn read(&self, key: &str) -> Result<Option<Entry>, String> {
        let path = self.path_of(key);
        // Only a regular file is opened (a FIFO would block the read).
        let text = match crate::contained::read_regular_text(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        match parse_entry(&text) {
            Ok(e) if e.key == key => Ok(Some(e)),
            Ok(e) => Err(format!("{}: holds the entry of key {}", path.display(), e.key)),
            Err(why) => Err(format!("{}: {why}", path.display())),
        }
    }

    /// Writes `entry` atomically under its key (creating the folder).
    pub fn write(&self, entry: &Entry) -> Result<(), Error> {
        let io = |e: std::io::Error| Error::Write { path: self.dir.clone(), source: e };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let text = serde_json::to_string_pretty(entry).map_err(|e| Error::Unsupported(format!("tune cache: {e}")))?;
        let sum = crate::hash::checksum(text.as_bytes());
        let file = format!("{{\"checksum\": \"{sum:016x}\", \"entry\": {text}}}\n");
        let path = self.path_of(&entry.key);
        crate::output::write_atomic(&path, file.as_bytes()).map_err(|e| Error::Write { path, source: e })
    }

    /// Every entry in the folder (an absent folder holds none), and one line per damaged file.
    pub fn entries(&self) -> (Vec<Entry>, Vec<String>) {
        let (mut entries, mut damaged) = (vec![], vec![]);
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return (entries, damaged) };
        let mut paths: Vec<PathBuf> = dir
            .flatten()
            .map(|d| d.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.ends_with(".json") && !name.starts_with('.') && name != COSTDB_FILE
            })
            .collect();
        paths.sort();
        for p in paths {
            let key = p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
            match self.read(&key) {
                Ok(Some(e)) => entries.push(e),
                Ok(None) => {}
                Err(why) => damaged.push(why),
            }
        }
        (entries, damaged)
    }
}

/// An entry from its file's text, or why it is damaged.
fn parse_entry(text: &str) -> Result<Entry, String> {
    let stored: Stored = serde_json::from_str(text).map_err(|e| format!("not a tune cache entry: {e}"))?;
    let raw = stored.entry.get();
    if format!("{:016x}", crate::hash::checksum(raw.as_bytes())) != stored.checksum {
        return Err("checksum does not match its content".into());
    }
    let entry: Entry = serde_json::from_str(raw).map_err(|e| format!("not a tune cache entry: {e}"))?;
    if cache_key(&entry.signature, &entry.target, &entry.version) != entry.key {
        return Err("its key does not match its signature".into());
    }
    Ok(entry)
}
