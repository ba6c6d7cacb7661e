//! The reference executor matches onnxruntime on a real model: MiniLM-L3 (BERT-like,
//! batch 32 x sequence 128), prepared by `models/setup_minilm_l3.sh` (CI runs it).

use spartac_tests::models::{compare_with_ort, models_dir};

#[test]
fn minilm_l3_matches_onnxruntime() {
    let dir = models_dir();
    let (model, reference) = (dir.join("minilm-l3.onnx"), dir.join("minilm-l3.ref.npz"));
    assert!(
        model.exists() && reference.exists(),
        "{} is missing: run models/setup_minilm_l3.sh first (.ci/run does)",
        reference.display()
    );
    let c = compare_with_ort(&model, &reference, 1).unwrap();
    for o in &c.outputs {
        eprintln!("{}: max rel err {:.3e} (max abs {:.3e})", o.name, o.max_rel, o.max_abs);
    }
    assert_eq!(c.outputs.len(), 4);
    assert!(c.worst_rel() <= 1e-4, "worst relative error {:.3e} > 1e-4", c.worst_rel());
}
