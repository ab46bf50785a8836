"""The DSL template's epilogue map: for every consumer thread, the accumulator registers it copies into
each epilogue subtile hold exactly that subtile's elements (trace time, CuTe layouts, no GPU)."""
from __future__ import annotations

import importlib.util
import os

import pytest

from cutegen import GemmProblem, KernelConfig, dsl
from cutegen.render import complete_config

if importlib.util.find_spec("cutlass") is None:
    pytest.skip("nvidia-cutlass-dsl (the dsl extra) is not installed", allow_module_level=True)
# The DSL reads its target once; these layouts are sm_90a's whatever GPU (if any) is here.
os.environ["CUTE_DSL_ARCH"] = "sm_90a"

CASES = {
    "coop_128x256_epi128x32": (GemmProblem(m=4096, n=4096, k=4096),
                               dict(tile_shape=(128, 256, 64), cluster_shape=(1, 2, 1))),
    "ws_128x128_epi64x32": (GemmProblem(m=2048, n=2048, k=2048),
                            dict(tile_shape=(128, 128, 64), mainloop_schedule="warp_specialized",
                                 epilogue_schedule="tma_warp_specialized")),
    "coop_256x128": (GemmProblem(m=4096, n=4096, k=4096), dict(tile_shape=(256, 128, 64))),
    "f32_col_d": (GemmProblem(m=1000, n=520, k=264, dtype_c="void", dtype_d="f32", layout_c="col"),
                  dict(tile_shape=(128, 128, 64))),
}


def _load(tmp_path, problem, cfg):
    path = tmp_path / "kernel.py"
    path.write_text(dsl.render_dsl(problem, cfg))
    spec = importlib.util.spec_from_file_location(f"cutegen_dsl_kernel_{tmp_path.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", sorted(CASES))
def test_epilogue_map_holds_for_every_thread(tmp_path, case):
    problem, kw = CASES[case]
    cfg = complete_config(problem, KernelConfig(**kw))
    k = _load(tmp_path, problem, cfg)
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    found = {}

    def verify(tiled_mma, r2s, emap):
        # Every 5th thread plus the last: both warpgroups, all four warps of each, odd and even lanes.
        threads = sorted(set(range(0, k.TILE_THREADS, 5)) | {k.TILE_THREADS - 1})
        bad = checked = 0
        for t in threads:
            acc = tiled_mma.get_slice(t).partition_C(cute.make_identity_tensor(k.TILE_MNK[:2]))
            src = r2s.get_slice(t).partition_S(cute.make_identity_tensor(k.EPI_TILE))
            for em in range(k.EPI_COUNT_M):
                for en in range(k.EPI_COUNT_N):
                    row = emap[em * k.EPI_COUNT_N + en]
                    for j in range(cute.size(src)):
                        m, n = src[j]
                        checked += 1
                        bad += tuple(acc[row[j]]) != (em * k.EPI_TILE[0] + m, en * k.EPI_TILE[1] + n)
        found.update(bad=bad, checked=checked, subtiles=len(emap), values=len(emap[0]))

    @cute.jit
    def trace():
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            k.A_DTYPE, k.B_DTYPE, k._major(k.A_K_MAJOR), k._major(k.B_K_MAJOR), k.ACC_DTYPE,
            k.WARPGROUP_LAYOUT, tiler_mn=(k.MMA_INST_MNK[0], k.MMA_INST_MNK[1]))
        r2s = k._make_r2s(tiled_mma)
        verify(tiled_mma, r2s, k._epilogue_map(tiled_mma, r2s))

    trace()
    tm, tn, _ = cfg.tile_shape
    em, en = k.EPI_TILE
    assert found["subtiles"] == (tm // em) * (tn // en)
    # each subtile's values are spread evenly over the consumer threads
    assert found["values"] * k.TILE_THREADS == em * en
    assert found["checked"] > 0 and found["bad"] == 0
