"""On a Hopper GPU: stream-K kernels relaunched many times on ONE workspace, every result checked.

The proof behind search/legality_analysis.py not pruning SM90-STREAMK-TMA-EPILOGUE-HANG (see
bench/streamk_relaunch.py, which holds the check so that the GPU script needs no pytest). Kernels: every
built stream-K kernel under generated/forms/relaunch/sm90a (the rulebook's hang configurations),
generated/forms/sm90a and generated/sm90a; bench/gpu_splitk.sh builds them.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

# the tests are skipped at setup without a GPU (tests/conftest.py); collecting them needs no torch

from cutegen import runner as R  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "streamk_relaunch", Path(__file__).resolve().parents[1] / "bench" / "streamk_relaunch.py")
relaunch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(relaunch)
KERNELS = relaunch.streamk_kernels()


@pytest.fixture(scope="module")
def worker():
    # one worker for every kernel (a hang kills its child; the next request starts a fresh one)
    with R.Worker(init={"op": "init"}) as w:
        yield w


@pytest.mark.skipif(not KERNELS, reason="no built stream-K kernel (bench/gpu_splitk.sh builds them)")
@pytest.mark.parametrize("info", KERNELS, ids=[k.label for k in KERNELS])
def test_relaunch_on_one_workspace_is_correct_every_time(info, worker):
    records = relaunch.check_kernel(worker, info, say=lambda line: None)
    assert records, "no plan of the relaunch set is legal for this kernel"
    bad = [f"{r['size']} {r['plan']}: {r['status']} {str(r['result'])[:300]}" for r in records if not r["ok"]]
    assert not bad, "\n".join(bad)
