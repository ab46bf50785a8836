"""SM90-SMEM-STAGE-SLICE: CuTe's static divisibility checks when a stage is sliced from a swizzled
smem layout, against nvcc's verdicts (oracles/smem_probe_slice.py, nvcc 13.0 + CUTLASS 4.2.0)."""
import sys
from pathlib import Path

import pytest

from cutegen.collective_builder import smem_atom
from cutegen.config import KernelConfig
from cutegen.legality import check_config
from cutegen.problem import GemmProblem
from cutegen.smem import stage_layout, stage_slice_error

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracles"))
from smem_probe_slice import CASES  # noqa: E402

# nvcc's verdict per CASES row: True = sizeof(Main::Params) compiles
NVCC = [False, True, True, False, True, False, False, False, False, True, True, False,
        False, False, True, False, False, True, True, False, False, False, False, True, False]
BITS = {"bf16": 16, "e4m3": 8, "tf32": 32}


@pytest.mark.parametrize("case,compiles", list(zip(CASES, NVCC)), ids=[str(c) for c in CASES])
def test_model_matches_nvcc(case, compiles):
    dt, lb, (m, n, k), stages = case
    errors = []
    for mn, k_major in ((m, True), (n, lb == "col")):
        atom = smem_atom("K" if k_major else "MN", dt, mn, k)
        sliced, diced = stage_layout(atom, BITS[dt], mn, k, stages, mn_first=k_major)
        if stage_slice_error(atom.swizzle, sliced, diced):
            errors.append(mn)
    assert (not errors) == compiles


def test_rule_through_check_config():
    p = GemmProblem(m=4096, n=4096, k=4096)
    # 200 rows x Tile_K 128: two SW128 atoms along K, which the one-stage form (cutegen/stage_tma.py) does not
    # cover, so the stock collective's stage slice decides: it does not compile
    bad = check_config(p, KernelConfig(tile_shape=(128, 200, 128), stages=2))
    assert [v.rule_id for v in bad.violations] == ["SM90-SMEM-STAGE-SLICE"]
    assert "Shape Divisibility Condition" in bad.violations[0].reason
    assert "no one-stage form" in bad.violations[0].reason
    # 128x8x64 with 13 stages broke the stock slice (nvcc); the form builds it, 12 stages the stock collective
    assert check_config(p, KernelConfig(tile_shape=(128, 8, 64), stages=13)).legal
    assert check_config(p, KernelConfig(tile_shape=(128, 8, 64), stages=12)).legal
    # 200 = 25 atoms of 8 rows at Tile_K 64: the stage stride breaks the stock divisibility for any stage
    # count, and the form covers it
    assert check_config(p, KernelConfig(tile_shape=(128, 200, 64), stages=4)).legal
    # MN-major B of the same tile is fine
    assert check_config(p.replace(layout_b="row"), KernelConfig(tile_shape=(128, 8, 64), stages=13)).legal


def test_layout_algebra_units():
    """composition_impl on the numbers of the first nvcc failure: (13:512) under the SW128 projection."""
    from cutegen.smem import LayoutAlgebraError, _compose
    anti = [(16, 1), (8, 0), (1, 128), (8, 0), (1, 1024)]
    with pytest.raises(LayoutAlgebraError, match="Shape Divisibility"):
        _compose(anti, [(13, 512)])
    assert _compose(anti, [(12, 512)]) is not None
    assert _compose(anti, [(13, 1024)]) == [[(13, 1024)]]


def test_epilogue_buffers_not_judged_by_the_slice_algebra():
    """nvcc 13.0 compiled the full pingpong 128x8x128 kernel with column-major bf16 C/D (C buffer 64x8 with 3
    stages, which slice_and_offset's algebra would reject): the epilogue does not slice that way."""
    p = GemmProblem(m=4096, n=4096, k=4096, layout_c="col")
    cfg = KernelConfig(tile_shape=(128, 8, 128), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    assert check_config(p, cfg).legal


def test_full_kernel_verdicts():
    """oracles/smem_probe_slice.py kernels: nvcc 13.0 compiled the whole kernel (device code included) for
    every KERNEL_CASES row except the two whose epilogue FragmentSize is 12 (Tile_N = 24)."""
    from smem_probe_slice import KERNEL_CASES
    nvcc_fails = {4, 5}
    for i, (la, lb, lc, tile, stages, sched) in enumerate(KERNEL_CASES):
        p = GemmProblem(m=4096, n=4096, k=4096, layout_a=la, layout_b=lb, layout_c=lc)
        cfg = KernelConfig(tile_shape=tile, stages=stages,
                           mainloop_schedule="cooperative" if sched == "coop" else "pingpong",
                           epilogue_schedule="tma_warp_specialized_cooperative" if sched == "coop" else "tma_warp_specialized")
        assert check_config(p, cfg).legal == (i not in nvcc_fails), (i, check_config(p, cfg).to_dict()["reasons"])
