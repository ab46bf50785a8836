"""A trivial search space for grouped GEMM: a fixed list of configurations known to compile, ranked by
a roofline over the expected group sizes. It keeps ``cutegen generate --op grouped_gemm`` working until
the grouped e-graph search, rules and cost model (grpsearch) replace ``space``, ``check`` and ``cost``.
"""
from __future__ import annotations

import math

from .config import GroupedGemmConfig
from .problem import GroupedGemmProblem

# H200 by the datasheet: the floor every grouped figure is held against.
HBM_BYTES_PER_S = 4.8e12
PEAK_FLOPS = {"bf16": 989e12, "e4m3": 1979e12}
SMS = 132
# L2 -> shared memory bandwidth per SM (about 16 TB/s over 132 SMs): a narrow tile reloads its operands
# for few FLOPs and is bound by it, not by the tensor cores.
L2_BYTES_PER_S_PER_SM = 16e12 / SMS
LAUNCH_US = 4.0          # the prep kernel and the grouped kernel


def space(p: GroupedGemmProblem):
    """Cooperative 128-row and ping-pong 64-row tiles, unclustered and 2x1; swap-AB with narrow token
    tiles for decode-sized groups."""
    tk = 64 if p.dtype == "bf16" else 128
    for tn in (128, 256):
        for cm in (1, 2):
            yield GroupedGemmConfig(128, tn, tk, cm, 1, "ptr_cooperative")
    for tn in (128, 256):
        yield GroupedGemmConfig(64, tn, tk, 1, 1, "ptr_pingpong")
    for tn in (16, 32, 64):                 # swapped: kernel M runs along N, tokens on tile_n
        yield GroupedGemmConfig(128, tn, tk, 1, 1, "ptr_cooperative", swap_ab=True)
        yield GroupedGemmConfig(64, tn, tk, 1, 1, "ptr_pingpong", swap_ab=True)


def check(p: GroupedGemmProblem, c: GroupedGemmConfig) -> list:
    """No rules of its own: the configs of ``space`` all compile. The renderer's refusals (``RENDER-*``
    IDs, cutegen/ops/grouped_gemm/render.py) are checked by ``render``."""
    return []


def cost(p: GroupedGemmProblem, c: GroupedGemmConfig) -> float:
    """Microseconds: the larger of the HBM time (every used expert's weights, the tokens, the output)
    and the time of the padded tiles in waves over the SMs (each tile the larger of its tensor-core time and
    its operands' L2 traffic), plus a tenth of the smaller."""
    eb = p.element_bytes
    sizes = p.group_sizes
    used = sum(1 for m in sizes if m)
    rows = sum(sizes)
    hbm = (used * p.n * p.k * eb + rows * p.k * eb + rows * p.n * 2) / HBM_BYTES_PER_S
    # token rows run along the kernel's M (unswapped) or N (swapped); N along the other
    tok_tile, n_tile = (c.tile_n, c.tile_m) if c.swap_ab else (c.tile_m, c.tile_n)
    tiles = sum(math.ceil(m / tok_tile) for m in sizes) * math.ceil(p.n / n_tile)
    waves = math.ceil(tiles / SMS) if tiles else 0
    per_tile = max(2 * tok_tile * n_tile * p.k / (PEAK_FLOPS[p.dtype] / SMS),
                   (tok_tile + n_tile) * p.k * eb / L2_BYTES_PER_S_PER_SM)
    mma = waves * per_tile
    # the two overlap imperfectly: a tenth of the smaller shows (it also breaks ties between tiles on a
    # bandwidth-bound problem in favour of the one that wastes fewer tensor-core cycles)
    return LAUNCH_US + 1e6 * (max(hbm, mma) + 0.1 * min(hbm, mma))
