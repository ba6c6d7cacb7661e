//! Streaming readers of the challenge's TSV formats: layers (`row col value`), images
//! (`image pixel value`) and categories (one image id per line).
//!
//! Every reader consumes a `BufRead` line by line without holding the text, validates each
//! line and reports errors as `file:line: message` (bad number, index 0, index beyond the
//! neuron count, duplicate entry, truncated line, extra fields, a line past [`MAX_LINE`] bytes).
//! The entries a file names grow by fallible reservations: a file too large for memory is an
//! error, not an abort.

use std::io::{BufRead, Read};

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::sparse::{CompressedMatrix, LayerMatrix};

/// Splits one line into exactly three tab- or space-separated fields.
fn three_fields<'a>(file: &str, line_no: u64, line: &'a [u8]) -> HpecResult<[&'a [u8]; 3]> {
    let mut fields = line.split(|b| *b == b'\t' || *b == b' ').filter(|f| !f.is_empty());
    let mut out: [&[u8]; 3] = [&[]; 3];
    for (idx, slot) in out.iter_mut().enumerate() {
        *slot = fields.next().ok_or_else(|| {
            HpecError::parse(file, line_no, format!("truncated line: expected 3 fields, found {idx}"))
        })?;
    }
    if fields.next().is_some() {
        return Err(HpecError::parse(file, line_no, "extra fields: expected 3 fields"));
    }
    Ok(out)
}

fn show(field: &[u8]) -> String {
    String::from_utf8_lossy(field).into_owned()
}

/// Parses a 1-based index in `1..=limit`; `what` names the field in messages.
fn one_based_index(file: &str, line_no: u64, field: &[u8], what: &str, limit: Option<usize>) -> HpecResult<u32> {
    let mut value: u64 = 0;
    if field.is_empty() || field.len() > 12 {
        return Err(HpecError::parse(file, line_no, format!("bad number `{}` for {what}", show(field))));
    }
    for &byte in field {
        if !byte.is_ascii_digit() {
            return Err(HpecError::parse(file, line_no, format!("bad number `{}` for {what}", show(field))));
        }
        value = value * 10 + (byte - b'0') as u64;
    }
    if value == 0 {
        return Err(HpecError::parse(file, line_no, format!("{what} index 0: indices are 1-based")));
    }
    if let Some(limit) = limit {
        if value > limit as u64 {
            return Err(HpecError::parse(
                file,
                line_no,
                format!("{what} index {value} exceeds the neuron count {limit}"),
            ));
        }
    }
    if value > u32::MAX as u64 {
        return Err(HpecError::parse(file, line_no, format!("{what} index {value} is too large")));
    }
    Ok(value as u32)
}

/// Parses a finite f32, remembering the last text so that the usual constant value
/// (`6.250000e-02`) is parsed once per file.
struct ValueParser {
    last_text: Vec<u8>,
    last_value: f32,
}

impl ValueParser {
    fn new() -> ValueParser {
        ValueParser { last_text: Vec::new(), last_value: 0.0 }
    }

    fn parse(&mut self, file: &str, line_no: u64, field: &[u8]) -> HpecResult<f32> {
        if field == self.last_text.as_slice() && !field.is_empty() {
            return Ok(self.last_value);
        }
        let bad = || HpecError::parse(file, line_no, format!("bad number `{}` for value", show(field)));
        let text = std::str::from_utf8(field).map_err(|_| bad())?;
        let value: f32 = text.parse().map_err(|_| bad())?;
        if !value.is_finite() {
            return Err(bad());
        }
        self.last_text.clear();
        self.last_text.extend_from_slice(field);
        self.last_value = value;
        Ok(value)
    }
}

/// Most bytes one line of a challenge file may hold (three numbers take a few dozen): a longer
/// one, such as the endless line of `/dev/zero` or of a binary file, is refused when read.
pub const MAX_LINE: usize = 4096;

/// Calls `on_line(line_no, bytes)` for each non-blank line (without its line ending); a line
/// longer than [`MAX_LINE`] is an error.
fn for_each_line(
    file: &str,
    mut reader: impl BufRead,
    mut on_line: impl FnMut(u64, &[u8]) -> HpecResult<()>,
) -> HpecResult<()> {
    let mut buffer = Vec::with_capacity(64);
    let mut line_no = 0u64;
    loop {
        buffer.clear();
        let n_read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .map_err(|e| HpecError::io(file, e))?;
        if n_read == 0 {
            return Ok(());
        }
        line_no += 1;
        if buffer.len() > MAX_LINE && buffer.last() != Some(&b'\n') {
            return Err(HpecError::parse(file, line_no, format!("line longer than {MAX_LINE} bytes")));
        }
        let mut line = buffer.as_slice();
        while let Some((&last, rest)) = line.split_last() {
            if last == b'\n' || last == b'\r' {
                line = rest;
            } else {
                break;
            }
        }
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        on_line(line_no, line)?;
    }
}

/// Appends to `entries`, growing it by a fallible reservation: out of memory is an error of
/// `file` at `line_no`, not an abort.
fn push_entry<T>(entries: &mut Vec<T>, entry: T, file: &str, line_no: u64) -> HpecResult<()> {
    if entries.len() == entries.capacity() {
        entries
            .try_reserve(entries.len().max(1 << 10))
            .map_err(|_| HpecError::parse(file, line_no, format!("{} entries do not fit in memory", entries.len())))?;
    }
    entries.push(entry);
    Ok(())
}

/// Reads one layer TSV of an `neurons`-neuron network into both compressed forms.
pub fn read_layer_tsv(file: &str, reader: impl BufRead, neurons: usize) -> HpecResult<LayerMatrix> {
    // (row, col, value, line) so that a duplicate can name both of its lines.
    let mut entries: Vec<(u32, u32, f32, u32)> = Vec::new();
    let mut values = ValueParser::new();
    for_each_line(file, reader, |line_no, line| {
        let [row, col, value] = three_fields(file, line_no, line)?;
        let row = one_based_index(file, line_no, row, "row", Some(neurons))?;
        let col = one_based_index(file, line_no, col, "column", Some(neurons))?;
        let value = values.parse(file, line_no, value)?;
        push_entry(&mut entries, (row - 1, col - 1, value, line_no.min(u32::MAX as u64) as u32), file, line_no)
    })?;
    entries.sort_unstable_by_key(|e| (e.0, e.1));
    if let Some(pair) = entries.windows(2).find(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1) {
        let (first, second) = if pair[0].3 < pair[1].3 { (pair[0], pair[1]) } else { (pair[1], pair[0]) };
        return Err(HpecError::parse(
            file,
            second.3 as u64,
            format!("duplicate entry ({}, {}), first given on line {}", first.0 + 1, first.1 + 1, first.3),
        ));
    }
    let triples: Vec<(u32, u32, f32)> = entries.iter().map(|e| (e.0, e.1, e.2)).collect();
    Ok(LayerMatrix::from_csr(CompressedMatrix::from_sorted_triples(neurons, neurons, &triples)?))
}

/// Most images one image file may number (ids past it are refused before anything is sized
/// by them): 2^24, 280 times the challenge's 60,000.
pub const MAX_IMAGES: usize = 1 << 24;

/// Reads an image TSV (`image pixel value`, 1-based). The image count is the largest image id
/// unless `n_images` is given, in which case larger ids are an error; at most [`MAX_IMAGES`].
pub fn read_images_tsv(
    file: &str,
    reader: impl BufRead,
    neurons: usize,
    n_images: Option<usize>,
) -> HpecResult<Images> {
    let mut entries: Vec<(u32, u32, f32, u32)> = Vec::new();
    let mut values = ValueParser::new();
    for_each_line(file, reader, |line_no, line| {
        let [image, pixel, value] = three_fields(file, line_no, line)?;
        let image = one_based_index(file, line_no, image, "image", n_images)?;
        let pixel = one_based_index(file, line_no, pixel, "pixel", Some(neurons))?;
        let value = values.parse(file, line_no, value)?;
        push_entry(&mut entries, (image - 1, pixel - 1, value, line_no.min(u32::MAX as u64) as u32), file, line_no)
    })?;
    entries.sort_unstable_by_key(|e| (e.0, e.1));
    if let Some(pair) = entries.windows(2).find(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1) {
        let line = pair[0].3.max(pair[1].3);
        return Err(HpecError::parse(
            file,
            line as u64,
            format!("duplicate entry (image {}, pixel {})", pair[0].0 + 1, pair[0].1 + 1),
        ));
    }
    let count = n_images.unwrap_or_else(|| entries.last().map(|e| e.0 as usize + 1).unwrap_or(0));
    if count > MAX_IMAGES {
        let line = entries.last().map_or(0, |e| e.3 as u64);
        return Err(HpecError::parse(
            file,
            line,
            format!("image id {count}: at most {MAX_IMAGES} images a file (the challenge has 60,000); split the file"),
        ));
    }
    let triples: Vec<(u32, u32, f32)> = entries.iter().map(|e| (e.0, e.1, e.2)).collect();
    Ok(Images::from_csr(CompressedMatrix::from_sorted_triples(count, neurons, &triples)?))
}

/// Reads a category file: one 1-based image id per line, returned ascending.
pub fn read_categories(file: &str, reader: impl BufRead) -> HpecResult<Vec<u32>> {
    let mut ids: Vec<(u32, u64)> = Vec::new();
    for_each_line(file, reader, |line_no, line| {
        let mut fields = line.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty());
        let field = fields.next().unwrap_or(&[]);
        if fields.next().is_some() {
            return Err(HpecError::parse(file, line_no, "extra fields: expected one image id"));
        }
        let id = one_based_index(file, line_no, field, "image", None)?;
        push_entry(&mut ids, (id, line_no), file, line_no)
    })?;
    ids.sort_unstable();
    if let Some(pair) = ids.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(HpecError::parse(file, pair[1].1, format!("duplicate image id {}", pair[0].0)));
    }
    Ok(ids.into_iter().map(|(id, _)| id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(text: &str, neurons: usize) -> HpecResult<LayerMatrix> {
        read_layer_tsv("n4-l1.tsv", text.as_bytes(), neurons)
    }

    #[test]
    fn reads_a_small_layer_in_both_forms() {
        let matrix = layer("1\t2\t6.250000e-02\n3\t2\t0.5\n2\t1\t1\n", 4).unwrap();
        assert_eq!(matrix.n_nonzeros(), 3);
        assert_eq!(matrix.csr.offsets, vec![0, 1, 2, 3, 3]);
        assert_eq!(matrix.csc().slot(1), (&[0u32, 2][..], &[0.0625f32, 0.5][..]));
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            ("1\t1\t1\n1\tx\t1\n", "n4-l1.tsv:2: bad number `x` for column"),
            ("1\t1\t1\n\n0\t1\t1\n", "n4-l1.tsv:3: row index 0: indices are 1-based"),
            ("5\t1\t1\n", "n4-l1.tsv:1: row index 5 exceeds the neuron count 4"),
            ("1\t1\n", "n4-l1.tsv:1: truncated line: expected 3 fields, found 2"),
            ("1\t1\t1e\n", "n4-l1.tsv:1: bad number `1e` for value"),
            ("1\t1\tnan\n", "n4-l1.tsv:1: bad number `nan` for value"),
            ("1\t1\t1\t1\n", "n4-l1.tsv:1: extra fields: expected 3 fields"),
            ("1\t2\t1\n2\t2\t1\n1\t2\t1\n", "n4-l1.tsv:3: duplicate entry (1, 2), first given on line 1"),
        ];
        for (text, expected) in cases {
            assert_eq!(layer(text, 4).unwrap_err().to_string(), expected, "input {text:?}");
        }
    }

    #[test]
    fn reads_images_and_categories() {
        let images = read_images_tsv("img.tsv", "2\t3\t1\n1\t1\t1\n".as_bytes(), 4, None).unwrap();
        assert_eq!(images.n_images(), 2);
        assert_eq!(images.pixels.slot(1).0, &[2u32]);
        let err = read_images_tsv("img.tsv", "1\t5\t1\n".as_bytes(), 4, None).unwrap_err();
        assert_eq!(err.to_string(), "img.tsv:1: pixel index 5 exceeds the neuron count 4");
        assert_eq!(read_categories("c.tsv", "3\n1\n\n".as_bytes()).unwrap(), vec![1, 3]);
        // An endless line (a device, a binary file) is refused at the bound, not read whole.
        let zeros = std::io::BufReader::new(std::io::repeat(0).take(1 << 20));
        let err = read_categories("zero", zeros).unwrap_err();
        assert_eq!(err.to_string(), format!("zero:1: line longer than {MAX_LINE} bytes"));
        let long = format!("1\t1\t{}\n", "0".repeat(MAX_LINE - 4));
        assert!(read_images_tsv("img.tsv", long.as_bytes(), 4, None).is_ok(), "a line of MAX_LINE bytes");
        let err = read_categories("c.tsv", "3\n3\n".as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), "c.tsv:2: duplicate image id 3");
    }
}
