#!/usr/bin/env bash
# `spartac tune` on MiniLM-L6 (batch 32 x sequence 128) on the GPU machine: the untuned
# compile + run, the tune (its time, report, JSON and plot), then the tuned compile + run, both
# runs checked against the CPU executor, in one call.
# usage: BIN=./target/gpu/spartac OUT=/tmp/tune [TESA=models/tesa/minilm-l6-block32-90.json]
#        [BUDGET=6m] [REPEAT=200] benches/tune_gpu.sh
# Needs .device/minilm-l6.stripped.onnx (benches/e2e_prepare.py strip, here). The tune cache is
# $OUT/tune: run the script again (same OUT) and the tune resumes where its budget stopped it.
set -uo pipefail
DEFAULT_BUDGET=6m DEFAULT_REPEAT=200
source "$(dirname "$0")/tune_flow.sh"
TESA=${TESA:-models/tesa/minilm-l6-block32-90.json}
ONNX="$OUT/minilm-l6.onnx"
[ -f "$ONNX" ] || python3 benches/e2e_prepare.py restore .device/minilm-l6.stripped.onnx "$ONNX"
tune_flow "$ONNX" --tesa "$TESA"
