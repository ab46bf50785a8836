"""The launch contract agrees with real kernel libraries' own refusals, without a GPU.

A built kernel checks alignment and extents before it touches CUDA (templates/cutegen_abi.inc.j2),
so the refusal probes can be sent to it on a machine without a GPU: the pointers are never
dereferenced. Every built library found (under generated/ or in the build cache) is asked in a
child process; skipped when none has been built here, or when a GPU is present (there
`cutegen validate` sends the same probes with real buffers).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _libraries(limit=4):
    roots = [REPO / "generated", Path(os.environ.get("CUTEGEN_CACHE") or Path.home() / ".cache" / "cutegen")]
    found = []
    for root in roots:
        if root.is_dir():
            found += sorted(root.rglob("kernel.so"), key=lambda p: str(p))
    return found[:limit]


LIBS = _libraries()
GPU = any(Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl"))

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


@pytest.mark.skipif(not LIBS, reason="no built kernel library here (cutegen build generated/sm90a/<problem>)")
@pytest.mark.skipif(GPU, reason="a GPU is present: cutegen validate sends these probes with real buffers")
@pytest.mark.parametrize("library", LIBS, ids=lambda p: p.parent.name[:24])
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
