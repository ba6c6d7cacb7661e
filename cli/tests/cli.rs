//! The `spartac` binary end to end: inspect, run, and one-line errors (non-zero exit,
//! no panic, no partial output file) for bad input.

use spartac::ir::{DType, Tensor};
use spartac_runtime::npz::{read_npz, write_npz};
use spartac_tests::builder::{fixed, ModelBuilder};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn spartac(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spartac")).args(args).output().expect("spawning spartac")
}

/// [`spartac`] with extra environment variables.
fn spartac_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spartac"));
    c.args(args).envs(env.iter().copied());
    c.output().expect("spawning spartac")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A model y = relu(x @ w + b) with x: f32[2,3].
fn write_model(dir: &Path) -> PathBuf {
    let bytes = ModelBuilder::new("cli_model", 17)
        .input("x", DType::F32, &fixed(&[2, 3]))
        .init("w", &Tensor::from_vec(vec![3, 2], vec![1.0f32, 0.0, 0.0, 0.0, -1.0, 2.0]))
        .init("b", &Tensor::from_vec(vec![2], vec![0.5f32, -0.5]))
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("add", "Add", &["h", "b"], &["z"], vec![])
        .node("relu", "Relu", &["z"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2, 2]))
        .bytes();
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Asserts a one-line error, exit code 1, and returns the message.
fn expect_error(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {}", String::from_utf8_lossy(&o.stdout), stderr(o));
    let err = stderr(o);
    assert_eq!(err.trim_end().lines().count(), 1, "error is not one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
    err
}

#[test]
fn inspect_prints_tables_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let o = spartac(&["inspect", model.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("3 nodes, 8 parameters in 2 initializers"), "{text}");
    assert!(text.contains("MatMul") && text.contains("0.5000"), "{text}");
    let o = spartac(&["inspect", model.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["parameters"], 8);
    assert_eq!(v["ops"]["Relu"], 1);
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([2, 3]));
}

#[test]
fn run_with_npz_inputs_writes_exact_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let inputs = dir.path().join("in.npz");
    write_npz(&inputs, &[("x".into(), Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, -1.0, 0.0, 1.0]))]).unwrap();
    let out = dir.path().join("out.npz");
    let o = spartac(&[
        "run",
        model.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = String::from_utf8(o.stdout).unwrap();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains(" ms") && line.contains("1 outputs written"), "{line}");
    let y = &read_npz(&out).unwrap()["y"];
    // x@w = [[1-3, 6], [-1-1, 2]] = [[-2, 6], [-2, 2]]; + b; relu
    assert_eq!(y.to_f64_vec(), vec![0.0, 5.5, 0.0, 1.5]);
}

#[test]
fn random_inputs_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let (a, b) = (dir.path().join("a.npz"), dir.path().join("b.npz"));
    for out in [&a, &b] {
        let o = spartac(&["run", model.to_str().unwrap(), "--random", "7", "--output", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(read_npz(&a).unwrap(), read_npz(&b).unwrap());
}

#[test]
fn truncated_model_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() - 20]).unwrap();
    let err = expect_error(&spartac(&["inspect", model.to_str().unwrap()]));
    assert!(err.contains("not a valid ONNX model"), "{err}");
}

#[test]
fn missing_file_is_one_line_error() {
    let err = expect_error(&spartac(&["inspect", "/nonexistent/model.onnx"]));
    assert!(err.contains("/nonexistent/model.onnx"), "{err}");
}

/// A FIFO or a device given as a model, attrs file or input archive would block or never end:
/// each is a one-line error, at once.
#[test]
#[cfg(unix)]
fn fifos_and_devices_are_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo is needed for this test");
    let (m, f) = (model.to_str().unwrap(), fifo.to_str().unwrap());
    for args in [
        vec!["inspect", f],
        vec!["inspect", "/dev/zero"],
        vec!["propagate", m, "--tesa", f],
        vec!["run", m, "--inputs", f],
    ] {
        let err = expect_error(&spartac(&args));
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
}

#[test]
fn wrong_npz_name_or_dtype_leaves_no_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let out = dir.path().join("out.npz");
    let cases = [
        ("wrong_name.npz", ("input", Tensor::from_vec(vec![2, 3], vec![0.0f32; 6])), "\"input\": is not an input"),
        ("wrong_dtype.npz", ("x", Tensor::from_vec(vec![2, 3], vec![0.0f64; 6])), "expects f32[2,3] but got f64[2,3]"),
        ("wrong_shape.npz", ("x", Tensor::from_vec(vec![3, 2], vec![0.0f32; 6])), "expects f32[2,3] but got f32[3,2]"),
    ];
    for (file, (name, t), want) in cases {
        let path = dir.path().join(file);
        write_npz(&path, &[(name.to_string(), t)]).unwrap();
        let o = spartac(&[
            "run",
            model.to_str().unwrap(),
            "--inputs",
            path.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        let err = expect_error(&o);
        assert!(err.contains(want), "{err}");
        assert!(!out.exists(), "an output file was left behind");
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn corrupt_npz_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let path = dir.path().join("in.npz");
    std::fs::write(&path, b"PK\x03\x04 definitely not a zip").unwrap();
    let err = expect_error(&spartac(&["run", model.to_str().unwrap(), "--inputs", path.to_str().unwrap()]));
    assert!(err.contains("not a valid .npz"), "{err}");
}

#[test]
fn unknown_op_error_names_node_type_and_opset() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = ModelBuilder::new("unknown", 21)
        .input("x", DType::F32, &fixed(&[2]))
        .node("my_node", "NonMaxSuppressionV9", &["x"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2]))
        .bytes();
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, bytes).unwrap();
    let err = expect_error(&spartac(&["run", model.to_str().unwrap(), "--random", "1"]));
    assert!(err.contains("node \"my_node\": unsupported op NonMaxSuppressionV9 (domain \"\", opset 21)"), "{err}");
}

#[test]
fn bad_input_shape_flag_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let err = expect_error(&spartac(&["inspect", model.to_str().unwrap(), "--input-shape", "x=2,three"]));
    assert!(err.contains("\"three\" is not a dimension"), "{err}");
    let err = expect_error(&spartac(&["inspect", model.to_str().unwrap(), "--input-shape", "nope=1"]));
    assert!(err.contains("names no graph input (inputs: x)"), "{err}");
}

#[test]
fn argument_errors_are_one_line_with_the_usage_and_exit_2() {
    for (args, want) in [
        (vec!["hpec", "run", "--bogus"], "unexpected argument '--bogus'"),
        (vec!["plan"], "required arguments were not provided: <MODEL> (usage: spartac plan <MODEL>"),
        (vec!["hpec", "run", "--gpus", "x"], "invalid value 'x' for '--gpus <GPUS>'"),
        (vec!["hpec", "run", "--backend", "foo"], "[possible values: cpu, cuda, sim, auto, reference]"),
        (vec!["hpec", "run", "--precision", "f16"], "unknown precision \"f16\" (choose screened, f32 or f64)"),
        (vec!["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ] {
        let o = spartac(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("error: ") && err.contains(want), "{args:?}: {err}");
    }
    // Help is still help: on stdout, exit 0.
    let o = spartac(&["plan", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: spartac plan"));
}

#[test]
fn help_teaches_with_examples() {
    let o = spartac(&["run", "--help"]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("--random") && text.contains("--input-shape") && text.contains("integer ids"), "{text}");
}

#[test]
fn hpec_cuda_backend_without_a_gpu_is_a_one_line_error_and_with_one_passes() {
    let o = spartac(&["hpec", "run", "--backend", "cuda", "--no-cache", "--image-count", "64"]);
    if o.status.success() {
        // A machine with a GPU and its driver: the compiled task graph ran and matched the truth.
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("PASS") && out.contains("inference (cuda"), "{out}");
    } else {
        let err = expect_error(&o);
        assert!(err.contains("cannot open GPU 0"), "{err}");
    }
}

#[test]
fn hpec_sim_backend_runs_the_compiled_program_and_repeated_images_keep_their_truth() {
    // 1,500 images: the 1,200 real ones and the first 300 again; the truth repeats with them.
    let args = ["hpec", "run", "--backend", "sim", "--no-cache", "--layers", "24", "--neurons", "1024"];
    let o = spartac(
        &[&args[..], &["--repeat-images", "--image-count", "1500", "--compact-first", "4", "--compact-every", "5"]]
            .concat(),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(&o));
    assert!(out.contains("repeated to 1500 images: PASS"), "{out}");
    // Hashed inputs in batches of 400: the images run in another order, the categories map back.
    let o = spartac(
        &[&args[..], &["--repeat-images", "--image-count", "1500", "--batch", "400", "--hash-inputs"]].concat(),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("PASS"), "stdout: {out}\nstderr: {}", stderr(&o));
    // The f64 program (exact layers, f64 rows), as JSON.
    let o = spartac(&[&args[..], &["--image-count", "300", "--precision", "f64", "--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!((v["precision"].as_str(), v["verdict"].as_str()), (Some("f64"), Some("PASS")), "{v}");
    assert!(v["layer_kernels"].as_object().unwrap().keys().any(|k| k.starts_with("exact_f64")), "{v}");
    // The default: the fp32 screen of the layers before the tail, then f64 for its survivors.
    let o = spartac(&[&args[..], &["--image-count", "300", "--tail-from", "16", "--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!((v["precision"].as_str(), v["verdict"].as_str()), (Some("screened"), Some("PASS")), "{v}");
    let (layers, survivors) = (v["screen"]["layers"].as_u64(), v["screen"]["survivors"].as_u64().unwrap());
    assert_eq!(v["screen"]["stages"][0]["name"].as_str(), Some("screen"), "{v}");
    assert_eq!(v["screen"]["stages"][1]["images"].as_u64(), Some(survivors), "{v}");
    assert_eq!(layers, Some(16), "{v}");
    assert!(survivors >= v["categories"].as_u64().unwrap() && survivors < 300, "{v}");
    assert!(v["screen"]["weight_scale"].as_f64().unwrap() > 1.0, "{v}");
}

#[test]
fn hpec_cpu_engine_is_screened_by_default_and_f32_and_f64_on_request() {
    for (flags, precision) in
        [(&[][..], "screened"), (&["--precision", "f32"][..], "f32"), (&["--precision", "f64"][..], "f64")]
    {
        let o = spartac(&[&["hpec", "run", "--backend", "cpu", "--no-cache", "--json"][..], flags].concat());
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
        assert_eq!((v["precision"].as_str(), v["verdict"].as_str()), (Some(precision), Some("PASS")), "{v}");
        assert_eq!(v["categories"].as_array().map(|c| c.len()), Some(19), "{v}");
    }
}

#[test]
fn hpec_generated_network_runs_on_mnist_inputs_and_passes() {
    let o = spartac(&["hpec", "run", "--neurons", "256", "--layers", "12", "--image-count", "60", "--no-cache"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(&o));
    assert!(out.contains("PASS"), "{out}");
}

/// `--backend reference` computes the f64 truth alone: it agrees with the bundled truth of the
/// real network, caches what it computed (a second run reads it), and a truth file that
/// disagrees is a one-line error naming the images.
#[test]
fn hpec_reference_backend_checks_and_caches_the_truth() {
    let cache = tempfile::tempdir().unwrap();
    let env = [("SPARTAC_CACHE_DIR", cache.path().to_str().unwrap())];
    let o = spartac_env(&["hpec", "run", "--backend", "reference", "--image-count", "300"], &env);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("reference: f64 reference run: 2 of 300 images"), "{out}");
    assert!(out.contains("first1200.tsv: PASS"), "{out}");
    let args = ["hpec", "run", "--backend", "reference", "--neurons", "256", "--layers", "8", "--image-count", "50"];
    let first = spartac_env(&args, &env);
    let again = spartac_env(&args, &env);
    let (first, again) = (String::from_utf8_lossy(&first.stdout), String::from_utf8_lossy(&again.stdout));
    assert!(first.contains("f64 reference run:") && again.contains("f64 reference (cached):"), "{first}\n{again}");
    let wrong = cache.path().join("wrong.tsv");
    std::fs::write(&wrong, "1\n").unwrap();
    let o = spartac_env(&[&args[..], &["--categories", wrong.to_str().unwrap()]].concat(), &env);
    let err = expect_error(&o);
    assert!(err.contains("wrong.tsv"), "{err}");
}

#[test]
fn propagate_plot_and_attrs_masks_from_npy() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    // Keep only row 0 of w (3×2): an .npy mask next to the attrs file.
    let mask = Tensor::from_vec(vec![3, 2], vec![1u8, 1, 0, 0, 0, 0]);
    std::fs::write(dir.path().join("w_mask.npy"), spartac::npy::write_npy(&mask).unwrap()).unwrap();
    let attrs = dir.path().join("attrs.json");
    std::fs::write(&attrs, r#"{"tensors": {"w": {"mask": {"npy": "w_mask.npy"}}, "*": {"bits": 16}}}"#).unwrap();
    let plot = dir.path().join("sparsity.png");
    let o = spartac(&[
        "propagate",
        model.to_str().unwrap(),
        "--tesa",
        attrs.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("total weight density: 0.3750"), "{text}");
    let bytes = std::fs::read(&plot).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");

    // A mask of the wrong shape: one line naming the tensor and both shapes.
    std::fs::write(&attrs, r#"{"tensors": {"w": {"mask": [[1, 0, 1], [1, 1, 1]]}}}"#).unwrap();
    let o = spartac(&["propagate", model.to_str().unwrap(), "--tesa", attrs.to_str().unwrap()]);
    let err = expect_error(&o);
    assert!(err.contains("\"w\": mask has shape [2, 3] but the tensor has shape [3, 2]"), "{err}");
}

#[test]
fn propagate_with_calibration_narrows_widths_and_reports_them() {
    let dir = tempfile::tempdir().unwrap();
    // Weights no narrow format holds exactly.
    let bytes = ModelBuilder::new("calib_model", 17)
        .input("x", DType::F32, &fixed(&[2, 3]))
        .init("w", &Tensor::from_vec(vec![3, 2], vec![0.1234f32, -0.7771, 0.3333, 0.0101, -0.9876, 0.4242]))
        .node("mm", "MatMul", &["x", "w"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2, 2]))
        .bytes();
    let model = dir.path().join("calib.onnx");
    std::fs::write(&model, bytes).unwrap();
    let report = dir.path().join("report.json");
    // A relative error of 1 accepts any width: w narrows to 4-bit integers.
    let o = spartac(&[
        "propagate",
        model.to_str().unwrap(),
        "--calib",
        "random:3",
        "--quant-threshold",
        "1",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("quantization ("), "{text}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let w = doc["quantization"]["tensors"].as_array().unwrap().iter().find(|t| t["name"] == "w").unwrap().clone();
    assert_eq!((w["bits"].as_u64(), w["format"].as_str()), (Some(4), Some("int")));
    // Calibration inputs from an .npz, with a tiny threshold: w keeps 32 bits.
    let npz = dir.path().join("calib.npz");
    let x = Tensor::from_vec(vec![2, 3], vec![0.3f32, -1.0, 2.0, 0.7, 0.1, -0.4]);
    write_npz(&npz, &[("x".to_string(), x)]).unwrap();
    let o = spartac(&[
        "propagate",
        model.to_str().unwrap(),
        "--calib",
        npz.to_str().unwrap(),
        "--quant-threshold",
        "1e-12",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let w = doc["quantization"]["tensors"].as_array().unwrap().iter().find(|t| t["name"] == "w").unwrap().clone();
    assert_eq!(w["bits"].as_u64(), Some(32));
    // Bad specs are one-line errors.
    let err = expect_error(&spartac(&["propagate", model.to_str().unwrap(), "--calib", "random:x"]));
    assert!(err.contains("seed must be an integer"), "{err}");
    let o = spartac(&["propagate", model.to_str().unwrap(), "--calib", "random", "--quant-widths", "16,3"]);
    let err = expect_error(&o);
    assert!(err.contains("3 is not supported"), "{err}");
}

#[test]
fn plan_and_explain_print_write_json_and_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let json = dir.path().join("plan.json");
    let pb = dir.path().join("plan.pb");
    // A user's file with the name a fixed temporary name would take: never touched.
    let users = dir.path().join("plan.tmp");
    std::fs::write(&users, "mine").unwrap();
    let o = spartac(&[
        "plan",
        model.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--artifact",
        pb.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("mm") && out.contains("3x2") && out.contains("total:"), "{out}");
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(plan["version"], 1);
    assert_eq!(plan["operators"][0]["node"], "mm");
    assert_eq!(plan["operators"][0]["epilogue"]["bias"], "b");
    let decoded = spartac::plan::Plan::decode(&std::fs::read(&pb).unwrap()).unwrap();
    assert_eq!(decoded.operators.len(), 1);
    assert_eq!(std::fs::read_to_string(&users).unwrap(), "mine");
    // The weight has 3 zeros of 6: explain lists it as sparse.
    let o = spartac(&["explain", model.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("density     0.5000") && out.contains("why"), "{out}");
}

/// `explain` on a convnet lists every convolution after the rewrites: the pointwise ones as
/// the planned MatMuls they become (shrunk where channels are pruned), the others with the
/// NHWC kernel that runs them.
#[test]
fn explain_lists_the_convolutions_and_what_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("convnet.onnx");
    std::fs::write(&model, spartac_tests::builder::small_convnet()).unwrap();
    let tesa = dir.path().join("tesa.json");
    std::fs::write(&tesa, r#"{"tensors": {"*.weight": {"channel_magnitude": {"sparsity": 0.5}}, "fc.weight": {}}}"#)
        .unwrap();
    let o = spartac(&["explain", model.to_str().unwrap(), "--tesa", tesa.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let section = out.split("convolutions after the rewrites").nth(1).unwrap_or_else(|| panic!("{out}"));
    let rows: Vec<&str> = section.lines().skip(2).filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(rows.len(), 5, "{section}");
    assert_eq!(rows.iter().filter(|r| r.contains("1x1 as a planned MatMul")).count(), 3, "{section}");
    assert!(rows.iter().any(|r| r.contains("depthwise kernel")), "{section}");
    assert!(rows.iter().any(|r| r.contains("implicit GEMM") && r.contains("channels gathered")), "the stem: {section}");
    // Half the channels cut: some weight is smaller after than before.
    let shrunk = rows.iter().any(|r| {
        let f: Vec<&str> = r.split_whitespace().collect();
        let elems = |d: &str| d.split('x').map(|v| v.parse::<usize>().unwrap_or(0)).product::<usize>();
        elems(f[2]) < elems(f[1])
    });
    assert!(shrunk, "{section}");
}

#[test]
fn plan_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let db = dir.path().join("db.json");
    std::fs::write(&db, "{\"version\": 7}").unwrap();
    let err = expect_error(&spartac(&["plan", model.to_str().unwrap(), "--costdb", db.to_str().unwrap()]));
    assert!(err.contains("cost db"), "{err}");
    // A negative rate in an otherwise good DB: one line naming the field, no panic.
    let mut good: serde_json::Value = serde_json::from_str(spartac::plan::cost::SM_90_COSTDB).unwrap();
    good["l2_tb_s"] = serde_json::json!(-2.0);
    std::fs::write(&db, good.to_string()).unwrap();
    let err = expect_error(&spartac(&["plan", model.to_str().unwrap(), "--costdb", db.to_str().unwrap()]));
    assert!(err.contains("l2_tb_s is -2"), "{err}");
    let err = expect_error(&spartac(&["explain", "missing.onnx"]));
    assert!(err.contains("missing.onnx"), "{err}");
    let help = String::from_utf8_lossy(&spartac(&["explain", "--help"]).stdout).into_owned();
    assert!(help.contains("Examples:") && help.contains("crossover"), "{help}");
}

#[test]
fn hpec_sizes_past_the_machine_and_the_bundled_data_are_one_line_errors() {
    // 4e9 layers: refused from the estimate, before anything is allocated.
    let err = expect_error(&spartac(&["hpec", "run", "--neurons", "1024", "--layers", "4000000000"]));
    assert!(err.contains("1024x4000000000 network") && err.contains("GiB of memory"), "{err}");
    // More real images than are bundled: an error, not a silent clamp.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("net");
    let err = expect_error(&spartac(&[
        "hpec",
        "generate",
        "--neurons",
        "1024",
        "--layers",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--images",
        "5000",
    ]));
    assert!(err.contains("bundled real images") && err.contains("1200"), "{err}");
    assert!(!out.exists(), "a refused generate wrote {}", out.display());
    let err = expect_error(&spartac(&["hpec", "run", "--neurons", "4096", "--layers", "2", "--image-count", "70000"]));
    assert!(err.contains("70000 MNIST-derived images"), "{err}");
}

#[test]
fn hpec_files_that_name_huge_sizes_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images.tsv");
    std::fs::write(&images, "1000000000\t5\t1\n").unwrap();
    let err = expect_error(&spartac(&["hpec", "run", "--images", images.to_str().unwrap(), "--no-cache"]));
    assert!(err.contains("image id 1000000000") && err.contains("at most"), "{err}");
    let net = dir.path().join("net");
    std::fs::create_dir(&net).unwrap();
    std::fs::write(net.join("n10000000000-l1.tsv"), "1\t1\t0.0625\n").unwrap();
    let err = expect_error(&spartac(&["hpec", "run", "--network", net.to_str().unwrap(), "--no-check", "--no-cache"]));
    assert!(err.contains("10000000000 neurons, at most"), "{err}");
}

/// `y = relu(x · w + b)` with a 256 × 256 weight, 85% of its 32 × 32 blocks and most other
/// elements zero.
fn write_sparse_model(dir: &Path) -> PathBuf {
    use spartac::tesa::patterns::Pattern;
    let mask = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.85, scattered: 0.01 }.mask(256, 256, 11);
    let mut rng = spartac::rng::SplitMix64::new(12);
    let w: Vec<f32> = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
    let bytes = ModelBuilder::new("sparse", 17)
        .input("x", DType::F32, &fixed(&[128, 256]))
        .init("w", &Tensor::from_vec(vec![256, 256], w))
        .init("b", &Tensor::from_vec(vec![256], vec![0.25f32; 256]))
        .node("fc", "MatMul", &["x", "w"], &["h"], vec![])
        .node("add", "Add", &["h", "b"], &["z"], vec![])
        .node("relu", "Relu", &["z"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[128, 256]))
        .bytes();
    let path = dir.join("sparse.onnx");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn tune_without_a_gpu_is_a_one_line_error() {
    if spartac_runtime::cuda::driver_present().is_ok() {
        eprintln!("skipped: a CUDA driver is present (the GPU test scripts run the real tune)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = write_sparse_model(dir.path());
    let cache = dir.path().join("cache");
    let o = spartac(&["tune", model.to_str().unwrap(), "--cache", cache.to_str().unwrap(), "--budget", "90s"]);
    let err = expect_error(&o);
    assert!(err.contains("GPU") && err.contains("CUDA driver"), "{err}");
    assert!(!cache.exists(), "nothing written");
    let o = spartac(&["tune", model.to_str().unwrap(), "--budget", "5 parsecs"]);
    assert!(!o.status.success() && stderr(&o).contains("unknown unit"), "{}", stderr(&o));
    // A budget past what a Duration holds is a clear error, not an internal one (exit 101).
    for budget in ["99999999999999999999h", "1e30", "nan", "-5"] {
        let o = spartac(&["tune", model.to_str().unwrap(), &format!("--budget={budget}")]);
        assert_eq!(o.status.code(), Some(2), "{budget}: {}", stderr(&o));
        assert!(stderr(&o).contains("--budget") && !stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
}

/// `run --tolerance` takes a finite relative error, 0 or more: NaN would pass every check.
#[test]
fn run_refuses_a_tolerance_that_is_not_a_finite_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_sparse_model(dir.path());
    for t in ["nan", "inf", "-1e-3", "x"] {
        let o = spartac(&["run", model.to_str().unwrap(), "--random", "1", &format!("--tolerance={t}")]);
        assert_eq!(o.status.code(), Some(2), "{t}: {}", stderr(&o));
        assert!(stderr(&o).contains("finite relative error"), "{t}: {}", stderr(&o));
    }
}

#[test]
fn compile_takes_the_measured_winners_and_the_refitted_db_from_a_tune_cache() {
    use spartac::codegen::Engine;
    use spartac::plan::KernelChoice;
    use spartac::tune::{tune_graph, TuneCache, TuneOptions};
    if spartac_runtime::cuda::driver_present().is_ok() {
        eprintln!("skipped: a CUDA driver is present (compile matches the cache to that GPU, not the fake one)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = write_sparse_model(dir.path());
    // `compile`'s pipeline up to the plan, then a tune on a fake GPU where SIMT wins.
    let mut graph = spartac::frontend::load_model(&model, &Default::default()).unwrap();
    spartac::tesa::attrs::apply_attrs(&mut graph, None).unwrap();
    spartac::propagate::propagate(&mut graph, &Default::default()).unwrap();
    spartac::rewrite::prepare_for_lowering(&mut graph, true).unwrap();
    let cache_dir = dir.path().join("tune");
    let cache = TuneCache::new(&cache_dir);
    let mut timer = spartac_tests::fake_timer::FakeTimer::favoring(KernelChoice::Engine(Engine::Simt));
    tune_graph(&graph, &TuneOptions::default(), &cache, &mut timer, &mut |_| {}).unwrap();
    let compile = |extra: &[&str]| {
        let out = dir.path().join("m.sparta");
        let json = dir.path().join("m.json");
        let base = [model.to_str().unwrap(), "-o", out.to_str().unwrap(), "--no-ptx", "--json", json.to_str().unwrap()];
        let o = spartac(&[&["compile"][..], &base, extra].concat());
        assert!(o.status.success(), "stdout: {}\nstderr: {}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (String::from_utf8_lossy(&o.stdout).into_owned(), summary["tuning"].as_str().unwrap().to_string(), stderr(&o))
    };
    let tuned = ["--tune-cache", cache_dir.to_str().unwrap()];
    let (text, tuning, _) = compile(&tuned);
    assert!(tuning.starts_with("1 of 1 operators from") && tuning.contains("Fake GPU"), "{tuning}");
    assert!(text.lines().any(|l| l.starts_with("tuning") && l.contains("1 of 1")), "{text}");
    // The refitted DB in the cache is used, and said so.
    let mut db = spartac::plan::cost::CostModel::sm_90().db;
    db.source = "fitted by a test".into();
    std::fs::write(cache_dir.join("costdb.json"), serde_json::to_string(&db).unwrap()).unwrap();
    let (_, tuning, _) = compile(&tuned);
    assert!(tuning.contains("cost DB") && tuning.contains("fitted by a test"), "{tuning}");
    // A damaged entry: a warning, and the model's own plan.
    for e in std::fs::read_dir(&cache_dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "costdb.json" {
            std::fs::write(&p, "{\"checksum\": \"0\", \"entry\": {}}").unwrap();
        }
    }
    let (_, tuning, err) = compile(&tuned);
    assert!(err.contains("warning: damaged tune cache entry"), "{err}");
    assert!(tuning.starts_with("no entries"), "{tuning}");
    // An empty folder given explicitly: no entries, no error.
    let empty = dir.path().join("empty");
    let (_, tuning, _) = compile(&["--tune-cache", empty.to_str().unwrap()]);
    assert!(tuning.starts_with("no entries"), "{tuning}");
}

/// An output path that is a directory is refused up front and said to be one (a trailing `/`
/// used to read "Not a directory"); the directory is left as it was.
#[test]
fn an_output_path_that_is_a_directory_is_named_so() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let m = model.to_str().unwrap();
    let cache = dir.path().join("cache");
    let env = [("SPARTAC_CACHE_DIR", cache.to_str().unwrap())];
    let d = dir.path().to_str().unwrap();
    let err = expect_error(&spartac_env(&["compile", m, "-o", d, "--no-ptx"], &env));
    assert!(err.contains("the output path is a directory"), "{err}");
    let slash = format!("{d}/");
    let err = expect_error(&spartac_env(&["compile", m, "-o", &slash, "--no-ptx"], &env));
    assert!(err.contains("the output path names a directory"), "{err}");
    let npz = dir.path().join("out.npz");
    std::fs::create_dir(&npz).unwrap();
    let err = expect_error(&spartac(&["run", m, "--random", "1", "--output", npz.to_str().unwrap()]));
    assert!(err.contains("--output") && err.contains("the output path is a directory"), "{err}");
    assert!(npz.is_dir() && std::fs::read_dir(&npz).unwrap().next().is_none(), "left as it was");
}

/// `run --json` on an ONNX model writes the summary it promises (it used to be dropped).
#[test]
fn run_on_an_onnx_model_writes_its_json_summary() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let json = dir.path().join("run.json");
    let o =
        spartac(&["run", model.to_str().unwrap(), "--random", "3", "--repeat", "2", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["runs"], 2);
    assert_eq!(v["name"], "cli_model");
    assert!(v["median_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{v}");
}

/// `compile --print-ir-after` prints the IR after the graph passes asked for (all of them, or
/// by name, or through SPARTAC_PRINT_IR_AFTER), `--passes` lists every pass with its result,
/// and a name that is no graph pass is a one-line error before anything is written.
#[test]
fn compile_prints_the_ir_after_the_passes_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let m = model.to_str().unwrap();
    let cache = dir.path().join("cache");
    let env = [("SPARTAC_CACHE_DIR", cache.to_str().unwrap())];
    let out = dir.path().join("m.sparta");
    let o = out.to_str().unwrap();
    let run = spartac_env(&["compile", m, "-o", o, "--no-ptx", "--print-ir-after", "all", "--passes"], &env);
    assert!(run.status.success(), "{}", stderr(&run));
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("// IR after ")).collect();
    assert_eq!(headers.len(), 10, "one IR per graph pass: {headers:?}");
    assert_eq!(headers[0], "// IR after frontend");
    assert_eq!(headers[9], "// IR after to_half");
    assert!(text.contains("graph \"cli_model\"") && text.contains("Relu("), "{text}");
    for pass in ["frontend", "propagate", "fold_scales", "merge_matmuls", "to_half", "plan", "lower", "write"] {
        assert!(text.lines().any(|l| l.starts_with(pass) && l.contains("  ")), "--passes lists {pass}: {text}");
    }
    let env_run = spartac_env(&["compile", m, "-o", o, "--no-ptx"], &[env[0], ("SPARTAC_PRINT_IR_AFTER", "propagate")]);
    assert!(env_run.status.success(), "{}", stderr(&env_run));
    let text = String::from_utf8_lossy(&env_run.stdout).into_owned();
    assert_eq!(text.lines().filter(|l| l.starts_with("// IR after ")).collect::<Vec<_>>(), ["// IR after propagate"]);
    std::fs::remove_file(&out).unwrap();
    let err = expect_error(&spartac_env(&["compile", m, "-o", o, "--print-ir-after", "plan"], &env));
    assert!(err.contains("no graph pass \"plan\"") && err.contains("to_half"), "{err}");
    assert!(!out.exists(), "nothing written");
}

/// `explain` names a patch embedding (a convolution whose windows tile its input) as the
/// planned MatMul of patch rows it becomes, with its flattened weight.
#[test]
fn explain_names_a_patch_embedding_as_a_planned_matmul() {
    use spartac_tests::builder::A;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("patches.onnx");
    let w = Tensor::from_vec(vec![8, 3, 4, 4], (0..384).map(|i| ((i % 7) as f32 - 3.0) / 8.0).collect());
    let bytes = ModelBuilder::new("patches", 18)
        .input("x", DType::F32, &fixed(&[2, 3, 16, 16]))
        .output("y", DType::F32, &fixed(&[2, 8, 4, 4]))
        .init("w", &w)
        .node(
            "patch",
            "Conv",
            &["x", "w"],
            &["y"],
            vec![("kernel_shape", A::Is(vec![4, 4])), ("strides", A::Is(vec![4, 4]))],
        )
        .bytes();
    std::fs::write(&model, bytes).unwrap();
    let o = spartac(&["explain", model.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out.lines().find(|l| l.starts_with("patch ")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("8x3x4x4") && row.contains("48x8") && row.contains("patches as a planned MatMul"), "{row}");
}

/// `explain --dtype f16` plans what `compile --dtype f16` plans: the graph rewritten (here
/// Q, K and V merged into one product) with 16-bit values; without it, the graph as loaded.
#[test]
fn explain_with_a_dtype_plans_the_compiled_graph() {
    use spartac_tests::builder::A;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qkv.onnx");
    let w = |seed: usize| {
        Tensor::from_vec(vec![64, 64], (0..4096).map(|i| ((i * seed % 89) as f32 - 44.0) / 400.0).collect())
    };
    let mut b = ModelBuilder::new("qkv", 18).input("x", DType::F32, &fixed(&[2, 16, 64])).output(
        "o",
        DType::F32,
        &fixed(&[2, 16, 64]),
    );
    for (p, seed) in [("q", 7), ("k", 11), ("v", 13)] {
        b = b.init(&format!("w{p}"), &w(seed)).node(
            &format!("mm_{p}"),
            "MatMul",
            &["x", &format!("w{p}")],
            &[p],
            vec![],
        );
    }
    let bytes = b
        .node("tr", "Transpose", &["k"], &["kt"], vec![("perm", A::Is(vec![0, 2, 1]))])
        .node("scores", "MatMul", &["q", "kt"], &["s"], vec![])
        .node("sm", "Softmax", &["s"], &["p"], vec![("axis", A::I(-1))])
        .node("pv", "MatMul", &["p", "v"], &["o"], vec![])
        .bytes();
    std::fs::write(&model, bytes).unwrap();
    let tesa = dir.path().join("t.json");
    std::fs::write(&tesa, r#"{"tensors": {"w*": {"block_magnitude": {"block": [16, 16], "sparsity": 0.75}}}}"#)
        .unwrap();
    let m = model.to_str().unwrap();
    let t = tesa.to_str().unwrap();
    let plain = spartac(&["explain", m, "--tesa", t]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(plain.contains("mm_q") && !plain.contains(".merged"), "{plain}");
    let f16 = spartac(&["explain", m, "--tesa", t, "--dtype", "f16"]);
    assert!(f16.status.success(), "{}", stderr(&f16));
    let f16 = String::from_utf8_lossy(&f16.stdout).into_owned();
    assert!(f16.contains("compile --dtype f16") && f16.contains(".merged"), "{f16}");
    // A dtype compile does not take is a usage error that names it.
    let bad = spartac(&["explain", m, "--dtype", "f8"]);
    assert!(!bad.status.success() && stderr(&bad).contains("'f8'"), "{}", stderr(&bad));
}
