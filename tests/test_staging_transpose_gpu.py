"""On a Hopper GPU: the transposing-stage kernels (cutegen/staging.py) validated against the float32 reference.

Kernels: every built kernel directory under generated/layouts/sm90a and $CUTEGEN_TRANSPOSE_KERNELS
(default out/transpose-plan/sm90a, which ``bash bench/gpu_transpose.sh --plan`` renders and the script
builds) whose configuration transposes an operand. Each is run the way ``cutegen validate`` does it (its
own size, ragged M/N/K, beta != 0 where C exists, batches 2 and 3 with padded strides, a sub-tile
problem, the refusal probes; a stream-K kernel under every launch plan), the caller's operands MN-major
as the problem states them: the ABI transposes them into the workspace first.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
ROOTS = [REPO / "generated" / "layouts" / "sm90a",
         Path(os.environ.get("CUTEGEN_TRANSPOSE_KERNELS", REPO / "out" / "transpose-plan" / "sm90a"))]


def _transposing(directory: Path) -> bool:
    config = json.loads((directory / "manifest.json").read_text())["config"]
    return bool(config.get("stage_transpose_a") or config.get("stage_transpose_b"))


def _built(directory: Path) -> bool:
    from cutegen import runner as R
    try:
        R.load_kernel_info(directory)
    except Exception:      # noqa: BLE001 - KernelNotFound: not built (the GPU script builds the plan)
        return False
    return True


KERNELS = sorted({m.parent for root in ROOTS if root.is_dir() for m in root.glob("*/manifest.json")
                  if _transposing(m.parent) and _built(m.parent)})


@pytest.fixture(scope="module")
def worker():
    from cutegen import runner as R
    with R.Worker(init={"op": "init"}) as w:
        yield w


@pytest.mark.skipif(not KERNELS, reason="no built transposing kernel (bash bench/gpu_transpose.sh builds them)")
@pytest.mark.parametrize("directory", KERNELS, ids=lambda d: d.name)
def test_transposed_kernel_validates(directory, worker):
    from cutegen import runner as R
    from cutegen.commands import validate as V
    info = R.load_kernel_info(directory)
    assert info.problem.blas_layout != "tn" and info.problem.dtype_a in ("e4m3", "e5m2", "tf32")
    args = argparse.Namespace(no_manifest_shape=False, no_probes=False, timeout=60.0, seed=0)
    report = V.validate_one(worker, info, [], args, say=lambda *a, **k: None)
    assert report["verdict"] == "pass", report["reason"]
    runs = [c for c in report["cases"] if c.get("kind") == "case" and not c.get("refused")]
    assert {"ragged", "ragged_batch2", "padded_batch3", "sub_tile"} <= {c["case"] for c in runs}
    assert all(c["ok"] and c["rel_err"] < c["tol"] for c in runs)
    if info.problem.dtype_c != "void":
        assert any(c["beta"] != 0 for c in runs)
