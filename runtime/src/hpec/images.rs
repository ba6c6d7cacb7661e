//! Sparse input images (one row per image, one column per input neuron) and their files.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::error::{HpecError, HpecResult};
use super::sparse::CompressedMatrix;
use super::tsv_reader::{read_categories, read_images_tsv};

/// A batch of input images as a CSR matrix `image -> (pixel, value)`, pixels ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct Images {
    pub pixels: CompressedMatrix,
}

impl Images {
    pub fn from_csr(pixels: CompressedMatrix) -> Images {
        Images { pixels }
    }

    pub fn n_images(&self) -> usize {
        self.pixels.n_outer
    }

    pub fn neurons(&self) -> usize {
        self.pixels.n_inner
    }

    pub fn n_nonzeros(&self) -> usize {
        self.pixels.n_nonzeros()
    }

    /// The first `count` images (all of them when fewer exist).
    pub fn first(&self, count: usize) -> Images {
        let count = count.min(self.n_images());
        let end = self.pixels.offsets[count] as usize;
        Images::from_csr(CompressedMatrix {
            n_outer: count,
            n_inner: self.neurons(),
            offsets: self.pixels.offsets[..=count].to_vec(),
            indices: self.pixels.indices[..end].to_vec(),
            values: self.pixels.values[..end].to_vec(),
        })
    }

    /// `count` images: these images repeated in order (image i is image i mod n), the way the
    /// measured peers in `PEERS.md` made 60,000 inputs from the 1,200 real challenge images.
    /// Image i's category is that of image i mod n, so a truth for the n extends by
    /// [`tile_categories`].
    pub fn tiled(&self, count: usize) -> HpecResult<Images> {
        let n = self.n_images();
        if n == 0 {
            return Err(HpecError::InvalidArgument("cannot repeat an empty image set".into()));
        }
        let order: Vec<u32> = (0..count).map(|i| (i % n) as u32).collect();
        self.reordered(&order)
    }

    /// The images in the order `order` gives (image i of the result is image `order[i]`; an
    /// image may appear any number of times). Errors when the result holds 2^32 pixels or more.
    pub fn reordered(&self, order: &[u32]) -> HpecResult<Images> {
        let total: usize = order.iter().map(|&i| self.pixels.slot(i as usize).0.len()).sum();
        if total > u32::MAX as usize {
            return Err(HpecError::InvalidArgument(format!("{} images hold more than 2^32 pixels", order.len())));
        }
        let mut offsets = Vec::with_capacity(order.len() + 1);
        let (mut indices, mut values) = (Vec::with_capacity(total), Vec::with_capacity(total));
        offsets.push(0u32);
        for &i in order {
            let (px, v) = self.pixels.slot(i as usize);
            indices.extend_from_slice(px);
            values.extend_from_slice(v);
            offsets.push(indices.len() as u32);
        }
        Ok(Images::from_csr(CompressedMatrix {
            n_outer: order.len(),
            n_inner: self.neurons(),
            offsets,
            indices,
            values,
        }))
    }

    /// Rescales square images to another neuron count by nearest-neighbour sampling.
    ///
    /// Pixels are read as a `side × side` raster (`side = sqrt(neurons)`); the target raster
    /// has side `floor(sqrt(target_neurons))` and pixel `y * side + x`, so targets that are not
    /// perfect squares (N = 2^odd) leave their last `N - side²` neurons unused. Inputs for generated
    /// networks come from [`super::mnist`] instead (bilinear from the 28×28 digits); this stays
    /// for rescaling given image files.
    pub fn rescaled(&self, target_neurons: usize) -> HpecResult<Images> {
        let source_side = (self.neurons() as f64).sqrt().round() as usize;
        if source_side * source_side != self.neurons() {
            return Err(HpecError::InvalidArgument(format!(
                "cannot rescale images of {} pixels: not a square raster",
                self.neurons()
            )));
        }
        let target_side = (target_neurons as f64).sqrt().floor() as usize;
        if target_side == 0 {
            return Err(HpecError::InvalidArgument(format!("cannot rescale images to {target_neurons} pixels")));
        }
        let mut triples = Vec::new();
        let mut dense = vec![0f32; self.neurons()];
        for image in 0..self.n_images() {
            let (pixels, values) = self.pixels.slot(image);
            for (&pixel, &value) in pixels.iter().zip(values) {
                dense[pixel as usize] = value;
            }
            for y in 0..target_side {
                let source_y = y * source_side / target_side;
                for x in 0..target_side {
                    let value = dense[source_y * source_side + x * source_side / target_side];
                    if value != 0.0 {
                        triples.push((image as u32, (y * target_side + x) as u32, value));
                    }
                }
            }
            for &pixel in pixels {
                dense[pixel as usize] = 0.0;
            }
        }
        Ok(Images::from_csr(CompressedMatrix::from_sorted_triples(self.n_images(), target_neurons, &triples)?))
    }
}

/// Opens a regular file (links followed): a FIFO or a device (`/dev/zero`) is refused by its
/// type before it is opened, so it can neither block the reader nor feed it without end.
pub fn open_regular(path: &Path) -> HpecResult<File> {
    spartac::contained::check_regular(path).map_err(|e| HpecError::io(path, e))?;
    File::open(path).map_err(|e| HpecError::io(path, e))
}

/// Opens a regular file for buffered reading, decompressing it when its name ends in `.gz`.
pub fn open_text(path: &Path) -> HpecResult<Box<dyn BufRead>> {
    let file = open_regular(path)?;
    if path.extension().is_some_and(|ext| ext == "gz") {
        Ok(Box::new(BufReader::with_capacity(1 << 16, flate2::read::GzDecoder::new(file))))
    } else {
        Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
    }
}

/// Reads an image TSV (optionally `.gz`) of `neurons`-pixel images.
pub fn load_images(path: &Path, neurons: usize) -> HpecResult<Images> {
    read_images_tsv(&path.display().to_string(), open_text(path)?, neurons, None)
}

/// Reads a category file (optionally `.gz`): ascending 1-based image ids.
pub fn load_categories(path: &Path) -> HpecResult<Vec<u32>> {
    read_categories(&path.display().to_string(), open_text(path)?)
}

/// The categories of `count` images tiled from `n` base images (see [`Images::tiled`]), given
/// the base images' categories (1-based ids, ascending).
pub fn tile_categories(base: &[u32], n: usize, count: usize) -> Vec<u32> {
    (0..count.div_ceil(n.max(1)))
        .flat_map(|copy| base.iter().map(move |&id| id as usize + copy * n))
        .filter(|&id| id <= count)
        .map(|id| id as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescaling_doubles_each_pixel() {
        // 2x2 image with pixel (x=1, y=0) on -> 4x4 image with a 2x2 block on.
        let csr = CompressedMatrix::from_sorted_triples(1, 4, &[(0, 1, 1.0)]).unwrap();
        let images = Images::from_csr(csr).rescaled(16).unwrap();
        assert_eq!(images.pixels.slot(0).0, &[2u32, 3, 6, 7]);
        let first = images.first(5);
        assert_eq!(first, images);
    }
}
