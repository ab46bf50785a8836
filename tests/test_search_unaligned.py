"""Every GEMM the problem model accepts gets a legal kernel: a property test over edge and random problems.

M, N, K from {1, 2, 3, 7, 8, 9, 1001, 2047, 4096}, odd leading dimensions, every input dtype and layout.
A TMA mainloop needs 16-byte rows; the cp.async mainloop (legality/cp_async.py) takes the rest, so an
empty answer is a bug. The one exception is a class no SM90 kernel cutegen renders can compute at any
alignment: CUTLASS routes fp8 operands that are not both K-major, and tf32 ones that are not TN, to the
register-A mainloop (SM90-RS-ROUTE, CUTLASS-EXPLICIT-RS); those are computed by the transposing stage
(cutegen/staging.py: the MN-major operands are copied K-major into the workspace), aligned or not.
"""
from __future__ import annotations

import random

import pytest

from cutegen.collective_builder import uses_register_a
from cutegen.errors import FieldError
from cutegen.legality import check_config
from cutegen.problem import BLAS_LAYOUTS, GemmProblem
from cutegen.search import search
from cutegen.search.engine import tma_can_load

EXTENTS = (1, 2, 3, 7, 8, 9, 1001, 2047, 4096)
DTYPES = ("bf16", "f16", "tf32", "e4m3", "e5m2")
OUT = {"bf16": "bf16", "f16": "f16", "tf32": "f32", "e4m3": "bf16", "e5m2": "bf16"}


def _problem(m, n, k, dtype, layout, ld_pad=(0, 0, 0)):
    la, lb = BLAS_LAYOUTS[layout]
    p = GemmProblem(m=m, n=n, k=k, dtype_a=dtype, dtype_b=dtype, dtype_c=OUT[dtype], dtype_d=OUT[dtype],
                    layout_a=la, layout_b=lb)
    if any(ld_pad):
        lds = {f"ld{op}": p.contiguous_extent(op)[1] + pad for op, pad in zip("abc", ld_pad) if pad}
        p = p.replace(alignment_a=0, alignment_b=0, alignment_c=0, **lds)
    return p


def _cases():
    rng = random.Random(10)
    out = [(1, 1, 1, "bf16", "tn", (0, 0, 0)), (2047, 2047, 2047, "bf16", "nn", (0, 0, 0)),
           (9, 4096, 7, "e4m3", "tn", (0, 0, 0)), (1001, 3, 2047, "tf32", "tn", (0, 0, 0)),
           (4096, 4096, 4096, "bf16", "tn", (3, 0, 5)), (8, 8, 8, "f16", "tt", (1, 1, 1)),
           (4096, 1001, 4096, "bf16", "tn", (0, 0, 0)), (7, 9, 1001, "e5m2", "tn", (0, 7, 0))]
    for _ in range(12):
        pads = tuple(rng.choice((0, 0, 1, 3, 9)) for _ in range(3))
        out.append((rng.choice(EXTENTS), rng.choice(EXTENTS), rng.choice(EXTENTS), rng.choice(DTYPES),
                    rng.choice(tuple(BLAS_LAYOUTS)), pads))
    return out


@pytest.mark.parametrize("m,n,k,dtype,layout,pads", _cases())
def test_search_answers_every_problem(m, n, k, dtype, layout, pads):
    p = _problem(m, n, k, dtype, layout, pads)
    res = search(p, top_k=1)
    rs_class = uses_register_a(p)
    assert res.ranked, f"{p.name}: no kernel; rules: {res.pruned_by_rule}"
    cfg = res.ranked[0].config
    from cutegen.staging import needs_transpose, transposed_operands
    # exactly the MN-major operands of an 8-bit / tf32 problem are transposed, and only those problems
    # are in CUTLASS's register-A class (both operands of one dtype here)
    assert set(transposed_operands(cfg)) == {op for op in "ab" if needs_transpose(p, op)}
    assert bool(transposed_operands(cfg)) == rs_class
    if rs_class:
        assert check_config(p, cfg).legal and cfg.mainloop_load == "tma"
        assert "CUTLASS-EXPLICIT-RS" in res.pruned_by_rule      # the unstaged forms, pruned whole
        return
    rep = check_config(p, cfg)
    from cutegen.legality.cp_async import ADVISORY
    assert rep.legal and not [w for w in rep.warnings if w.rule_id not in ADVISORY]
    tma_ok = tma_can_load(p)
    # when TMA cannot read A or B the kernel is a cp.async one or a TMA one on staged copies of exactly
    # the operands TMA cannot read (cutegen/staging.py); otherwise neither
    from cutegen.staging import staged_operands, tma_aligned
    staged = staged_operands(cfg)
    assert (cfg.mainloop_load == "cp_async" or bool(staged)) == (not tma_ok)
    if staged:
        assert cfg.mainloop_load == "tma" and set(staged) == {op for op in "ab" if not tma_aligned(p, op)}


def test_the_issue_problem_gets_a_kernel_that_takes_its_own_n():
    # issue 10: --m 1024 --n 1001 --k 2048 stated alignment_c = 8 and the kernel refused N = 1001
    p = GemmProblem(m=1024, n=1001, k=2048)
    assert p.alignment_c == 1 and p.alignment_a == p.alignment_b == 8
    res = search(p, top_k=3)
    assert res.ranked
    for r in res.ranked:
        assert r.config.epilogue_schedule == "no_smem" and r.config.mainloop_load == "tma"
    # stating the old alignment makes every candidate break the rule that says why
    res = search(p.replace(alignment_c=8), top_k=1)
    assert res.ranked == [] and "SM90-PROBLEM-ALIGNMENT" in res.pruned_by_rule


def test_k_2047_from_the_issue_stages_both_operands():
    # 2-byte rows: the cp.async kernel copies synchronously (measured 2.09 ms on an H100); the staged
    # TMA kernel pays two restride copies instead
    res = search(GemmProblem(m=2048, n=2048, k=2047), top_k=1)
    cfg = res.ranked[0].config
    assert cfg.mainloop_load == "tma" and cfg.stage_a and cfg.stage_b
    assert res.ranked[0].breakdown["staging_us"] > 0


def test_fused_epilogue_on_unaligned_rows_is_a_field_error():
    with pytest.raises(FieldError, match="bias"):
        GemmProblem(m=128, n=1001, k=64, bias=True)
    with pytest.raises(FieldError, match="activation"):
        GemmProblem(m=128, n=128, k=63, activation="relu")
    GemmProblem(m=128, n=1000, k=64, bias=True)      # 1000 = 125 x 8: aligned, accepted


def test_cli_leading_dimensions(capsys):
    import json
    from cutegen.cli import main
    assert main(["search", "--m", "1024", "--n", "1024", "--k", "2048", "--lda", "2052", "--top-k", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problem"]["lda"] == 2052 and out["problem"]["alignment_a"] == 4
    assert out["ranked"][0]["config"].get("mainloop_load") == "cp_async" or out["ranked"][0]["config"]["stage_a"]
    assert main(["search", "--m", "64", "--n", "64", "--k", "64", "--ldb", "60"]) == 2
    assert "problem.ldb: 60 is smaller than the contiguous extent K=64" in capsys.readouterr().err
