"""`cutegen validate --op` and `cutegen bench --op` on the GPU (bench/gpu_checks.sh runs `pytest -m gpu`): one small
problem of each operation planned, built, validated against its float32 reference, timed against its peers in the
worker child, filed in a results database, and reused from it on a second bench. Imports without torch; the gpu
marker skips it (at setup, in conftest.py) where there is no Hopper GPU."""
from __future__ import annotations

import pytest

from cutegen.results import ResultsDB
from cutegen.run import ops

PROBLEMS = {
    # GQA, causal, ragged lengths off the tile: the prefill kernel class of the Llama suite
    "attention": '{"batch": 2, "heads_q": 8, "heads_kv": 2, "seqlen_q": 1000, "seqlen_kv": 1000, "head_dim": 128, '
                 '"causal": true, "layout": "bhsd"}',
    # 8 experts, uneven routing, N and K the Mixtral w1 shape scaled down
    "grouped_gemm": '{"groups": 8, "tokens": 2048, "n": 2048, "k": 1024, "distribution": "skewed"}',
}


@pytest.mark.gpu
@pytest.mark.compile
@pytest.mark.parametrize("op_name", sorted(PROBLEMS))
def test_an_operation_through_validate_bench_and_the_database(op_name, tmp_path):
    cases = ops.load_cases(op_name, None, [PROBLEMS[op_name]])
    plan = tmp_path / "plan"
    ops.plan(op_name, cases, plan)
    index = ops.load_index(plan)
    dirs = [k["dir"] for c in cases for k in ops.kernels_for(plan, index, c)[0].values()]
    assert all(why == "" for why in ops.build_dirs(dirs, jobs=4).values())
    v = ops.validate(op_name, cases, plan, timeout=300)
    assert v["summary"]["ok"], [(r["role"], r["verdict"], r.get("reason")) for r in v["kernels"]]
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    doc, path = ops.bench(op_name, cases, plan, tmp_path / "out", db=db, plot=False, timeout=300)
    entry = doc["problems"][0]
    peers = ops.operation(op_name).peers
    assert entry["results"]["cutegen"]["status"] == "ok" and entry["results"]["cutegen"]["verify"]["ok"]
    assert entry["ratios"][peers[0]] is not None            # the first peer (SDPA cuDNN, torch._grouped_mm) ran
    stored = db.measurements(op=op_name)
    assert stored and all(m.peers_us and m.validated for m in stored)
    again, _ = ops.bench(op_name, cases, plan, tmp_path / "out2", db=db, plot=False, timeout=300)
    assert again["summary"]["reused"] == [cases[0].name]
    assert again["problems"][0]["results"]["cutegen"]["median_ms"] == entry["results"]["cutegen"]["median_ms"]
    assert len(db.measurements(op=op_name)) == len(stored)
