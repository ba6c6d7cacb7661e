//! The ONNX form of a challenge network (`spartac hpec export`) loads through the
//! frontend, and the reference executor's result on it equals the HPEC engine's.

use spartac::frontend::{load_model, LoadOptions};
use spartac_runtime::hpec::{self, bundled, images_to_tensor, network_to_graph, InferOptions};
use spartac_runtime::hpec::{CompressedMatrix, Images};
use std::collections::BTreeMap;

fn subset(images: &Images, picked: &[usize]) -> Images {
    let (mut offsets, mut indices, mut values) = (vec![0u32], vec![], vec![]);
    for &i in picked {
        let (p, v) = images.pixels.slot(i);
        indices.extend_from_slice(p);
        values.extend_from_slice(v);
        offsets.push(indices.len() as u32);
    }
    Images::from_csr(CompressedMatrix { n_outer: picked.len(), n_inner: images.neurons(), offsets, indices, values })
}

#[test]
fn exported_network_runs_like_the_engine() {
    let layers = 24;
    let network = hpec::generate_with(&hpec::GeneratorConfig {
        neurons: 1024,
        layers,
        seed: 0,
        relabellings: Some(bundled::real_1024_relabellings().unwrap()),
    })
    .unwrap();
    // Images that die and images that survive all layers: the first 60, plus 40 survivors.
    let all = bundled::real_1024_images().unwrap();
    let survivors = hpec::infer(&network, &all, &InferOptions::default()).unwrap().categories;
    let mut picked: Vec<usize> = (0..60).collect();
    picked.extend(survivors.iter().map(|&c| c as usize - 1).filter(|&i| i >= 60).take(40));
    let images = subset(&all, &picked);
    let graph = network_to_graph(&network, images.n_images());

    // Through the file format and the frontend, like any model.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hpec.onnx");
    spartac::frontend::save_model(&graph, &path).unwrap();
    let loaded = load_model(&path, &LoadOptions::default()).unwrap();
    assert_eq!(loaded.nodes.len(), 4 * layers);
    assert_eq!(loaded.initializers.len(), layers + 2);

    let inputs = BTreeMap::from([("images".to_string(), images_to_tensor(&images))]);
    let scores = spartac::reference::execute(&loaded, &inputs).unwrap().remove(0).1;
    let scores = scores.as_slice::<f32>().unwrap();
    let n = network.neurons;
    let onnx_categories: Vec<u32> = (0..images.n_images())
        .filter(|&i| scores[i * n..(i + 1) * n].iter().any(|&v| v != 0.0))
        .map(|i| i as u32 + 1)
        .collect();
    let engine = hpec::infer(&network, &images, &InferOptions::default()).unwrap();
    assert_eq!(onnx_categories, engine.categories);
    assert!(!onnx_categories.is_empty(), "a test with no surviving image checks nothing");
    // Values agree with the f64 reference row by row.
    for img in 0..images.n_images() {
        let want = hpec::reference::reference_final_row(&network, &images, img);
        for (j, (&got, want)) in scores[img * n..(img + 1) * n].iter().zip(want).enumerate() {
            assert!((got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "image {img} neuron {j}: {got} vs {want}");
        }
    }
}
