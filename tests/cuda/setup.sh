#!/usr/bin/env bash
# Installs NVRTC and ptxas (PyPI wheels, pinned to 13.0.88 so that the PTX matches the GPU
# machine's CUDA 13.0 driver) under <repo>/.cuda. The kernel tests load
# .cuda/nvidia/cu13/lib/libnvrtc.so.13 and run .cuda/nvidia/cu13/bin/ptxas; no GPU needed.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$repo/.cuda"
VERSION=13.0.88
if [ -f "$dir/.complete-$VERSION" ] && [ -x "$dir/nvidia/cu13/bin/ptxas" ]; then
  echo "NVRTC/ptxas $VERSION already in $dir"
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check --target "$dir" --upgrade \
  "nvidia-cuda-nvrtc==$VERSION" "nvidia-cuda-nvcc==$VERSION" "nvidia-nvvm==$VERSION" \
  "nvidia-cuda-crt==$VERSION" "nvidia-cuda-runtime==$VERSION"
test -f "$dir/nvidia/cu13/lib/libnvrtc.so.13" || { echo "error: the wheels did not provide libnvrtc.so.13" >&2; exit 1; }
test -x "$dir/nvidia/cu13/bin/ptxas" || { echo "error: the wheels did not provide ptxas" >&2; exit 1; }
touch "$dir/.complete-$VERSION"
echo "installed NVRTC/ptxas $VERSION in $dir"
