//! The exact fp32 CPU engine: data parallelism over blocks of images with rayon.
//!
//! Each rayon task takes one block of up to `block_images` images through every layer
//! (`Y_{l+1} = min(32, max(0, Y_l · W_l + bias))`), dropping images whose row became all zero.
//! Memory is `threads × 2 × N × block_images` floats plus the network, never images × N.
//!
//! Kernel choice per block and layer ([`KernelChoice::Auto`]): the column-wise right SpMM over
//! CSC only when the block is full (no image dropped yet) and every neuron row of Y holds a
//! nonzero (fraction >= `AUTO_ROW_WISE_DENSITY` = 1.0); the row-wise left SpMM over CSR
//! otherwise. Measured on the real 1024×120 network and the 1,200 real images (see
//! `benches/results/hpec_cpu.md`): the CSR form skips zero rows and wins at every density below
//! about 90 % and on every whole network; the CSC gather wins only on full, fully dense blocks
//! (by about 10 % per layer), where it needs no zero fill of the output tile.

use std::time::Instant;

use rayon::prelude::*;

use super::error::{HpecError, HpecResult};
use super::hashing::{bucket_permutation, hashed_image_order, permute_network};
use super::images::Images;
use super::kernels::{step_column_wise_csc, step_row_wise_csr, ImageBlock};
use super::network::Network;

/// Auto picks the row-wise CSR form below this fraction of nonzero neuron rows in a full block.
pub const AUTO_ROW_WISE_DENSITY: f64 = 1.0;

/// Which SpMM form runs each layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KernelChoice {
    /// Per block and layer by [`AUTO_ROW_WISE_DENSITY`].
    #[default]
    Auto,
    /// Always the row-wise left SpMM over CSR.
    RowWiseCsr,
    /// Always the column-wise right SpMM over CSC.
    ColumnWiseCsc,
}

/// Inference settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferOptions {
    /// Rayon threads (`None`: rayon's default, one per core).
    pub threads: Option<usize>,
    pub kernel: KernelChoice,
    /// Images per block (lanes of the dense tile).
    pub block_images: usize,
    /// Order images by a hash of their id before blocking.
    pub input_hashing: bool,
    /// Relabel neurons by bucket hashing with this many buckets (`None`: no layer hashing).
    pub layer_hashing_buckets: Option<usize>,
}

impl Default for InferOptions {
    fn default() -> InferOptions {
        InferOptions {
            threads: None,
            kernel: KernelChoice::Auto,
            block_images: 32,
            input_hashing: true,
            layer_hashing_buckets: None,
        }
    }
}

/// What an inference produced and how fast.
#[derive(Clone, Debug, PartialEq)]
pub struct InferResult {
    /// 1-based ids of images whose final row has any nonzero, ascending.
    pub categories: Vec<u32>,
    /// Inference time (block set-up and all layers), excluding file reading and hashing.
    pub seconds: f64,
    /// Time spent before the timed part on layer hashing and, for the forced column-wise
    /// kernel, on building every layer's CSC form (0 when neither applies).
    pub prepare_seconds: f64,
    pub images: usize,
    pub layers: usize,
    /// Images × nonzeros over all layers.
    pub edges: f64,
    pub edges_per_second: f64,
    /// Block-layer steps run by each form.
    pub row_wise_steps: u64,
    pub column_wise_steps: u64,
    pub threads: usize,
}

/// Runs the network on the images.
pub fn infer(network: &Network, images: &Images, options: &InferOptions) -> HpecResult<InferResult> {
    if images.neurons() != network.neurons {
        return Err(HpecError::NeuronMismatch {
            message: format!("images have {} pixels, network has {} neurons", images.neurons(), network.neurons),
        });
    }
    if options.block_images == 0 {
        return Err(HpecError::InvalidArgument("block_images must be at least 1".to_string()));
    }
    let mut builder = rayon::ThreadPoolBuilder::new();
    if let Some(threads) = options.threads {
        if threads == 0 {
            return Err(HpecError::InvalidArgument("threads must be at least 1".to_string()));
        }
        builder = builder.num_threads(threads);
    }
    let pool = builder
        .build()
        .map_err(|e| HpecError::InvalidArgument(format!("cannot start {:?} threads: {e}", options.threads)))?;
    pool.install(|| infer_in_pool(network, images, options, pool.current_num_threads()))
}

fn infer_in_pool(
    network: &Network,
    images: &Images,
    options: &InferOptions,
    threads: usize,
) -> HpecResult<InferResult> {
    let prepare_start = Instant::now();
    let permutation = options.layer_hashing_buckets.and_then(|k| bucket_permutation(network.neurons, k));
    let hashed_network;
    let hashed_images;
    let (network_used, images_used) = match &permutation {
        Some(permutation) => {
            hashed_network = permute_network(network, permutation);
            hashed_images = permute_images(images, permutation);
            (&hashed_network, &hashed_images)
        }
        None => (network, images),
    };
    if options.kernel == KernelChoice::ColumnWiseCsc {
        // CSC is built lazily; build it for every layer now so the timed part runs kernels only.
        network_used.layers.par_iter().for_each(|layer| {
            layer.csc();
        });
    }
    let prepared = permutation.is_some() || options.kernel == KernelChoice::ColumnWiseCsc;
    let prepare_seconds = if prepared { prepare_start.elapsed().as_secs_f64() } else { 0.0 };

    let start = Instant::now();
    let order: Vec<u32> = if options.input_hashing {
        hashed_image_order(images.n_images(), 0x5eed)
    } else {
        (0..images.n_images() as u32).collect()
    };
    let outcomes: Vec<(Vec<u32>, u64, u64)> = order
        .par_chunks(options.block_images)
        .map(|chunk| run_block(network_used, images_used, chunk.to_vec(), options.kernel))
        .collect();
    let seconds = start.elapsed().as_secs_f64();

    let mut categories: Vec<u32> = outcomes.iter().flat_map(|o| o.0.iter().map(|id| id + 1)).collect();
    categories.sort_unstable();
    let edges = images.n_images() as f64 * network.total_nonzeros() as f64;
    Ok(InferResult {
        categories,
        seconds,
        prepare_seconds,
        images: images.n_images(),
        layers: network.n_layers(),
        edges,
        edges_per_second: if seconds > 0.0 { edges / seconds } else { 0.0 },
        row_wise_steps: outcomes.iter().map(|o| o.1).sum(),
        column_wise_steps: outcomes.iter().map(|o| o.2).sum(),
        threads,
    })
}

/// Takes one block through all layers; returns surviving image ids and kernel step counts.
fn run_block(network: &Network, images: &Images, image_ids: Vec<u32>, kernel: KernelChoice) -> (Vec<u32>, u64, u64) {
    let mut block = ImageBlock::new(network.neurons, image_ids, |image| images.pixels.slot(image as usize));
    let (mut row_wise, mut column_wise) = (0u64, 0u64);
    for layer in &network.layers {
        if block.active == 0 {
            break;
        }
        let use_row_wise = match kernel {
            KernelChoice::RowWiseCsr => true,
            KernelChoice::ColumnWiseCsc => false,
            KernelChoice::Auto => {
                block.active < block.lanes
                    || (block.nonzero_rows.len() as f64) < AUTO_ROW_WISE_DENSITY * network.neurons as f64
            }
        };
        if use_row_wise {
            step_row_wise_csr(&mut block, layer, network.bias);
            row_wise += 1;
        } else {
            step_column_wise_csc(&mut block, layer, network.bias);
            column_wise += 1;
        }
    }
    (block.image_ids.clone(), row_wise, column_wise)
}

/// Images with every pixel relabelled by `permutation`.
fn permute_images(images: &Images, permutation: &[u32]) -> Images {
    let mut pixels = images.pixels.clone();
    for image in 0..images.n_images() {
        let start = pixels.offsets[image] as usize;
        let end = pixels.offsets[image + 1] as usize;
        let mut entries: Vec<(u32, f32)> = pixels.indices[start..end]
            .iter()
            .zip(&pixels.values[start..end])
            .map(|(&p, &v)| (permutation[p as usize], v))
            .collect();
        entries.sort_unstable_by_key(|e| e.0);
        for (slot, (pixel, value)) in entries.into_iter().enumerate() {
            pixels.indices[start + slot] = pixel;
            pixels.values[start + slot] = value;
        }
    }
    Images::from_csr(pixels)
}
