//! The real 1024-neuron challenge network from `../shared/hpec`: exact categories, byte-for-byte
//! regeneration, bundled data and the cache on real data.

use std::io::Read;
use std::path::PathBuf;

use spartac_runtime::hpec::{self, bundled, CacheConfig, CacheStatus, InferOptions, KernelChoice, NetworkSource};

/// `$SPARTAC_SHARED_DIR/hpec`, else `../shared/hpec` beside the repository; the tests fail
/// (never pass silently) without it.
fn shared_hpec_dir() -> PathBuf {
    let shared = std::env::var_os("SPARTAC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let dir = shared.join("hpec");
    assert!(
        dir.join("neuron1024.tar.gz").is_file(),
        "the real HPEC data is missing: expected {} (shared/hpec beside the repository, or set SPARTAC_SHARED_DIR)",
        dir.display()
    );
    dir
}

fn real_network(layers: Option<usize>) -> hpec::Network {
    let source = NetworkSource::from_path(&shared_hpec_dir().join("neuron1024.tar.gz"));
    hpec::load_network(&source, layers, &CacheConfig::Disabled).expect("real network loads")
}

#[test]
fn real_network_gives_the_19_published_categories_with_every_kernel() {
    let network = real_network(None);
    assert_eq!(network.n_layers(), 120);
    assert_eq!(network.total_nonzeros(), 120 * 32768);
    assert_eq!(network.bias, -0.3f32);
    let images = hpec::load_images(&shared_hpec_dir().join("sparse-images-1024-first1200.tsv"), 1024).unwrap();
    assert_eq!((images.n_images(), images.n_nonzeros()), (1200, 122_713));
    let truth = hpec::load_categories(&shared_hpec_dir().join("neuron1024-l120-categories-first1200.tsv")).unwrap();
    assert_eq!(truth.len(), 19);
    for kernel in [KernelChoice::Auto, KernelChoice::RowWiseCsr, KernelChoice::ColumnWiseCsc] {
        for (input_hashing, layer_hashing_buckets) in [(true, None), (false, Some(128))] {
            let options = InferOptions {
                kernel,
                input_hashing,
                layer_hashing_buckets,
                block_images: 24,
                ..InferOptions::default()
            };
            let result = hpec::infer(&network, &images, &options).unwrap();
            assert_eq!(result.categories, truth, "{options:?}");
        }
    }
    // The f64 reference agrees on the first 300 images (all 120 layers).
    let first = images.first(300);
    let reference = hpec::reference_categories(&network, &first).unwrap();
    let expected: Vec<u32> = truth.iter().copied().filter(|&id| id <= 300).collect();
    assert_eq!(reference, expected);
}

#[test]
fn generator_with_bundled_relabellings_reproduces_the_real_layers_byte_for_byte() {
    let config = hpec::GeneratorConfig {
        neurons: 1024,
        layers: 120,
        seed: 0,
        relabellings: Some(bundled::real_1024_relabellings().unwrap()),
    };
    let generated = hpec::generate_with(&config).unwrap();
    let file = std::fs::File::open(shared_hpec_dir().join("neuron1024.tar.gz")).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut compared = 0;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let Some((neurons, layer)) = hpec::source::parse_layer_file_name(name.rsplit('/').next().unwrap()) else {
            continue;
        };
        assert_eq!(neurons, 1024);
        let mut real_bytes = Vec::new();
        entry.read_to_end(&mut real_bytes).unwrap();
        let mut generated_bytes = Vec::new();
        hpec::write_layer_tsv(&generated.layers[layer - 1], &mut generated_bytes).unwrap();
        assert!(real_bytes == generated_bytes, "layer {layer} differs from {name}");
        compared += 1;
    }
    assert_eq!(compared, 120);
    // And the relabellings read back from the real network are the bundled ones.
    let recovered = hpec::recover_relabellings(&real_network(None)).expect("real network follows the recipe");
    assert_eq!(Some(recovered), config.relabellings);
}

#[test]
fn bundled_inputs_are_the_shared_ones() {
    let shared = shared_hpec_dir();
    assert_eq!(
        bundled::real_1024_images().unwrap(),
        hpec::load_images(&shared.join("sparse-images-1024-first1200.tsv"), 1024).unwrap()
    );
    assert_eq!(
        bundled::real_1024_categories().unwrap(),
        hpec::load_categories(&shared.join("neuron1024-l120-categories-first1200.tsv")).unwrap()
    );
}

#[test]
fn cache_round_trip_on_the_real_archive_and_corrupt_cache_rebuild() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheConfig::Directory(cache_dir.path().to_path_buf());
    let source = NetworkSource::from_path(&shared_hpec_dir().join("neuron1024.tar.gz"));
    let (first, status) = hpec::load_network_with_status(&source, Some(30), &cache).unwrap();
    assert_eq!(first.n_layers(), 30);
    let CacheStatus::Written { path, .. } = status else { panic!("expected a written cache, got {status:?}") };
    let (second, status) = hpec::load_network_with_status(&source, Some(30), &cache).unwrap();
    assert_eq!(status, CacheStatus::Hit(path.clone()));
    assert_eq!(second, first);
    // Another layer count is another cache entry.
    let (shorter, status) = hpec::load_network_with_status(&source, Some(7), &cache).unwrap();
    assert!(matches!(status, CacheStatus::Written { .. }), "{status:?}");
    assert_eq!(shorter, first.truncated(7));
    // Corrupt one byte in the middle: the load rebuilds and rewrites a good cache.
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let (rebuilt, status) = hpec::load_network_with_status(&source, Some(30), &cache).unwrap();
    assert_eq!(status, CacheStatus::Written { path: path.clone(), reason: "checksum mismatch".to_string() });
    assert_eq!(rebuilt, first);
    // Truncated cache file: rebuilt too.
    std::fs::write(&path, &bytes[..1000]).unwrap();
    let (rebuilt, status) = hpec::load_network_with_status(&source, Some(30), &cache).unwrap();
    assert!(matches!(status, CacheStatus::Written { .. }), "{status:?}");
    assert_eq!(rebuilt, first);
    assert!(matches!(hpec::load_network_with_status(&source, Some(30), &cache).unwrap().1, CacheStatus::Hit(_)));
}
