#!/usr/bin/env bash
# `spartac tune` on an HPEC network per layer, on the GPU machine: the network is exported as an
# ONNX model (`spartac hpec export`: per layer MatMul with the sparse weight + Add + Relu + Min),
# whose 120 MatMuls the tune takes like any model's; then the untuned and the tuned compile +
# run, both checked against the CPU executor. (`spartac hpec run --backend cuda` plans its layers
# itself and does not read the tune cache yet.)
# usage: BIN=./target/gpu/spartac OUT=/tmp/tune-hpec [NEURONS=1024] [LAYERS=120] [BATCH=1024]
#        [BUDGET=8m] [REPEAT=50] benches/tune_hpec.sh
set -uo pipefail
DEFAULT_BUDGET=8m DEFAULT_REPEAT=50
source "$(dirname "$0")/tune_flow.sh"
ONNX="$OUT/hpec.onnx"
$BIN hpec export --neurons "${NEURONS:-1024}" --layers "${LAYERS:-120}" --batch "${BATCH:-1024}" --out "$ONNX" || exit 1
tune_flow "$ONNX"
