//! Writers of the challenge's TSV formats, byte-identical to the published files: layer lines
//! `row<TAB>col<TAB>value` sorted by column then row, values as C's `%.6e` (`6.250000e-02`);
//! image lines `image<TAB>pixel<TAB>value` sorted by image then pixel, integral values as
//! integers (`1`); category files with one id per line.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::network::Network;
use super::sparse::LayerMatrix;

/// Formats like C's `printf("%.6e", value)`: six decimals, exponent with sign and 2+ digits.
pub fn format_c_exponential(value: f64) -> String {
    let rust = format!("{value:.6e}");
    match rust.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => rust,
    }
}

/// Formats an image value: integers without a fraction, others as `%.6e`.
fn format_image_value(value: f32) -> String {
    if value.fract() == 0.0 && value.abs() < 1e9 {
        format!("{}", value as i64)
    } else {
        format_c_exponential(value as f64)
    }
}

/// Writes one layer in the challenge's TSV form.
pub fn write_layer_tsv(layer: &LayerMatrix, mut out: impl Write) -> std::io::Result<()> {
    let mut last_bits: Option<u32> = None;
    let mut last_text = String::new();
    let csc = layer.csc();
    for column in 0..csc.n_outer {
        let (rows, values) = csc.slot(column);
        for (&row, &value) in rows.iter().zip(values) {
            if last_bits != Some(value.to_bits()) {
                last_bits = Some(value.to_bits());
                last_text = format_c_exponential(value as f64);
            }
            writeln!(out, "{}\t{}\t{}", row + 1, column + 1, last_text)?;
        }
    }
    Ok(())
}

/// Writes `n{N}-l{k}.tsv` for every layer into `dir` (created when missing).
pub fn write_network_tsv(network: &Network, dir: &Path) -> HpecResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| HpecError::io(dir, e))?;
    let mut paths = Vec::with_capacity(network.n_layers());
    for (idx, layer) in network.layers.iter().enumerate() {
        let path = dir.join(format!("n{}-l{}.tsv", network.neurons, idx + 1));
        spartac::output::write_atomic_with(&path, |out| write_layer_tsv(layer, out))
            .map_err(|e| HpecError::io(&path, e))?;
        paths.push(path);
    }
    Ok(paths)
}

/// Writes images as `image<TAB>pixel<TAB>value` lines.
pub fn write_images_tsv(images: &Images, path: &Path) -> HpecResult<()> {
    spartac::output::write_atomic_with(path, |out| {
        for image in 0..images.n_images() {
            let (pixels, values) = images.pixels.slot(image);
            for (&pixel, &value) in pixels.iter().zip(values) {
                writeln!(out, "{}\t{}\t{}", image + 1, pixel + 1, format_image_value(value))?;
            }
        }
        Ok(())
    })
    .map_err(|e| HpecError::io(path, e))
}

/// Writes one 1-based image id per line.
pub fn write_categories(categories: &[u32], path: &Path) -> HpecResult<()> {
    let mut text = String::with_capacity(categories.len() * 6);
    for id in categories {
        text.push_str(&id.to_string());
        text.push('\n');
    }
    spartac::output::write_atomic(path, text.as_bytes()).map_err(|e| HpecError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpec::sparse::CompressedMatrix;

    #[test]
    fn c_exponential_format() {
        assert_eq!(format_c_exponential(0.0625), "6.250000e-02");
        assert_eq!(format_c_exponential(-1.5e-300), "-1.500000e-300");
        assert_eq!(format_c_exponential(12.0), "1.200000e+01");
        assert_eq!(format_c_exponential(0.0), "0.000000e+00");
    }

    #[test]
    fn layer_lines_are_sorted_by_column_then_row() {
        let csr = CompressedMatrix::from_sorted_triples(2, 2, &[(0, 1, 0.0625), (1, 0, 0.0625), (1, 1, 0.5)]).unwrap();
        let mut out = Vec::new();
        write_layer_tsv(&LayerMatrix::from_csr(csr), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "2\t1\t6.250000e-02\n1\t2\t6.250000e-02\n2\t2\t5.000000e-01\n");
    }
}
