//! Tests of the attrs file: every key, every error, and the schema in sync with the parser.

use super::*;
use crate::ir::{Graph, Initializer, Tensor, ValueFact, ValueId, ValueKind};
use crate::tesa::annotate::glob_match;
use crate::tesa::{ElemAttr, Tesa};

/// A graph holding only these initializers.
fn graph(inits: &[(&str, Tensor)]) -> Graph {
    let mut g = Graph { name: "t".into(), ..Default::default() };
    for (name, t) in inits {
        let id = g.add_value(name.to_string(), ValueFact::of(t), ValueKind::Initializer);
        g.initializers.insert(id, Initializer::Dense(t.clone()));
    }
    g
}

fn ones(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (1..=n).map(|i| i as f32).collect())
}

/// Applies `json` to one 4×4 initializer "w" of values 1..=16 and returns its TeSA.
fn apply_one(json: &str, shape: &[usize]) -> Result<Tesa, Error> {
    let mut g = graph(&[("w", ones(shape))]);
    apply_attrs(&mut g, Some(&TesaAttrs::parse(json)?))?;
    Ok(g.values[0].tesa.clone().unwrap())
}

fn err(json: &str, shape: &[usize]) -> String {
    apply_one(json, shape).unwrap_err().to_string()
}

fn pruned(t: &Tesa) -> Vec<usize> {
    (0..t.numel()).filter(|i| t.is_pruned(*i)).collect()
}

/// A unique scratch folder under the system temp dir.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spartac-attrs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn parse_rejects_bad_specs() {
    let a = TesaAttrs::parse(r#"{"tensors": {"w": {"nm": [2, 4], "bits": 8}, "v": {"prune": "zeros"}}}"#).unwrap();
    assert_eq!(a.tensors.len(), 2);
    assert!(TesaAttrs::parse(r#"{"tensors": {"w": {"nm": [5, 4]}}}"#).is_err());
    let e = TesaAttrs::parse(r#"{"tensors": {"w": {"bitz": 8}}}"#).unwrap_err().to_string();
    assert!(e.contains("unknown key \"bitz\"") && e.contains(&TENSOR_KEYS.join(", ")), "{e}");
    assert!(TesaAttrs::parse(r#"{"tensor": {}}"#).is_err());
    for bad in [
        r#"{"w": {"mask": [[1, 0], [1]]}}"#,
        r#"{"w": {"mask": [[1, 2]]}}"#,
        r#"{"w": {"mask": 1}}"#,
        r#"{"w": {"block_mask": {"block": [2], "mask": [[1]]}}}"#,
        r#"{"w": {"block_mask": {"block": [2, 2]}}}"#,
        r#"{"w": {"rows": [-1]}}"#,
        r#"{"w": {"cols": "0"}}"#,
        r#"{"w": {"block_bits": {"block": [2, 2], "bits": [4, 8]}}}"#,
        r#"{"w": {"block_bits": {"block": [2, 2], "bits": [[200]]}}}"#,
        r#"{"w": {"element_bits": [{"index": [0], "bits": 4, "fmt": "int"}]}}"#,
        r#"{"w": {"element_bits": [{"index": [0], "bits": 4, "format": "int7"}]}}"#,
        r#"{"w": {"prune": "magnitude"}}"#,
    ] {
        let text = format!(r#"{{"tensors": {bad}}}"#);
        let e = TesaAttrs::parse(&text).unwrap_err().to_string();
        assert!(e.starts_with("tesa attrs: \"w\": ") && !e.contains('\n'), "{bad}: {e}");
    }
}

#[test]
fn unknown_names_suggest_close_ones() {
    let mut g = graph(&[("fc1.weight", Tensor::from_vec(vec![2], vec![0.0f32, 1.0]))]);
    let a = TesaAttrs::parse(r#"{"tensors": {"fc1.wieght": {"bits": 8}}}"#).unwrap();
    let e = apply_attrs(&mut g, Some(&a)).unwrap_err().to_string();
    assert!(e.contains("did you mean \"fc1.weight\""), "{e}");
    let a = TesaAttrs::parse(r#"{"tensors": {"fc1.weight": {"bits": 8, "format": "int"}}}"#).unwrap();
    apply_attrs(&mut g, Some(&a)).unwrap();
    assert_eq!(g.values[0].tesa.as_ref().unwrap().to_string(), "#tesa(density 0.5, bits 8 int)");
}

#[test]
fn inline_mask_keeps_ones() {
    let t = apply_one(r#"{"tensors": {"w": {"mask": [[1, 0, 1], [true, false, 1]]}}}"#, &[2, 3]).unwrap();
    assert_eq!(pruned(&t), vec![1, 4]);
    let e = err(r#"{"tensors": {"w": {"mask": [[1, 0], [1, 1], [0, 0]]}}}"#, &[2, 3]);
    assert!(e.contains("\"w\": mask has shape [3, 2] but the tensor has shape [2, 3]"), "{e}");
}

#[test]
fn npy_mask_is_relative_to_the_attrs_file() {
    let dir = scratch("npy");
    let mask = Tensor::from_vec(vec![2, 2], vec![0.0f32, 2.5, 1.0, 0.0]);
    std::fs::write(dir.join("m.npy"), crate::npy::write_npy(&mask).unwrap()).unwrap();
    let attrs = dir.join("attrs.json");
    std::fs::write(&attrs, r#"{"tensors": {"w": {"mask": {"npy": "m.npy"}}}}"#).unwrap();
    let mut g = graph(&[("w", ones(&[2, 2]))]);
    apply_attrs(&mut g, Some(&TesaAttrs::read(&attrs).unwrap())).unwrap();
    assert_eq!(pruned(g.values[0].tesa.as_ref().unwrap()), vec![0, 3]);
    // Not an array, and a missing file: one-line errors naming the tensor.
    std::fs::write(dir.join("bad.npy"), b"not numpy").unwrap();
    let e = TesaAttrs::parse_in(r#"{"tensors": {"w": {"mask": {"npy": "bad.npy"}}}}"#, &dir).unwrap_err().to_string();
    assert!(e.contains("\"w\": mask: ") && e.contains("bad magic"), "{e}");
    let e = TesaAttrs::parse_in(r#"{"tensors": {"w": {"mask": {"npy": "gone.npy"}}}}"#, &dir).unwrap_err().to_string();
    assert!(e.contains("cannot open") && e.contains("gone.npy") && !e.contains('\n'), "{e}");
    // Masks stay inside the attrs file's folder: absolute paths, `..` and links out are refused.
    std::fs::write(dir.with_extension("outside.npy"), crate::npy::write_npy(&mask).unwrap()).unwrap();
    let outside = dir.with_extension("outside.npy");
    for path in [outside.display().to_string(), format!("../{}", outside.file_name().unwrap().to_string_lossy())] {
        let json = format!(r#"{{"tensors": {{"w": {{"mask": {{"npy": {path:?}}}}}}}}}"#);
        let e = TesaAttrs::parse_in(&json, &dir).unwrap_err().to_string();
        assert!(e.contains("must be a relative path inside"), "{path}: {e}");
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&outside, dir.join("link.npy")).unwrap();
        let e = TesaAttrs::parse_in(r#"{"tensors": {"w": {"mask": {"npy": "link.npy"}}}}"#, &dir).unwrap_err();
        assert!(e.to_string().contains("leads outside"), "{e}");
    }
    std::fs::remove_file(&outside).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn block_mask_covers_the_grid() {
    // A 3×5 tensor with 2×2 blocks: a 2×3 grid; the last row and column are partial.
    let t =
        apply_one(r#"{"tensors": {"w": {"block_mask": {"block": [2, 2], "mask": [[1, 0, 1], [1, 1, 0]]}}}}"#, &[3, 5])
            .unwrap();
    assert_eq!(pruned(&t), vec![2, 3, 7, 8, 14]);
    let e = err(r#"{"tensors": {"w": {"block_mask": {"block": [2, 2], "mask": [[1, 0]]}}}}"#, &[3, 5]);
    assert!(e.contains("block_mask has shape [1, 2]") && e.contains("grid [2, 3]"), "{e}");
}

#[test]
fn rows_cols_and_channels() {
    let t = apply_one(r#"{"tensors": {"w": {"rows": [1], "cols": [0]}}}"#, &[3, 3]).unwrap();
    assert_eq!(pruned(&t), vec![0, 3, 4, 5, 6]);
    // Rows flatten the leading axes; channels are axis 0.
    let t = apply_one(r#"{"tensors": {"w": {"rows": [3]}}}"#, &[2, 2, 2]).unwrap();
    assert_eq!(pruned(&t), vec![6, 7]);
    let t = apply_one(r#"{"tensors": {"w": {"channels": [0]}}}"#, &[2, 2, 2]).unwrap();
    assert_eq!(pruned(&t), vec![0, 1, 2, 3]);
    let e = err(r#"{"tensors": {"w": {"channels": [2]}}}"#, &[2, 2, 2]);
    assert!(e.contains("channels index 2 is out of range: shape [2, 2, 2] has 2 channels"), "{e}");
    let e = err(r#"{"tensors": {"w": {"cols": [9]}}}"#, &[2, 3]);
    assert!(e.contains("cols index 9 is out of range"), "{e}");
}

#[test]
fn block_and_element_bits_only_lower_widths() {
    let t = apply_one(
        r#"{"tensors": {"w": {"bits": 8, "block_bits": {"block": [1, 2], "bits": [[4, 0], [16, 2]]}}}}"#,
        &[2, 4],
    )
    .unwrap();
    assert_eq!(pruned(&t), vec![2, 3]);
    let widths: Vec<u8> = (0..8).map(|i| t.attr(i).bits()).collect();
    assert_eq!(widths, vec![4, 4, 0, 0, 8, 8, 2, 2], "16 does not raise the tensor's 8");
    let e = err(r#"{"tensors": {"w": {"block_bits": {"block": [2, 2], "bits": [[4]]}}}}"#, &[2, 4]);
    assert!(e.contains("block_bits has shape [1, 1]") && e.contains("grid [1, 2]"), "{e}");

    let json = r#"{"tensors": {"w": {"element_bits": [
        {"index": [0, 1], "bits": 4, "format": "int"}, {"index": [1, 0], "bits": 0}]}}}"#;
    let t = apply_one(json, &[2, 2]).unwrap();
    assert_eq!(t.attr(1), ElemAttr::new(4, Format::Int));
    assert!(t.is_pruned(2));
    assert_eq!(t.attr(0).bits(), 32);
    let e = err(r#"{"tensors": {"w": {"element_bits": [{"index": [2, 0], "bits": 4}]}}}"#, &[2, 2]);
    assert!(e.contains("element_bits index [2, 0] is out of range for shape [2, 2]"), "{e}");
    let e = err(r#"{"tensors": {"w": {"element_bits": [{"index": [0], "bits": 4}]}}}"#, &[2, 2]);
    assert!(e.contains("out of range"), "{e}");
}

/// `nm` prunes along the reduction axis of the MatMul or Gemm that reads the weight (rows of
/// `MatMul(X, W)`'s `W`, columns of a `transB` Gemm's), along the last axis of a tensor no
/// such node reads, and along an explicit `axis`; a bad axis is one clear error.
#[test]
fn nm_runs_along_the_reduction_axis() {
    use crate::ir::{Attr, Attrs, DType, Node, NodeId};
    let build = |op: &str, trans_b: bool| {
        let mut g = graph(&[("w", ones(&[8, 4]))]);
        let x = g.add_value("x".into(), ValueFact::new(DType::F32, vec![2, 8]), ValueKind::Input);
        let y = g.add_value("y".into(), ValueFact::new(DType::F32, vec![2, 4]), ValueKind::NodeOutput(NodeId(0)));
        let mut attrs = Attrs::new();
        if trans_b {
            attrs.insert("transB", Attr::Int(1));
        }
        g.nodes.push(Node {
            name: "mm".into(),
            op_type: op.into(),
            domain: String::new(),
            opset: 17,
            attrs,
            inputs: vec![Some(x), Some(ValueId(0))],
            outputs: vec![y],
        });
        g
    };
    let apply = |mut g: Graph, json: &str| {
        apply_attrs(&mut g, Some(&TesaAttrs::parse(json).unwrap())).map(|_| g.values[0].tesa.clone().unwrap())
    };
    // Values 1..=32 row-major 8 × 4: along the rows, each column's k 2, 3 of 0..3 win.
    let t = apply(build("MatMul", false), r#"{"tensors": {"w": {"nm": [2, 4]}}}"#).unwrap();
    for c in 0..4 {
        let kept: Vec<usize> = (0..8).filter(|r| !t.is_pruned(r * 4 + c)).collect();
        assert_eq!(kept, vec![2, 3, 6, 7], "column {c}");
    }
    assert_eq!(crate::tesa::annotate::reduction_axis(&build("Gemm", true), ValueId(0)), Some(1));
    let t = apply(build("Gemm", true), r#"{"tensors": {"w": {"nm": [2, 4]}}}"#).unwrap();
    assert_eq!(pruned(&t), (0..8).flat_map(|r| [r * 4, r * 4 + 1]).collect::<Vec<_>>(), "along each row");
    let t = apply(build("MatMul", false), r#"{"tensors": {"w": {"nm": {"n": 2, "m": 4, "axis": 1}}}}"#).unwrap();
    assert_eq!(pruned(&t), (0..8).flat_map(|r| [r * 4, r * 4 + 1]).collect::<Vec<_>>(), "axis 1 forced");
    let e = apply(build("MatMul", false), r#"{"tensors": {"w": {"nm": {"n": 2, "m": 4, "axis": 2}}}}"#).unwrap_err();
    assert!(e.to_string().contains("nm axis 2 is out of range for shape [8, 4]"), "{e}");
    assert!(TesaAttrs::parse(r#"{"tensors": {"w": {"nm": {"n": 2, "m": 4, "dim": 0}}}}"#).is_err());
    assert!(TesaAttrs::parse(r#"{"tensors": {"w": {"nm": {"n": 2}}}}"#).is_err());
}

#[test]
fn keys_combine_by_join() {
    // nm 1:2 prunes the smaller of each pair (even indices), the mask prunes element 1,
    // rows prune row 3: the union of all three.
    let json = r#"{"tensors": {"w": {"nm": [1, 2], "mask": [[1,0,1,1],[1,1,1,1],[1,1,1,1],[1,1,1,1]], "rows": [3],
        "block_magnitude": {"block": [2, 2], "sparsity": 0.25}, "bits": 8}}}"#;
    let t = apply_one(json, &[4, 4]).unwrap();
    assert_eq!(pruned(&t), vec![0, 1, 2, 4, 5, 6, 8, 10, 12, 13, 14, 15]);
    assert_eq!(t.max_bits(), 8);
}

#[test]
fn globs_match_initializers_and_exact_names_win() {
    let mut g = graph(&[
        ("enc.0.weight", ones(&[2, 2])),
        ("enc.1.weight", ones(&[2, 2])),
        ("enc.1.bias", ones(&[2])),
        ("head.weight", ones(&[2, 2])),
    ]);
    let json = r#"{"tensors": {"*": {"bits": 16}, "enc.*.weight": {"rows": [0]}, "enc.1.weight": {"cols": [1]}}}"#;
    apply_attrs(&mut g, Some(&TesaAttrs::parse(json).unwrap())).unwrap();
    let t = |i: usize| g.values[i].tesa.clone().unwrap();
    assert_eq!(pruned(&t(0)), vec![0, 1], "the longer glob wins over \"*\"");
    assert_eq!(t(0).max_bits(), 32);
    assert_eq!(pruned(&t(1)), vec![1, 3], "the exact name wins over globs");
    assert_eq!((pruned(&t(2)), t(2).max_bits()), (vec![], 16));
    assert_eq!(t(3).max_bits(), 16);
    assert!(glob_match("a*b*c", "aXbYbZc") && !glob_match("a*b", "ab.c") && glob_match("**", ""));

    let json = r#"{"tensors": {"encoder.*.weight": {"rows": [0]}}}"#;
    let e = apply_attrs(&mut g, Some(&TesaAttrs::parse(json).unwrap())).unwrap_err().to_string();
    assert!(e.contains("no initializer matches the glob \"encoder.*.weight\"") && e.contains("did you mean"), "{e}");
    // Errors in a glob's spec name the tensor and the glob.
    let json = r#"{"tensors": {"enc.*": {"rows": [5]}}}"#;
    let e = apply_attrs(&mut g, Some(&TesaAttrs::parse(json).unwrap())).unwrap_err().to_string();
    assert!(e.contains("\"enc.0.weight\" (from \"enc.*\"): rows index 5"), "{e}");
}

#[test]
fn selectors_pick_weights_by_role_below_names_and_globs() {
    // x · w1 (MatMul, weight right), w2 · x (MatMul, weight left), Gemm(x, w3, bias), Conv(x, k).
    let mut g = graph(&[
        ("w1", ones(&[2, 2])),
        ("w2", ones(&[2, 2])),
        ("w3", ones(&[2, 2])),
        ("bias", ones(&[2])),
        ("k", ones(&[1, 1, 1, 1])),
        ("scale", ones(&[2, 2])),
    ]);
    let x = g.add_value("x".into(), ValueFact::of(&ones(&[2, 2])), ValueKind::Input);
    let node = |op: &str, inputs: Vec<u32>| crate::ir::Node {
        name: format!("n_{op}"),
        op_type: op.into(),
        domain: String::new(),
        opset: 18,
        attrs: Default::default(),
        inputs: inputs.into_iter().map(|i| Some(ValueId(i))).collect(),
        outputs: vec![],
    };
    let xi = x.0;
    g.nodes = vec![
        node("MatMul", vec![xi, 0]),
        node("MatMul", vec![1, xi]),
        node("Gemm", vec![xi, 2, 3]),
        node("Conv", vec![xi, 4]),
        node("Mul", vec![xi, 5]),
    ];
    let json = r#"{"tensors": {"@matmul_weights": {"rows": [0]}, "w2": {"cols": [0]}, "@conv_weights": {"bits": 8}}}"#;
    apply_attrs(&mut g, Some(&TesaAttrs::parse(json).unwrap())).unwrap();
    let t = |i: usize| g.values[i].tesa.clone().unwrap();
    assert_eq!(pruned(&t(0)), vec![0, 1], "a MatMul's right weight");
    assert_eq!(pruned(&t(1)), vec![0, 2], "the exact name wins over the selector");
    assert_eq!(pruned(&t(2)), vec![0, 1], "a Gemm's weight");
    assert_eq!(pruned(&t(3)), Vec::<usize>::new(), "a bias is no MatMul weight");
    assert_eq!(t(4).max_bits(), 8, "a Conv's weight");
    assert_eq!((pruned(&t(5)), t(5).max_bits()), (vec![], 32), "a Mul's constant is untouched");

    for (json, want) in [
        (
            r#"{"tensors": {"@weights": {"rows": [0]}}}"#,
            "unknown selector \"@weights\" (known: @matmul_weights, @conv_weights, @mlp_out_weights)",
        ),
        (r#"{"tensors": {"@conv_weights": {"rows": [0]}}}"#, ""),
    ] {
        let mut h = graph(&[("w", ones(&[2, 2]))]);
        let e = apply_attrs(&mut h, Some(&TesaAttrs::parse(json).unwrap())).unwrap_err().to_string();
        let want = if want.is_empty() { "\"@conv_weights\": the model has no such weight" } else { want };
        assert!(e.contains(want), "{e}");
    }
}

fn schema() -> serde_json::Value {
    let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tesa.schema.json"));
    serde_json::from_str(text).expect("models/tesa.schema.json is valid JSON")
}

#[test]
fn schema_lists_exactly_the_parsed_keys() {
    let s = schema();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let props = s["$defs"]["tensor"]["properties"].as_object().expect("$defs.tensor.properties");
    let mut in_schema: Vec<&str> = props.keys().map(|k| k.as_str()).collect();
    let mut in_parser = TENSOR_KEYS.to_vec();
    in_schema.sort();
    in_parser.sort();
    assert_eq!(in_schema, in_parser, "models/tesa.schema.json and TENSOR_KEYS drifted apart");
}

#[test]
fn example_files_parse() {
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let mut files = vec![models.join("tesa.example.json"), models.join("tesa.masks.example.json")];
    for e in std::fs::read_dir(models.join("tesa")).unwrap() {
        files.push(e.unwrap().path());
    }
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let a = TesaAttrs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!a.tensors.is_empty(), "{}", f.display());
    }
}

#[test]
fn magnitude_pruning_needs_an_initializer_but_masks_do_not() {
    let mut g = graph(&[("w", ones(&[2, 2]))]);
    let x = g.add_value("x".into(), ValueFact::new(crate::ir::DType::F32, vec![2, 2]), ValueKind::Input);
    let a = TesaAttrs::parse(r#"{"tensors": {"x": {"nm": [1, 2]}}}"#).unwrap();
    let e = apply_attrs(&mut g, Some(&a)).unwrap_err().to_string();
    assert!(e.contains("\"x\": magnitude pruning needs values, but it is not an initializer"), "{e}");
    let a = TesaAttrs::parse(r#"{"tensors": {"x": {"cols": [1], "bits": 8}}}"#).unwrap();
    apply_attrs(&mut g, Some(&a)).unwrap();
    let t = g.values[x.index()].tesa.clone().unwrap();
    assert_eq!((pruned(&t), t.max_bits()), (vec![1, 3], 8));
}

#[test]
fn coupled_channel_magnitude_parses_and_falls_back_outside_a_conv() {
    // A weight no Conv reads has no coupled channels: it is ranked alone, as without the flag.
    let coupled =
        apply_one(r#"{"tensors": {"w": {"channel_magnitude": {"sparsity": 0.5, "coupled": true}}}}"#, &[4, 2]);
    let alone = apply_one(r#"{"tensors": {"w": {"channel_magnitude": {"sparsity": 0.5}}}}"#, &[4, 2]);
    assert_eq!(pruned(&coupled.unwrap()), pruned(&alone.unwrap()));
    let e = err(r#"{"tensors": {"w": {"channel_magnitude": {"sparsity": 0.5, "coupled": 1}}}}"#, &[4, 2]);
    assert!(e.contains("\"coupled\": true|false"), "{e}");
}

#[test]
fn coupled_pruning_keeps_aligned_widths() {
    use crate::tesa::annotate::{kept_channels, CHANNEL_ALIGN};
    assert_eq!(CHANNEL_ALIGN, 8);
    // (class width, sparsity) → channels kept.
    for (n, s, kept) in
        [(64, 0.5, 32), (120, 0.5, 64), (144, 0.5, 72), (8, 0.5, 4), (12, 0.5, 6), (30, 0.5, 16), (16, 1.0, 0)]
    {
        assert_eq!(kept_channels(n, s), kept, "{n} channels at {s}");
    }
}
