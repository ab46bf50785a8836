"""``cutegen tune`` end to end on this CPU: real search, nvMMH, rendering and results database (a fresh file);
fake builder, timer and validator, injected."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cutegen.errors import CutegenError, FieldError
from cutegen.problem import GemmProblem
from cutegen.results import ResultsDB
from cutegen.tuning import Plan, Tuner, make_plan, records_document, records_lines

PROBLEM = GemmProblem.from_dict({"m": 2048, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})
H100 = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "torch_cuda": "13.0"}


class CountingDB(ResultsDB):
    """The real results database (no seed), counting its write transactions."""
    transactions = 0

    def add_many(self, ms):
        self.transactions += 1
        return super().add_many(ms)


def new_db(tmp_path):
    return CountingDB(tmp_path / "results.sqlite", seed=None)


# --- fakes of the GPU side --------------------------------------------------------------------------
class FakeBuilder:
    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def __call__(self, dirs):
        self.calls.append([Path(d) for d in dirs])
        out = {}
        for d in dirs:
            d = Path(d)
            if d.name in self.fail:
                out[str(d)] = (False, "nvcc exited with 1\n  error: fake")
            else:
                (d / "kernel.so").write_bytes(b"fake library of " + d.name.encode())
                out[str(d)] = (True, "")
        return out


class FakeTimer:
    """Times by candidate name (microseconds); ``bad``: fails verification."""

    def __init__(self, times, cublas_us=110.0, bad=()):
        self.times, self.cublas_us, self.bad = times, cublas_us, set(bad)
        self.calls = []

    def device(self):
        return dict(H100)

    def __call__(self, problem, contenders):
        self.calls.append([c["name"] for c in contenders])
        out = {}
        for c in contenders:
            name = c["name"]
            if name == "cublas":
                us = self.cublas_us
            elif c.get("library") is None:
                out[name] = {"status": "missing", "reason": c.get("reason", "")}
                continue
            elif name in self.bad:
                out[name] = {"status": "failed_verification", "reason": "relative error 0.5 >= 0.01",
                             "verify": {"ok": False, "rel_err": 0.5}}
                continue
            else:
                us = self.times[name]
            out[name] = {"status": "ok", "median_ms": us / 1e3, "times_ms": [us / 1e3] * 50,
                         "verify": {"ok": True, "rel_err": 1e-3}}
        return out


class FakeValidator:
    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def __call__(self, directory, problem, config, library):
        self.calls.append(Path(directory).name)
        assert Path(library).is_file()
        if Path(directory).name in self.fail:
            return False, "ragged_m: relative Frobenius error 3.1e-01 >= tolerance 0.01"
        return True, "9/9 cases"


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    make_plan([(PROBLEM.name, PROBLEM)], d, top_k=3, device_kind="h100-sxm", single=True)
    return d


def test_plan_renders_search_nvmmh_and_default(plan_dir):
    plan = Plan.load(plan_dir)
    assert plan.single and plan.top_k == 3
    names = [c.name for c in plan.problems[0].candidates]
    assert names == ["search1", "search2", "search3", "nvmmh", "cutlass_default"]
    for c in plan.problems[0].candidates:
        man = json.loads((plan_dir / c.directory / "manifest.json").read_text())
        assert man["hash"] == c.kernel_hash and (plan_dir / c.directory / "kernel.cu").is_file()
    default = plan.problems[0].candidates[-1]
    assert default.backend == "cutlass_builder" and default.config.tile_shape == (128, 256, 64)
    assert plan.problems[0].nvmmh["chosen_rank"] is not None


def _tuner(plan_dir, out, db, **kw):
    return Tuner(Plan.load(plan_dir), plan_dir, out, db=db, single=True, **kw)


def test_tune_end_to_end_with_fakes(plan_dir, tmp_path):
    db = new_db(tmp_path)
    builder = FakeBuilder(fail={"cutlass_default"})
    timer = FakeTimer({"search1": 120.0, "search2": 90.0, "search3": 100.0, "nvmmh": 80.0}, bad={"nvmmh"})
    validator = FakeValidator(fail={"search2"})
    out = tmp_path / "kernel"
    [o] = _tuner(plan_dir, out, db, builder=builder, timer=timer, validator=validator).run()

    # search2 was fastest but failed validation; nvmmh failed verification; the default did not build
    assert o.chosen["name"] == "search3"
    assert validator.calls == ["search2", "search3"]
    assert timer.calls == [["search1", "search2", "search3", "nvmmh", "cutlass_default", "cublas"]]
    status = {c["name"]: c["status"] for c in o.candidates}
    assert status == {"search1": "ok", "search2": "failed_validation", "search3": "ok",
                      "nvmmh": "failed_verification", "cutlass_default": "missing"}
    assert "build failed" in next(c for c in o.candidates if c["name"] == "cutlass_default")["reason"]

    # the kernel written is search3's, its manifest says it was tuned and by how much it won
    src = plan_dir / PROBLEM.name / "search3"
    assert (out / "kernel.cu").read_text() == (src / "kernel.cu").read_text()
    assert (out / "kernel.so").read_bytes() == b"fake library of search3"
    man = json.loads((out / "manifest.json").read_text())
    t = man["tuning"]
    assert t["tuned"] and t["source"] == "measured" and t["chosen"]["name"] == "search3"
    assert t["speedup_vs_first_pick"] == pytest.approx(1.2)
    assert t["speedup_vs_cublas"] == pytest.approx(1.1)
    assert t["speedup_vs_nvmmh"] is None          # nvMMH's kernel computed a wrong answer: no time
    assert [c["name"] for c in t["candidates"]] == ["search1", "search2", "search3", "nvmmh", "cutlass_default"]
    assert man["hash"] == json.loads((src / "manifest.json").read_text())["hash"]

    # every timed kernel is recorded in one transaction; only verified and validated ones count as validated
    assert db.transactions == 1
    rows = db.measurements()
    rec = {m.source.rsplit("/search", 1)[-1]: m for m in rows}
    assert sorted(rec) == ["1", "2", "3"]
    assert len({m.source.split("#")[0] for m in rows}) == 1 and len({m.measured_at for m in rows}) == 1
    assert [rec[r].validated for r in ("1", "2", "3")] == [True, False, True]
    assert all(m.device_kind == "h100-sxm" and m.cublas_us == pytest.approx(110.0) for m in rows)
    assert rec["3"].median_us == pytest.approx(100.0) and len(rec["3"].times_us) == 50
    doc = records_document([o], rows, H100, {})
    assert doc["schema"] == "cutegen-tune/1" and len(doc["measurements"]) == 3
    json.dumps(doc)
    # the records file is what `cutegen db import` reads
    from cutegen.results import importers
    (tmp_path / "records.jsonl").write_text(records_lines(rows))
    assert sorted(m.record_key for m in importers.load(tmp_path / "records.jsonl")) == \
        sorted(m.record_key for m in rows)

    # --- the same problem again: answered from the database, no GPU (no timer at all)
    out2 = tmp_path / "again"
    builder2 = FakeBuilder()
    [o2] = _tuner(plan_dir, out2, db, builder=builder2, timer=None, validator=None, device_kind="h100-sxm").run()
    assert o2.source == "database"
    assert o2.chosen["config"] == rec["3"].config.to_dict()       # search2 was faster but not validated
    assert json.loads((out2 / "manifest.json").read_text())["tuning"]["source"] == "database"
    assert (out2 / "kernel.cu").read_text() == (src / "kernel.cu").read_text()
    assert builder2.calls == [[out2]]
    assert db.transactions == 1

    # --- another device kind has no answer, and without a GPU that is an error naming the cause
    with pytest.raises(CutegenError, match="no GPU"):
        _tuner(plan_dir, tmp_path / "h200", db, builder=FakeBuilder(), timer=None, device_kind="h200").run()

    # --- --force measures again
    timer3 = FakeTimer({"search1": 95.0, "search2": 99.0, "search3": 97.0, "cutlass_default": 150.0}, bad={"nvmmh"})
    [o3] = _tuner(plan_dir, tmp_path / "forced", db, builder=FakeBuilder(), timer=timer3, validator=FakeValidator(),
                  force=True).run()
    assert len(timer3.calls) == 1 and o3.source == "measured" and o3.chosen["name"] == "search1"
    assert db.transactions == 2


def test_no_device_kind_without_gpu_is_a_clear_error(plan_dir, tmp_path):
    with pytest.raises(CutegenError, match="--device-kind"):
        _tuner(plan_dir, tmp_path / "k", new_db(tmp_path), builder=FakeBuilder(), timer=None).run()


def test_no_candidate_passes(plan_dir, tmp_path):
    db = new_db(tmp_path)
    timer = FakeTimer({}, bad={"search1", "search2", "search3", "nvmmh"})
    [o] = _tuner(plan_dir, tmp_path / "k", db, builder=FakeBuilder(fail={"cutlass_default"}), timer=timer,
                 validator=FakeValidator()).run()
    assert o.chosen is None and not (tmp_path / "k").exists()
    assert db.measurements() == [] and db.transactions == 0


def test_cli_argument_errors():
    from cutegen.cli import main
    assert main(["tune", "--suite", "bench/suite.toml", "--m", "1", "--n", "1", "--k", "1"]) == 2
    assert main(["tune", "--only", "x"]) == 2
    assert main(["tune", "--iters", "10"]) == 2


# --- DSL screening --------------------------------------------------------------------------------------
def test_screening_families_from_the_committed_comparisons():
    from cutegen.tuning import screening
    fams = screening.default_families()
    long_coop = fams[("bf16", "cooperative", "tma_warp_specialized_cooperative", "long")]
    assert long_coop.screenable and len(long_coop.shapes) >= 5 and long_coop.spread <= 1.10
    assert [k for k, f in fams.items() if f.screenable] == [long_coop.key]
    short = fams[("bf16", "cooperative", "tma_warp_specialized_cooperative", "short")]
    assert short.spread <= 1.10 and len(short.shapes) < screening.MIN_SHAPES and not short.screenable
    assert not any(f.screenable for k, f in fams.items() if k[0] == "e4m3")   # no two-level promotion in the DSL
    assert screening.finalists({"a": 3.0, "b": 1.0, "c": 2.0}, 2) == ["b", "c"]


def test_tune_with_dsl_screen(tmp_path):
    from cutegen.tuning import screening
    from cutegen.tuning.plan import dsl_screen
    # every bf16 cooperative candidate is screenable in this made-up family table
    key = ("bf16", "cooperative", "tma_warp_specialized_cooperative", "long")
    fams = {key: screening.Family(key, [1.0, 1.01, 0.99], True, {(1, 1, 1), (2, 2, 2), (3, 3, 3)})}
    built_dsl = []

    def fake_dsl_build(problem, config, out_dir):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "kernel.so").write_bytes(b"dsl")
        built_dsl.append(Path(out_dir).name)

    big = GemmProblem.from_dict({"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "layout": "tn"})
    d = tmp_path / "plan"
    plan = make_plan([(big.name, big)], d, top_k=4, single=True, with_nvmmh=False, with_default=False,
                     screen=dsl_screen(fams, fake_dsl_build), finalists=2)
    twins = [c.name for c in plan.problems[0].candidates if c.dsl_directory]
    assert len(twins) >= 3 and built_dsl == [f"{n}.dsl" for n in twins]
    dsl_times = {f"{n}.dsl": 100.0 + i for i, n in enumerate(reversed(twins))}   # the last two are fastest
    timer = FakeTimer({**dsl_times, **{c.name: 200.0 - (c.rank or 0) for c in plan.problems[0].candidates}})
    builder = FakeBuilder()
    db = new_db(tmp_path)
    [o] = Tuner(plan, d, tmp_path / "k", db=db, builder=builder, timer=timer, validator=FakeValidator(),
                single=True).run()
    finalists = set(twins[-2:])
    assert timer.calls[0] == [f"{n}.dsl" for n in twins] + ["cublas"]
    assert {p.name for p in builder.calls[0]} == {c.name for c in plan.problems[0].candidates
                                                  if c.name in finalists or not c.dsl_directory}
    st = {c["name"]: c["status"] for c in o.candidates}
    assert {n for n, s in st.items() if s == "screened_out"} == set(twins) - finalists
    assert o.chosen["name"] in finalists | {c.name for c in plan.problems[0].candidates if not c.dsl_directory}
    backends = sorted(m.backend for m in db.measurements())
    assert backends.count("dsl") == len(twins) and backends.count("cutlass") == len(o.candidates) - len(twins) + 2


def test_builder_deadline_reports_the_rest_not_built(tmp_path):
    import time
    from cutegen.tuning.gpu import Builder
    said = []
    b = Builder(jobs=1, say=said.append, deadline=time.monotonic() - 1)
    out = b([tmp_path / "a", tmp_path / "b"])
    assert out == {str(tmp_path / n): (False, "not built: the build deadline passed") for n in ("a", "b")}
    assert "2 kernel directories not built" in said[0]


def test_timing_deadline_skips_the_rest(plan_dir, tmp_path):
    import time
    db = new_db(tmp_path)
    timer = FakeTimer({"search1": 1.0})
    [o] = _tuner(plan_dir, tmp_path / "k", db, builder=FakeBuilder(), timer=timer, validator=FakeValidator(),
                 deadline=time.monotonic() - 1).run()
    assert o.source == "skipped" and o.chosen is None and timer.calls == [] and db.measurements() == []


def test_builder_batches_count_distinct_sources(tmp_path):
    from cutegen.tuning.gpu import Builder
    dirs = []
    for i, src in enumerate("aabcadde"):
        d = tmp_path / f"k{i}"
        d.mkdir()
        (d / "kernel.cu").write_text(src)
        dirs.append(d)
    batches = Builder(jobs=1)._batches(dirs)     # two distinct sources per batch
    assert [[d.name for d in b] for b in batches] == [["k0", "k1", "k2"], ["k3", "k4", "k5", "k6"], ["k7"]]


def test_database_answer_renders_a_kernel_the_plan_lacks(plan_dir, tmp_path):
    from cutegen.results import Measurement
    plan = Plan.load(plan_dir)
    cfg = plan.problems[0].candidates[0].config.replace(raster_order="along_n", raster_swizzle=4)
    assert all(c.config != cfg for c in plan.problems[0].candidates)
    db = new_db(tmp_path)
    db.add(Measurement(problem=PROBLEM, config=cfg, device_kind="h200", median_us=50.0, validated=True,
                       timing_method="cuda-events/median", source="elsewhere", measured_at="2026-11-23"))
    [o] = _tuner(plan_dir, tmp_path / "k", db, builder=FakeBuilder(), timer=None, device_kind="h200").run()
    assert o.source == "database"
    man = json.loads((tmp_path / "k" / "manifest.json").read_text())
    assert man["config"] == cfg.to_dict() and man["tuning"]["chosen"]["median_us"] == 50.0
    assert 'raster_order = "along_n"' in (tmp_path / "k" / "kernel.cu").read_text()


def test_measuring_on_another_kind_than_asked_is_refused(plan_dir, tmp_path):
    with pytest.raises(CutegenError, match="h200.*h100-sxm"):
        _tuner(plan_dir, tmp_path / "k", new_db(tmp_path), builder=FakeBuilder(), timer=FakeTimer({}),
               device_kind="h200").run()


def test_runner_timer_isolates_a_contender_that_hangs():
    from cutegen.runner import Reply
    from cutegen.tuning.gpu import RunnerTimer

    class FakeWorker:
        def __init__(self):
            self.tasks = []

        def request(self, task, timeout):
            names = [c["name"] for c in task["contenders"]]
            self.tasks.append((names, timeout))
            if "bad" in names:
                return Reply("hang", None, "no answer within 90 s; worker pid 1 killed", timeout, True)
            return Reply("ok", {"results": {n: {"status": "ok", "median_ms": 0.1} for n in names}})

    t = RunnerTimer(timeout=90)
    t.worker = FakeWorker()
    out = t(PROBLEM, [{"name": "good", "library": "a.so"}, {"name": "bad", "library": "b.so"}, {"name": "cublas"}])
    assert out["good"]["status"] == "ok" and out["cublas"]["status"] == "ok"
    assert out["bad"] == {"status": "hang", "reason": "no answer within 90 s; worker pid 1 killed"}
    assert t.worker.tasks == [(["good", "bad", "cublas"], 90), (["good"], 30.0), (["bad"], 30.0), (["cublas"], 30.0)]
    assert t.timeout == 90


def test_plan_for_a_device_kind_ranks_as_search_device(tmp_path):
    from cutegen.search import search
    from cutegen.tuning.plan import device_search
    plan = make_plan([(PROBLEM.name, PROBLEM)], tmp_path, top_k=2, with_nvmmh=False, with_default=False,
                     search=device_search("h100-pcie", tmp_path / "empty.sqlite"))
    assert plan.ranking == "device h100-pcie"
    want = [r.config for r in search(PROBLEM, 2, device="h100-pcie").ranked]   # the kind has no exact measurements
    assert [c.config for c in plan.problems[0].candidates] == want


def test_a_stream_k_candidate_is_timed_and_recorded_under_the_search_plan(tmp_path):
    """The search's plan for a stream-K candidate goes into its manifest, the timing request and its record
    (before, tune timed every stream-K candidate through cutegen_gemm and recorded no plan)."""
    from cutegen.launch_plan import LaunchPlan
    from cutegen.results.importers import load

    bench = Path(__file__).resolve().parents[1] / "bench" / "results" / "2026-11-24-nvidia-h100-80gb-hbm3-llm.json"
    ref = next(m for m in load(bench) if m.source.endswith("#llama70b_o_m128_bf16/cutegen"))   # split-K x2 there
    persistent = ref.config.replace(tile_scheduler="persistent")
    # a search of (config, cost, plan) and one of the older (config, cost) shape, side by side
    search = lambda p, k: [(ref.config, 56.2, LaunchPlan("split_k", 2)), (persistent, 60.0)]  # noqa: E731
    d = tmp_path / "plan"
    make_plan([(ref.problem.name, ref.problem)], d, top_k=2, search=search, with_nvmmh=False, with_default=False,
              single=True)
    man = json.loads((d / ref.problem.name / "search1" / "manifest.json").read_text())
    assert man["launch_plan"] == {"decomposition": "split_k", "splits": 2, "reduction": "deterministic"}

    class PlanTimer(FakeTimer):
        def __call__(self, problem, contenders):
            self.seen = {c["name"]: c.get("launch_plan") for c in contenders}
            return super().__call__(problem, contenders)

    timer = PlanTimer({"search1": 62.0, "search2": 65.0})
    db = new_db(tmp_path)
    _tuner(d, tmp_path / "kernel", db, builder=FakeBuilder(), timer=timer, validator=FakeValidator()).run()
    assert timer.seen == {"search1": man["launch_plan"], "search2": None, "cublas": None}
    rec = {m.source.rsplit("/", 1)[-1]: m for m in db.measurements()}
    assert rec["search1"].launch_plan == man["launch_plan"] and rec["search2"].launch_plan is None
