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

/// [`reference_categories`], kept in the folder `cache` between runs: the entry is keyed by a
/// hash of the network (every layer's pattern and values, the bias) and of the images, and
/// holds the categories with their checksum; a damaged entry is recomputed. Returns the
/// categories and whether they came from the cache.
pub fn reference_categories_cached(
    network: &Network,
    images: &Images,
    cache: Option<&std::path::Path>,
) -> HpecResult<(Vec<u32>, bool)> {
    let Some(dir) = cache else {
        return Ok((reference_categories(network, images)?, false));
    };
    let mut h = spartac::program::Fnv64::new();
    h.add(&network.neurons.to_le_bytes());
    h.add(&network.bias.to_le_bytes());
    for layer in &network.layers {
        let m = &layer.csr;
        h.add_u32s(&m.offsets);
        h.add_u32s(&m.indices);
        h.add_f32s(&m.values);
    }
    let px = &images.pixels;
    h.add(&px.n_inner.to_le_bytes());
    h.add_u32s(&px.offsets);
    h.add_u32s(&px.indices);
    h.add_f32s(&px.values);
    let path = dir.join(format!("{:016x}.categories", h.finish()));
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some((sum, ids)) = text.split_once('\n') {
            if format!("{:016x}", spartac::program::checksum(ids.as_bytes())) == sum {
                if let Ok(ids) = ids.split_whitespace().map(str::parse::<u32>).collect::<Result<Vec<_>, _>>() {
                    return Ok((ids, true));
                }
            }
        }
    }
    let ids = reference_categories(network, images)?;
    let body = ids.iter().map(u32::to_string).collect::<Vec<_>>().join("\n");
    let text = format!("{:016x}\n{body}", spartac::program::checksum(body.as_bytes()));
    crate::exec::write_cache_entry(&path, text.as_bytes());
    Ok((ids, false))
}
