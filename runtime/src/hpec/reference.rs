//! The f64 reference: dense rows, plain loops; slow and obviously correct. Used to cross-check
//! the engine and to make the truth of generated networks.
//!
//! [`reference_final_row`] runs one image. [`reference_categories`] runs the images in chunks,
//! layer by layer, and computes each distinct row of a chunk once: a layer is a pure function
//! of its input row, so rows equal bit for bit stay equal, and the activations of the
//! challenge networks converge (past layer ~22 every surviving image of the 1024 and 4096
//! networks holds the same row), which makes the 4096×1920 truth ~50× cheaper. A test checks
//! it against [`reference_final_row`] image by image.

use rayon::prelude::*;

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::kernels::ACTIVATION_CAP;
use super::network::Network;

/// The input row of one image (0-based) in f64.
fn input_row(network: &Network, images: &Images, image: usize) -> Vec<f64> {
    let mut row = vec![0f64; network.neurons];
    let (pixels, values) = images.pixels.slot(image);
    for (&pixel, &value) in pixels.iter().zip(values) {
        row[pixel as usize] = value as f64;
    }
    row
}

/// `row` through one layer, in place (`next` is scratch of the same length).
fn apply_layer(layer: &super::sparse::LayerMatrix, bias: f64, row: &mut [f64], next: &mut [f64]) {
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
    for (out, &z) in row.iter_mut().zip(next.iter()) {
        *out = (z + bias).clamp(0.0, ACTIVATION_CAP as f64);
    }
}

/// Final activation row of one image (0-based) in f64.
pub fn reference_final_row(network: &Network, images: &Images, image: usize) -> Vec<f64> {
    let mut row = input_row(network, images, image);
    let bias = network.bias as f64;
    let mut next = vec![0f64; network.neurons];
    for layer in &network.layers {
        apply_layer(layer, bias, &mut row, &mut next);
        if row.iter().all(|&v| v == 0.0) {
            break;
        }
    }
    row
}

/// Images a chunk of [`reference_categories`] holds: at most ~256 MiB of f64 rows.
fn chunk_images(neurons: usize) -> usize {
    ((256 << 20) / (8 * neurons.max(1))).clamp(1, 4096)
}

/// A 64-bit hash of a row's bits: four independent multiply-rotate lanes (a row of 65,536
/// neurons hashes in ~20 µs; SipHash over a copied key took ~0.4 ms, a tenth of the reference).
fn row_hash(row: &[f64]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [1u64, 2, 3, 4];
    let mut quads = row.chunks_exact(4);
    for q in &mut quads {
        for (lane, v) in lanes.iter_mut().zip(q) {
            *lane = (lane.rotate_left(23) ^ v.to_bits()).wrapping_mul(K);
        }
    }
    for (lane, v) in lanes.iter_mut().zip(quads.remainder()) {
        *lane = (lane.rotate_left(23) ^ v.to_bits()).wrapping_mul(K);
    }
    lanes.iter().fold(row.len() as u64, |h, &l| (h.rotate_left(29) ^ l).wrapping_mul(K))
}

/// The images of `range` whose final row has any nonzero (0-based), each distinct row of the
/// chunk computed once per layer.
fn chunk_categories(network: &Network, images: &Images, range: std::ops::Range<usize>) -> Vec<usize> {
    let bias = network.bias as f64;
    // Distinct live rows, each with the images it stands for. Rows are found by a fast hash of
    // their bits and told apart by comparing them whole (equal hashes of different rows merge
    // nothing).
    let mut rows: Vec<(Vec<f64>, Vec<usize>)> = vec![];
    let mut seen: std::collections::HashMap<u64, Vec<usize>> = Default::default();
    let mut merge = |rows: Vec<(Vec<f64>, Vec<usize>)>| {
        seen.clear();
        let mut out: Vec<(Vec<f64>, Vec<usize>)> = vec![];
        for (row, members) in rows {
            if row.iter().all(|&v| v == 0.0) {
                continue;
            }
            let same = seen.entry(row_hash(&row)).or_default();
            match same.iter().find(|&&i| out[i].0.iter().zip(&row).all(|(a, b)| a.to_bits() == b.to_bits())) {
                Some(&i) => out[i].1.extend(members),
                None => {
                    same.push(out.len());
                    out.push((row, members));
                }
            }
        }
        out
    };
    rows = merge(range.map(|i| (input_row(network, images, i), vec![i])).collect());
    let mut next = vec![0f64; network.neurons];
    for layer in &network.layers {
        if rows.is_empty() {
            break;
        }
        for (row, _) in rows.iter_mut() {
            apply_layer(layer, bias, row, &mut next);
        }
        rows = merge(rows);
    }
    let mut ids: Vec<usize> = rows.into_iter().flat_map(|(_, members)| members).collect();
    ids.sort_unstable();
    ids
}

/// 1-based ids of the images whose final row has any nonzero, ascending.
pub fn reference_categories(network: &Network, images: &Images) -> HpecResult<Vec<u32>> {
    if images.neurons() != network.neurons {
        return Err(HpecError::NeuronMismatch {
            message: format!("images have {} pixels, network has {} neurons", images.neurons(), network.neurons),
        });
    }
    let n = images.n_images();
    let chunk = chunk_images(network.neurons).min(n.div_ceil(rayon::current_num_threads().max(1))).max(1);
    let per_chunk: Vec<Vec<usize>> = (0..n.div_ceil(chunk))
        .into_par_iter()
        .map(|c| chunk_categories(network, images, c * chunk..((c + 1) * chunk).min(n)))
        .collect();
    Ok(per_chunk.into_iter().flatten().map(|image| image as u32 + 1).collect())
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
    // Only a regular file is opened: a FIFO in the cache would block the read.
    if let Ok(text) = spartac::contained::read_regular_text(&path) {
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
