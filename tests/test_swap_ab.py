"""Swap AB (cutegen/swap_ab.py, legality/swap_ab.py, the search's problem rewrite, the ABI swap)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from cutegen.config import KernelConfig
from cutegen.errors import FieldError
from cutegen.legality import check_config
from cutegen.problem import GemmProblem
from cutegen.swap_ab import kernel_problem, transposed

ROOT = Path(__file__).resolve().parents[1]


def prob(m, n, k, layout="tn", dtype="bf16", **kw):
    return GemmProblem.from_dict(dict(m=m, n=n, k=k, layout=layout, dtype=dtype, **kw))


@pytest.mark.parametrize("layout,expect", [("tn", "tn"), ("nt", "nt"), ("tt", "nn"), ("nn", "tt")])
def test_transposed_swaps_roles_and_flips_majorness(layout, expect):
    p = prob(16, 4096, 512, layout, alignment_a=8, alignment_b=4)
    t = transposed(p)
    assert (t.m, t.n, t.k) == (4096, 16, 512)
    assert t.blas_layout == expect
    assert t.layout_c == "col"                        # row-major D is column-major D^T
    assert (t.alignment_a, t.alignment_b) == (4, 8)
    assert transposed(t) == p                         # an involution
    assert t.flops == p.flops


def test_mixed_fp8_types_swap_roles():
    p = GemmProblem(m=8, n=256, k=128, dtype_a="e4m3", dtype_b="e5m2", dtype_c="bf16", dtype_d="bf16")
    t = transposed(p)
    assert (t.dtype_a, t.dtype_b) == ("e5m2", "e4m3")


def test_swap_ab_field_is_invisible_at_its_default():
    c = KernelConfig(tile_shape=(128, 128, 64))
    assert "swap_ab" not in c.to_dict()
    s = c.replace(swap_ab=True)
    assert s.to_dict()["swap_ab"] is True
    assert s.hash != c.hash
    assert KernelConfig.from_dict(s.to_dict()) == s
    assert KernelConfig.from_dict(c.to_dict()).hash == c.hash
    assert s.short_name().endswith("_swapab") and not c.short_name().endswith("_swapab")
    assert kernel_problem(prob(16, 64, 64), c) == prob(16, 64, 64)
    assert kernel_problem(prob(16, 64, 64), s) == transposed(prob(16, 64, 64))
    with pytest.raises(FieldError, match="swap_ab"):
        KernelConfig(tile_shape=(128, 128, 64), swap_ab="yes")


def test_swap_ab_bias_rule_both_sides():
    cfg = KernelConfig(tile_shape=(128, 16, 64), swap_ab=True)
    with_bias = check_config(prob(16, 4096, 4096, bias=True), cfg)
    assert not with_bias.legal and [v.rule_id for v in with_bias.violations] == ["SWAP-AB-BIAS"]
    assert "bias" in str(with_bias.violations[0])
    without = check_config(prob(16, 4096, 4096), cfg)
    assert without.legal, without.violations
    assert without.config.swap_ab is True
    # the rule is about the swap: the same config unswapped with a bias is judged by the other rules only
    assert "SWAP-AB-BIAS" not in {v.rule_id for v in check_config(prob(16, 4096, 4096, bias=True),
                                                                    cfg.replace(swap_ab=False)).violations}


def test_swapped_config_is_judged_on_the_transposed_problem():
    # NN: B is K-major, so Tile_N = 200 at Tile_K = 128 breaks the stage-slice rule (two SW128 atoms along K,
    # which the one-stage form does not cover); swapped, the kernel's B is the caller's A^T, MN-major, where
    # 200 is legal (SM90-SMEM-STAGE-SLICE, config oracle).
    p = prob(512, 1024, 1024, "nn")
    cfg = KernelConfig(tile_shape=(128, 200, 128), stages=2)
    straight = check_config(p, cfg)
    swapped = check_config(p, cfg.replace(swap_ab=True))
    assert "SM90-SMEM-STAGE-SLICE" in {v.rule_id for v in straight.violations}
    assert swapped.legal, swapped.violations
    inner = check_config(transposed(p), cfg)
    assert inner.legal and inner.stages == swapped.stages and inner.smem_bytes == swapped.smem_bytes


def test_render_swapped_kernel_exchanges_operands_in_the_abi():
    from cutegen import render
    p = prob(16, 4096, 4096)
    cfg = KernelConfig(tile_shape=(64, 16, 256), mainloop_schedule="pingpong",
                       epilogue_schedule="tma_warp_specialized", swap_ab=True)
    k = render.render(p, cfg, "cutlass")
    src = k.source
    assert "std::swap(A, B);" in src and "std::swap(M, N);" in src and "std::swap(lda, ldb);" in src
    # the CUTLASS types are the transposed problem's: C and D column-major (the caller's row-major D^T)
    assert re.search(r"using LayoutC = cutlass::layout::ColumnMajor;", src)
    block = re.search(r"kDescribe\[\] = (.*?);\n", src, re.S).group(1)
    describe = json.loads("".join(ast.literal_eval(f'"{x}"') for x in re.findall(r'"((?:[^"\\]|\\.)*)"', block)))
    assert describe["config"]["swap_ab"] is True
    assert describe["problem"] == p.kernel_key()       # the caller's problem, not the transposed one
    assert k.manifest["problem"]["m"] == 16 and k.manifest["config"]["swap_ab"] is True
    plain = render.render(p, cfg.replace(swap_ab=False, tile_shape=(64, 256, 64)), "cutlass")
    assert "std::swap" not in plain.source
    with pytest.raises(Exception, match="SWAP-AB-BIAS"):
        render.render(prob(16, 4096, 4096, bias=True), cfg, "cutlass")


def test_dsl_refuses_swap():
    from cutegen.collective_builder import complete
    from cutegen.dsl import dsl_supports
    p = prob(16, 4096, 4096)
    cfg = complete(transposed(p), KernelConfig(tile_shape=(128, 16, 64), swap_ab=True))
    assert any(r.startswith("DSL-SWAP-AB") for r in dsl_supports(p, cfg))
    assert not any(r.startswith("DSL-SWAP-AB") for r in dsl_supports(p, cfg.replace(swap_ab=False)))


def test_problem_rewrite_reaches_both_orientations():
    from cutegen.search.problem_rewrites import orientations
    assert orientations(prob(16, 4096, 4096)) == [False, True]
    assert orientations(prob(4096, 4096, 4096, "nn")) == [False, True]


def test_search_swaps_a_decode_problem_and_not_a_square_one():
    from cutegen.search import search
    decode = search(prob(1, 8192, 8192), top_k=3)
    best = decode.ranked[0]
    assert best.config.swap_ab and best.breakdown.get("swap_ab") is True
    # the reason: the caller's N fills the kernel's 64-row M mode; M = 1 sits in an 8-wide N mode
    assert best.config.tile_shape[1] <= 16
    square = search(prob(4096, 4096, 4096), top_k=3)
    assert not square.ranked[0].config.swap_ab


def test_search_does_not_swap_what_it_may_not():
    from cutegen.search import search
    biased = search(prob(1, 8192, 8192, bias=True), top_k=3)
    assert not any(r.config.swap_ab for r in biased.ranked)
    assert biased.pruned_by_rule.get("SWAP-AB-BIAS", 0) >= 1
    dsl = search(prob(1, 8192, 8192), top_k=3, backend="dsl")
    assert not any(r.config.swap_ab for r in dsl.ranked)
    assert dsl.pruned_by_rule.get("DSL-SWAP-AB", 0) >= 1


@pytest.mark.compile
def test_a_swapped_kernel_compiles():
    """The ABI swap builds: the checked-in decode kernel (M = 16, swap AB) through cutegen.build."""
    import shutil
    from cutegen import build as build_mod
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on the PATH")
    d = ROOT / "generated/llm/sm90a/bf16_tn_m16n4096k4096_cbf16dbf16"
    assert json.loads((d / "manifest.json").read_text())["config"]["swap_ab"] is True
    had = (d / "kernel.so").exists()
    summary = build_mod.build([d], jobs=1, progress=None)
    assert summary.ok, "\n".join(r.message for r in summary.results if not r.ok)
    assert summary.results[0].stats.get("ptx_wgmma_mma_async", 1) > 0
    try:
        # The ABI swap, without a GPU: every refusal probe (misaligned pointer, leading dimension, batch
        # stride or extent of one of the caller's operands) is refused by the kernel naming the rule the
        # launch contract names, and the operand the caller passed (the kernel checks them as its B and A).
        import os
        import subprocess
        import sys
        from test_runner_abi_agreement import PROBE
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run([sys.executable, "-c", PROBE, str(d / "kernel.so")], capture_output=True, text=True,
                              timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert len(out) >= 5 and all(r["agree"] for r in out), out
        by_case = {r["case"]: r["message"] for r in out}
        assert by_case["probe_ptr_A"].startswith("E18: A pointer")
        assert by_case["probe_ld_B"].startswith("E15: B leading dimension")
    finally:
        if not had:
            (d / "kernel.so").unlink()


def test_validation_plans_see_the_swapped_tile_along_n():
    from cutegen import runner as R
    cfg = KernelConfig(tile_shape=(64, 8, 256), swap_ab=True)
    assert R.tile_extents(cfg) == (8, 64, 256)
    assert R.tile_extents(cfg.replace(swap_ab=False)) == (64, 8, 256)
    probes = R.refusal_probes(prob(16, 4096, 4096), cfg)
    # probes are sized one tile and a bit along each of the caller's extents: N past the 64-row mode
    assert all(c.n > 64 and c.m > 8 for c in probes)


def test_swap_margin_is_zero_below_one_wgmma_m_mode_only():
    """Below 64 rows the two orientations differ physically (the unswapped kernel pads M to 64 rows of
    WGMMA): the cheaper one is taken. From 64 rows on, a swap must win by SWAP_MARGIN."""
    from cutegen.search import engine

    assert engine.swap_margin(prob(63, 4096, 4096)) == 0.0
    assert engine.swap_margin(prob(1, 4096, 4096)) == 0.0
    assert engine.swap_margin(prob(64, 4096, 4096)) == engine.SWAP_MARGIN > 0.0


def test_decode_takes_the_cheaper_orientation_even_by_less_than_the_margin():
    """1 x 57344 x 8192 (Llama-70B gate-up decode): the prior prices the swapped kernel within 1% of the
    unswapped one; the H100 ran the swapped one 12% faster (2026-11-24). At M = 1 it is taken."""
    from cutegen.search import search

    p = prob(1, 57344, 8192)
    r = search(p, top_k=8)
    best = r.ranked[0]
    unswapped = [x for x in r.ranked if not x.config.swap_ab]
    assert best.config.swap_ab
    assert not unswapped or best.cost <= min(x.cost for x in unswapped)
