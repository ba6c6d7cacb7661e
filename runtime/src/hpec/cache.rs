//! Binary cache of parsed networks, so that a 1024×1920 network reloads in well under a second.
//!
//! File layout (all little-endian): magic `SPHPECNW`, format version (u32), reserved (u32),
//! source key (u64), neurons (u64), layer count (u64), bias bits (u32), reserved (u32),
//! payload length (u64), checksum (u64, [`checksum64`] of every header field before it and the
//! layer checksums: a flipped bias or count fails it), then one record
//! per layer (see [`push_layer`]: CSR only, u16 indices when N <= 65536, a single value when all
//! are equal, each record with its own checksum so layers decode and verify in parallel).
//! A 1024×1920 network takes 131 MB instead of 1 GB.
//!
//! The key hashes the source's canonical path, the size and modification time of each of its
//! files, the requested layer count and the format version. A cache file that is missing,
//! truncated, of another version or key, fails its checksum or holds malformed matrices is
//! ignored and rewritten: a bad cache costs a rebuild, never a wrong result. Files are written
//! to a temporary name and renamed, so readers never see half a file.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::error::{HpecError, HpecResult};
use super::network::Network;
use super::sparse::{CompressedMatrix, LayerMatrix};

const MAGIC: &[u8; 8] = b"SPHPECNW";
const FORMAT_VERSION: u32 = 3;
const HEADER_BYTES: usize = 64;

/// Where parsed networks are cached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheConfig {
    /// Never read or write a cache.
    Disabled,
    /// `$XDG_CACHE_HOME/spartac/hpec`, else `$HOME/.cache/spartac/hpec`.
    Default,
    /// A given directory (created when missing).
    Directory(PathBuf),
}

impl CacheConfig {
    pub fn directory(&self) -> Option<PathBuf> {
        match self {
            CacheConfig::Disabled => None,
            CacheConfig::Directory(dir) => Some(dir.clone()),
            CacheConfig::Default => {
                let base = std::env::var_os("XDG_CACHE_HOME")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
                Some(base.join("spartac").join("hpec"))
            }
        }
    }
}

/// What the cache did during one load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    Disabled,
    /// Loaded from this cache file.
    Hit(PathBuf),
    /// Parsed the source and wrote this cache file (`reason` says why no usable one existed).
    Written {
        path: PathBuf,
        reason: String,
    },
    /// Parsed the source; writing the cache failed (the network is still correct).
    WriteFailed {
        path: PathBuf,
        reason: String,
    },
}

/// A 64-bit hash of bytes: four FNV-style lanes over little-endian u64 words, each
/// `(lane ^ word) * FNV_PRIME` rotated, then mixed with the length through a SplitMix64
/// finaliser. Detects corruption; not cryptographic.
pub fn checksum64(bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut lanes = [0xcbf2_9ce4_8422_2325u64, 0x8422_2325_cbf2_9ce4, 0x9e37_79b9_7f4a_7c15, 0xbf58_476d_1ce4_e5b9];
    let mut chunks = bytes.chunks_exact(32);
    for chunk in &mut chunks {
        for (lane_idx, lane) in lanes.iter_mut().enumerate() {
            let word = u64::from_le_bytes(chunk[lane_idx * 8..lane_idx * 8 + 8].try_into().unwrap());
            *lane = ((*lane ^ word).wrapping_mul(PRIME)).rotate_left(23);
        }
    }
    let mut hash = bytes.len() as u64;
    for &byte in chunks.remainder() {
        hash = (hash ^ byte as u64).wrapping_mul(PRIME);
    }
    for lane in lanes {
        hash = mix64(hash ^ lane);
    }
    hash
}

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The cache key of a source: canonical paths, sizes and modification times of its files.
pub fn source_key(files: &[PathBuf], layers: Option<usize>) -> HpecResult<u64> {
    let mut text = format!("spartac-hpec-cache v{FORMAT_VERSION} layers={layers:?}\n");
    for file in files {
        let canonical = std::fs::canonicalize(file).map_err(|e| HpecError::io(file, e))?;
        let meta = std::fs::metadata(&canonical).map_err(|e| HpecError::io(file, e))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        text.push_str(&format!("{}\t{}\t{}\n", canonical.display(), meta.len(), mtime));
    }
    Ok(checksum64(text.as_bytes()))
}

/// The cache file for a source with this key.
pub fn cache_file_path(dir: &Path, source_stem: &str, key: u64) -> PathBuf {
    let stem: String =
        source_stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    dir.join(format!("{stem}-{key:016x}.spnet"))
}

/// Appends one layer record: `payload length (u64), payload checksum (u64), payload` with
/// payload `nnz (u64), index width (u32: 2 or 4), value mode (u32: 0 = one value for all,
/// 1 = one per nonzero), CSR offsets (N+1 × u32), column indices (nnz × u16 or u32), values`.
/// Only CSR is stored; CSC is built lazily on first use (see [`LayerMatrix::csc`]).
fn push_layer(out: &mut Vec<u8>, matrix: &CompressedMatrix) {
    let mut payload = Vec::with_capacity(16 + 4 * (matrix.offsets.len() + 2 * matrix.n_nonzeros()));
    let narrow = matrix.n_inner <= u16::MAX as usize + 1;
    let uniform =
        matrix.values.first().is_some_and(|first| matrix.values.iter().all(|v| v.to_bits() == first.to_bits()));
    payload.extend_from_slice(&(matrix.n_nonzeros() as u64).to_le_bytes());
    payload.extend_from_slice(&(if narrow { 2u32 } else { 4u32 }).to_le_bytes());
    payload.extend_from_slice(&(if uniform { 0u32 } else { 1u32 }).to_le_bytes());
    for &offset in &matrix.offsets {
        payload.extend_from_slice(&offset.to_le_bytes());
    }
    for &index in &matrix.indices {
        if narrow {
            payload.extend_from_slice(&(index as u16).to_le_bytes());
        } else {
            payload.extend_from_slice(&index.to_le_bytes());
        }
    }
    let values: &[f32] = if uniform { &matrix.values[..1] } else { &matrix.values };
    for &value in values {
        payload.extend_from_slice(&value.to_bits().to_le_bytes());
    }
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum64(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// Serialises a network into the cache format.
pub fn encode_network(network: &Network, key: u64) -> Vec<u8> {
    let records: Vec<Vec<u8>> = network
        .layers
        .par_iter()
        .map(|layer| {
            let mut record = Vec::new();
            push_layer(&mut record, &layer.csr);
            record
        })
        .collect();
    let payload_len: usize = records.iter().map(|r| r.len()).sum();
    let mut out = Vec::with_capacity(HEADER_BYTES + payload_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&(network.neurons as u64).to_le_bytes());
    out.extend_from_slice(&(network.n_layers() as u64).to_le_bytes());
    out.extend_from_slice(&network.bias.to_bits().to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(payload_len as u64).to_le_bytes());
    let mut summed = out.clone();
    summed.extend(records.iter().flat_map(|r| r[8..16].to_vec()));
    out.extend_from_slice(&checksum64(&summed).to_le_bytes());
    debug_assert_eq!(out.len(), HEADER_BYTES);
    for record in records {
        out.extend_from_slice(&record);
    }
    out
}

/// Reads little-endian fields, failing with a reason instead of panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n_bytes: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n_bytes).filter(|&end| end <= self.bytes.len()).ok_or("truncated")?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn usize(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "length overflow".to_string())
    }
    fn u32_vec(&mut self, count: usize) -> Result<Vec<u32>, String> {
        let bytes = self.take(count.checked_mul(4).ok_or("length overflow")?)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect())
    }
    fn u16_vec(&mut self, count: usize) -> Result<Vec<u32>, String> {
        let bytes = self.take(count.checked_mul(2).ok_or("length overflow")?)?;
        Ok(bytes.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap()) as u32).collect())
    }
}

/// Decodes and checks one layer record's payload.
fn decode_layer(payload: &[u8], checksum: u64, neurons: usize) -> Result<LayerMatrix, String> {
    if checksum64(payload) != checksum {
        return Err("checksum mismatch".to_string());
    }
    let mut cursor = Cursor { bytes: payload, pos: 0 };
    let nnz = cursor.usize()?;
    let width = cursor.u32()?;
    let value_mode = cursor.u32()?;
    let offsets = cursor.u32_vec(neurons + 1)?;
    let indices = match width {
        2 => cursor.u16_vec(nnz)?,
        4 => cursor.u32_vec(nnz)?,
        _ => return Err(format!("bad index width {width}")),
    };
    let values: Vec<f32> = match value_mode {
        0 => vec![f32::from_bits(cursor.u32()?); nnz],
        1 => cursor.u32_vec(nnz)?.into_iter().map(f32::from_bits).collect(),
        _ => return Err(format!("bad value mode {value_mode}")),
    };
    if cursor.pos != payload.len() {
        return Err("layer record of the wrong length".to_string());
    }
    let csr = CompressedMatrix { n_outer: neurons, n_inner: neurons, offsets, indices, values };
    if !csr.is_well_formed() {
        return Err("malformed matrix".to_string());
    }
    Ok(LayerMatrix::from_csr(csr))
}

/// Decodes a cache file, checking magic, version, key, checksums and matrix structure.
/// Layers are decoded in parallel.
pub fn decode_network(bytes: &[u8], expected_key: u64) -> Result<Network, String> {
    let mut cursor = Cursor { bytes, pos: 0 };
    if cursor.take(8)? != MAGIC {
        return Err("not a spartac hpec cache file".to_string());
    }
    let version = cursor.u32()?;
    if version != FORMAT_VERSION {
        return Err(format!("format version {version}, expected {FORMAT_VERSION}"));
    }
    cursor.u32()?;
    if cursor.u64()? != expected_key {
        return Err("stale: key of another source".to_string());
    }
    let neurons = cursor.usize()?;
    let n_layers = cursor.usize()?;
    let bias = f32::from_bits(cursor.u32()?);
    cursor.u32()?;
    let payload_len = cursor.usize()?;
    let header = &bytes[..cursor.pos];
    let checksum = cursor.u64()?;
    if bytes.len() - cursor.pos != payload_len {
        return Err("truncated or padded payload".to_string());
    }
    if neurons == 0 || n_layers == 0 || neurons > u32::MAX as usize {
        return Err("bad header".to_string());
    }
    let mut records = Vec::with_capacity(n_layers.min(1 << 20));
    let mut record_checksums = header.to_vec();
    for _ in 0..n_layers {
        let length = cursor.usize()?;
        let layer_checksum = cursor.u64()?;
        record_checksums.extend_from_slice(&layer_checksum.to_le_bytes());
        records.push((cursor.take(length)?, layer_checksum));
    }
    if cursor.pos != bytes.len() {
        return Err("trailing bytes".to_string());
    }
    if checksum64(&record_checksums) != checksum {
        return Err("checksum mismatch".to_string());
    }
    let layers = records
        .par_iter()
        .map(|(payload, layer_checksum)| decode_layer(payload, *layer_checksum, neurons))
        .collect::<Result<Vec<LayerMatrix>, String>>()?;
    Ok(Network { neurons, bias, layers })
}

/// Tries the cache file; `Err(reason)` when it is missing or unusable.
pub fn read_cache_file(path: &Path, key: u64) -> Result<Network, String> {
    // Only a regular file is opened: a FIFO in the cache would block the read.
    let bytes = spartac::contained::read_regular(path).map_err(|e| format!("no usable cache file ({e})"))?;
    decode_network(&bytes, key)
}

/// Writes a cache file atomically (temporary file, then rename).
pub fn write_cache_file(path: &Path, network: &Network, key: u64) -> HpecResult<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| HpecError::io(dir, e))?;
    }
    spartac::output::write_atomic(path, &encode_network(network, key)).map_err(|e| HpecError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_network() -> Network {
        let csr = CompressedMatrix::from_sorted_triples(2, 2, &[(0, 1, 0.5), (1, 0, 0.25)]).unwrap();
        Network { neurons: 2, bias: -0.3, layers: vec![LayerMatrix::from_csr(csr)] }
    }

    #[test]
    fn encode_decode_round_trip_and_rejects_damage() {
        let network = tiny_network();
        let bytes = encode_network(&network, 7);
        assert_eq!(decode_network(&bytes, 7).unwrap(), network);
        assert_eq!(decode_network(&bytes, 8).unwrap_err(), "stale: key of another source");
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(decode_network(&flipped, 7).unwrap_err(), "checksum mismatch");
        // Every header byte after the key is covered too: a flipped bias (bytes 40..44) or
        // layer count is a checksum failure, never a network with another bias.
        for at in [32, 40, 43, 44] {
            let mut header = bytes.clone();
            header[at] ^= 0x04;
            assert!(decode_network(&header, 7).is_err(), "header byte {at} flipped and still decoded");
        }
        assert!(decode_network(&bytes[..bytes.len() - 3], 7).is_err());
        assert!(decode_network(&bytes[..10], 7).is_err());
        let uniform = CompressedMatrix::from_sorted_triples(2, 2, &[(0, 0, 0.0625), (1, 1, 0.0625)]).unwrap();
        let network = Network { neurons: 2, bias: -0.3, layers: vec![LayerMatrix::from_csr(uniform)] };
        assert_eq!(decode_network(&encode_network(&network, 1), 1).unwrap(), network);
    }

    #[test]
    fn checksum_sees_every_byte() {
        let data: Vec<u8> = (0..100u8).collect();
        let base = checksum64(&data);
        for idx in 0..data.len() {
            let mut changed = data.clone();
            changed[idx] ^= 0x10;
            assert_ne!(checksum64(&changed), base, "byte {idx}");
        }
    }
}
