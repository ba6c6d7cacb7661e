//! Input hashing and layer hashing for load balance and locality (Hidayetoğlu-style, seed 001).
//!
//! * Input hashing orders images by a hash of their id before they are cut into blocks, so
//!   that runs of similar images (early-dying or long-lived) spread over all blocks and the
//!   data-parallel threads get balanced work.
//! * Layer hashing relabels neurons with one permutation π shared by every layer and by the
//!   input pixels: `W'[π(r), π(c)] = W[r, c]`, `Y'[·, π(n)] = Y[·, n]`. Outputs are permuted
//!   the same way, so which images survive is unchanged. π is 2D bucket hashing with `k`
//!   buckets, `π(n) = (n mod k) · (N / k) + n div k`: neurons that are k apart become
//!   neighbours, which turns the strided rows of the radix layers into nearby rows. It uses only
//!   N, never the network's relabellings.

use rayon::prelude::*;

use super::network::Network;
use super::sparse::{CompressedMatrix, LayerMatrix};

/// Image ids (0-based) in input-hashed order.
pub fn hashed_image_order(n_images: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<(u64, u32)> = (0..n_images as u32).map(|id| (mix64(id as u64 ^ seed), id)).collect();
    order.sort_unstable();
    order.into_iter().map(|(_, id)| id).collect()
}

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bucket-hashing permutation, or `None` when `k` does not divide N (no hashing then).
pub fn bucket_permutation(neurons: usize, buckets: usize) -> Option<Vec<u32>> {
    if buckets < 2 || !neurons.is_multiple_of(buckets) || buckets >= neurons {
        return None;
    }
    let per_bucket = neurons / buckets;
    Some((0..neurons).map(|n| ((n % buckets) * per_bucket + n / buckets) as u32).collect())
}

/// Permutes one compressed matrix's outer and inner indices (inner lists re-sorted).
fn permute_matrix(matrix: &CompressedMatrix, permutation: &[u32]) -> CompressedMatrix {
    let mut inverse = vec![0u32; permutation.len()];
    for (old, &new) in permutation.iter().enumerate() {
        inverse[new as usize] = old as u32;
    }
    let mut offsets = Vec::with_capacity(matrix.n_outer + 1);
    offsets.push(0u32);
    let mut indices = Vec::with_capacity(matrix.n_nonzeros());
    let mut values = Vec::with_capacity(matrix.n_nonzeros());
    let mut slot: Vec<(u32, f32)> = Vec::new();
    for &old_outer in &inverse {
        let (inner, weights) = matrix.slot(old_outer as usize);
        slot.clear();
        slot.extend(inner.iter().zip(weights).map(|(&i, &w)| (permutation[i as usize], w)));
        slot.sort_unstable_by_key(|entry| entry.0);
        indices.extend(slot.iter().map(|entry| entry.0));
        values.extend(slot.iter().map(|entry| entry.1));
        offsets.push(indices.len() as u32);
    }
    CompressedMatrix { n_outer: matrix.n_outer, n_inner: matrix.n_inner, offsets, indices, values }
}

/// The network with every neuron relabelled by `permutation`.
pub fn permute_network(network: &Network, permutation: &[u32]) -> Network {
    let layers =
        network.layers.par_iter().map(|layer| LayerMatrix::from_csr(permute_matrix(&layer.csr, permutation))).collect();
    Network { neurons: network.neurons, bias: network.bias, layers }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_permutation_is_a_permutation() {
        let permutation = bucket_permutation(1024, 128).unwrap();
        let mut sorted = permutation.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1024).collect::<Vec<u32>>());
        assert_eq!(&permutation[..3], &[0, 8, 16]);
        assert_eq!(permutation[128], 1);
        assert!(bucket_permutation(100, 128).is_none());
    }

    #[test]
    fn hashed_order_is_a_permutation() {
        let mut order = hashed_image_order(100, 1);
        order.sort_unstable();
        assert_eq!(order, (0..100).collect::<Vec<u32>>());
    }
}
