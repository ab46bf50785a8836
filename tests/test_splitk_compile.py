"""One real nvcc build (about 1-2 minutes): the checked-in stream-K forms kernel with its split-K plan.

It proves the launch-plan ABI compiles against CUTLASS 4.2 and that the library checks a plan
before it touches the GPU (no GPU is needed for what is asserted here).
"""
from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path

import pytest

from cutegen import abi
from cutegen import build as build_mod
from cutegen import manifest as manifest_mod

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)

FORMS = Path(__file__).resolve().parents[1] / "generated" / "forms" / "sm90a"
# The first checked-in forms kernel the search made stream-K (which problem that is moves with the cost model).
KERNEL = next(m.parent for m in sorted(FORMS.glob("*/manifest.json"))
              if json.loads(m.read_text())["config"].get("tile_scheduler") == "stream_k")
PROBLEM = json.loads((KERNEL / "manifest.json").read_text())["problem"]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    work = tmp_path_factory.mktemp("splitk-kernel") / KERNEL.name
    shutil.copytree(KERNEL, work)   # build next to a copy: the checked-in tree stays as it is
    summary = build_mod.build([work], jobs=1, progress=None)
    result = summary.results[0]
    assert result.ok, result.message
    return abi.bind(ctypes.CDLL(str(result.library)))


def _call(lib, decomposition, splits, reduction):
    m, n, k = PROBLEM["m"], PROBLEM["n"], PROBLEM["k"]      # bf16 TN: A and B K-major, D N-major
    assert (PROBLEM["layout_a"], PROBLEM["layout_b"], PROBLEM["layout_c"]) == ("row", "col", "row")
    args = [None] * 4 + [m, n, k, 1, k, k, n, n, 0, 0, 0, 0, 1.0, 0.0, None, decomposition, splits, reduction,
                         None, 0, None]
    status = lib.cutegen_gemm_plan(*args)
    return status, lib.cutegen_last_error().decode()


def test_forms_kernel_exports_the_plan_abi(lib):
    man = manifest_mod.load(KERNEL)
    assert man.config.tile_scheduler == "stream_k" and man.data["launch_plan"]["decomposition"] in (
        "heuristic", "data_parallel", "split_k", "stream_k")
    assert abi.has_plan(lib)
    described = json.loads(lib.cutegen_describe().decode())
    assert described["hash"] == man.kernel_hash
    assert "launch_plan" not in described and "splits" not in json.dumps(described["config"])


def test_the_library_refuses_a_bad_plan_before_launching(lib):
    status, msg = _call(lib, 7, 1, 0)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("PLAN:")
    status, msg = _call(lib, 3, 4, 0)      # stream-K with 4 splits: CUTLASS's can_implement would fail
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("SM90-STREAMK-SPLITS-MODE")
    status, msg = _call(lib, 2, 4, 0)      # a good plan gets past the plan checks (then NULL A is refused)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("ABI-NULL")
