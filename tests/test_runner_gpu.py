"""On a Hopper GPU: the worker, the timing method and (when built) a generated kernel end to end.

Skipped by tests/conftest.py, with the reason, where torch or a Hopper device is missing (CI).
"""
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

try:
    import torch
except ImportError:  # the tests are skipped at setup (conftest.py); collecting them needs no torch
    torch = None

from cutegen import GemmProblem  # noqa: E402
from cutegen import runner as R  # noqa: E402
from cutegen import _runner_worker as W  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _built_kernels():
    root = REPO / "generated" / "sm90a"
    found, _ = R.discover_kernels([root]) if root.is_dir() else ([], [])
    return found


def test_worker_init_reports_the_device():
    with R.Worker(init={"op": "init"}) as w:
        reply = w.request({"op": "ping"}, timeout=60)
        assert reply.ok, reply.message
        info = w.init_reply.value
        assert info["name"] and info["sm_count"] > 0 and info["l2_bytes"] > 0


def test_time_calls_measures_a_matmul_with_events():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    times = W.time_calls(lambda i: a @ b, n_sets=1, warmup=3, iters=50)
    assert len(times) == 50 and all(t > 0 for t in times)
    tf = R.tflops(2 * 2048**3, R.median(times) * 1e-3)
    assert 10 < tf < 2000


def test_buffers_reference_matches_torch_for_a_strided_col_major_problem():
    p = GemmProblem(96, 80, 64, layout_a="col", layout_b="row", layout_c="col")
    case = R.Case("t", 96, 80, 64, 2, 0.75, 0.5, ld_pad={"A": 8, "D": 8}, batch_pad={"B": 16})
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    bufs = W.Buffers(p, case, gen)
    ref = bufs.reference(0.75, 0.5)
    a, b, c = (bufs.views[x].float() for x in "ABC")
    assert torch.allclose(ref, 0.75 * torch.bmm(a, b) + 0.5 * c, rtol=1e-4, atol=1e-4)
    # D is all NaN until written: writing the reference passes, leaving it fails
    assert not bufs.check_d(ref, 1e-2)["ok"]
    bufs.views["D"].copy_(ref.to(torch.bfloat16))
    check = bufs.check_d(ref, 1e-2)
    assert check["ok"] and check["written_outside"] == 0


@pytest.mark.skipif(not os.environ.get("CUTEGEN_GPU_KERNEL_TESTS") and not _built_kernels(),
                    reason="no built kernel under generated/sm90a (run cutegen build there first)")
def test_first_built_kernel_validates():
    info = _built_kernels()[0]
    with R.Worker(init={"op": "init"}) as w:
        for case in R.validation_cases(info.problem, info.config, include_manifest=False)[:2]:
            reply = w.request({"op": "validate_case", "library": str(info.library), "problem": info.problem.to_dict(),
                               "config": info.config.to_dict(), "case": case.to_dict()}, timeout=60)
            assert reply.ok and reply.value["ok"], (case.name, reply.message, reply.value)


def test_host_and_torch_backends_compute_the_same_reference():
    """The numpy host backend (CI's dry run) and the torch backend agree on the same stored inputs."""
    import numpy as np
    from cutegen import _runner_host as H
    p = GemmProblem(96, 80, 64, layout_a="col", layout_b="row", layout_c="col", bias=True, activation="gelu")
    case = R.Case("t", 96, 80, 64, 2, 0.75, 0.5, ld_pad={"A": 8, "D": 8}, batch_pad={"B": 16})
    host = H.Buffers(p, case, np.random.default_rng(0))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    dev = W.Buffers(p, case, gen)
    for name in ("A", "B", "C"):          # bf16: copy the raw 16-bit storage across
        assert dev.flat[name].numel() == host.flat[name].size
        dev.flat[name].view(torch.int16).copy_(torch.from_numpy(host.flat[name].view(np.int16)))
    dev.bias.view(torch.int16).copy_(torch.from_numpy(host.bias.view(np.int16)))
    ref_dev = dev.reference(0.75, 0.5).double().cpu().numpy()
    ref_host = host.reference(0.75, 0.5)
    assert np.allclose(ref_dev, ref_host, rtol=1e-5, atol=1e-5)
    host.write_d(ref_dev)
    assert host.check_d(ref_host, 1e-2)["ok"]
