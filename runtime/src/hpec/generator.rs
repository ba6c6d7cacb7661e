//! Generator of structure-equivalent challenge networks for N = 16·2^k and any layer count.
//!
//! Recipe (verified byte for byte on the 120 real layers of the 1024 network):
//! let M = N/16 and D = log2 M. Base radix-2 layer j (j = 1..D, place value p = 2^(j-1)) has
//! row i connected to columns {i, (i - p) mod M}. Layer l (1-based) belongs to block
//! b = (l-1) div D and uses base layer j = (l-1) mod D + 1. Block 0 is `kron(ones(16,16), R_j)/16`,
//! i.e. relabelling σ_0(r) = r mod M; every later block b has a random 16-to-1 relabelling σ_b
//! of the N rows onto the M base rows, shared by its D layers:
//! `W_l[r, c] = R_j[σ_b(r), c mod M] / 16`. Every row and column then has 32 nonzeros of 1/16.
//!
//! σ_b is taken from the given [`Relabellings`] when it holds block b (the bundled file holds
//! the 19 blocks of the real 1024 network), else drawn from the seed: a Fisher–Yates shuffle of
//! `(r mod M)_r` driven by SplitMix64 seeded with `mix(seed, b)`, so each block depends only on
//! the seed and its number.

use spartac::rng::SplitMix64;

use super::error::{HpecError, HpecResult};
use super::network::{bias_for_neurons, Network};
use super::relabellings::Relabellings;
use super::sparse::{CompressedMatrix, LayerMatrix};

/// Everything that determines a generated network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    pub neurons: usize,
    pub layers: usize,
    pub seed: u64,
    /// Relabellings for the first blocks; later blocks come from the seed.
    pub relabellings: Option<Relabellings>,
}

/// Checks that N = 16·2^k with k >= 1 and returns (M, D).
pub fn base_shape(neurons: usize) -> HpecResult<(usize, usize)> {
    if neurons < 32 || !neurons.is_power_of_two() || neurons > (1 << 30) {
        return Err(HpecError::InvalidArgument(format!(
            "generated networks need N = 16·2^k neurons with k >= 1 (32, 64, …, 1024, 4096, …), got {neurons}"
        )));
    }
    let base = neurons / 16;
    Ok((base, base.trailing_zeros() as usize))
}

/// σ_b of a block drawn from the seed (see the module documentation).
pub fn random_relabelling(neurons: usize, seed: u64, block: usize) -> Vec<u32> {
    let base = (neurons / 16).max(1);
    let mut mixer = SplitMix64::new(seed ^ (block as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut rng = SplitMix64::new(mixer.next_u64());
    let mut sigma: Vec<u32> = (0..neurons).map(|r| (r % base) as u32).collect();
    for idx in (1..neurons).rev() {
        let other = (rng.next_u64() % (idx as u64 + 1)) as usize;
        sigma.swap(idx, other);
    }
    sigma
}

/// σ_b for block `block` (block 0 is `r mod M`).
fn relabelling_for_block(config: &GeneratorConfig, block: usize) -> Vec<u32> {
    let base = config.neurons / 16;
    if block == 0 {
        return (0..config.neurons).map(|r| (r % base) as u32).collect();
    }
    match &config.relabellings {
        Some(given) if block <= given.blocks.len() => given.blocks[block - 1].clone(),
        _ => random_relabelling(config.neurons, config.seed, block),
    }
}

/// Builds layer `j` (1-based base layer) under relabelling `sigma`, CSC first.
fn build_layer(neurons: usize, base: usize, place_value: usize, sigma: &[u32]) -> HpecResult<LayerMatrix> {
    let mut rows_of_base: Vec<Vec<u32>> = vec![Vec::with_capacity(16); base];
    for (row, &target) in sigma.iter().enumerate() {
        rows_of_base[target as usize].push(row as u32);
    }
    let mut offsets = Vec::with_capacity(neurons + 1);
    offsets.push(0u32);
    let mut indices = Vec::with_capacity(neurons * 32);
    let mut column_rows = Vec::with_capacity(32);
    for column in 0..neurons {
        let base_column = column % base;
        column_rows.clear();
        column_rows.extend_from_slice(&rows_of_base[base_column]);
        column_rows.extend_from_slice(&rows_of_base[(base_column + place_value) % base]);
        column_rows.sort_unstable();
        indices.extend_from_slice(&column_rows);
        let count = u32::try_from(indices.len())
            .map_err(|_| HpecError::InvalidArgument(format!("{neurons} neurons give too many nonzeros per layer")))?;
        offsets.push(count);
    }
    let values = vec![1.0f32 / 16.0; indices.len()];
    let csc = CompressedMatrix { n_outer: neurons, n_inner: neurons, offsets, indices, values };
    // CSR only: the CSC is rebuilt on first use (a 65536x1920 network would hold 66 GB instead of 33).
    Ok(LayerMatrix::from_csr(csc.transposed()))
}

/// Generates a network from a full configuration.
pub fn generate_with(config: &GeneratorConfig) -> HpecResult<Network> {
    let (base, per_block) = base_shape(config.neurons)?;
    if config.layers == 0 {
        return Err(HpecError::InvalidArgument("a network needs at least one layer".to_string()));
    }
    check_fits(
        &format!("a {}x{} network", config.neurons, config.layers),
        network_bytes(config.neurons, config.layers),
        available_memory(),
    )?;
    if let Some(given) = &config.relabellings {
        if given.neurons != config.neurons {
            return Err(HpecError::NeuronMismatch {
                message: format!("relabellings for {} neurons, network of {}", given.neurons, config.neurons),
            });
        }
        given.validate("relabellings")?;
    }
    let mut layers = Vec::with_capacity(config.layers);
    let mut sigma = Vec::new();
    for layer_idx in 0..config.layers {
        let block = layer_idx / per_block;
        let base_layer = layer_idx % per_block;
        if base_layer == 0 {
            sigma = relabelling_for_block(config, block);
        }
        layers.push(build_layer(config.neurons, base, 1 << base_layer, &sigma)?);
    }
    Ok(Network { neurons: config.neurons, bias: bias_for_neurons(config.neurons), layers })
}

/// Generates an N-neuron, L-layer network whose relabellings all come from `seed`.
pub fn generate(neurons: usize, layers: usize, seed: u64) -> HpecResult<Network> {
    generate_with(&GeneratorConfig { neurons, layers, seed, relabellings: None })
}

/// Recovers the relabellings of blocks 1.. from a network that follows the recipe (σ_b is read
/// off the block's first layer, p = 1: column c ∩ column c+1 = σ_b⁻¹(c+1)). Returns `None`
/// when the network does not follow the recipe.
pub fn recover_relabellings(network: &Network) -> Option<Relabellings> {
    let (base, per_block) = base_shape(network.neurons).ok()?;
    let n_blocks = network.n_layers().saturating_sub(1) / per_block;
    let mut blocks = Vec::with_capacity(n_blocks);
    for block in 1..=n_blocks {
        let layer = &network.layers[block * per_block];
        let mut sigma = vec![u32::MAX; network.neurons];
        for base_column in 0..base {
            let (left, _) = layer.csc().slot(base_column);
            let (right, _) = layer.csc().slot((base_column + 1) % base);
            for row in left.iter().filter(|r| right.binary_search(r).is_ok()) {
                sigma[*row as usize] = ((base_column + 1) % base) as u32;
            }
        }
        if sigma.contains(&u32::MAX) {
            return None;
        }
        blocks.push(sigma);
    }
    let relabellings = Relabellings { neurons: network.neurons, blocks };
    relabellings.validate("recovered").ok()?;
    let config = GeneratorConfig {
        neurons: network.neurons,
        layers: network.n_layers(),
        seed: 0,
        relabellings: Some(relabellings.clone()),
    };
    let regenerated = generate_with(&config).ok()?;
    (regenerated.layers == network.layers).then_some(relabellings)
}

/// Bytes a generated `neurons × layers` network holds in memory: 32 nonzeros per neuron and
/// layer, each a u32 index and an f32 value, plus the row offsets.
pub fn network_bytes(neurons: usize, layers: usize) -> u128 {
    layers as u128 * neurons as u128 * (32 * 8 + 4)
}

/// Memory the machine can still give (`MemAvailable` of `/proc/meminfo`); `None` where it
/// cannot be read, and nothing is checked.
pub fn available_memory() -> Option<u64> {
    spartac::frontend::meminfo_bytes("MemAvailable").map(|b| b as u64)
}

/// A one-line error when `bytes` exceed `available` (before anything is allocated).
pub fn check_fits(what: &str, bytes: u128, available: Option<u64>) -> HpecResult<()> {
    match available {
        Some(avail) if bytes > avail as u128 => Err(HpecError::InvalidArgument(format!(
            "{what} needs {:.1} GiB of memory and this machine has {:.1} GiB available",
            bytes as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_and_column_has_32_nonzeros() {
        let network = generate(256, 9, 3).unwrap();
        for layer in &network.layers {
            for idx in 0..256 {
                assert_eq!(layer.csr.slot(idx).0.len(), 32);
                assert_eq!(layer.csc().slot(idx).0.len(), 32);
            }
        }
        assert_eq!(network.bias, -0.25);
    }

    #[test]
    fn generation_is_deterministic_and_recoverable() {
        let first = generate(512, 13, 11).unwrap();
        assert_eq!(first, generate(512, 13, 11).unwrap());
        assert_ne!(first.layers[5], generate(512, 13, 12).unwrap().layers[5]);
        let recovered = recover_relabellings(&first).unwrap();
        assert_eq!(recovered.blocks.len(), 2);
        assert_eq!(recovered.blocks[0], random_relabelling(512, 11, 1));
    }

    #[test]
    fn rejects_sizes_that_are_not_16_times_a_power_of_two() {
        assert!(generate(1000, 3, 0).is_err());
        assert!(generate(16, 3, 0).is_err());
        assert!(generate(64, 0, 0).is_err());
    }
}
