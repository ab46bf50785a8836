"""check_config against the configuration oracle: CUTLASS 4.2 kernels compiled with nvcc 13.0 and run
on a Hopper GPU (tests/data/config_oracle_*.jsonl, real data in the *_h200 file; see
tests/data/ORACLE_DEVICE.txt). Legal iff the recorded outcome is "correct"; and where the kernel
compiled, the model's shared-memory sizes and stage count equal the compiler's."""
import json
from pathlib import Path

import pytest

from cutegen import stage_tma
from cutegen.collective_builder import complete, shared_storage
from cutegen.config import KernelConfig
from cutegen.legality import check_config
from cutegen.problem import GemmProblem

DATA = Path(__file__).resolve().parent / "data"
FILES = sorted(p for p in DATA.glob("config_oracle_*.jsonl") if not p.is_symlink())
ROWS = [json.loads(line) for f in FILES for line in f.read_text().splitlines() if line.strip()]


def test_oracle_present():
    assert FILES and len(ROWS) >= 60


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_verdict_matches_outcome(row):
    problem, config = GemmProblem.from_dict(row["problem"]), KernelConfig.from_dict(row["config"])
    report = check_config(problem, config)
    if row["outcome"] == "compile_error" and report.legal and stage_tma.needed_for(problem, report.config):
        # the oracle compiled CUTLASS's stock collective, whose stage slice fails here (SM90-SMEM-STAGE-SLICE);
        # cutegen renders these with the one-stage TMA form (cutegen/stage_tma.py), which builds them (nvcc 13.0:
        # 128x8x64 s13, 128x200x64, 64x200x64; tests/test_stage_tma.py)
        assert row["id"].startswith("tile_n-bf16tn") and row["config"]["tile_shape"][1] in (8, 200), row["id"]
        return
    assert report.legal == (row["outcome"] == "correct"), (row["outcome"], report.to_dict()["reasons"])


@pytest.mark.parametrize("row", [r for r in ROWS if r.get("smem_kernel") is not None],
                         ids=[r["id"] for r in ROWS if r.get("smem_kernel") is not None])
def test_shared_memory_matches_compiler(row):
    problem, config = GemmProblem.from_dict(row["problem"]), KernelConfig.from_dict(row["config"])
    s = shared_storage(problem, config)
    assert (s.mainloop, s.epilogue, s.kernel) == (row["smem_mainloop"], row["smem_epilogue"], row["smem_kernel"])
    assert complete(problem, config).stages == row["stages"]


def test_streamk_hang_is_a_stale_workspace_not_a_configuration():
    """H100: the rulebook's stream-K hangs appear only when a launch reuses a stale workspace."""
    from cutegen import GemmProblem, KernelConfig
    from cutegen.legality import check_config
    fresh_path, stale_path = DATA / "config_oracle_streamk_h100.jsonl", DATA / "streamk_stale_workspace_h100.jsonl"
    if not (fresh_path.exists() and stale_path.exists()):
        pytest.skip("no H100 stream-K data")
    fresh = {r["id"]: r for r in map(json.loads, fresh_path.read_text().splitlines())}
    stale = [json.loads(line) for line in stale_path.read_text().splitlines()]
    hung = [r for r in stale if r["outcome"] == "hang"]
    assert hung and all(fresh[r["id"]]["outcome"] == "correct" for r in hung)
    assert all(r["config"]["tile_scheduler"] == "stream_k" for r in hung)
    for r in hung:
        rep = check_config(GemmProblem.from_dict(r["problem"]), KernelConfig.from_dict(r["config"]))
        assert rep.legal and "SM90-STREAMK-TMA-EPILOGUE-HANG" in {w.rule_id for w in rep.warnings}
