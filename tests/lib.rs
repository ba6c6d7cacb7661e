//! Shared helpers for the integration tests: repository paths, ONNX conformance runner, model
//! builder, checks of compiled programs without a GPU (`compiled`), and a GPU-free timer for the
//! tuner (`fake_timer`).

pub mod builder;
pub mod compiled;
pub mod conformance;
pub mod fake_timer;
pub mod models;

use std::path::PathBuf;

/// The repository root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}
