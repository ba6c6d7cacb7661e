//! Generated networks: the fp32 engine agrees with the f64 reference, and generated networks
//! survive a TSV round trip through a directory and the cache.

use spartac_runtime::hpec::{self, bundled, CacheConfig, CacheStatus, InferOptions, KernelChoice, NetworkSource};

fn check_engine_against_reference(network: &hpec::Network, images: &hpec::Images) -> Vec<u32> {
    let reference = hpec::reference_categories(network, images).unwrap();
    for kernel in [KernelChoice::Auto, KernelChoice::RowWiseCsr, KernelChoice::ColumnWiseCsc] {
        let options = InferOptions { kernel, ..InferOptions::default() };
        let result = hpec::infer(network, images, &options).unwrap();
        assert_eq!(result.categories, reference, "kernel {kernel:?}");
        assert_eq!(result.edges, images.n_images() as f64 * network.total_nonzeros() as f64);
    }
    let hashed = InferOptions { layer_hashing_buckets: Some(64), input_hashing: false, ..InferOptions::default() };
    assert_eq!(hpec::infer(network, images, &hashed).unwrap().categories, reference);
    reference
}

#[test]
fn generated_1024_network_engine_matches_reference() {
    let network = hpec::generate(1024, 60, 42).unwrap();
    let images = bundled::images_for_neurons(1024, 400).unwrap();
    let categories = check_engine_against_reference(&network, &images);
    assert!(!categories.is_empty(), "some images should survive 60 layers");
}

#[test]
fn generated_4096_network_engine_matches_reference() {
    let network = hpec::generate(4096, 24, 7).unwrap();
    assert_eq!(network.bias, -0.35f32);
    // MNIST-derived 64×64 inputs (the bundled digits by the rule of `hpec::mnist`).
    let images = bundled::images_for_neurons(4096, 120).unwrap();
    assert_eq!(images.neurons(), 4096);
    let categories = check_engine_against_reference(&network, &images);
    assert!(!categories.is_empty(), "some images should survive 24 layers");
}

#[test]
fn real_relabellings_extend_with_seeded_blocks() {
    let relabellings = bundled::real_1024_relabellings().unwrap();
    let config =
        |seed| hpec::GeneratorConfig { neurons: 1024, layers: 130, seed, relabellings: Some(relabellings.clone()) };
    let first = hpec::generate_with(&config(1)).unwrap();
    let second = hpec::generate_with(&config(2)).unwrap();
    assert_eq!(first.layers[..120], second.layers[..120]);
    assert_ne!(first.layers[120..], second.layers[120..]);
}

#[test]
fn generated_network_round_trips_through_tsv_directory_and_cache() {
    let network = hpec::generate(256, 20, 9).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paths = hpec::write_network_tsv(&network, dir.path()).unwrap();
    assert_eq!(paths.len(), 20);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheConfig::Directory(cache_dir.path().to_path_buf());
    let source = NetworkSource::from_path(dir.path());
    let (loaded, status) = hpec::load_network_with_status(&source, None, &cache).unwrap();
    assert!(matches!(status, CacheStatus::Written { .. }));
    assert_eq!(loaded, network);
    let (cached, status) = hpec::load_network_with_status(&source, None, &cache).unwrap();
    assert!(matches!(status, CacheStatus::Hit(_)));
    assert_eq!(cached, network);
    // Changing a layer file changes the key: the cache is not used for the new content.
    std::fs::write(&paths[19], "1\t1\t5.000000e-01\n").unwrap();
    let (changed, status) = hpec::load_network_with_status(&source, None, &cache).unwrap();
    assert!(matches!(status, CacheStatus::Written { .. }), "{status:?}");
    assert_eq!(changed.layers[19].n_nonzeros(), 1);
    // The first 5 layers from an explicit file list.
    let files = NetworkSource::Files(paths[..5].to_vec());
    assert_eq!(hpec::load_network(&files, None, &CacheConfig::Disabled).unwrap(), network.truncated(5));
    // Images written and read back.
    let images = bundled::images_for_neurons(256, 10).unwrap();
    let image_path = dir.path().join("images.tsv");
    hpec::write_images_tsv(&images, &image_path).unwrap();
    assert_eq!(hpec::load_images(&image_path, 256).unwrap(), images);
}
