"""What pack --tune's GPU step takes on W GPU workers (cutegen/packs/scaling.py), and measure_gpu's batches of
W tasks on an executor with W GPU workers. Synthetic logs and records with known answers: the logic, never a
reported figure (those come from the committed runs, NOTES.md)."""
from __future__ import annotations

import gzip
import json

import pytest

from cutegen.packs import scaling


def test_list_scheduling_keeps_the_submission_order():
    """Each item to the first free slot, in order (not longest first): [1, 1, 10] on 2 slots ends at 11 (the
    10 starts when a 1 is done), where longest-first would end at 10; 4 x 4 on 2, 3, 4 slots: 8, 8, 4."""
    assert scaling.makespan([1, 1, 10], 2) == 11
    assert [scaling.makespan([4] * 4, s) for s in (2, 3, 4)] == [8, 8, 4]
    assert scaling.makespan([], 4) == 0.0


def _build_log(stamps):
    return "".join(f"[10:00:{s:02d}] k{i:02d}_{'ab' * 8}: built\n" for i, s in stamps)


def test_compile_times_come_back_from_the_completion_stamps():
    """2 slots, the build started at 10:00:00 (wall 10 s to the last stamp): k00 done at 4 and k01 at 5 started at
    0; k02 (done 9) took the slot k00 freed at 4, k03 (done 10) the one k01 freed at 5: 4, 5, 5, 5 s. Replayed on
    those 2 slots they end at the measured 10 s; on 4 slots (2 workers) at the longest, 5 s."""
    log = _build_log([(2, 9), (0, 4), (3, 10), (1, 5)]) + "noise line\n"
    got = scaling.compile_times(log, jobs=2, wall_s=10)
    assert got == [("k00_" + "ab" * 8, 4), ("k01_" + "ab" * 8, 5), ("k02_" + "ab" * 8, 5), ("k03_" + "ab" * 8, 5)]
    durations = [d for _, d in got]
    assert scaling.makespan(durations, 2) == 10 and scaling.makespan(durations, 4) == 5
    with pytest.raises(ValueError, match="no .* built"):
        scaling.compile_times("nothing\n", 2, 10)


def _records(n, k, ms, median_us, cands=2, cublas_us=10.0):
    return [{"problem": {"m": m, "n": n, "k": k}, "median_us": median_us, "times_us": [median_us] * 20,
             "cublas_us": cublas_us} for m in ms for _ in range(cands)]


def test_the_timing_model_fits_the_host_cost_and_predicts_the_split():
    """Two (N, K) tasks whose wall times are their launches' GPU time plus 50 us per launch: the fit finds 50 us
    and reproduces both tasks; on 2 workers the timing is the longer task, and split one task per shape on 2
    workers about half the total."""
    recs = _records(64, 64, [1, 2, 3, 4], 100.0, cands=2000) + _records(128, 64, [1, 2], 300.0, cands=2000)
    costs = scaling.shape_costs(recs)
    launches = scaling.MATMUL_LAUNCHES + 2000 * (20 + 5 + scaling.VALIDATE_LAUNCHES)
    assert all(c.launches == launches for c in costs)
    truth = {}
    for c in costs:
        truth[(c.n, c.k)] = truth.get((c.n, c.k), 0.0) + c.gpu_s + c.launches * 50e-6
    log = "pack-tune: ...\n" + "".join(f"  N={n} K={k}: 4 shapes, 800 records ({t:.0f} s)\n" for (n, k), t in (
        ((64, 64), truth[(64, 64)]), ((128, 64), truth[(64, 64)] + truth[(128, 64)])))
    tasks = scaling.task_times(log)
    assert [nk for nk, *_ in tasks] == [(64, 64), (128, 64)]
    model = scaling.fit_timing(costs, tasks)
    # the log rounds to whole seconds: the fit is exact up to that
    assert model.per_launch_s == pytest.approx(50e-6, rel=0.2) and model.per_shape_s >= 0
    assert model.residual < 0.05
    per_task = [sum(model.shape_s(c) for c in costs if (c.n, c.k) == nk) for nk in ((64, 64), (128, 64))]
    assert scaling.makespan(per_task, 2) == pytest.approx(max(truth.values()), rel=0.05)
    per_shape = [model.shape_s(c) for c in costs]
    assert scaling.makespan(per_shape, 2) < 0.6 * sum(truth.values())


def test_predict_reproduces_one_worker_and_shrinks_with_more(tmp_path):
    """The whole prediction on a synthetic run: one worker is the measured build and (to the fit) timing; two
    workers halve the build of 4 equal kernels and the timing of two equal tasks; the CLI prints the table,
    writes the JSON, and refuses a missing file in one line."""
    build = _build_log([(0, 5), (1, 5), (2, 10), (3, 10)])          # 2 jobs, wall 10: every compile 5 s
    recs = _records(64, 64, [1, 2], 1000.0, cands=1000) + _records(128, 64, [1, 2], 1000.0, cands=1000)
    costs = scaling.shape_costs(recs)
    per_task = sum(c.gpu_s + c.launches * 20e-6 for c in costs if c.n == 64)
    log = f"  N=64 K=64: 2 shapes, 20 records ({per_task:.3f} s)\n"
    log = log.replace(f"({per_task:.3f} s)", f"({round(per_task)} s)")
    log += f"  N=128 K=64: 2 shapes, 20 records ({round(2 * per_task)} s)\n"
    pred = scaling.predict(build, 10, 2, log, recs, [1, 2, 4])
    rows = {r["workers"]: r for r in pred["rows"]}
    assert rows[1]["build_s"] == 10 and rows[2]["build_s"] == 5 and rows[4]["build_s"] == 5
    assert rows[2]["timing_s"] == pytest.approx(rows[1]["timing_s"] / 2, rel=0.01)
    assert rows[1]["timing_s"] == pytest.approx(pred["measured_timing_s"], rel=0.25)
    assert rows[4]["timing_split_per_shape_s"] < rows[4]["timing_s"]
    b, t, r = tmp_path / "build.txt", tmp_path / "log.txt", tmp_path / "m.jsonl.gz"
    b.write_text(build)
    t.write_text(log)
    with gzip.open(r, "wt") as f:
        f.write("".join(json.dumps(x) + "\n" for x in recs))
    out = tmp_path / "p.json"
    assert scaling.main(["--build-log", str(b), "--build-wall", "10", "--jobs", "2", "--tune-log", str(t),
                         "--records", str(r), "--json", str(out)]) == 0
    assert [x["workers"] for x in json.loads(out.read_text())["rows"]] == [1, 2, 4, 8]
    with pytest.raises(SystemExit):
        scaling.main(["--build-log", str(tmp_path / "none"), "--build-wall", "10", "--tune-log", str(t),
                      "--records", str(r)])


class _Executor:
    """An executor with ``slots`` GPU workers that runs here and notes each map_gpu call's size."""
    name = "fake"

    def __init__(self, slots):
        from cutegen.executor import LocalExecutor
        self.slots, self.calls, self.inner = slots, [], LocalExecutor(progress=None)

    def gpu_slots(self):
        return self.slots

    def map_gpu(self, fn, items, names=None, details=None):
        self.calls.append(len(items))
        return self.inner.map_gpu(fn, items, names=names)


def test_measure_gpu_sends_as_many_tasks_at_once_as_the_executor_has_gpu_workers(tmp_path, monkeypatch):
    """The pack --tune GPU step on an executor with 3 GPU workers submits its 4 (N, K) tasks as 3 + 1 (one at a
    time before: more workers ran nothing faster), with 1 as 1 + 1 + 1 + 1, and records the same pairs."""
    from cutegen.packs import measure_gpu, tune
    from cutegen.packs.select import class_key
    from test_pack_tune import _configs, _setup
    f, t, points, off = _setup(tmp_path, m_max=64)
    a, b = _configs(points[0].problem)
    cands = [tune.Candidate(class_key(points[0].problem), cfg, points[0].problem, ["test"], 1.0) for cfg in (a, b)]
    files = tune.plan_files(str(f), t, cands, points, off, "cand", [])
    plan_dir = tmp_path / "plan" / "h200"
    plan = json.loads(files["tune.json"])
    # four (N, K) groups: the plan's one group copied with other N
    g0 = plan["groups"][0]
    plan["groups"] = [{**g0, "n": g0["n"] + 8 * j, "shapes": [{**s, "problem": {**s["problem"], "n": g0["n"] + 8 * j}}
                                                           for s in g0["shapes"]]} for j in range(4)]
    files["tune.json"] = json.dumps(plan)
    for rel, text in files.items():
        (plan_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (plan_dir / rel).write_text(text)

    def fake(item):
        _, _, group, _, todo, _ = item
        rows = [{"m": s["m"], "matmul_us": 25.0, "kernels": {str(i): {"us": 10.0, "times": [10.0], "rel_err": 0.0,
                                                                       "ok": True} for i in todo[str(s["m"])]}}
                for s in group["shapes"] if str(s["m"]) in todo]
        return {"device": {"name": "NVIDIA H200", "sm_count": 132, "torch_cuda": "13.0"}, "shapes": rows, "skipped": []}
    monkeypatch.setattr(measure_gpu, "measure_group", fake)
    got = {}
    for slots in (3, 1):
        ex = _Executor(slots)
        s = measure_gpu.run(str(plan_dir), "x.so", str(tmp_path / f"db{slots}.sqlite"), say=lambda m: None, executor=ex)
        got[slots] = (ex.calls, s["recorded"])
    assert got[3][0] == [3, 1] and got[1][0] == [1, 1, 1, 1]
    assert got[3][1] == got[1][1] == 4 * 2 * len(g0["shapes"])
