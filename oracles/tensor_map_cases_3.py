"""Third tensor-map sweep (small): the exact byte threshold of the box limit.

Usage: python oracles/tensor_map_cases_3.py OUT.jsonl[.gz]

Sweeps 1 and 2 put the largest accepted box count (esize * prod(floor(box/estride))) at
233,472 B and the smallest rejected at 233,520 B. Only a few counts in between can be formed
from box dims <= 256 and element strides <= 8: 233,478, 233,479, 233,490, 233,495, 233,496,
233,508, 233,512, 233,519. This sweep asks for each of them (every way it finds, each dtype
size that divides it, each interleave), with 233,472 and 233,520 as controls.
"""
from __future__ import annotations

import gzip
import json
import sys

LIMIT = 233472
ESIZE_TYPES = {1: "UINT8", 2: "BFLOAT16", 4: "FLOAT32", 8: "FLOAT64"}
IL_NAMES = ("NONE", "16B", "32B")


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def factorizations(n: int, k: int, lo: int = 1) -> list[list[int]]:
    """n as a product of at most k factors in lo..256, factors non-increasing; a few of them."""
    if n == 1:
        return [[]]
    if k == 0:
        return []
    out = []
    for f in range(min(256, n), max(lo, 2) - 1, -1):
        if n % f == 0:
            for rest in factorizations(n // f, k - 1, 2):
                if not rest or rest[0] <= f:
                    out.append([f] + rest)
                    if len(out) >= 4:
                        return out
    return out


def inner_options(esize: int) -> dict[int, tuple[int, int]]:
    """floor(box0/e0) -> (box0, e0) with box0*esize a multiple of 16 and box0 <= 256."""
    opts: dict[int, tuple[int, int]] = {}
    for box0 in range(1, 257):
        if (box0 * esize) % 16:
            continue
        for e0 in range(1, 9):
            opts.setdefault(box0 // e0, (box0, e0))
    opts.pop(0, None)
    return opts


def case(esize, box, estr, il):
    gdim = list(box)
    a = 32 if il == 2 else 16
    strides, prev = [], ceil_to(gdim[0] * esize, a)
    for d in gdim[1:]:
        strides.append(prev)
        prev = ceil_to(prev * d, a)
    return {
        "data_type": f"CU_TENSOR_MAP_DATA_TYPE_{ESIZE_TYPES[esize]}",
        "rank": len(box),
        "global_address": 0x7F0000000000,
        "global_dim": gdim,
        "global_strides": strides,
        "box_dim": box,
        "element_strides": estr,
        "interleave": f"CU_TENSOR_MAP_INTERLEAVE_{IL_NAMES[il]}",
        "swizzle": "CU_TENSOR_MAP_SWIZZLE_NONE",
        "l2_promotion": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
        "oob_fill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
    }


def generate() -> list[dict]:
    out, seen = [], set()
    values = [LIMIT, LIMIT + 6, LIMIT + 7, LIMIT + 18, LIMIT + 23, LIMIT + 24, LIMIT + 36, LIMIT + 40,
              LIMIT + 47, LIMIT + 48, LIMIT + 64]
    for v in values:
        for esize in (1, 2, 4, 8):
            if v % esize:
                continue
            n = v // esize
            opts = inner_options(esize)
            for f0, (box0, e0) in sorted(opts.items()):
                if n % f0:
                    continue
                for outer in factorizations(n // f0, 4):
                    if not outer:
                        continue
                    for il in (0, 1, 2):
                        rank = 1 + len(outer)
                        if il and rank < 3:
                            outer = outer + [1] * (2 - len(outer))
                        box = [box0] + outer
                        d = case(esize, box, [e0] + [1] * (len(box) - 1), il)
                        k = json.dumps(d, sort_keys=True)
                        if k not in seen:
                            seen.add(k)
                            out.append(d)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python oracles/tensor_map_cases_3.py OUT.jsonl[.gz]", file=sys.stderr)
        return 2
    data = "".join(json.dumps(d) + "\n" for d in generate()).encode()
    if argv[1].endswith(".gz"):
        with open(argv[1], "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)
    else:
        with open(argv[1], "wb") as f:
            f.write(data)
    n = data.count(b"\n")
    print(f"wrote {n} cases to {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
