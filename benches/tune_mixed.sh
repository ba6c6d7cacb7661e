#!/usr/bin/env bash
# `spartac tune` on the 4096^2 mixed pattern (SparTA Fig. 16: 90% of the 32x32 blocks pruned plus
# 1% of all elements kept in the pruned ones) as one MatMul, on the GPU machine: the model is
# written there (`spartac synth matmul`, 64 MB: not carried), then the untuned compile + run, the
# tune, and the tuned compile + run, both runs checked against the CPU executor.
# usage: BIN=./target/gpu/spartac OUT=/tmp/tune-mixed [M=4096] [SEED=1] [BUDGET=4m] [REPEAT=200]
#        benches/tune_mixed.sh
# The tune cache is $OUT/tune: run again with the same OUT and the tune resumes.
set -uo pipefail
DEFAULT_BUDGET=4m DEFAULT_REPEAT=200
source "$(dirname "$0")/tune_flow.sh"
ONNX="$OUT/mixed.onnx"
TESA="$OUT/mixed.tesa.json"
$BIN synth matmul --m "${M:-4096}" --k 4096 --n 4096 --pattern mixed32x32@0.9+0.01 --seed "${SEED:-1}" \
  -o "$ONNX" --tesa-out "$TESA" || exit 1
tune_flow "$ONNX" --tesa "$TESA"
