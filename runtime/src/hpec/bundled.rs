//! Data bundled with spartac under `models/hpec/`: the 19 row relabellings of the real 1024
//! network, its first 1,200 input images and their truth. With these the real 1024×120
//! network is regenerated exactly, and any 1024-neuron network can be run on real inputs.

use super::error::HpecResult;
use super::images::Images;
use super::relabellings::Relabellings;
use super::tsv_reader::{read_categories, read_images_tsv};

const RELABELLINGS_TEXT: &str = include_str!("../../../models/hpec/neuron1024-relabellings.txt");
const IMAGES_GZ: &[u8] = include_bytes!("../../../models/hpec/sparse-images-1024-first1200.tsv.gz");
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

/// Real inputs for an N-neuron network: the bundled images, rescaled when N != 1024
/// (see [`Images::rescaled`]), limited to the first `count`.
pub fn images_for_neurons(neurons: usize, count: usize) -> HpecResult<Images> {
    let images = real_1024_images()?.first(count);
    if neurons == 1024 {
        Ok(images)
    } else {
        images.rescaled(neurons)
    }
}
