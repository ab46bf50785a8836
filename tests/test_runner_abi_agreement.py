"""The launch contract agrees with a real kernel library's own refusals, without a GPU.

A built kernel checks alignment and extents before it touches CUDA (templates/cutegen_abi.inc.j2),
so the refusal probes can be sent to it on any machine: the pointers are never dereferenced. The
module builds the kernel it asks (a copy of the first explicit-type kernel under generated/, the
one tests/test_generated.py::test_two_checked_in_kernels_compile compiles first) through
cutegen.build and the session's cache: in CI that cache starts empty, so the library is compiled
there once and serves both tests; nothing is looked up from earlier builds on the machine.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cutegen import build as build_mod

pytestmark = pytest.mark.compile

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "generated"


def first_explicit_kernel() -> Path:
    """The first kernel directory under generated/ rendered with explicit types (backend cutlass)."""
    for d in sorted(p.parent for p in GENERATED.rglob("manifest.json")):
        if json.loads((d / "manifest.json").read_text()).get("backend") == "cutlass":
            return d
    raise AssertionError(f"no explicit-type kernel under {GENERATED}")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    assert build_mod.find_nvcc() is not None, "nvcc is not on the PATH: this test compiles a kernel"
    src = first_explicit_kernel()
    work = tmp_path_factory.mktemp("abi-agreement") / src.name
    work.mkdir()
    for name in ("kernel.cu", "manifest.json"):
        shutil.copy2(src / name, work / name)
    summary = build_mod.build([work], jobs=1, progress=None)
    result = summary.results[0]
    assert result.ok, result.message
    return Path(result.library)


PROBE = r"""
import ctypes, json, sys
from cutegen import GemmProblem, KernelConfig, abi
from cutegen import runner as R
lib = abi.bind(ctypes.CDLL(sys.argv[1]))
d = json.loads(lib.cutegen_describe())
# The kernel describes what it depends on, not one problem's sizes: probe it at a size of our own.
p = GemmProblem.from_dict({**d["problem"], "m": 1024, "n": 1024, "k": 1024})
cfg = KernelConfig.from_dict(d["config"])
bases = {"A": 1 << 40, "B": 2 << 40, "C": 3 << 40, "D": 4 << 40}   # never dereferenced: every call is refused
out = []
for case in R.refusal_probes(p, cfg):
    args = R.case_launch_args(p, case, bases)
    v = R.preflight(p, args, cfg)
    status = lib.cutegen_gemm(*args.abi_tuple(), None, 0, None)
    msg = lib.cutegen_last_error().decode()
    ok, why = R.refusal_agrees(v, status, msg)
    out.append({"case": case.name, "expect": list(case.expect), "found": [x.rule_id for x in v],
                "status": status, "message": msg, "agree": ok, "why": why})
print(json.dumps(out))
"""


def test_kernel_refuses_what_the_launch_contract_refuses(library):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(library)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) >= 6
    for r in results:
        assert set(r["expect"]) <= set(r["found"]), r
        assert r["status"] == 1 and r["agree"], r
