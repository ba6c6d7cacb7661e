//! `hpec run --mpi` as MPI jobs of 2 and 3 ranks on the CPU, with the pinned Open MPI that
//! `tests/mpi/setup.sh` installs under `.cache/mpi` (run by `tests/run-all.sh`): the images are
//! dealt to the ranks, rank 0 gathers and checks the categories; a failing rank fails the job
//! with its error on rank 0; a missing libmpi is a one-line error.
#![cfg(feature = "mpi")]

use std::path::PathBuf;
use std::process::{Command, Output};

fn mpi_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/mpi");
    if !dir.join("bin/mpirun").is_file() || !dir.join("lib/libmpi.so.40").is_file() {
        panic!("Open MPI is required by this test and was not found in {}; run tests/run-all.sh", dir.display());
    }
    dir
}

/// `mpirun -np ranks spartac hpec run --mpi args...`, libmpi from the pinned install.
fn mpirun(ranks: usize, args: &[&str]) -> Output {
    let dir = mpi_dir();
    let lib = dir.join("lib/libmpi.so.40");
    Command::new(dir.join("bin/mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &ranks.to_string(), "-x", "SPARTAC_MPI_LIB"])
        .arg(env!("CARGO_BIN_EXE_spartac"))
        .args(["hpec", "run", "--mpi", "--no-cache"])
        .args(args)
        .env("SPARTAC_MPI_LIB", &lib)
        .output()
        .expect("spawning mpirun")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn two_ranks_on_the_cpu_engine_pass_with_one_summary_line() {
    let o = mpirun(2, &["--backend", "cpu"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let summaries: Vec<&str> = out.lines().filter(|l| l.starts_with("mpi: ")).collect();
    assert_eq!(summaries.len(), 1, "one summary, from rank 0: {out}");
    assert!(summaries[0].contains("1200 images over 2 ranks (600 + 600)") && summaries[0].ends_with("PASS"), "{out}");
    assert!(summaries[0].contains("categories: 19 images"), "{out}");
}

#[test]
fn three_ranks_of_the_compiled_program_gather_every_category() {
    let o = mpirun(3, &["--backend", "sim", "--layers", "24", "--image-count", "500", "--precision", "f32", "--json"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!((v["mpi_ranks"].as_u64(), v["verdict"].as_str()), (Some(3), Some("PASS")), "{v}");
    let per_rank: Vec<u64> = v["images_per_rank"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(per_rank, vec![166, 167, 167], "{v}");
}

#[test]
fn a_failing_rank_fails_the_job_with_its_error_on_rank_0() {
    let o = mpirun(3, &["--backend", "cpu", "--mpi-fail-rank", "1"]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "stdout: {out}\nstderr: {err}");
    assert!(!out.contains("PASS"), "no result is printed as a pass: {out}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors, ["error: rank 1 of 3 failed: failing on purpose (--mpi-fail-rank 1)"], "{err}");
}

#[test]
fn a_missing_mpi_library_is_a_one_line_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_spartac"))
        .args(["hpec", "run", "--mpi", "--backend", "cpu"])
        .env("SPARTAC_MPI_LIB", "/nonexistent/libmpi.so")
        .output()
        .expect("spawning spartac");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "stdout: {out}\nstderr: {err}");
    assert!(err.starts_with("error: MPI: cannot open an MPI library") && err.trim_end().lines().count() == 1, "{err}");
}
