#!/usr/bin/env bash
# Builds the Python package's wheel (maturin, pinned) and runs its pytest suite on the CPU.
# Build tools go under <repo>/.cache/py-build, the installed package under .cache/py-spartac.
# Run by tests/run-all.sh after `cargo test` (the bit-for-bit test runs the binary it built).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
tools=.cache/py-build
if [ ! -f "$tools/.complete-1" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$tools" --upgrade \
    "maturin==1.9.6" "pytest==8.4.2" "numpy==2.2.6"
  touch "$tools/.complete-1"
fi
rm -rf .cache/wheels .cache/py-spartac
PYTHONPATH="$tools" "$tools/bin/maturin" build --release --locked -m python/Cargo.toml -o .cache/wheels
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target .cache/py-spartac .cache/wheels/spartac-*.whl
PYTHONPATH=".cache/py-spartac:$tools" python3 -m pytest -q -p no:cacheprovider python/tests
