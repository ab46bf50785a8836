"""Cost terms for small M and small K: TMA clipping at the problem's edge, the split-K place."""
import numpy as np
import pytest

from cutegen.problem import GemmProblem
from cutegen.search import cost as C


def costs(problem, tm, tn, tk=64, splits=1, sched=2, epi=0):
    return C.cost_arrays(problem, [tm], [tn], [tk], [1], [1], [sched], [epi], [0], [6], splits=[splits])


def test_rows_past_m_are_not_loaded():
    # a 64-row tile over M = 16 reads 16 rows of A (TMA clips the box): its per-k-block load is that
    # of a 16-row tile; at M = 64 it loads all 64
    small = GemmProblem(16, 8192, 8192)
    _, p64 = costs(small, 64, 128)
    per_cta = lambda rows: (rows * 64 + 128 * 64) * 2 * min(132, p64["tiles"][0]) / C.L2_BYTES_PER_S * 1e6  # noqa: E731
    assert p64["load_us_per_kblock"][0] == pytest.approx(per_cta(16))
    _, full = costs(GemmProblem(64, 8192, 8192), 64, 128)
    assert full["load_us_per_kblock"][0] == pytest.approx(per_cta(64))
    # the WGMMA still computes the whole 64-row tile: the MMA term does not shrink
    assert p64["mma_us_per_kblock"][0] == pytest.approx(full["mma_us_per_kblock"][0])


def test_decode_is_memory_bound_and_priced_near_the_hbm_floor():
    # the swap-AB decode kernel's problem (D^T = W x^T: N = 8192 in the tile's M mode, M = 1 in its N)
    p = GemmProblem(8192, 1, 8192)
    total, parts = costs(p, 64, 8, tk=256)
    floor = parts["hbm_floor_us"][0]
    # bytes over the bandwidth a streaming GEMM sustains (HBM_EFFICIENCY of the brief's)
    assert floor == pytest.approx((8192 * 8192 + 2 * 8192) * 2 / (C.HBM_BYTES_PER_S * C.HBM_EFFICIENCY) * 1e6)
    assert max(parts["dram_us"][0], floor) > parts["mainloop_us"][0]      # bandwidth-bound
    assert floor < total[0] < 1.3 * floor + C.LAUNCH_US
    # a square problem is not
    _, sq = costs(GemmProblem(8192, 8192, 8192), 128, 256)
    assert sq["mainloop_us"][0] > sq["hbm_floor_us"][0]


def test_split_k_place_defaults_to_no_split():
    """The split-K place is branch splitk's launch plan (search/decomposition.py): a persistent kernel
    ignores it; a stream-K kernel's split-K plan runs s units per tile and pays the partial tiles."""
    p = GemmProblem(128, 4096, 14336)
    one, parts_one = costs(p, 64, 64, splits=1)
    plain, parts_plain = C.cost_arrays(p, [64], [64], [64], [1], [1], [2], [0], [0], [6])
    assert one[0] == plain[0] and "splitk_reduce_us" not in parts_one
    ignored, _ = costs(p, 64, 64, splits=2)                     # persistent: no split
    assert ignored[0] == plain[0]
    sk = lambda s: C.cost_arrays(p, [128], [64], [64], [1], [1], [1], [1], [1], [6],  # noqa: E731
                                 decomposition=[C.DECOMP_SPLIT_K], splits=[s])
    _, one_sk = sk(1)
    _, two_sk = sk(2)
    assert two_sk["reduction_us"][0] > 0 == one_sk["reduction_us"][0]
    assert two_sk["workspace_bytes"][0] == one_sk["tiles"][0] * 128 * 64 * 4
