"""bench/dsl_compare.py's choice of a configuration both backends express (no GPU, no compile)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from cutegen import GemmProblem, dsl

_spec = importlib.util.spec_from_file_location("dsl_compare", Path(__file__).parent.parent / "bench" / "dsl_compare.py")
dsl_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dsl_compare)


def test_bf16_gets_a_config_both_backends_take():
    p = GemmProblem(m=1000, n=1000, k=1000)
    origin, cfg, _ = dsl_compare.choose(p)
    assert cfg is not None and cfg.is_complete
    assert dsl.dsl_supports(p, cfg) == []


def test_tf32_is_skipped_with_the_dsl_reason():
    p = GemmProblem.from_dict({"m": 512, "n": 512, "k": 512, "dtype": "tf32"})
    origin, cfg, reasons = dsl_compare.choose(p)
    assert cfg is None and origin is None
    assert reasons and any("DSL-TF32" in r for r in reasons)


def test_run_refuses_fewer_than_50_timed_runs(capsys):
    import pytest
    with pytest.raises(SystemExit):
        dsl_compare.main(["run", "--iters", "10"])
    assert "at least 50" in capsys.readouterr().err
