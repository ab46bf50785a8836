"""The sanitizer's problem reaches the code it must check (cutegen/commands/validate.py)."""
import math
from types import SimpleNamespace

from cutegen import GemmProblem, KernelConfig
from cutegen.commands.validate import sanitizer_case


def _tiles(case, tile):
    return math.ceil(case.m / tile[0]) * math.ceil(case.n / tile[1])


def test_pingpong_sanitizer_case_gives_every_sm_several_tiles():
    p = GemmProblem(m=4096, n=4096, k=4096)
    pp = KernelConfig(tile_shape=(128, 128, 64), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    case = sanitizer_case(SimpleNamespace(problem=p, config=pp))
    assert _tiles(case, pp.tile_shape) >= 3 * 132          # the second warpgroup runs on every CTA
    assert case.m % 128 and case.n % 128 and case.k % 64    # ragged in every mode
    assert case.beta != 0.0


def test_other_schedules_keep_the_small_case():
    p = GemmProblem(m=4096, n=4096, k=4096)
    coop = KernelConfig(tile_shape=(128, 128, 64), mainloop_schedule="cooperative",
                        epilogue_schedule="tma_warp_specialized_cooperative")
    case = sanitizer_case(SimpleNamespace(problem=p, config=coop))
    assert _tiles(case, coop.tile_shape) <= 4 and case.batch == 2
