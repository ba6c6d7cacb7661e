//! Hostile inputs through the whole command line (issue 29): mutated ONNX bytes, `.npz` inputs,
//! TeSA JSON, cost DBs, HPEC TSV networks and HPEC binary caches. Every run must end in exit 0,
//! or in exit 1 with one `error:` line and no output file; never a panic, a signal, a hang or
//! an output left behind, and all of it inside a 4 GiB address space (an allocation past it
//! aborts the process, which fails the test). The mutations come from a fixed-seed generator,
//! so a failure names a case that reproduces.
//!
//! Issue 47 added the classes below the mutations: side outputs that cannot be written (the
//! main output must survive), cache entries and inputs that are FIFOs or devices (no hang, no
//! endless read), sizes named by a model or a file past memory (refused before allocating),
//! NaN and Inf inputs (the compiled artifact on the CPU executor gives what the ONNX engine
//! gives), and absurd numeric arguments (argument errors, exit 2).

use spartac::ir::{DType, Tensor};
use spartac_runtime::npz::{read_npz, write_npz};
use spartac_tests::builder::{fixed, ModelBuilder};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Cases per input kind (each one run of the binary, most under 50 ms).
const CASES: usize = 150;

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values a hostile user puts where a number or a name belongs.
const HOSTILE: [&str; 16] = [
    "-1",
    "0",
    "4294967296",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "1.5",
    "\"x\"",
    "null",
    "[]",
    "{}",
    "99999999999",
    "",
    "\u{0}",
];

/// One byte-level mutation: flip bits, overwrite with 0xff/0x00, truncate, duplicate a chunk,
/// or insert random bytes.
fn mutate_bytes(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        if d.is_empty() {
            break;
        }
        let at = rng.below(d.len());
        match rng.below(5) {
            0 => d[at] ^= 1 << rng.below(8),
            1 => d[at] = if rng.below(2) == 0 { 0xff } else { 0 },
            2 => d.truncate(at),
            3 => {
                let len = rng.below(64).min(d.len() - at);
                let chunk = d[at..at + len].to_vec();
                d.splice(at..at, chunk);
            }
            _ => {
                let extra: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                d.splice(at..at, extra);
            }
        }
    }
    d
}

/// One text-level mutation: replace a number-like token with a hostile value, delete a line,
/// truncate, or swap two characters.
fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut t = text.to_string();
    for _ in 0..1 + rng.below(3) {
        match rng.below(4) {
            0 | 1 => {
                // Token boundaries: digits, '.', '-', 'e' runs.
                let spans: Vec<(usize, usize)> = {
                    let b = t.as_bytes();
                    let mut v = vec![];
                    let mut i = 0;
                    while i < b.len() {
                        if b[i].is_ascii_digit() {
                            let s = i;
                            while i < b.len() && (b[i].is_ascii_digit() || b".-e+".contains(&b[i])) {
                                i += 1;
                            }
                            v.push((s, i));
                        } else {
                            i += 1;
                        }
                    }
                    v
                };
                if let Some(&(s, e)) = spans.get(rng.below(spans.len())) {
                    t.replace_range(s..e, HOSTILE[rng.below(HOSTILE.len())]);
                }
            }
            2 => {
                let lines: Vec<&str> = t.lines().collect();
                if !lines.is_empty() {
                    let k = rng.below(lines.len());
                    t = lines
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != k)
                        .map(|(_, l)| *l)
                        .collect::<Vec<_>>()
                        .join("\n");
                }
            }
            _ => {
                let cut = rng.below(t.len());
                let cut = (0..=cut).rev().find(|&c| t.is_char_boundary(c)).unwrap_or(0);
                t.truncate(cut);
            }
        }
    }
    t
}

/// The binary under a 4 GiB address-space limit and a 60 s time limit. Two worker threads and
/// two malloc arenas, so the address space a many-core machine reserves up front (an arena of
/// 64 MiB per thread) does not count against the limit the inputs are tested under.
fn spartac_limited(args: &[&str]) -> Output {
    spartac_limited_env(args, &[])
}

/// [`spartac_limited`] with extra environment variables.
fn spartac_limited_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("sh")
        .envs(env.iter().copied())
        .env("RAYON_NUM_THREADS", "2")
        .env("MALLOC_ARENA_MAX", "2")
        .arg("-c")
        .arg("ulimit -v 4194304 && exec timeout 60 \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_spartac"))
        .args(args)
        .output()
        .expect("spawning sh")
}

/// The run ended cleanly: exit 0, or exit 1 with one `error:` line and `output` not written.
/// Returns whether it was an error.
fn check(kind: &str, case: usize, o: &Output, output: Option<&Path>) -> bool {
    let err = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code().unwrap_or_else(|| panic!("{kind} case {case}: killed by a signal: {err}"));
    match code {
        0 => {}
        1 => {
            assert_eq!(err.trim_end().lines().count(), 1, "{kind} case {case}: not one line: {err}");
            assert!(err.starts_with("error: "), "{kind} case {case}: {err}");
            assert!(!err.contains("internal error") && !err.contains("panicked"), "{kind} case {case}: {err}");
            if let Some(p) = output {
                assert!(!p.exists(), "{kind} case {case}: failed but left {}", p.display());
            }
        }
        124 => panic!("{kind} case {case}: still running after 60 s"),
        other => panic!("{kind} case {case}: exit {other} (abort or memory limit?): {err}"),
    }
    if let Some(p) = output {
        let _ = std::fs::remove_file(p);
    }
    code == 1
}

/// Per kind of input: runs, and how many ended in an error. A kind whose mutations never
/// produced an error would mean the mutations do not reach the parser: that fails too.
#[derive(Default)]
struct Tally(std::collections::BTreeMap<&'static str, (usize, usize)>);

impl Tally {
    fn add(&mut self, kind: &'static str, error: bool) {
        let e = self.0.entry(kind).or_default();
        e.0 += 1;
        e.1 += usize::from(error);
    }

    fn finish(&self) {
        for (kind, (runs, errors)) in &self.0 {
            eprintln!("{kind}: {runs} runs, {errors} errors");
            assert!(*errors > 0, "{kind}: no mutation was refused; the mutations do not reach the reader");
        }
    }
}

fn model_bytes() -> Vec<u8> {
    ModelBuilder::new("hostile", 17)
        .input("x", DType::F32, &fixed(&[2, 8]))
        .init("w", &Tensor::from_vec(vec![8, 4], (0..32).map(|i| if i % 3 == 0 { 0.0 } else { i as f32 }).collect()))
        .init("b", &Tensor::from_vec(vec![4], vec![0.5f32, -0.5, 1.0, 0.0]))
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("add", "Add", &["h", "b"], &["z"], vec![])
        .node("relu", "Relu", &["z"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2, 4]))
        .bytes()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn mutated_models_inputs_attrs_and_cost_dbs_end_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = model_bytes();
    let good_model = write(d, "good.onnx", &model);
    let npz_path = d.join("good.npz");
    write_npz(&npz_path, &[("x".to_string(), Tensor::from_vec(vec![2, 8], vec![0.25f32; 16]))]).unwrap();
    let npz = std::fs::read(&npz_path).unwrap();
    let tesa = r#"{"tensors": {"w": {"block_magnitude": {"block": [4, 2], "sparsity": 0.5}, "bits": 8, "format": "int"}, "b": {"prune": "zeros"}}}"#;
    let costdb = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../costdb/sm_90.json")).unwrap();
    let out = d.join("out.npz");
    let (gm, o) = (good_model.to_str().unwrap(), out.to_str().unwrap());
    let mut rng = Rng(0x5eed_0029);
    let mut tally = Tally::default();
    for case in 0..CASES {
        // ONNX bytes.
        let m = write(d, "m.onnx", &mutate_bytes(&mut rng, &model));
        let o_run = spartac_limited(&["run", m.to_str().unwrap(), "--random", "1", "--output", o]);
        tally.add("onnx", check("onnx", case, &o_run, Some(&out)));
        // .npz inputs.
        let n = write(d, "in.npz", &mutate_bytes(&mut rng, &npz));
        let o_run = spartac_limited(&["run", gm, "--inputs", n.to_str().unwrap(), "--output", o]);
        tally.add("npz", check("npz", case, &o_run, Some(&out)));
        // TeSA attrs.
        let t = write(d, "attrs.json", mutate_text(&mut rng, tesa).as_bytes());
        let report = d.join("report.json");
        let args = ["propagate", gm, "--tesa", t.to_str().unwrap(), "--report", report.to_str().unwrap()];
        tally.add("tesa", check("tesa", case, &spartac_limited(&args), Some(&report)));
        // Cost DB.
        let c = write(d, "db.json", mutate_text(&mut rng, &costdb).as_bytes());
        let plan = d.join("plan.json");
        let args = ["plan", gm, "--costdb", c.to_str().unwrap(), "--json", plan.to_str().unwrap()];
        tally.add("costdb", check("costdb", case, &spartac_limited(&args), Some(&plan)));
    }
    tally.finish();
}

#[test]
fn mutated_hpec_networks_and_caches_end_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let net = d.join("net");
    let gen =
        spartac_limited(&["hpec", "generate", "--neurons", "1024", "--layers", "2", "--out", net.to_str().unwrap()]);
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    let layer = std::fs::read_to_string(net.join("n1024-l1.tsv")).unwrap();
    // A parsed network in the binary cache, to damage.
    let cache = d.join("cache");
    let (n, c) = (net.to_str().unwrap(), cache.to_str().unwrap());
    let base = ["hpec", "run", "--backend", "cpu", "--image-count", "100"];
    let first = spartac_limited(&[&base[..], &["--network", n, "--cache-dir", c]].concat());
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let entry = std::fs::read_dir(&cache).unwrap().next().unwrap().unwrap().path();
    let cached = std::fs::read(&entry).unwrap();
    let mut rng = Rng(0x5eed_4ec0);
    let mut tally = Tally::default();
    for case in 0..CASES {
        // The TSV: a changed field, a lost line, a cut file.
        std::fs::write(net.join("n1024-l1.tsv"), mutate_text(&mut rng, &layer)).unwrap();
        let o = spartac_limited(&[&base[..], &["--network", n, "--no-cache"]].concat());
        tally.add("hpec tsv", check("hpec tsv", case, &o, None));
        // The binary cache of the good network: detected and rebuilt, or refused.
        std::fs::write(net.join("n1024-l1.tsv"), &layer).unwrap();
        std::fs::write(&entry, mutate_bytes(&mut rng, &cached)).unwrap();
        let o = spartac_limited(&[&base[..], &["--network", n, "--cache-dir", c]].concat());
        check("hpec cache", case, &o, None);
        assert!(o.status.success(), "hpec cache case {case}: a damaged cache entry must be rebuilt, not fail the run");
    }
    tally.finish();
}

/// A one-line error (exit 1) whose message contains every one of `words`.
fn expect_error_with(what: &str, o: &Output, words: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: not one line: {err}");
    assert!(err.starts_with("error: ") && !err.contains("internal error"), "{what}: {err}");
    for w in words {
        assert!(err.contains(w), "{what}: no {w:?} in {err}");
    }
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().is_ok_and(|s| s.success());
    assert!(made, "mkfifo is needed for this test");
}

/// Every output path is checked before the work: a side output that cannot be written (here
/// into a folder that does not exist) fails the command before the main output has replaced
/// the file that was there.
#[test]
fn a_side_output_that_cannot_be_written_leaves_the_main_output_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good_model = write(d, "m.onnx", &model_bytes());
    let m = good_model.to_str().unwrap();
    let cache = d.join("cache");
    let env = [("SPARTAC_CACHE_DIR", cache.to_str().unwrap())];
    let artifact = d.join("m.sparta");
    let o = spartac_limited_env(&["compile", m, "-o", artifact.to_str().unwrap(), "--no-ptx"], &env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (npz, sparta, json, png, onnx) =
        (d.join("keep.npz"), d.join("keep.sparta"), d.join("keep.json"), d.join("keep.png"), d.join("keep.onnx"));
    let side = d.join("nodir/side.json");
    let a = artifact.to_str().unwrap();
    let [npz_s, sparta_s, json_s, png_s, onnx_s, side_s] =
        [&npz, &sparta, &json, &png, &onnx, &side].map(|p| p.to_str().unwrap());
    let synth = ["synth", "matmul", "--m", "4", "--k", "8", "--n", "8", "--pattern", "unstructured@0.5"];
    let cases: Vec<(Vec<&str>, &Path, &str)> = vec![
        (vec!["run", m, "--random", "1", "--output", npz_s, "--json", side_s], &npz, "--json"),
        (vec!["run", a, "--random", "1", "--backend", "cpu", "--output", npz_s, "--json", side_s], &npz, "--json"),
        (vec!["compile", m, "-o", sparta_s, "--no-ptx", "--json", side_s], &sparta, "--json"),
        (vec!["propagate", m, "--plot", png_s, "--report", side_s], &png, "--report"),
        (vec!["plan", m, "--json", json_s, "--artifact", side_s], &json, "--artifact"),
        ([&synth[..], &["-o", onnx_s, "--tesa-out", side_s]].concat(), &onnx, "--tesa-out"),
    ];
    for (args, main, flag) in &cases {
        std::fs::write(main, b"keep me").unwrap();
        let o = spartac_limited_env(args, &env);
        expect_error_with(&format!("{args:?}"), &o, &[flag, "nodir", "does not exist"]);
        assert_eq!(std::fs::read(main).unwrap(), b"keep me", "{args:?} replaced {}", main.display());
    }
    // Commands whose one output is refused before any work.
    for args in [vec!["explain", m, "--json", side_s], vec!["hpec", "export", "--layers", "2", "--out", side_s]] {
        expect_error_with(&format!("{args:?}"), &spartac_limited_env(&args, &env), &["nodir", "does not exist"]);
    }
    assert!(!d.join("nodir").exists());
}

/// Spawns the binary (not under the memory limit) and kills it after `limit`: a hang fails the
/// test instead of stalling the suite.
fn spartac_within(args: &[&str], env: &[(&str, &str)], limit: std::time::Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spartac"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning spartac");
    let start = std::time::Instant::now();
    while child.try_wait().expect("waiting for spartac").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after {limit:?} (blocked on a FIFO?)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting spartac's output")
}

/// A FIFO where a cache entry belongs (the propagation cache, the tune cache) would block a
/// reader that opens it: it is a miss with a warning, the command runs to its end.
#[test]
#[cfg(unix)]
fn cache_entries_that_are_fifos_are_misses_not_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = write(d, "m.onnx", &model_bytes());
    let cache = d.join("cache");
    let env = [("SPARTAC_CACHE_DIR", cache.to_str().unwrap())];
    let out = d.join("m.sparta");
    let args = ["compile", m.to_str().unwrap(), "-o", out.to_str().unwrap(), "--no-ptx"];
    let limit = std::time::Duration::from_secs(60);
    let o = spartac_within(&args, &env, limit);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let entries: Vec<PathBuf> =
        std::fs::read_dir(cache.join("propagate")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    std::fs::remove_file(&entries[0]).unwrap();
    mkfifo(&entries[0]);
    // A tune cache holding a FIFO entry, given explicitly.
    let tune = d.join("tune");
    std::fs::create_dir(&tune).unwrap();
    mkfifo(&tune.join("0123456789abcdef.json"));
    std::fs::remove_file(&out).unwrap();
    let o = spartac_within(&[&args[..], &["--tune-cache", tune.to_str().unwrap()]].concat(), &env, limit);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("propagation cache entry") && err.contains("not a regular file"), "{err}");
    assert!(err.contains("0123456789abcdef.json"), "the tune cache's FIFO is named: {err}");
    assert!(!err.contains("internal error"), "{err}");
    assert!(out.is_file(), "the artifact is written");
}

/// HPEC inputs that are devices or FIFOs are refused by their type, like models and artifacts:
/// `/dev/zero` as images or truth is one endless line, a FIFO would block.
#[test]
#[cfg(unix)]
fn hpec_inputs_that_are_devices_or_fifos_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo.tsv");
    mkfifo(&fifo);
    let net = d.join("net");
    std::fs::create_dir(&net).unwrap();
    mkfifo(&net.join("n1024-l1.tsv"));
    let f = fifo.to_str().unwrap();
    let base = ["hpec", "run", "--backend", "cpu", "--no-cache", "--image-count", "10"];
    for (extra, words) in [
        (vec!["--images", "/dev/zero"], ["images", "/dev/zero", "not a regular file"]),
        (vec!["--images", f], ["images", "fifo.tsv", "not a regular file"]),
        (vec!["--categories", "/dev/zero"], ["categories", "/dev/zero", "not a regular file"]),
        (vec!["--categories", f], ["categories", "fifo.tsv", "not a regular file"]),
        (vec!["--network", net.to_str().unwrap(), "--no-check"], ["n1024-l1.tsv", "not a regular file", "network"]),
    ] {
        let args = [&base[..], &extra].concat();
        expect_error_with(&format!("{args:?}"), &spartac_limited(&args), &words);
    }
}

/// A Constant whose `sparse_value` names a 100000 × 100000 tensor with one nonzero: made dense
/// it takes 37 GiB, so the memory budget refuses it before anything is allocated (it used to
/// abort `inspect` on the allocation).
#[test]
fn a_constant_past_the_memory_budget_is_refused_before_it_is_made_dense() {
    use spartac::ir::{Data, SparseTensor};
    use spartac_tests::builder::A;
    let dir = tempfile::tempdir().unwrap();
    let huge = SparseTensor { shape: vec![100_000, 100_000], indices: vec![12_345], values: Data::F32(vec![1.0]) };
    let bytes = ModelBuilder::new("huge_constant", 17)
        .node("c", "Constant", &[], &["k"], vec![("sparse_value", A::Sparse(huge))])
        .output("k", DType::F32, &fixed(&[100_000, 100_000]))
        .bytes();
    let m = write(dir.path(), "huge.onnx", &bytes);
    for cmd in ["inspect", "plan"] {
        let o = spartac_limited(&[cmd, m.to_str().unwrap(), "--memory-budget-gib", "2"]);
        expect_error_with(cmd, &o, &["\"c\"", "Constant", "sparse_value", "memory budget"]);
    }
    // A dense `value` over the budget too (4 MiB of raw data against a 1 MiB budget).
    let big = Tensor::from_vec(vec![1024, 1024], vec![0.5f32; 1 << 20]);
    let bytes = ModelBuilder::new("big_constant", 17)
        .node("c", "Constant", &[], &["k"], vec![("value", A::T(big))])
        .output("k", DType::F32, &fixed(&[1024, 1024]))
        .bytes();
    let m = write(dir.path(), "big.onnx", &bytes);
    let o = spartac_limited(&["inspect", m.to_str().unwrap(), "--memory-budget-gib", "0.0009765625"]);
    expect_error_with("value", &o, &["Constant", "'value'", "memory budget"]);
    let o = spartac_limited(&["inspect", m.to_str().unwrap()]);
    assert!(o.status.success(), "within the default budget: {}", String::from_utf8_lossy(&o.stderr));
}

/// An artifact whose header names a small body but whose file runs on for 5 GiB (a sparse
/// file: no disk used) is refused from its length before the body is read.
#[test]
fn an_artifact_longer_than_its_header_says_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = write(d, "m.onnx", &model_bytes());
    let cache = d.join("cache");
    let art = d.join("m.sparta");
    let o = spartac_limited_env(
        &["compile", m.to_str().unwrap(), "-o", art.to_str().unwrap(), "--no-ptx"],
        &[("SPARTAC_CACHE_DIR", cache.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let len = std::fs::metadata(&art).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&art).unwrap().set_len(len + (5 << 30)).unwrap();
    let a = art.to_str().unwrap();
    for args in [vec!["run", a, "--random", "1", "--backend", "cpu"], vec!["inspect", a]] {
        expect_error_with(&format!("{args:?}"), &spartac_limited(&args), &["m.sparta", "truncated or has extra bytes"]);
    }
}

/// Values no run can use are argument errors (exit 2, one line), whatever the model: NaN or
/// infinite thresholds, zero samples, a batch past any image file, tiles of zeros.
#[test]
fn absurd_numeric_arguments_are_argument_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = write(d, "m.onnx", &model_bytes());
    let m = m.to_str().unwrap();
    let out = d.join("out");
    let o = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["propagate", m, "--calib", "random", "--quant-threshold=nan"], "--quant-threshold"),
        (vec!["propagate", m, "--calib", "random", "--quant-threshold=inf"], "--quant-threshold"),
        (vec!["propagate", m, "--calib", "random", "--quant-threshold=-1"], "--quant-threshold"),
        (vec!["propagate", m, "--samples", "0"], "--samples"),
        (vec!["propagate", m, "--samples", "99999999999"], "--samples"),
        (vec!["hpec", "export", "--batch", "99999999999", "--out", o], "--batch"),
        (vec!["hpec", "export", "--batch", "0", "--out", o], "--batch"),
        (vec!["compile", m, "-o", o, "--no-ptx", "--fine-tile", "0,0,0,0"], "--fine-tile"),
        (vec!["compile", m, "-o", o, "--no-ptx", "--fine-tile", "64,16,0,1"], "--fine-tile"),
        (vec!["compile", m, "-o", o, "--no-ptx", "--fine-tile", "64,16,6,3"], "--fine-tile"),
        (vec!["hpec", "run", "--backend", "sim", "--fine-tile", "0,0,0,0"], "--fine-tile"),
        (vec!["run", m, "--random", "1", "--tolerance=nan"], "--tolerance"),
    ];
    for (args, flag) in cases {
        let r = spartac_limited(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("error: ") && err.contains(flag), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {o}");
    }
}

/// NaN/+Inf/-Inf or finite, and for finite values close: the comparison of an artifact's
/// output with the ONNX engine's (the kernels sum in another order).
fn same_values(what: &str, got: &Tensor, want: &Tensor) {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len(), "{what}");
    let class = |x: f64| {
        if x.is_nan() {
            0
        } else if x == f64::INFINITY {
            1
        } else if x == f64::NEG_INFINITY {
            2
        } else {
            3
        }
    };
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert_eq!(class(*a), class(*b), "{what}[{i}]: artifact {a}, ONNX engine {b}");
        if a.is_finite() {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{what}[{i}]: artifact {a}, ONNX engine {b}");
        }
    }
}

/// A model run by the ONNX engine and, compiled, by the CPU executor on the same inputs: each
/// output must be [`same_values`].
fn onnx_and_artifact_agree(d: &Path, name: &str, model: &[u8], inputs: Vec<(String, Tensor)>) {
    let m = write(d, &format!("{name}.onnx"), model);
    let art = d.join(format!("{name}.sparta"));
    let cache = d.join("cache");
    let env = [("SPARTAC_CACHE_DIR", cache.to_str().unwrap())];
    let o = spartac_limited_env(&["compile", m.to_str().unwrap(), "-o", art.to_str().unwrap(), "--no-ptx"], &env);
    assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
    let inp = d.join(format!("{name}_in.npz"));
    write_npz(&inp, &inputs).unwrap();
    let mut outs = vec![];
    for (path, backend) in [(&m, "cpu"), (&art, "cpu")] {
        let out = d.join(format!("{name}_{}.npz", outs.len()));
        let args = ["run", path.to_str().unwrap(), "--inputs", inp.to_str().unwrap(), "--backend", backend, "--output"];
        let o = spartac_limited_env(&[&args[..], &[out.to_str().unwrap()]].concat(), &env);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        outs.push(read_npz(&out).unwrap());
    }
    assert!(!outs[0].is_empty() && outs[0].len() == outs[1].len(), "{name}");
    for (key, want) in &outs[0] {
        same_values(&format!("{name} {key}"), &outs[1][key], want);
    }
}

/// NaN and Inf go through a compiled model as through the ONNX engine: ReLU(NaN) is NaN, not 0
/// (a fused epilogue's `max(x, 0)` used to turn it into 0), Clip keeps it, and +Inf and -Inf
/// reach the outputs where the engine's do. A dense MLP (Relu, then Clip as ReLU6) takes
/// single NaN and Inf elements; a block-sparse chain takes whole NaN rows (a pruned weight is
/// absent from the compiled model, so a lone NaN reaches only the columns of its row's kept
/// weights, where the engine's dense product would spread it to all).
#[test]
fn nan_and_inf_inputs_give_what_the_onnx_engine_gives_on_the_compiled_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = spartac::rng::SplitMix64::new(47);
    let mut nonzero = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = rng.uniform(-1.0, 1.0) as f32;
                if v.abs() < 0.05 {
                    0.5
                } else {
                    v
                }
            })
            .collect()
    };
    let mlp = ModelBuilder::new("mlp", 17)
        .input("x", DType::F32, &fixed(&[6, 8]))
        .init("w1", &Tensor::from_vec(vec![8, 16], nonzero(128)))
        .init("b1", &Tensor::from_vec(vec![16], nonzero(16)))
        .init("w2", &Tensor::from_vec(vec![16, 4], nonzero(64)))
        .init("b2", &Tensor::from_vec(vec![4], nonzero(4)))
        .init("lo", &Tensor::scalar(0.0f32))
        .init("hi", &Tensor::scalar(6.0f32))
        .node("fc1", "MatMul", &["x", "w1"], &["h1"], vec![])
        .node("add1", "Add", &["h1", "b1"], &["z1"], vec![])
        .node("relu1", "Relu", &["z1"], &["y1"], vec![])
        .node("fc2", "MatMul", &["y1", "w2"], &["h2"], vec![])
        .node("add2", "Add", &["h2", "b2"], &["z2"], vec![])
        .node("clip", "Clip", &["z2", "lo", "hi"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[6, 4]))
        .bytes();
    let mut x: Vec<f32> = (0..48).map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.5).collect();
    x[8 + 2] = f32::NAN; // row 1: one NaN
    x[16] = f32::INFINITY; // row 2: +Inf
    x[24 + 5] = f32::NEG_INFINITY; // row 3: -Inf
    x[32..40].fill(f32::NAN); // row 4: all NaN
    onnx_and_artifact_agree(d, "mlp", &mlp, vec![("x".into(), Tensor::from_vec(vec![6, 8], x))]);

    // Two 64 × 64 layers, each weight kept in one 16 × 16 block of four along every column.
    let block_sparse = |seed: u64| -> Tensor {
        let mut rng = spartac::rng::SplitMix64::new(seed);
        let w = (0..64 * 64)
            .map(|i| {
                let (k, j) = (i / 64, i % 64);
                let v = rng.uniform(0.1, 1.0) as f32;
                if (k / 16 + j / 16) % 4 == 0 {
                    if i % 2 == 0 {
                        v
                    } else {
                        -v
                    }
                } else {
                    0.0
                }
            })
            .collect();
        Tensor::from_vec(vec![64, 64], w)
    };
    let chain = ModelBuilder::new("sparse_chain", 17)
        .input("x", DType::F32, &fixed(&[8, 64]))
        .init("w1", &block_sparse(1))
        .init("b1", &Tensor::from_vec(vec![64], vec![0.25f32; 64]))
        .init("w2", &block_sparse(2))
        .init("b2", &Tensor::from_vec(vec![64], vec![-0.25f32; 64]))
        .node("fc1", "MatMul", &["x", "w1"], &["h1"], vec![])
        .node("add1", "Add", &["h1", "b1"], &["z1"], vec![])
        .node("relu1", "Relu", &["z1"], &["y1"], vec![])
        .node("fc2", "MatMul", &["y1", "w2"], &["h2"], vec![])
        .node("add2", "Add", &["h2", "b2"], &["z2"], vec![])
        .node("relu2", "Relu", &["z2"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[8, 64]))
        .bytes();
    let mut x: Vec<f32> = (0..8 * 64).map(|i| ((i * 13) % 17) as f32 / 17.0 - 0.5).collect();
    x[64..128].fill(f32::NAN);
    x[5 * 64..6 * 64].fill(f32::NAN);
    onnx_and_artifact_agree(d, "sparse_chain", &chain, vec![("x".into(), Tensor::from_vec(vec![8, 64], x))]);
}
