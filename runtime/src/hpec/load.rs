//! `load_network`: read a network from its source through the binary cache.

use super::cache::{cache_file_path, read_cache_file, source_key, write_cache_file, CacheConfig, CacheStatus};
use super::error::HpecResult;
use super::network::Network;
use super::source::{read_network, NetworkSource};

/// Loads the first `layers` layers (all when `None`) of a network, using the cache.
pub fn load_network(source: &NetworkSource, layers: Option<usize>, cache: &CacheConfig) -> HpecResult<Network> {
    Ok(load_network_with_status(source, layers, cache)?.0)
}

/// Like [`load_network`], also telling what the cache did.
pub fn load_network_with_status(
    source: &NetworkSource,
    layers: Option<usize>,
    cache: &CacheConfig,
) -> HpecResult<(Network, CacheStatus)> {
    let Some(dir) = cache.directory() else {
        return Ok((read_network(source, layers)?, CacheStatus::Disabled));
    };
    let files = source.fingerprint_files()?;
    let key = source_key(&files, layers)?;
    let stem = match source {
        NetworkSource::Directory(path) | NetworkSource::TarGz(path) => {
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "network".into())
        }
        NetworkSource::Files(_) => "files".to_string(),
    };
    let path = cache_file_path(&dir, &stem, key);
    let reason = match read_cache_file(&path, key) {
        Ok(network) => return Ok((network, CacheStatus::Hit(path))),
        Err(reason) => reason,
    };
    let network = read_network(source, layers)?;
    let status = match write_cache_file(&path, &network, key) {
        Ok(()) => CacheStatus::Written { path, reason },
        Err(err) => CacheStatus::WriteFailed { path, reason: err.to_string() },
    };
    Ok((network, status))
}
