"""validate of a stream-K kernel end to end on the CPU, with a stand-in library that has the plan ABI.

The stand-in (tests/test_runner_dryrun.py's host GEMM plus ``cutegen_gemm_plan`` and
``cutegen_workspace_size_plan``) sizes the workspace from the plan it is given, so each case's
recorded workspace size shows which plan reached the library. Mode ``stale_workspace`` corrupts D when
it is relaunched on the workspace of its previous call, as the H100's stream-K kernels did without
re-initialization: the relaunch case must catch it.
"""
import json

import pytest

from test_runner_dryrun import FAKE_KERNEL_C, build_fake  # noqa: E402  (same folder; skips without torch/cc)

from cutegen import GemmProblem, KernelConfig  # noqa: E402
from cutegen.commands import validate as V  # noqa: E402
from cutegen.launch_plan import LaunchPlan  # noqa: E402

PLAN_C = r"""
static const void* last_ws;
size_t cutegen_workspace_size_plan(int64_t M, int64_t N, int64_t K, int64_t batch, int d, int s, int r) {
  return 16 + 1024 * (size_t)d + 8 * (size_t)s + (size_t)r;
}
int cutegen_gemm_plan(const void* A, const void* Bm, const void* C, void* D, int64_t M, int64_t N, int64_t K,
                      int64_t batch, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd, int64_t bsa, int64_t bsb,
                      int64_t bsc, int64_t bsd, float alpha, float beta, const void* bias, int d, int s, int r,
                      void* ws, size_t wsb, void* stream) {
  if (d < 0 || d > 3 || r < 0 || r > 1 || s < 1) return fail("PLAN: out of range");
  if (s > 1 && d != 0 && d != 2) return fail("SM90-STREAMK-SPLITS-MODE: splits need heuristic or split_k");
  if (!ws || wsb < cutegen_workspace_size_plan(M, N, K, batch, d, s, r)) { fail("workspace too small"); return 2; }
  int rc = cutegen_gemm(A, Bm, C, D, M, N, K, batch, lda, ldb, ldc, ldd, bsa, bsb, bsc, bsd, alpha, beta, bias,
                        0, 0, stream);
  const char* mode = getenv("CUTEGEN_FAKE_MODE");
  if (rc == 0 && mode && strcmp(mode, "stale_workspace") == 0 && ws == last_ws)
    for (int64_t i = 0; i < 64 && i < M * N; ++i) ((uint16_t*)D)[i] = to_bf16(1000.0f);
  last_ws = ws;
  return rc;
}
"""

SK = KernelConfig((128, 128, 64), mainloop_schedule="cooperative", epilogue_schedule="tma_warp_specialized_cooperative",
                  tile_scheduler="stream_k")
P = GemmProblem(136, 200, 72)


@pytest.fixture
def streamk_kernel(tmp_path, monkeypatch):
    import test_runner_dryrun as D
    monkeypatch.setattr(D, "FAKE_KERNEL_C", FAKE_KERNEL_C + PLAN_C)
    k = build_fake(tmp_path / "sk", P, SK)
    man = json.loads((k / "manifest.json").read_text())
    man["launch_plan"] = LaunchPlan("split_k", 2).to_dict()
    (k / "manifest.json").write_text(json.dumps(man))
    monkeypatch.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    monkeypatch.delenv("CUTEGEN_FAKE_MODE", raising=False)
    return k


def _cases(tmp_path, k, *extra):
    rc = V.main([str(k), "--json", str(tmp_path / "v.json"), "--timeout", "120", "-q", "--no-probes", *extra])
    report = json.loads((tmp_path / "v.json").read_text())
    return rc, {c["case"]: c for c in report["kernels"][0]["cases"]}


def test_every_plan_reaches_the_library_and_validates(tmp_path, streamk_kernel):
    rc, cases = _cases(tmp_path, streamk_kernel)
    assert rc == 0, json.dumps(cases, indent=1)[:3000]
    planned = {n: c for n, c in cases.items() if "plan" in c}
    assert cases["manifest"]["plan"]["decomposition"] == "split_k"
    assert {"plan_heuristic", "plan_data_parallel", "plan_stream_k", "plan_split_k_x2", "plan_split_k_x5",
            "relaunch_stream_k", "plan_stream_k_batch2"} <= set(planned)
    for c in planned.values():
        plan = LaunchPlan.from_dict(c["plan"])
        d, s, r = plan.codes()
        assert c["workspace_bytes"] == 16 + 1024 * d + 8 * s + r      # sized by the plan it was given
        assert c["ok"] and c["rel_err"] < 1e-2
    assert cases["relaunch_stream_k"]["launches"] == 20
    assert "plan" not in cases["ragged"]                               # the plain cases still use cutegen_gemm


def test_relaunch_case_catches_a_kernel_that_breaks_on_a_reused_workspace(tmp_path, streamk_kernel, monkeypatch):
    monkeypatch.setenv("CUTEGEN_FAKE_MODE", "stale_workspace")
    rc, cases = _cases(tmp_path, streamk_kernel, "--no-manifest-shape")
    relaunch = cases["relaunch_stream_k"]
    assert rc == 1 and not relaunch["ok"] and "launch" in relaunch["reason"]


def test_the_gpu_relaunch_check_runs_through_the_worker(tmp_path, streamk_kernel, monkeypatch):
    """bench/streamk_relaunch.py check_kernel (what bench/gpu_splitk.sh runs), on the stand-in: it
    passes a correct kernel and reports the one that breaks on a reused workspace."""
    import importlib.util
    from pathlib import Path
    from cutegen import runner as R
    spec = importlib.util.spec_from_file_location(
        "streamk_relaunch", Path(__file__).resolve().parents[1] / "bench" / "streamk_relaunch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    info = R.load_kernel_info(streamk_kernel)
    small = {136: (LaunchPlan("stream_k"), LaunchPlan("split_k", 2), LaunchPlan("stream_k", 4))}
    with R.Worker(init={"op": "init"}) as w:
        good = mod.check_kernel(w, info, relaunches=3, say=lambda _: None, plan_set=small)
        monkeypatch.setenv("CUTEGEN_FAKE_MODE", "stale_workspace")
    with R.Worker(init={"op": "init"}) as w:
        bad = mod.check_kernel(w, info, relaunches=3, say=lambda _: None, plan_set=small)
    assert [r["plan"]["decomposition"] for r in good] == ["stream_k", "split_k"]   # stream_k x4 is illegal: skipped
    assert all(r["ok"] and r["result"]["launches"] == 3 for r in good)
    assert not any(r["ok"] for r in bad)
