"""The fuzz campaign (bench/fuzz_campaign.py) end to end on the CPU: plan -> render -> stand-in build ->
run -> report, with no nvcc and no GPU.

The plan step runs the real search on three explicit problems; the GPU half runs through the runner's
CPU twin (CUTEGEN_RUNNER_DEVICE=cpu) with the stand-in library of tests/test_runner_dryrun.py plus
the stream-K plan ABI of tests/test_splitk_dryrun.py, compiled once per kernel directory the render
step wrote. One kernel's stand-in is planted to compute a wrong result (10 % off).
"""
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from test_runner_dryrun import CC, FAKE_KERNEL_C  # noqa: E402  (same folder)
from test_splitk_dryrun import PLAN_C  # noqa: E402

from cutegen import GemmProblem, KernelConfig  # noqa: E402
from cutegen.launch_plan import LaunchPlan  # noqa: E402
from cutegen.legality.stream_k import check_plan  # noqa: E402
from cutegen.manifest import kernel_hash  # noqa: E402
from cutegen.search import search  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("fuzz_campaign", ROOT / "bench" / "fuzz_campaign.py")
F = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(F)

# K = 16000 over a 512x512 output: the search ranks stream-K candidates in its top 12 (every rank on this
# tree; the tinier 64x64x16384 went to split-K with a separate reduction when that form landed).
SK = GemmProblem(512, 512, 16000, beta=0.5)
SK_TWIN = GemmProblem(512, 512, 16000, alpha=2.0, beta=1.0, ldc=520)   # same kernel key (C still 16-byte aligned)
PLAIN = GemmProblem(136, 200, 72, layout_a="col", layout_b="row", batch=2, beta=-0.75)


def _rank_of(problem, want):
    """1-based rank of the first candidate in the top 12 for which want(ranked, hash) holds."""
    for i, r in enumerate(search(problem, top_k=12).ranked):
        if want(r, kernel_hash(problem, r.config, "cutlass")):
            return i + 1, kernel_hash(problem, r.config, "cutlass"), r
    return None, None, None


def _fake_build(directory: Path, problem: GemmProblem, wrong: bool) -> None:
    src = FAKE_KERNEL_C + PLAN_C
    if wrong:
        src = src.replace('strcmp(mode, "wrong") == 0 ? 1.1f : 1.0f', "1.1f")
        assert "1.1f;" in src
    (directory / "fake.c").write_text(src)
    flags = [f"-DA_ROW={int(problem.layout_a == 'row')}", f"-DB_ROW={int(problem.layout_b == 'row')}",
             f"-DD_ROW={int(problem.layout_c == 'row')}"]
    subprocess.run([CC, "-O2", "-shared", "-fPIC", *flags, "-o", str(directory / "kernel.so"),
                    str(directory / "fake.c")], check=True)


@pytest.fixture
def campaign(tmp_path, monkeypatch):
    assert CC, "no C compiler (cc or gcc) on the PATH for the stand-in kernel library"
    sk_rank, sk_hash, sk_ranked = _rank_of(SK, lambda r, h: r.config.tile_scheduler == "stream_k")
    assert sk_rank is not None, "the search no longer ranks a stream-K candidate for 512x512x16000 in its top 12"
    twin_rank, twin_hash, _ = _rank_of(SK_TWIN, lambda r, h: h == sk_hash)
    assert twin_rank is not None, "the twin problem does not rank the same stream-K kernel"
    problems = [{"problem": SK.to_dict(), "ranks": [sk_rank]}, {"problem": SK_TWIN.to_dict(), "ranks": [twin_rank]},
                {"problem": PLAIN.to_dict(), "ranks": [1]}]
    (tmp_path / "problems.json").write_text(json.dumps(problems))
    plan_dir = tmp_path / "plan"
    assert F.main(["plan", "--problems", str(tmp_path / "problems.json"), "--out", str(plan_dir), "--shards", "2",
                   "--seed", "7", "--no-cache", "--jobs", "1", "-q"]) == 0
    plan = json.loads((plan_dir / "plan.json").read_text())
    return {"dir": plan_dir, "plan": plan, "sk_hash": sk_hash, "sk_config": sk_ranked.config,
            "sk_plan": sk_ranked.plan, "tmp": tmp_path, "env": monkeypatch}


def test_plan_dedups_kernels_and_lists_every_allowed_plan(campaign):
    plan, sk_hash = campaign["plan"], campaign["sk_hash"]
    # three problems, three pairs, two distinct kernels: the stream-K one serves two problems
    assert len(plan["pairs"]) == 3 and len(plan["kernels"]) == 2
    kernels = {k["hash"]: k for k in plan["kernels"]}
    assert len(kernels[sk_hash]["pairs"]) == 2
    assert sorted(k["shard"] for k in plan["kernels"]) == [1, 2]
    # every plan of the stream-K candidate is a case, for each of its two problems
    kt = -(-SK.k // campaign["sk_config"].tile_shape[2])
    for pid, problem in zip(("p0000", "p0001"), (SK, SK_TWIN)):
        plans = [LaunchPlan.from_dict(c["plan"]) for c in plan["cases"] if c["problem"] == pid]
        assert campaign["sk_plan"] in plans                        # the search's own plan
        want = {LaunchPlan("heuristic"), LaunchPlan("heuristic", 2), LaunchPlan("data_parallel"),
                LaunchPlan("stream_k"), LaunchPlan("split_k", 2), LaunchPlan("split_k", 3),
                LaunchPlan("split_k", kt // 2), LaunchPlan("split_k", min(kt, 132)),
                LaunchPlan("split_k", 2, "nondeterministic")}
        allowed = {p for p in want if not check_plan(problem, campaign["sk_config"], p)[0]}
        assert allowed <= set(plans) and len(plans) == len(set(plans))
        assert all(not check_plan(problem, campaign["sk_config"], p)[0] for p in plans)
    # the plain kernel runs cutegen_gemm once per pair, 2 launches on one workspace
    plain = [c for c in plan["cases"] if c["problem"] == "p0002"]
    assert len(plain) == 1 and plain[0]["plan"] is None and plain[0]["repeat"] == 2


def test_plan_render_run_report_end_to_end(campaign):
    plan, plan_dir, tmp, env = campaign["plan"], campaign["dir"], campaign["tmp"], campaign["env"]
    kdir = tmp / "kernels"
    assert F.main(["render", str(plan_dir), "--shard", "0", "--dest", str(kdir)]) == 0
    rendered = sorted(d.name for d in kdir.iterdir())
    assert rendered == sorted(k["hash"] for k in plan["kernels"])        # one directory per distinct kernel
    probs = {p["id"]: GemmProblem.from_dict(p["problem"]) for p in plan["problems"]}
    planted = next(k["hash"] for k in plan["kernels"] if k["hash"] != campaign["sk_hash"])
    built = 0
    for k in plan["kernels"]:
        man = json.loads((kdir / k["hash"] / "manifest.json").read_text())
        assert man["hash"] == k["hash"] and KernelConfig.from_dict(man["config"]).to_dict() == k["config"]
        _fake_build(kdir / k["hash"], probs[k["render_problem"]], wrong=k["hash"] == planted)
        built += 1
    assert built == 2
    env.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    env.delenv("CUTEGEN_FAKE_MODE", raising=False)
    out = tmp / "out"
    rcs = [F.main(["run", str(plan_dir), "--shard", str(s), "--kernels", str(kdir), "--out", str(out),
                   "--timeout", "120", "-q"]) for s in (1, 2)]
    recs = [json.loads(line) for f in sorted(out.glob("cases-shard*.jsonl")) for line in f.read_text().splitlines()]
    assert len(recs) == len(plan["cases"]) and {r["case"] for r in recs} == {c["id"] for c in plan["cases"]}
    by = {r["case"]: r for r in recs}
    for c in plan["cases"]:
        r = by[c["id"]]
        if c["kernel"] == planted:
            assert r["verdict"] == "wrong" and 0.05 < r["rel_err"] < 0.2, r
        else:
            assert r["verdict"] == "pass" and r["rel_err"] < 1e-2 and r["launches"] == 2, r
            assert r["plan"] == c["plan"] and r["workspace_bytes"] == 16 + 1024 * LaunchPlan.from_dict(c["plan"]).codes()[0] \
                + 8 * LaunchPlan.from_dict(c["plan"]).codes()[1] + LaunchPlan.from_dict(c["plan"]).codes()[2]
    shard_of_planted = next(k["shard"] for k in plan["kernels"] if k["hash"] == planted)
    assert rcs[shard_of_planted - 1] == 1 and rcs[2 - shard_of_planted] == 0
    summary = json.loads((out / f"summary-shard{shard_of_planted}.json").read_text())
    assert summary["verdicts"] == {"wrong": 1} and summary["failures"][0]["kernel"] == planted

    rep_path = tmp / "report.json"
    assert F.main(["report", str(plan_dir), str(out), "--json", str(rep_path)]) == 1
    rep = json.loads(rep_path.read_text())
    n_sk = sum(c["kernel"] != planted for c in plan["cases"])
    assert rep["verdicts"] == {"pass": n_sk, "wrong": 1} and rep["cases_run"] == n_sk + 1
    assert rep["pairs_run"] == 3 and rep["kernels_run"] == 2
    assert [k["hash"] for k in rep["failing_kernels"]] == [planted]
    # the best separating predicate holds on the failure and on no pass
    best = rep["separating_predicates"][0]
    assert best["failures"] == 1 and best["passes_matching"] == 0


def test_sampler_reuses_kernels_within_its_budget(tmp_path):
    """A random plan: every pair's candidate is one of its problem's top 12 (its kernel hash), the
    kernel budget holds, and kernels repeat across problems."""
    out = tmp_path / "plan"
    # two pairs per problem, at most 3 kernels: 4 pairs hold a kernel twice; problems of one size regime
    # (about 20 of them here) until one ranks a kernel already chosen
    assert F.main(["plan", "--pairs", "4", "--seed", "3", "--out", str(out), "--families", "bf16", "--anchors", "1",
                   "--layouts", "tn", "--alignment", "aligned", "--kernels-max", "3", "--reuse", "1.0", "--second", "1.0",
                   "--max-macs", str(2**30), "--max-problems", "60", "--shards", "1", "--no-cache", "--jobs", "1",
                   "-q"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["pairs"]) == 4 and len(plan["kernels"]) <= 3
    assert max(len(k["pairs"]) for k in plan["kernels"]) >= 2
    assert plan["stats"]["problems_searched"] > len(plan["problems"])     # some problems had no kernel in budget
    probs = {p["id"]: GemmProblem.from_dict(p["problem"]) for p in plan["problems"]}
    cfgs = {k["hash"]: KernelConfig.from_dict(k["config"]) for k in plan["kernels"]}
    pair = plan["pairs"][-1]
    ranked = search(probs[pair["problem"]], top_k=12).ranked
    r = ranked[pair["rank"] - 1]
    assert kernel_hash(probs[pair["problem"]], r.config, "cutlass") == pair["kernel"]
    assert r.config.to_dict() == cfgs[pair["kernel"]].to_dict()
    for p in plan["pairs"]:
        q = probs[p["problem"]]
        assert q.m * q.n * q.k * q.batch <= 2**30 and q.dtype_a == "bf16" and q.blas_layout == "tn"


def test_unbuilt_kernels_are_recorded_and_a_compile_failure_is_a_failure(campaign):
    """No library: a kernel nvcc failed on is build_failed (a finding: the rules called it legal), one
    never compiled (the build deadline) is not_built; a later call with --done skips what ran."""
    plan, plan_dir, tmp = campaign["plan"], campaign["dir"], campaign["tmp"]
    kdir = tmp / "kernels"
    assert F.main(["render", str(plan_dir), "--shard", "0", "--dest", str(kdir)]) == 0
    broken = campaign["sk_hash"]
    (kdir / broken / F.BUILD_FAILED).write_text("nvcc exited with 1\nerror: static assertion failed\n")
    out = tmp / "out"
    assert F.main(["run", str(plan_dir), "--shard", "0", "--kernels", str(kdir), "--out", str(out), "-q"]) == 1
    recs = [json.loads(x) for x in (out / "cases-shard0.jsonl").read_text().splitlines()]
    assert len(recs) == len(plan["cases"])
    for r in recs:
        assert r["verdict"] == ("build_failed" if r["kernel"] == broken else "not_built"), r
    assert all("static assertion" in r["reason"] for r in recs if r["kernel"] == broken)
    rep_path = tmp / "report.json"
    assert F.main(["report", str(plan_dir), str(out), "--json", str(rep_path)]) == 1
    rep = json.loads(rep_path.read_text())
    assert rep["verdicts"]["build_failed"] == sum(c["kernel"] == broken for c in plan["cases"])
    assert [k["hash"] for k in rep["failing_kernels"]] == [broken]
    # a second call with the first call's results renders only the kernels with cases left (not_built)
    kdir2 = tmp / "kernels2"
    assert F.main(["render", str(plan_dir), "--shard", "0", "--dest", str(kdir2), "--done", str(out)]) == 0
    assert sorted(d.name for d in kdir2.iterdir()) == sorted(k["hash"] for k in plan["kernels"] if k["hash"] != broken)


def test_explicit_entries_match_and_kernel_of(tmp_path):
    """--problems: "match" takes the best-ranked candidate with the given fields, "kernel_of" runs that
    kernel on a sibling problem (the other side of a boundary), refused where the kernel does not serve it."""
    sibling = GemmProblem(64, 64, 16000, beta=0.5)            # another K, still 16-byte aligned: same kernel key
    entries = [{"problem": SK.to_dict(), "match": {"tile_scheduler": "stream_k"}},
               {"problem": sibling.to_dict(), "kernel_of": 0}]
    (tmp_path / "p.json").write_text(json.dumps(entries))
    out = tmp_path / "plan"
    assert F.main(["plan", "--problems", str(tmp_path / "p.json"), "--out", str(out), "--shards", "1",
                   "--no-cache", "--jobs", "1", "-q"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [p["rank"] is None for p in plan["pairs"]] == [False, True]
    assert plan["pairs"][0]["kernel"] == plan["pairs"][1]["kernel"] and len(plan["kernels"]) == 1
    assert plan["kernels"][0]["config"]["tile_scheduler"] == "stream_k"
    assert {c["problem"] for c in plan["cases"]} == {"p0000", "p0001"}
    # a sibling of other alignments is another kernel: refused with a one-line reason
    entries[1] = {"problem": GemmProblem(64, 64, 16001, beta=0.5).to_dict(), "kernel_of": 0}
    (tmp_path / "p.json").write_text(json.dumps(entries))
    with pytest.raises(SystemExit, match="not served by kernel"):
        F.main(["plan", "--problems", str(tmp_path / "p.json"), "--out", str(out), "--no-cache", "--jobs", "1", "-q"])
    for bad, msg in (([{"problem": SK.to_dict(), "kernel_of": 0}], "not an earlier entry"),
                     ([{"problem": SK.to_dict(), "ranks": [1], "match": {}}], "one of ranks, match, kernel_of"),
                     ([{"problem": {"m": 0, "n": 1, "k": 1}}], r"\[0\]\.problem\.m"),
                     ({"problem": {}}, "expected a JSON list")):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(SystemExit, match=msg):
            F.read_problems_file(str(tmp_path / "bad.json"))
