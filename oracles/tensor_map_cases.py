"""Parameter sets for the cuTensorMapEncodeTiled oracle sweep, written as JSONL in the
`cutegen check tensor-map` input format.

Usage: python oracles/tensor_map_cases.py OUT.jsonl[.gz]

The sets are built to sit on and next to every boundary the documents state (and a few they
do not): each family below fixes a legal base map and moves one or more fields onto a
boundary. Deterministic: a fixed seed, no dict/set iteration order, no time. Self-contained
(no cutegen import) so that the sweep does not depend on the rules it is meant to test.
"""
from __future__ import annotations

import gzip
import json
import random
import sys

SEED = 20261122

DATA_TYPES = (
    "UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT64",
    "BFLOAT16", "FLOAT32_FTZ", "TFLOAT32", "TFLOAT32_FTZ", "16U4_ALIGN8B", "16U4_ALIGN16B",
    "16U6_ALIGN16B",
)
INTERLEAVES = ("NONE", "16B", "32B")
SWIZZLES = ("NONE", "32B", "64B", "128B", "128B_ATOM_32B", "128B_ATOM_32B_FLIP_8B", "128B_ATOM_64B")
L2_PROMOTIONS = ("NONE", "L2_64B", "L2_128B", "L2_256B")
OOB_FILLS = ("NONE", "NAN_REQUEST_ZERO_FMA")

# Bytes per element; the packed types are given the bytes one element occupies in their
# aligned container (16 x U4 in 8 B: 0.5; in 16 B: 1; 16 x U6 in 16 B: 1).
ESIZE = (1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 0.5, 1, 1)
SWIZZLE_SPAN = {0: None, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def enum_value(prefix: str, names: tuple[str, ...], value: int, rng: random.Random):
    """The driver's spelling for in-range values (sometimes the plain integer, which the CLI
    also accepts), the integer for values outside the enum."""
    if 0 <= value < len(names) and rng.random() < 0.85:
        return f"CU_TENSOR_MAP_{prefix}_{names[value]}"
    return value


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


class Case:
    """A mutable parameter set in driver terms (integers); `emit` spells it for the CLI."""

    def __init__(self, dt, rank, addr, gdim, gstr, box, estr, il, sw, l2, oob):
        self.dt, self.rank, self.addr = dt, rank, addr
        self.gdim, self.gstr, self.box, self.estr = list(gdim), list(gstr), list(box), list(estr)
        self.il, self.sw, self.l2, self.oob = il, sw, l2, oob

    def copy(self) -> "Case":
        return Case(self.dt, self.rank, self.addr, self.gdim, self.gstr, self.box, self.estr,
                    self.il, self.sw, self.l2, self.oob)

    def emit(self, rng: random.Random) -> dict:
        return {
            "data_type": enum_value("DATA_TYPE", DATA_TYPES, self.dt, rng),
            "rank": self.rank,
            "global_address": self.addr,
            "global_dim": self.gdim,
            "global_strides": self.gstr,
            "box_dim": self.box,
            "element_strides": self.estr,
            "interleave": enum_value("INTERLEAVE", INTERLEAVES, self.il, rng),
            "swizzle": enum_value("SWIZZLE", SWIZZLES, self.sw, rng),
            "l2_promotion": enum_value("L2_PROMOTION", L2_PROMOTIONS, self.l2, rng),
            "oob_fill": enum_value("FLOAT_OOB_FILL", OOB_FILLS, self.oob, rng),
        }


def esize_of(dt: int) -> float:
    return ESIZE[dt] if 0 <= dt < len(ESIZE) else 1


def packed(dt: int) -> bool:
    return dt in (13, 14, 15)


def align_of(dt: int, il: int) -> int:
    return 32 if (il == 2 or dt in (14, 15)) else 16


def dense_strides(dt: int, gdim: list[int], il: int) -> list[int]:
    """Row-major padded strides: each stride is the previous extent rounded up to the
    alignment the driver documents (16 B, 32 B for INTERLEAVE_32B and the 16-B packed types)."""
    a = align_of(dt, il)
    out = []
    prev = ceil_to(max(1, int(gdim[0] * esize_of(dt))) if gdim else 1, a)
    for i in range(1, len(gdim)):
        out.append(prev)
        prev = ceil_to(prev * gdim[i], a)
    return out


def legal_inner_box(dt: int, il: int, sw: int, rng: random.Random) -> int:
    """A boxDim[0] the documents call legal for this dtype / interleave / swizzle."""
    es = esize_of(dt)
    if packed(dt):
        return 128
    if il != 0:
        # Interleaved: dim 0 is the channel group of 16 or 32 bytes.
        return max(1, int((16 if il == 1 else 32) // es))
    span = SWIZZLE_SPAN.get(sw) or 256 * es
    lo = max(1, int(16 // es))
    hi = min(256, int(span // es))
    choices = [b for b in range(lo, hi + 1, lo)]
    return rng.choice(choices)


def legal_base(rng: random.Random, dt: int | None = None, rank: int | None = None,
               il: int | None = None, sw: int | None = None) -> Case:
    if dt is None:
        dt = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
    if il is None:
        il = 0 if rng.random() < 0.7 else rng.choice((1, 2))
    if rank is None:
        rank = rng.randint(3 if il else 1, 5)
    if sw is None:
        sw = 1 if il == 2 else rng.choice((0, 1, 2, 3))
    box0 = legal_inner_box(dt, il, sw, rng)
    box = [box0] + [rng.choice((1, 2, 4, 8, 16, 32, 64, 128, 256, rng.randint(1, 256)))
                    for _ in range(max(0, rank - 1))]
    # Keep the box modest so that the base is not near the large-box limit.
    while rank > 1 and prod_bytes(dt, box) > 32768:
        i = rng.randrange(1, rank)
        box[i] = max(1, box[i] // 2)
    gdim = []
    for i in range(rank):
        if i == 0 and il != 0:
            gdim.append(box0)
        elif i == 0 and packed(dt):
            gdim.append(128 * rng.randint(1, 64))
        else:
            gdim.append(rng.choice((box[i], box[i] * 3, 64, 1000, 4096, rng.randint(1, 70000))))
    while prod_bytes(dt, gdim) > 2**38:
        i = rng.randrange(0, rank)
        if not (i == 0 and (il or packed(dt))):
            gdim[i] = max(1, gdim[i] // 4)
    gstr = dense_strides(dt, gdim, il)
    estr = [1] * rank
    if rng.random() < 0.3:
        for i in range(1, rank):
            estr[i] = rng.randint(1, 8)
    addr = rng.choice((0x7F0000000000, 0x7F0000000000 + 256, 0x7F0000001000 + 32 * rng.randint(1, 1000)))
    l2 = rng.choice((0, 1, 2, 3))
    oob = 1 if (dt in (6, 7, 8, 9, 10, 11, 12) and rng.random() < 0.3) else 0
    return Case(dt, rank, addr, gdim, gstr, box, estr, il, sw, l2, oob)


def prod_bytes(dt: int, dims) -> float:
    p = esize_of(dt)
    for d in dims:
        p *= d
    return p


# ----------------------------------------------------------------------------- families

def fam_grid(rng):
    """Every dtype (and a few values past the enum) x rank 0..6 x interleave 0..3 x swizzle 0..8."""
    for dt in list(range(16)) + [16, 255]:
        for rank in range(0, 7):
            for il in range(0, 4):
                for sw in range(0, 9):
                    base_rank = min(max(rank, 1), 5)
                    c = legal_base(rng, dt=dt if dt < 16 else 0, rank=max(base_rank, 3 if il in (1, 2) else 1),
                                   il=il if il < 3 else 0, sw=sw if sw < 7 else 0)
                    c.dt, c.il, c.sw = dt, il, sw
                    set_rank(c, rank, rng)
                    yield c


def set_rank(c: Case, rank: int, rng) -> None:
    """Resize the arrays to `rank` (the CLI requires len(global_dim) == rank, ...)."""
    while c.rank < rank:
        c.gdim.append(rng.choice((1, 2, 7, 64)))
        c.box.append(rng.choice((1, 2)))
        c.estr.append(1)
        c.rank += 1
    if rank < c.rank:
        c.gdim, c.box, c.estr = c.gdim[:rank], c.box[:rank], c.estr[:rank]
        c.rank = rank
    c.gstr = dense_strides(c.dt, c.gdim, c.il if c.il in (0, 1, 2) else 0) if rank >= 1 else []
    c.gstr = c.gstr[: max(rank - 1, 0)]


DIM_VALUES = (0, 1, 2, 3, 15, 16, 17, 255, 256, 257, 65535, 65536, 2**31, 2**32 - 1, 2**32, 2**32 + 1,
              2**32 + 8, 2**33, 2**40, 2**63, U64_MAX)
STRIDE_DELTAS = (-32, -16, -8, -1, 0, 1, 8, 16, 24, 32)
STRIDE_VALUES = (0, 8, 16, 24, 32, 48, 64, 2**32, 2**40 - 32, 2**40 - 16, 2**40 - 8, 2**40, 2**40 + 16,
                 2**41, 2**63, U64_MAX)
BOX_VALUES = (0, 1, 2, 3, 8, 15, 16, 17, 32, 64, 128, 255, 256, 257, 264, 512, 2**16, U32_MAX)
ESTR_VALUES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, U32_MAX)
ADDR_VALUES = (0, 1, 8, 16, 24, 32, 48, 64, 96, 128, 0x7F0000000010, 0x7F0000000020, 0x7F0000000008,
               2**63, 2**64 - 16, 2**64 - 32, U64_MAX)


def fam_single_field(rng):
    """One field of a legal base moved onto each boundary value, for 48 bases."""
    for _ in range(48):
        base = legal_base(rng)
        yield base.copy()
        for i in range(base.rank):
            for v in DIM_VALUES:
                c = base.copy()
                c.gdim[i] = v
                yield c
            for v in BOX_VALUES:
                c = base.copy()
                c.box[i] = v
                yield c
            for v in ESTR_VALUES:
                c = base.copy()
                c.estr[i] = v
                yield c
        for i in range(base.rank - 1):
            for d in STRIDE_DELTAS:
                c = base.copy()
                c.gstr[i] = max(0, c.gstr[i] + d)
                yield c
            for v in STRIDE_VALUES:
                c = base.copy()
                c.gstr[i] = v
                yield c
        for v in ADDR_VALUES:
            c = base.copy()
            c.addr = v
            yield c
        for v in range(0, 18):
            c = base.copy()
            c.dt = v
            yield c
        for v in range(0, 9):
            c = base.copy()
            c.sw = v
            yield c
        for v in range(0, 4):
            c = base.copy()
            c.il = v
            yield c
        for v in range(0, 6):
            c = base.copy()
            c.l2 = v
            yield c
        for v in range(0, 3):
            c = base.copy()
            c.oob = v
            yield c


def fam_inner_box(rng):
    """boxDim[0] so that its bytes sit around 16 B and around each swizzle span."""
    for dt in range(16):
        es = esize_of(dt)
        for il in (0, 1, 2):
            for sw in range(0, 8):
                targets = sorted({8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 256, 512})
                boxes = sorted({max(0, int(t // es)) for t in targets} | {0, 1, 255, 256, 257}
                               | {max(0, int(t // es)) + 1 for t in (16, 32, 64, 128)})
                for b0 in boxes:
                    c = legal_base(rng, dt=dt if dt < 13 else 0, il=il, sw=sw if sw < 7 else 0)
                    c.dt, c.sw = dt, sw
                    c.box[0] = b0
                    if rng.random() < 0.5:
                        c.gdim[0] = max(c.gdim[0], b0, 1)
                        c.gstr = dense_strides(dt, c.gdim, il)
                    yield c


def fam_element_strides(rng):
    """Element strides 0..9 in every position, every rank, every interleave."""
    for rank in range(1, 6):
        for il in (0, 1, 2):
            if il and rank < 3:
                continue
            for pos in range(rank):
                for v in range(0, 10):
                    for rep in range(2):
                        c = legal_base(rng, rank=rank, il=il)
                        if rep:
                            c.estr = [rng.randint(1, 8) for _ in range(rank)]
                        c.estr[pos] = v
                        yield c


def fam_dims(rng):
    """Global dims 0/1/2^32/2^32+1 and friends in every position, with strides that follow."""
    for rank in range(1, 6):
        for pos in range(rank):
            for v in DIM_VALUES:
                for dt in (0, 9, 8):
                    c = legal_base(rng, dt=dt, rank=rank, il=0)
                    c.gdim[pos] = v
                    if rng.random() < 0.5 and v < 2**40:
                        c.gstr = [min(s, U64_MAX) for s in dense_strides(dt, c.gdim, 0)]
                    yield c


def fam_strides(rng):
    """Strides around %16, %32, 2^40, and smaller than the row they step over (A10)."""
    for rep in range(160):
        il = (0, 0, 1, 2)[rep % 4]
        dt = (0, 1, 2, 4, 6, 9, 14, 15)[rep % 8] if rep % 5 else rng.randint(0, 12)
        c = legal_base(rng, dt=dt if dt < 13 else 0, il=il, rank=rng.randint(2 if not il else 3, 5))
        c.dt = dt
        if packed(dt):
            c.gdim[0] = 128 * rng.randint(1, 8)
            c.box[0] = 128
            c.gstr = dense_strides(dt, c.gdim, il)
        i = rng.randrange(0, c.rank - 1)
        row = c.gstr[i]
        for v in (row - 32, row - 16, row - 8, row + 8, row + 16, row + 24, row + 32, row // 2, 16, 32,
                  ceil_to(row // 2 + 1, 16), 2**40 - 16, 2**40 - 32, 2**40, 2**40 + 16, 2**40 - 48):
            d = c.copy()
            d.gstr[i] = max(0, v)
            yield d
        # Every stride below the one before times the extent (overlapping rows).
        d = c.copy()
        d.gstr = [16 * (k + 1) for k in range(c.rank - 1)]
        yield d


def fam_addresses(rng):
    for il in (0, 1, 2):
        for dt in list(range(16)):
            for a in (0, 8, 16, 24, 32, 48, 64, 0x7F0000000010, 0x7F0000000020, 2**64 - 16, 2**64 - 32):
                c = legal_base(rng, dt=dt if dt < 13 else 0, il=il)
                c.dt = dt
                if packed(dt):
                    c.gdim[0], c.box[0] = 128 * rng.randint(1, 4), 128
                    c.gstr = dense_strides(dt, c.gdim, il)
                c.addr = a
                yield c


def fam_l2_oob(rng):
    for dt in list(range(16)) + [16]:
        for l2 in range(0, 6):
            for oob in range(0, 3):
                for rep in range(2):
                    c = legal_base(rng, dt=dt if dt < 13 else 0)
                    c.dt, c.l2, c.oob = dt, l2, oob
                    if packed(dt):
                        c.gdim[0], c.box[0] = 128 * rng.randint(1, 4), 128
                        c.gstr = dense_strides(dt, c.gdim, c.il)
                    yield c


def fam_packed(rng):
    """The packed types with every documented requirement met, and each one broken alone."""
    for dt in (13, 14, 15):
        for rep in range(60):
            il = rng.choice((0, 0, 1, 2))
            sw = rng.choice((0, 1, 2, 3, 4, 5, 6))
            c = legal_base(rng, dt=0, il=il, rank=rng.randint(3 if il else 1, 5), sw=sw if il == 0 else 1)
            c.dt, c.sw = dt, sw
            c.gdim[0] = 128 * rng.randint(1, 16)
            c.box[0] = 128
            c.gstr = dense_strides(dt, c.gdim, il)
            c.addr = 0x7F0000000000 + 1024 * rng.randint(0, 100)
            yield c
            d = c.copy()
            d.gdim[0] += 2
            yield d
            d = c.copy()
            d.box[0] = 64
            yield d


def fam_large_box(rng):
    """Boxes holding 64 KiB .. 2 MiB, to pin the undocumented large-box limit: total box bytes
    against bytes actually traversed (ceil(box/estride)), per rank, interleaved or not, by dtype."""
    anchors = (65536, 131072, 196608, 229376, 232448, 233472, 245760, 253952, 258048, 260096, 261120,
               262144, 262160, 263168, 266240, 270336, 278528, 294912, 327680, 393216, 524288, 1048576,
               2097152)
    n = 0
    while n < 6000:
        dt = rng.choice((0, 1, 2, 4, 6, 7, 8, 9, 11))
        es = esize_of(dt)
        il = rng.choice((0, 0, 0, 1, 2))
        rank = rng.randint(3 if il else 2, 5)
        sw = 1 if il == 2 and rng.random() < 0.7 else rng.choice((0, 0, 1, 2, 3))
        c = legal_base(rng, dt=dt, rank=rank, il=il, sw=sw)
        mode = rng.random()
        if mode < 0.35:
            target = rng.choice(anchors)
        else:
            target = int(65536 * 2 ** (rng.random() * 5))  # log-uniform 64 KiB .. 2 MiB
        # Inner box: legal for the swizzle; outer dims shaped so that the product hits the target.
        box0 = c.box[0]
        if il == 0 and sw == 0 and rng.random() < 0.6:
            box0 = int(16 // es) * rng.randint(1, max(1, int(256 // int(16 // es))))
            box0 = min(box0, 256)
        box = [box0] + [1] * (rank - 1)
        rest = target / (box0 * es)
        for i in range(1, rank):
            remaining_dims = rank - i
            want = rest ** (1.0 / remaining_dims)
            b = int(min(256, max(1, round(want * rng.uniform(0.8, 1.25)))))
            if i == rank - 1:
                b = int(min(256, max(1, round(rest))))
            box[i] = b
            rest = rest / b
        estr_mode = rng.random()
        estr = [1] * rank
        if estr_mode < 0.35:
            pass
        elif estr_mode < 0.75:
            for i in range(1, rank):
                estr[i] = rng.randint(1, 8)
        else:
            for i in range(0, rank):
                estr[i] = rng.randint(1, 8)
        c.box, c.estr = box, estr
        c.gdim = [max(c.gdim[i], box[i]) if rng.random() < 0.7 else c.gdim[i] for i in range(rank)]
        if il:
            c.gdim[0] = max(c.gdim[0], box0)
        c.gstr = dense_strides(dt, c.gdim, il)
        if any(s >= 2**40 for s in c.gstr):
            continue
        n += 1
        yield c


def fam_fuzz(rng):
    """Several fields on boundaries at once."""
    for _ in range(3000):
        c = legal_base(rng)
        for _ in range(rng.randint(2, 4)):
            what = rng.randrange(8)
            if what == 0:
                c.box[rng.randrange(c.rank)] = rng.choice(BOX_VALUES)
            elif what == 1:
                c.estr[rng.randrange(c.rank)] = rng.choice(ESTR_VALUES[:10])
            elif what == 2 and c.rank > 1:
                i = rng.randrange(c.rank - 1)
                c.gstr[i] = max(0, c.gstr[i] + rng.choice(STRIDE_DELTAS))
            elif what == 3:
                c.gdim[rng.randrange(c.rank)] = rng.choice(DIM_VALUES[:16])
            elif what == 4:
                c.sw = rng.randint(0, 7)
            elif what == 5:
                c.il = rng.randint(0, 3)
            elif what == 6:
                c.addr = rng.choice(ADDR_VALUES[:10])
            else:
                c.oob = rng.randint(0, 1)
                c.dt = rng.randint(0, 15)
        yield c


FAMILIES = (fam_grid, fam_single_field, fam_inner_box, fam_element_strides, fam_dims, fam_strides,
            fam_addresses, fam_l2_oob, fam_packed, fam_large_box, fam_fuzz)


def generate() -> list[dict]:
    rng = random.Random(SEED)
    seen: set[str] = set()
    out: list[dict] = []
    for fam in FAMILIES:
        for c in fam(rng):
            d = c.emit(rng)
            key = json.dumps(d, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            out.append(d)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python oracles/tensor_map_cases.py OUT.jsonl", file=sys.stderr)
        return 2
    cases = generate()
    data = "".join(json.dumps(d) + "\n" for d in cases).encode()
    if argv[1].endswith(".gz"):
        # mtime=0 and no file name: the same cases give the same bytes.
        with open(argv[1], "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)
    else:
        with open(argv[1], "wb") as f:
            f.write(data)
    print(f"wrote {len(cases)} cases to {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
