#!/usr/bin/env python3
"""Inputs for the HPEC peers (SNICIT, SNIG) from what `spartac hpec generate` writes.

The peers hard-code 60,000 input images. spartac's GPU runs use the 1,200 real challenge images
repeated in order up to 60,000 (`spartac hpec run --repeat-images --image-count 60000`: image i is
image i mod 1200), so the peers get the same: this script tiles an image TSV and the matching truth.

  hpec_inputs.py images --src sparse-images-1024.tsv --count 60000 --out OUT.tsv
  hpec_inputs.py truth  --src neuron1024-l120-categories.tsv --base 1200 --count 60000 --out OUT.tsv

Images: `image<TAB>pixel<TAB>value` lines, 1-based (the challenge format; SNICIT reads them with
`>>`, SNIG's converter with getline/stoi). Image j (1-based) of the output is image
((j-1) mod base)+1 of the source, base = the number of images in the source (the largest image id).
With count <= base the first `count` images are kept. Truth: one 1-based image id per line
(ascending), the categories of the tiled set: id t of the source gives t, t+base, t+2*base, ...
"""
import argparse
import sys


def read_images(path):
    """Rows of (image, pixel, value-text) and the largest image id."""
    rows = []
    top = 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3:
                sys.exit(f"{path}:{n}: expected 'image pixel value', got {line!r}")
            image, pixel = int(parts[0]), int(parts[1])
            if image < 1 or pixel < 1:
                sys.exit(f"{path}:{n}: ids are 1-based, got {image} {pixel}")
            rows.append((image, pixel, parts[2]))
            top = max(top, image)
    if not rows:
        sys.exit(f"{path}: no images")
    return rows, top


def tile_images(src, count, out, base=None):
    rows, top = read_images(src)
    base = base or top
    copies = -(-count // base)  # ceil
    by_image = {}
    for image, pixel, value in rows:
        by_image.setdefault(image, []).append(f"{pixel}\t{value}\n")
    written = 0
    with open(out, "w") as f:
        for k in range(copies):
            offset = k * base
            chunk = []
            for image in sorted(by_image):
                j = image + offset
                if j > count:
                    break
                prefix = f"{j}\t"
                chunk.extend(prefix + tail for tail in by_image[image])
            f.writelines(chunk)
            written += len(chunk)
    return base, written


def tile_truth(src, base, count, out):
    ids = []
    with open(src) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            t = int(line.split()[0])
            if not 1 <= t <= base:
                sys.exit(f"{src}:{n}: image {t} outside 1..{base}")
            ids.append(t)
    tiled = sorted(t + k * base for k in range(-(-count // base)) for t in ids if t + k * base <= count)
    with open(out, "w") as f:
        f.writelines(f"{j}\n" for j in tiled)
    return len(ids), len(tiled)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("images", help="tile an image TSV to COUNT images")
    a.add_argument("--src", required=True)
    a.add_argument("--count", type=int, default=60000)
    a.add_argument("--base", type=int, help="images in the source (default: its largest image id)")
    a.add_argument("--out", required=True)
    t = sub.add_parser("truth", help="tile a categories TSV to COUNT images")
    t.add_argument("--src", required=True)
    t.add_argument("--base", type=int, required=True, help="images in the source set")
    t.add_argument("--count", type=int, default=60000)
    t.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.count < 1:
        sys.exit("--count must be at least 1")
    if args.cmd == "images":
        base, lines = tile_images(args.src, args.count, args.out, args.base)
        print(f"images: {args.src} ({base} images) -> {args.out} ({args.count} images, {lines} nonzeros)")
    else:
        n, m = tile_truth(args.src, args.base, args.count, args.out)
        print(f"truth: {args.src} ({n} of {args.base}) -> {args.out} ({m} of {args.count})")


if __name__ == "__main__":
    main()
