#!/usr/bin/env python3
"""The loops of a kernel's machine code: for every backward branch in a `cuobjdump -sass`
listing, the loop's address range, its instruction count and its most frequent opcodes.
Used to count the instructions of a kernel's inner loop (run 13: the fine kernel's entry loop).

usage: sass_loops.py LISTING.sass [--min N]   (loops of at least N instructions; default 8)

Get the listing without a GPU:
  cargo run --release -p spartac-runtime --example kernel_ptx -- 1024 f32 "unstructured@0.95 fine" /tmp/k
  .cuda/nvidia/cu13/bin/ptxas -arch=sm_90a -O3 /tmp/k/X.ptx -o /tmp/k/X.cubin
  cuobjdump -sass /tmp/k/X.cubin > X.sass      (PyPI: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)
"""
import collections
import re
import sys

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def instructions(path):
    out = []
    for line in open(path):
        m = INSN.search(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text):
    words = text.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    min_len = int(sys.argv[sys.argv.index("--min") + 1]) if "--min" in sys.argv else 8
    insns = instructions(sys.argv[1])
    if not insns:
        sys.exit(f"{sys.argv[1]}: no SASS instructions found")
    for addr, text in insns:
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        target = int(m.group(1), 16)
        body = [t for a, t in insns if target <= a <= addr]
        if len(body) < min_len:
            continue
        ops = collections.Counter(opcode(t) for t in body).most_common(8)
        print(f"{target:#07x}-{addr:#07x} {len(body):4d} instructions: " + ", ".join(f"{o} {n}" for o, n in ops))


if __name__ == "__main__":
    main()
