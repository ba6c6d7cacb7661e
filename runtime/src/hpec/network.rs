//! The HPEC network: N neurons, L sparse weight layers and the challenge's bias.

use super::sparse::LayerMatrix;

/// A sparse DNN of the challenge: `Y_{l+1} = min(32, max(0, Y_l · W_l + bias))`.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub neurons: usize,
    pub bias: f32,
    pub layers: Vec<LayerMatrix>,
}

impl Network {
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Nonzeros over all layers (the challenge's "edges" per input).
    pub fn total_nonzeros(&self) -> usize {
        self.layers.iter().map(|layer| layer.n_nonzeros()).sum()
    }

    /// The first `n_layers` layers.
    pub fn truncated(&self, n_layers: usize) -> Network {
        Network {
            neurons: self.neurons,
            bias: self.bias,
            layers: self.layers[..n_layers.min(self.n_layers())].to_vec(),
        }
    }
}

/// The challenge bias for an N-neuron network.
///
/// The official sizes use the published values (-0.30, -0.35, -0.40, -0.45 for 1024, 4096,
/// 16384, 65536). Those drop by 0.05 each time N grows fourfold, so every other N uses the
/// same line: `bias = -0.30 - 0.025 · log2(N / 1024)` (e.g. -0.325 for 2048, -0.25 for 256).
pub fn bias_for_neurons(neurons: usize) -> f32 {
    match neurons {
        1024 => -0.30,
        4096 => -0.35,
        16384 => -0.40,
        65536 => -0.45,
        _ => (-0.30 - 0.025 * (neurons as f64 / 1024.0).log2()) as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_follows_the_published_values_and_their_line() {
        assert_eq!(bias_for_neurons(1024), -0.30f32);
        assert_eq!(bias_for_neurons(65536), -0.45f32);
        assert_eq!(bias_for_neurons(2048), -0.325f32);
        assert_eq!(bias_for_neurons(256), -0.25f32);
    }
}
