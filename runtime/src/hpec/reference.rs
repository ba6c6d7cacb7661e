//! The f64 reference: one image at a time, dense rows, plain loops; slow and obviously correct.
//! Used to cross-check the engine and to make the truth of generated networks.

use rayon::prelude::*;

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::kernels::ACTIVATION_CAP;
use super::network::Network;

/// Final activation row of one image (0-based) in f64.
pub fn reference_final_row(network: &Network, images: &Images, image: usize) -> Vec<f64> {
    let neurons = network.neurons;
    let mut row = vec![0f64; neurons];
    let (pixels, values) = images.pixels.slot(image);
    for (&pixel, &value) in pixels.iter().zip(values) {
        row[pixel as usize] = value as f64;
    }
    let bias = network.bias as f64;
    let mut next = vec![0f64; neurons];
    for layer in &network.layers {
        next.iter_mut().for_each(|z| *z = 0.0);
        for (input, &activation) in row.iter().enumerate() {
            if activation == 0.0 {
                continue;
            }
            let (columns, weights) = layer.csr.slot(input);
            for (&column, &weight) in columns.iter().zip(weights) {
                next[column as usize] += activation * weight as f64;
            }
        }
        for (out, &z) in row.iter_mut().zip(&next) {
            *out = (z + bias).clamp(0.0, ACTIVATION_CAP as f64);
        }
        if row.iter().all(|&v| v == 0.0) {
            break;
        }
    }
    row
}

/// 1-based ids of the images whose final row has any nonzero, ascending.
pub fn reference_categories(network: &Network, images: &Images) -> HpecResult<Vec<u32>> {
    if images.neurons() != network.neurons {
        return Err(HpecError::NeuronMismatch {
            message: format!("images have {} pixels, network has {} neurons", images.neurons(), network.neurons),
        });
    }
    Ok((0..images.n_images())
        .into_par_iter()
        .filter(|&image| reference_final_row(network, images, image).iter().any(|&v| v != 0.0))
        .map(|image| image as u32 + 1)
        .collect())
}
