//! Malformed inputs: every error names the file and line, and nothing panics.

use std::path::Path;

use spartac_runtime::hpec::{self, CacheConfig, NetworkSource};

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn load_error(dir: &Path, layers: Option<usize>) -> String {
    let source = NetworkSource::from_path(dir);
    hpec::load_network(&source, layers, &CacheConfig::Disabled).unwrap_err().to_string()
}

#[test]
fn malformed_layer_files_report_file_and_line() {
    let cases = [
        ("1\t1\t0.5\n2\tx2\t0.5\n", "n32-l1.tsv:2: bad number `x2` for column"),
        ("1\t1\t0.5\n0\t1\t0.5\n", "n32-l1.tsv:2: row index 0: indices are 1-based"),
        ("1\t1\t0.5\n1\t33\t0.5\n", "n32-l1.tsv:2: column index 33 exceeds the neuron count 32"),
        ("1\t1\t0.5\n2\t2\n", "n32-l1.tsv:2: truncated line: expected 3 fields, found 2"),
        ("1\t1\t0.5\n1\t1\t0.25\n", "n32-l1.tsv:2: duplicate entry (1, 1), first given on line 1"),
        ("1\t1\tabc\n", "n32-l1.tsv:1: bad number `abc` for value"),
    ];
    for (text, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "n32-l1.tsv", text);
        let message = load_error(dir.path(), None);
        assert!(message.ends_with(expected), "got `{message}`, expected it to end with `{expected}`");
        assert!(message.contains(&dir.path().display().to_string()), "{message}");
    }
}

#[test]
fn wrong_layer_sets_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "n32-l1.tsv", "1\t1\t0.5\n");
    write(dir.path(), "n32-l3.tsv", "1\t1\t0.5\n");
    let message = load_error(dir.path(), None);
    assert!(message.contains("wrong layer count: 3 layers needed but n32-l2.tsv is missing"), "{message}");
    let message = load_error(dir.path(), Some(5));
    assert!(message.contains("wrong layer count: 5 layers needed"), "{message}");
    // The first layer alone is fine.
    let network = hpec::load_network(&NetworkSource::from_path(dir.path()), Some(1), &CacheConfig::Disabled).unwrap();
    assert_eq!(network.n_layers(), 1);
    write(dir.path(), "n64-l2.tsv", "1\t1\t0.5\n");
    let message = load_error(dir.path(), None);
    assert!(message.starts_with("neuron count mismatch"), "{message}");
    let empty = tempfile::tempdir().unwrap();
    assert!(load_error(empty.path(), None).contains("no layer files"));
}

#[test]
fn malformed_archive_members_name_the_member_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let archive_path = dir.path().join("net.tar.gz");
    let file = std::fs::File::create(&archive_path).unwrap();
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::fast()));
    for (name, text) in [("net/n32-l2.tsv", "1\t1\t0.5\n3\t0\t0.5\n"), ("net/n32-l1.tsv", "1\t1\t0.5\n")] {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, text.as_bytes()).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
    let source = NetworkSource::from_path(&archive_path);
    let message = hpec::load_network(&source, None, &CacheConfig::Disabled).unwrap_err().to_string();
    assert!(message.ends_with("net.tar.gz:net/n32-l2.tsv:2: column index 0: indices are 1-based"), "{message}");
    // Only layer 1 requested: the bad layer 2 is skipped, not parsed.
    assert_eq!(hpec::load_network(&source, Some(1), &CacheConfig::Disabled).unwrap().n_layers(), 1);
    // A truncated archive is an error, not a panic.
    let bytes = std::fs::read(&archive_path).unwrap();
    std::fs::write(&archive_path, &bytes[..bytes.len() / 2]).unwrap();
    assert!(hpec::load_network(&source, None, &CacheConfig::Disabled).is_err());
}

#[test]
fn malformed_image_and_category_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "images.tsv", "1\t5\t1\n2\t1025\t1\n");
    let message = hpec::load_images(&dir.path().join("images.tsv"), 1024).unwrap_err().to_string();
    assert!(message.ends_with("images.tsv:2: pixel index 1025 exceeds the neuron count 1024"), "{message}");
    write(dir.path(), "categories.tsv", "4\n0\n");
    let message = hpec::load_categories(&dir.path().join("categories.tsv")).unwrap_err().to_string();
    assert!(message.ends_with("categories.tsv:2: image index 0: indices are 1-based"), "{message}");
    let missing = hpec::load_images(&dir.path().join("absent.tsv"), 1024).unwrap_err().to_string();
    assert!(missing.contains("absent.tsv"), "{missing}");
}
