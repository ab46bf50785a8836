"""Second, focused tensor-map sweep: pins the two limits the first sweep found but could not
place exactly. Writes JSONL in the `cutegen check tensor-map` input format.

Usage: python oracles/tensor_map_cases_2.py OUT.jsonl[.gz]

1. The shared-memory size of a box. Sweep 1: every accepted box had at most 233,472 bytes
   (228 KiB) of elements traversed, every rejected one at least 233,536; and two interleaved
   boxes of 258,048 and 1,048,576 traversed bytes were accepted, both with a dimension where
   box_dim < element_strides, which a floor(box/estride) count makes 0. Here: traversed bytes at
   233,472 + delta for small deltas (both counts), boxes where floor and ceil fall on opposite
   sides of the limit with a non-zero floor, boxes with a zero floor factor, every interleave,
   swizzle, rank and dtype size, element strides in dim 0 and outside.
2. The largest global address. Sweep 1: 0x7F0000008D00 accepted, 2^63 rejected. Here: 2^k - 32,
   2^k - 16, 2^k, 2^k + 16 for k = 40..63, canonical-high addresses, and the same addresses
   with a tiny and a huge tensor (is it the base or the end that is bounded?).
"""
from __future__ import annotations

import gzip
import json
import math
import random
import sys

SEED = 20261123
ESIZE = {0: 1, 1: 2, 2: 4, 4: 8, 6: 2, 7: 4, 8: 8, 9: 2, 11: 4}
NAMES = {0: "UINT8", 1: "UINT16", 2: "UINT32", 4: "UINT64", 6: "FLOAT16", 7: "FLOAT32", 8: "FLOAT64",
         9: "BFLOAT16", 11: "TFLOAT32"}
IL_NAMES = ("NONE", "16B", "32B")
SW_NAMES = ("NONE", "32B", "64B", "128B")
LIMIT = 233472


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def strides_for(esize: int, gdim: list[int], il: int) -> list[int]:
    a = 32 if il == 2 else 16
    out, prev = [], ceil_to(gdim[0] * esize, a)
    for d in gdim[1:]:
        out.append(prev)
        prev = ceil_to(prev * d, a)
    return out


def case(dt, box, estr, il=0, sw=0, addr=0x7F0000000000, gdim=None, gstr=None, l2=2) -> dict:
    es = ESIZE[dt]
    gdim = gdim or [max(b, 1) for b in box]
    return {
        "data_type": f"CU_TENSOR_MAP_DATA_TYPE_{NAMES[dt]}",
        "rank": len(box),
        "global_address": addr,
        "global_dim": gdim,
        "global_strides": strides_for(es, gdim, il) if gstr is None else gstr,
        "box_dim": box,
        "element_strides": estr,
        "interleave": f"CU_TENSOR_MAP_INTERLEAVE_{IL_NAMES[il]}",
        "swizzle": f"CU_TENSOR_MAP_SWIZZLE_{SW_NAMES[sw]}",
        "l2_promotion": l2,
        "oob_fill": 0,
    }


def traversed(box, estr, rounding) -> int:
    return math.prod(rounding(b, e) for b, e in zip(box, estr))


CEIL = lambda b, e: -(-b // e)  # noqa: E731
FLOOR = lambda b, e: b // e  # noqa: E731


def inner_boxes(dt: int, il: int, sw: int) -> list[int]:
    """box_dim[0] values legal by the documents: 16-B multiples within the swizzle span."""
    es = ESIZE[dt]
    step = max(1, 16 // es)
    span = {0: 256 * es, 1: 32, 2: 64, 3: 128}[sw] if il == 0 else 256 * es
    return [b for b in range(step, min(256, span // es) + 1, step)]


def fam_box_limit(rng: random.Random):
    """Boxes whose traversed bytes (floor or ceil count) sit at LIMIT + delta."""
    deltas = (-64, -48, -32, -16, -8, -4, -2, -1, 0, 1, 2, 4, 8, 16, 32, 48, 63, 64, 128)
    tries = 0
    out = 0
    want = {d: 0 for d in deltas}
    while out < 4000 and tries < 4_000_000:
        tries += 1
        dt = rng.choice(tuple(ESIZE))
        es = ESIZE[dt]
        il = rng.choice((0, 0, 1, 2))
        sw = rng.choice((0, 1, 2, 3))
        rank = rng.randint(3 if il else 2, 5)
        box0 = rng.choice(inner_boxes(dt, il, sw))
        estr = [1] * rank
        if rng.random() < 0.5:
            estr = [rng.randint(1, 8) for _ in range(rank)]
        if il == 0 and rng.random() < 0.3:
            estr[0] = 1
        rounding = rng.choice((CEIL, FLOOR))
        # Choose outer dims to land the product on LIMIT + delta.
        d = rng.choice(deltas)
        target = LIMIT + d
        if target % es:
            continue
        need = target // es
        inner = rounding(box0, estr[0])
        if inner == 0 or need % inner:
            continue
        need //= inner
        box = [box0]
        ok = True
        for i in range(1, rank):
            if i == rank - 1:
                n = need
            else:
                divs = [k for k in range(1, 257) if need % k == 0 and need // k <= 256 ** (rank - 1 - i)]
                if not divs:
                    ok = False
                    break
                n = rng.choice(divs)
            # A box b with rounding(b, estr) == n.
            cands = [b for b in range(1, 257) if rounding(b, estr[i]) == n]
            if not cands:
                ok = False
                break
            box.append(rng.choice(cands))
            need //= n
        if not ok or len(box) != rank or traversed(box, estr, rounding) * es != target:
            continue
        if want[d] > 4000 // len(deltas) + 20:
            continue
        want[d] += 1
        out += 1
        yield case(dt, box, estr, il, sw if il == 0 else rng.choice((0, 1, 2, 3)))


def fam_floor_vs_ceil(rng: random.Random):
    """floor count <= LIMIT < ceil count, with every floor factor non-zero; and boxes with a
    zero floor factor (box_dim < element_strides) whose ceil count is far above LIMIT."""
    n = 0
    tries = 0
    while n < 1500 and tries < 2_000_000:
        tries += 1
        dt = rng.choice(tuple(ESIZE))
        es = ESIZE[dt]
        il = rng.choice((0, 1, 2))
        rank = rng.randint(3, 5)
        sw = rng.choice((0, 1, 2, 3))
        box0 = rng.choice(inner_boxes(dt, il, sw))
        estr = [rng.randint(1, 8) for _ in range(rank)]
        box = [box0] + [rng.randint(1, 256) for _ in range(rank - 1)]
        f = traversed(box, estr, FLOOR) * es
        c = traversed(box, estr, CEIL) * es
        if 0 < f <= LIMIT < c:
            n += 1
            yield case(dt, box, estr, il, sw if il == 0 else rng.choice((0, 1, 2, 3)))
    n = 0
    while n < 600:
        dt = rng.choice(tuple(ESIZE))
        es = ESIZE[dt]
        il = rng.choice((0, 1, 2))
        rank = rng.randint(3, 5)
        box0 = rng.choice(inner_boxes(dt, il, 0))
        estr = [1] * rank
        box = [box0] + [256] * (rank - 1)
        k = rng.randrange(0 if il else 1, rank)
        estr[k] = rng.randint(2, 8)
        box[k] = rng.randint(1, estr[k] - 1)
        if k == 0 and il == 0:
            continue
        if k == 0 and (box[0] * es) % 16:
            continue
        n += 1
        yield case(dt, box, estr, il, 0)
    # The inner dimension alone: floor and ceil differ in dim 0 only (interleave NONE).
    for dt in ESIZE:
        es = ESIZE[dt]
        for b0 in inner_boxes(dt, 0, 0):
            for e0 in range(2, 9):
                lo, hi = b0 // e0, -(-b0 // e0)
                if lo == hi or lo == 0:
                    continue
                found = None
                for a in range(256, 0, -1):
                    b = min(256, LIMIT // (lo * es * a))
                    if b >= 1 and lo * a * b * es <= LIMIT < hi * a * b * es:
                        found = (a, b)
                        break
                if found:
                    yield case(dt, [b0, found[0], found[1]], [e0, 1, 1], 0, 0)


def fam_addresses(rng: random.Random):
    bases = []
    for k in range(40, 65):
        for off in (-32, -16, 0, 16, 32):
            a = 2**k + off
            if 0 <= a < 2**64 and a % 16 == 0:
                bases.append(a)
    for a in (0xFFFF800000000000, 0xFFFF800000000010, 0xFFFFFFFF00000000, 0x00007FFFFFFFFFF0,
              0x0000800000000000, 0x0001000000000000, 0x00FFFFFFFFFFFFF0, 0x0100000000000000,
              0x7FFFFFFFFFFFFFF0, 0x0000FFFFFFFFFFF0, 0x01FFFFFFFFFFFFF0, 0x0200000000000000):
        bases.append(a)
    for a in sorted(set(bases)):
        for il in (0, 2):
            a2 = a - (a % 32) if il == 2 else a
            # A 16-B tensor and a tensor spanning almost 2^48 bytes.
            yield case(0, [16, 1, 1] if il else [16, 1], [1, 1, 1] if il else [1, 1], il, 0, a2,
                       gdim=[16, 1, 1] if il else [16, 1])
            yield case(0, [16, 16, 16] if il else [16, 16], [1, 1, 1] if il else [1, 1], il, 0, a2,
                       gdim=[16, 2**20, 2**20] if il else [16, 2**32],
                       gstr=[32, 2**25] if il else [2**10])
        for dt in (9, 7):
            yield case(dt, [64 // ESIZE[dt], 8], [1, 1], 0, 3, a, gdim=[4096, 4096])


def generate() -> list[dict]:
    rng = random.Random(SEED)
    out, seen = [], set()
    for fam in (fam_box_limit, fam_floor_vs_ceil, fam_addresses):
        for d in fam(rng):
            k = json.dumps(d, sort_keys=True)
            if k not in seen:
                seen.add(k)
                out.append(d)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python oracles/tensor_map_cases_2.py OUT.jsonl[.gz]", file=sys.stderr)
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
