"""bench/suites.py (issue 24, "Measure"): chunking, ratios, merging, the targets, bad inputs, the plan's first pick,
and the device half end to end on the CPU (stand-in kernel libraries, CUTEGEN_RUNNER_DEVICE=cpu; no GPU)."""
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from cutegen import GemmProblem, KernelConfig

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_suites", ROOT / "bench" / "suites.py")
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)


# -- chunks -----------------------------------------------------------------------------------------

def test_chunks_cover_every_problem_once_in_order_and_differ_by_at_most_one():
    items = list(range(65))
    parts = [S.chunk_slice(items, i, 2) for i in (1, 2)]
    assert [len(p) for p in parts] == [33, 32] and parts[0] + parts[1] == items
    parts = [S.chunk_slice(items, i, 3) for i in (1, 2, 3)]
    assert [len(p) for p in parts] == [22, 22, 21] and sum(parts, []) == items
    assert S.chunk_slice(items, 1, 1) == items
    assert [S.chunk_slice([1, 2], i, 2) for i in (1, 2)] == [[1], [2]]     # N = len: one each
    with pytest.raises(S.SuitesError, match="only 2 problems"):            # N = len + 1: one part would be empty
        S.chunk_slice([1, 2], 1, 3)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "1", "1/2/3", ""])
def test_a_bad_chunk_is_named(text):
    with pytest.raises(S.SuitesError, match="--chunk"):
        S.parse_chunk(text)


def test_chunk_bounds_are_inclusive():
    assert S.parse_chunk("1/2") == (1, 2) and S.parse_chunk("2/2") == (2, 2)


# -- ratios and statistics ---------------------------------------------------------------------------

def test_ratio_is_cublas_time_over_the_kernels():
    assert S.ratio(10.0, 8.0) == pytest.approx(1.25)       # the kernel is faster: above 1
    assert S.ratio(8.0, 10.0) == pytest.approx(0.8)
    assert S.ratio(None, 8.0) is None and S.ratio(10.0, None) is None and S.ratio(0.0, 8.0) is None


def test_stats_floor_is_strict_and_missing_ratios_are_listed():
    s = S.stats([("a", 0.9), ("b", 0.8999), ("c", 1.2), ("d", None)])
    assert s["under"] == ["b"]                  # 0.9 itself is not under the floor; 0.8999 is
    assert s["min_name"] == "b" and s["min"] == pytest.approx(0.8999)
    assert s["missing"] == ["d"] and s["n"] == 3
    assert s["geomean"] == pytest.approx(math.exp((math.log(0.9) + math.log(0.8999) + math.log(1.2)) / 3))
    assert S.stats([("a", None)])["geomean"] is None


# -- merging runs -----------------------------------------------------------------------------------

def _problem(m, n, k, dtype="bf16"):
    return GemmProblem(m, n, k, dtype_a=dtype, dtype_b=dtype, dtype_c="bf16", dtype_d="bf16").to_dict()


def _run(label, date, rows, kind="h200", tune=False):
    """A run document as `suites.py time` writes it; rows: (suite, name, dtype, cublas, first, default, tuned)."""
    probs = []
    for suite, name, dtype, cub, first, default, tuned in rows:
        probs.append({"suite": suite, "name": name, "problem": _problem(256, 256, 256, dtype), "tune": tune,
                      "cublas": {"us": cub, "kernel": f"nvjet_{name}"},
                      "first": {"us": first, "config_name": "f", "status": "ok" if first else "failed_validation"},
                      "default": {"us": default, "config_name": "d", "status": "ok"},
                      "tuned": {"us": tuned, "config_name": "t", "timed": 5} if tune else None})
    return {"schema": S.RUN_SCHEMA, "label": label, "date": date, "device": {"name": "NVIDIA H200", "kind": kind},
            "versions": {"torch": "2.11"}, "problems": probs}


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_merge_keeps_first_picks_from_the_plain_run_and_tuned_from_the_tune_run(tmp_path):
    plain = _run("midsize", "2026-11-26T16:00:00+00:00", [
        ("midsize", "a", "bf16", 10.0, 12.5, 13.0, None), ("midsize", "b", "bf16", 10.0, 7.0, 11.0, None),
        ("llm", "c", "e4m3", 10.0, 10.0, 20.0, None)])
    # the tune run is later and re-times a's first pick (a different process): its cuBLAS and first pick do not
    # replace the plain run's, its tuned pick is taken with its own cuBLAS time
    tune = _run("tune", "2026-11-26T17:00:00+00:00", [("midsize", "a", "bf16", 11.0, 13.0, 14.0, 10.0)], tune=True)
    rows, headers = S.load_rows([_write(tmp_path, "t.json", tune), _write(tmp_path, "p.json", plain)])
    by = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == ["a", "b", "c"] and len(headers) == 2
    assert by["a"]["first_vs_cublas"] == pytest.approx(0.8) and by["a"]["cublas_us"] == 10.0
    assert by["a"]["tuned_vs_cublas"] == pytest.approx(1.1) and by["a"]["tuned_cublas_us"] == 11.0
    assert by["a"]["tune"] and not by["b"]["tune"] and len(by["a"]["from"]) == 2
    s = S.summarize(rows)
    f = s["midsize"]["bf16"]["first"]
    assert f["geomean"] == pytest.approx(math.sqrt(0.8 * 10 / 7)) and f["under"] == ["a"]
    assert s["midsize"]["bf16"]["tuned"]["n"] == 1
    # the suite's tuned figure counts the untuned problem b at its first pick
    assert s["midsize"]["bf16"]["tuned_or_first"]["geomean"] == pytest.approx(math.sqrt(1.1 * 10 / 7))
    assert s["llm"]["e4m3"]["first"]["geomean"] == pytest.approx(1.0)
    lines = S.target_lines(s)
    assert any(line.startswith("midsize bf16 first picks none under") and line.endswith("MISSED") for line in lines)
    assert any(line.startswith("midsize bf16 first picks geomean") and line.endswith("MET") for line in lines)
    assert any(line.startswith("llm e4m3 first picks geomean >= 1.05x") and line.endswith("MISSED") for line in lines)
    assert any(line.startswith("midsize bf16 tuned") and line.endswith("-> MET") for line in lines)


def test_a_later_plain_run_replaces_an_earlier_one_and_a_report_merges_again(tmp_path):
    a = _run("x", "2026-11-26T16:00:00+00:00", [("s", "p", "bf16", 10.0, 5.0, 5.0, None)])
    b = _run("x", "2026-11-26T16:30:00+00:00", [("s", "p", "bf16", 10.0, 20.0, 5.0, None)])
    rows, _ = S.load_rows([_write(tmp_path, "b.json", b), _write(tmp_path, "a.json", a)])
    assert rows[0]["first_vs_cublas"] == pytest.approx(0.5)
    rep = tmp_path / "rep.json"
    assert S.main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(rep)]) == 0
    again, _ = S.load_rows([str(rep)])
    assert again[0]["first_vs_cublas"] == pytest.approx(0.5)


def test_worst_ranks_missing_first_picks_first_and_keeps_to_the_suites():
    rows = [{"suite": "m", "name": "a", "first_vs_cublas": 0.95}, {"suite": "m", "name": "b", "first_vs_cublas": None},
            {"suite": "m", "name": "c", "first_vs_cublas": 0.7}, {"suite": "l", "name": "d", "first_vs_cublas": 0.5}]
    assert [r["name"] for r in S.worst(rows, 2, {"m"})] == ["b", "c"]
    assert [r["name"] for r in S.worst(rows, 9)] == ["b", "d", "c", "a"]
    with pytest.raises(S.SuitesError, match="--tune-worst"):
        S.worst(rows, 0)


def test_tune_order_puts_new_tiles_then_new_structures_then_raster_variants():
    from types import SimpleNamespace
    base = {"tile_shape": [128, 128, 64], "cluster_shape": [1, 1, 1], "mainloop_schedule": "pingpong",
            "raster_order": "heuristic", "raster_swizzle": 1}

    def cand(**kw):
        cfg = {**base, **kw}
        return SimpleNamespace(config=SimpleNamespace(to_dict=lambda cfg=cfg: cfg))
    have = [{"config": base}]
    ranked = [cand(raster_order="along_m"),                       # 0: the held structure, another raster order
              cand(cluster_shape=[2, 1, 1]),                      # 1: the held tile, a new cluster
              cand(tile_shape=[64, 256, 64]),                     # 2: a new tile
              cand(raster_swizzle=2),                             # 3: the held structure again
              cand(tile_shape=[64, 256, 64], raster_swizzle=4),   # 4: a raster variant of 2
              cand(swap_ab=True),                                 # 5: a new orientation
              cand(mainloop_schedule="cooperative")]              # 6: a new schedule
    assert S.tune_order(ranked, have) == [2, 5, 6, 1, 0, 3, 4]
    assert S.tune_order(ranked, have, variants=True) == list(range(7))
    assert S.tune_order([], have) == []


# -- bad inputs: one line, exit status 2 ------------------------------------------------------------

def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "suites.py"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_bad_result_files_get_one_line_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "cutegen-tune/1"}))
    (tmp_path / "list.json").write_text("[1, 2]")
    h100 = _write(tmp_path, "h100.json", _run("x", "2026", [("s", "p", "bf16", 1.0, 1.0, 1.0, None)], kind="h100-sxm"))
    h200 = _write(tmp_path, "h200.json", _run("x", "2026", [("s", "p", "bf16", 1.0, 1.0, 1.0, None)]))
    cases = [([str(tmp_path / "absent.json")], "absent.json: no such file"),
             ([str(tmp_path / "bad.json")], "bad.json: not valid JSON"),
             ([str(tmp_path / "other.json")], "schema 'cutegen-tune/1'"),
             ([str(tmp_path / "list.json")], "expected a JSON object"),
             ([h100, h200], "different device kinds (h100-sxm, h200)")]
    for files, message in cases:
        r = _cli("report", *files)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("suites.py report: error: ") and message in r.stderr


def test_bad_plan_inputs_get_one_line_errors(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[[problem]]\nname = "a"\nm = 64\nn = 64\nk = 64\n')
    cases = [(["plan", "--suite", str(tmp_path / "none.toml")], "no such suite file"),
             (["plan", "--suite", str(suite), "--only", "zzz"], "--only: not in"),
             (["plan", "--suite", str(suite), "--chunk", "2/1"], "--chunk"),
             (["plan", "--suite", str(suite), "--chunk", "1/2"], "only 1 problems to split"),
             (["plan", "--suite", str(suite), "--tune-worst", "3"], "--tune-worst needs --from"),
             (["plan", "--suite", str(suite), "--tune", "zzz"], "--tune: not among"),
             (["plan", "--suite", str(suite), "--tune-compiles", "1"], "--tune-compiles"),
             (["plan", "--suite", str(suite), "--label", "../x"], "--label"),
             (["time", str(tmp_path / "noplan"), "--json", str(tmp_path / "o.json")], "no such file (a suites plan")]
    for args, message in cases:
        r = _cli(*args, "--out", str(tmp_path / "o")) if args[0] == "plan" else _cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and message in r.stderr, (args, r.stderr)
    (tmp_path / "o2").mkdir()
    (tmp_path / "o2" / "keep.txt").write_text("mine")
    r = _cli("plan", "--suite", str(suite), "--out", str(tmp_path / "o2"))
    assert r.returncode == 2 and "not removing it" in r.stderr and (tmp_path / "o2" / "keep.txt").is_file()


# -- the plan: the first pick is generate's ---------------------------------------------------------

def test_plan_first_pick_is_generates_default_is_shared_and_tune_stays_within_its_compiles(tmp_path):
    from cutegen._api import generate
    from cutegen.search import ranking
    suite = tmp_path / "mini.toml"
    suite.write_text('[[problem]]\nname = "p257"\nm = 257\nn = 4096\nk = 4096\n\n'
                     '[[problem]]\nname = "p512"\nm = 512\nn = 4096\nk = 2048\n')
    out = tmp_path / "plan"
    assert S.main(["plan", "--suite", str(suite), "--tune", "p257", "--tune-compiles", "4", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["schema"] == S.PLAN_SCHEMA and plan["device_kind"] == "h200" and plan["label"] == "mini-tune"
    assert [e["name"] for e in plan["problems"]] == ["p257"]          # --tune NAME plans only the tuned problems
    e = plan["problems"][0]
    ks = {k["id"]: k for k in e["kernels"]}
    assert len({k["source_sha256"] for k in ks.values()}) == 4 and "first" in ks and "default" in ks
    assert len({(k["backend"], k["kernel_hash"], json.dumps(k["launch_plan"])) for k in ks.values()}) == len(ks)
    # the first pick: what `cutegen generate --device h200` writes on a fresh install (the seed's learned ranking)
    g = generate(GemmProblem(257, 4096, 4096), tmp_path / "gen", build=False, progress=None,
                 ranking=ranking.choose(device="h200", db=ranking.seed_db()))
    assert ks["first"]["kernel_hash"] == g.kernel_hash and ks["first"]["config"] == g.config.to_dict()
    assert (out / ks["first"]["dir"] / "kernel.cu").read_text() == (tmp_path / "gen" / "kernel.cu").read_text()
    man = json.loads((out / ks["first"]["dir"] / "manifest.json").read_text())
    assert man["cost"]["ranking"] == e["ranking"] == g.kernel.manifest["cost"]["ranking"]
    assert ks["default"]["config"]["tile_shape"] == [128, 256, 64] and ks["default"]["backend"] == "cutlass_builder"
    # without --tune: first pick and default only; the default's source is the same for both problems
    out2 = tmp_path / "plan2"
    assert S.main(["plan", "--suite", str(suite), "--out", str(out2)]) == 0
    plan2 = json.loads((out2 / "plan.json").read_text())
    assert [sorted(k["id"] for k in e["kernels"]) for e in plan2["problems"]] == [["default", "first"]] * 2
    defaults = [next(k for k in e["kernels"] if k["id"] == "default") for e in plan2["problems"]]
    assert defaults[0]["source_sha256"] == defaults[1]["source_sha256"]
    assert plan2["estimate"]["distinct_sources"] == len({k["source_sha256"] for e in plan2["problems"]
                                                          for k in e["kernels"]})
    order = S.build_order(plan2)
    assert [k["origin"] for k in order] == ["generate", "generate", "cutlass_default", "cutlass_default"]


# -- the device half on the CPU ---------------------------------------------------------------------

def _fake_plan(tmp_path):
    """A plan of two problems whose kernel directories hold stand-in libraries (tests/test_runner_dryrun.py): p1's
    first pick and default are correct, p2's default writes D transposed (fails validation) and p2 is tuned."""
    from test_runner_dryrun import build_fake
    plan_dir = tmp_path / "plan"
    p1, p2 = GemmProblem(136, 200, 72), GemmProblem(128, 128, 64)
    cfg = KernelConfig((128, 128, 64), (1, 1, 1))
    entries = []
    for name, p, tune in (("p1", p1, False), ("p2", p2, True)):
        kernels = []
        for kid, origin in (("first", "generate"), ("default", "cutlass_default")) + \
                (("search2", "search"),) * tune:
            d = plan_dir / "mini" / name / kid
            wrong = name == "p2" and kid == "default"
            build_fake(d, GemmProblem(p.m, p.n, p.k, layout_c="col") if wrong else p)
            if wrong:   # the manifest says row-major D: the library writes column-major, so every case fails
                (d / "manifest.json").write_text(json.dumps({"problem": p.to_dict(), "config": cfg.to_dict(),
                                                             "backend": "fake", "hash": "fake"}))
            kernels.append({"id": kid, "roles": [kid], "origin": origin, "backend": "cutlass",
                            "dir": f"mini/{name}/{kid}", "config": cfg.to_dict(), "config_name": f"{kid}_cfg",
                            "kernel_hash": f"{name}{kid}", "launch_plan": None, "source_sha256": f"{name}{kid}",
                            "rank": 1, "predicted_us": 1.0})
        entries.append({"suite": "mini", "name": name, "problem": p.to_dict(), "tune": tune, "kernels": kernels,
                        "notes": [], "ranking": "learned h200"})
    S._write_json(plan_dir / "plan.json", {"schema": S.PLAN_SCHEMA, "label": "mini", "created": "2026-11-26",
                                           "problems": entries, "ranking": "ranking learned h200 (test)"})
    return plan_dir


def test_device_half_validates_first_times_only_what_passed_and_writes_records(tmp_path, monkeypatch):
    from cutegen.commands import validate as V
    from cutegen.results import ResultsDB
    monkeypatch.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    monkeypatch.delenv("CUTEGEN_FAKE_MODE", raising=False)
    monkeypatch.chdir(ROOT)
    plan_dir = _fake_plan(tmp_path)
    dirs = []
    assert S.main(["dirs", str(plan_dir), "--built"]) == 0
    plan = S.load_plan(plan_dir)
    dirs = [str(plan_dir / k["dir"]) for k in S.build_order(plan)]
    assert V.main(dirs + ["--json", str(tmp_path / "v.json"), "-q", "--timeout", "60"]) == 1   # p2/default fails
    build = tmp_path / "build.json"
    build.write_text(json.dumps({"kernels": {k["dir"]: {"status": "built"} for e in plan["problems"]
                                             for k in e["kernels"] if k["id"] != "search2"}}))
    # p2/search2 has a library but no build record: "present" (a build cut off while writing its record)
    out, rec = tmp_path / "run.json", tmp_path / "run-records.jsonl"
    assert S.main(["time", str(plan_dir), "--build", str(build), "--validate", str(tmp_path / "v.json"),
                   "--json", str(out), "--records", str(rec), "--warmup", "1", "--l2-multiple", "0"]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == S.RUN_SCHEMA and doc["device"]["kind"] and doc["versions"]["cutegen"]
    by = {p["name"]: p for p in doc["problems"]}
    p1, p2 = by["p1"], by["p2"]
    assert p1["first"]["status"] == "ok" and p1["first"]["us"] > 0 and p1["cublas"]["us"] > 0
    assert p1["first"]["vs_cublas"] == pytest.approx(p1["cublas"]["us"] / p1["first"]["us"])
    assert p1["tuned"] is None and p2["tuned"]["timed"] == 2 and p2["tuned"]["of"] == 3
    k2 = {k["id"]: k for k in p2["kernels"]}
    assert k2["default"]["status"] == "failed_validation" and k2["default"]["us"] is None
    assert k2["default"]["validation"]["verdict"] == "fail" and p2["default"]["vs_cublas"] is None
    assert k2["search2"]["build"]["status"] == "present" and k2["search2"]["validation"]["cases_passed"] > 0
    assert p2["tuned"]["us"] == min(k2["first"]["us"], k2["search2"]["us"])
    lines = rec.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["validated"] for line in lines)   # p1 x2, p2 first + search2
    assert sorted(json.loads(line)["source"].rsplit("/", 1)[1] for line in lines) == \
        ["default", "first", "first", "search2"]
    db = tmp_path / "db.sqlite"
    r = subprocess.run([sys.executable, "-m", "cutegen", "db", "import", str(rec), "--db", str(db)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(ResultsDB(str(db), seed=None).measurements(op="gemm")) == 4
    # the report of that run: the table, the targets and a plot
    png, rep = tmp_path / "r.png", tmp_path / "rep.json"
    assert S.main(["report", str(out), "--json", str(rep), "--png", str(png)]) == 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(rep.read_text())["summary"]["mini"]["bf16"]["first"]["n"] == 2


def test_time_skips_problems_after_its_deadline_and_still_writes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    monkeypatch.chdir(ROOT)
    plan_dir = _fake_plan(tmp_path)
    out = tmp_path / "run.json"
    # no validation report: nothing is validated, so nothing but cuBLAS is timed; a deadline of 1e-9 s skips all
    assert S.main(["time", str(plan_dir), "--json", str(out), "--deadline", "1e-9"]) == 0
    doc = json.loads(out.read_text())
    assert [p["status"] for p in doc["problems"]] == ["skipped: timing deadline"] * 2
    assert all(k["status"] == "not_validated" for p in doc["problems"] for k in p["kernels"])


class _FakeBuilder:
    """cutegen.build.Builder's build_one, without nvcc: a source holding FAIL fails; every call is counted."""
    calls: list = []

    def __init__(self, jobs=None, progress=None, timeout=None):
        self.jobs = jobs or 2

    def build_one(self, job):
        from types import SimpleNamespace
        _FakeBuilder.calls.append(job.name)
        if "FAIL" in job.source:
            return SimpleNamespace(ok=False, status="failed", library=None, seconds=0.1, message="nvcc: error X\nmore")
        lib = Path(job.name) / "kernel.so"
        lib.write_bytes(b"lib of " + job.source.encode())
        return SimpleNamespace(ok=True, status="built", library=lib, seconds=0.1, message="")


def _source_plan(tmp_path, sources):
    plan_dir = tmp_path / "plan"
    kernels = []
    for i, (kid, origin, src) in enumerate(sources):
        d = plan_dir / "s" / "p" / kid
        d.mkdir(parents=True)
        (d / "kernel.cu").write_text(src)
        kernels.append({"id": kid, "roles": [kid], "origin": origin, "dir": f"s/p/{kid}", "rank": i + 1,
                        "source_sha256": S.sha256_text(src)})
    S._write_json(plan_dir / "plan.json", {"schema": S.PLAN_SCHEMA, "label": "t", "problems": [
        {"suite": "s", "name": "p", "problem": {}, "tune": True, "kernels": kernels}]})
    return plan_dir


def test_build_compiles_each_source_once_copies_it_and_records_failures(tmp_path, monkeypatch):
    import cutegen.build as B
    monkeypatch.setattr(B, "Builder", _FakeBuilder)
    _FakeBuilder.calls = []
    plan_dir = _source_plan(tmp_path, [("first", "generate", "A"), ("default", "cutlass_default", "B"),
                                       ("search2", "search", "A"), ("search3", "search", "FAIL")])
    rec = tmp_path / "build.json"
    assert S.main(["build", str(plan_dir), "--jobs", "1", "--json", str(rec)]) == 0
    st = json.loads(rec.read_text())["kernels"]
    assert len(_FakeBuilder.calls) == 3                       # A once, B, FAIL
    assert st["s/p/first"]["status"] == "built" and st["s/p/search2"]["status"] == "copied"
    assert (plan_dir / "s/p/search2/kernel.so").read_bytes() == b"lib of A"
    assert st["s/p/search3"]["status"] == "failed" and st["s/p/search3"]["message"].startswith("nvcc: error X")
    assert not (plan_dir / "s/p/search3/kernel.so").exists()
    # the order: first picks, then the default, then the search's candidates by rank
    assert [Path(c).name for c in _FakeBuilder.calls] == ["first", "default", "search3"]


def test_build_starts_nothing_after_its_deadline(tmp_path, monkeypatch):
    import cutegen.build as B
    monkeypatch.setattr(B, "Builder", _FakeBuilder)
    _FakeBuilder.calls = []
    plan_dir = _source_plan(tmp_path, [("first", "generate", "A"), ("default", "cutlass_default", "B")])
    rec = tmp_path / "build.json"
    assert S.main(["build", str(plan_dir), "--jobs", "1", "--deadline", "1e-9", "--json", str(rec)]) == 0
    st = json.loads(rec.read_text())["kernels"]
    assert _FakeBuilder.calls == [] and {v["status"] for v in st.values()} == {"not_built"}


@pytest.mark.parametrize("build, verdict, timed, state", [
    ({"status": "failed", "message": "nvcc: error"}, None, None, "not_built"),
    ({"status": "not_built", "message": "deadline"}, None, None, "not_built"),
    ({"status": "built"}, None, None, "not_validated"),
    ({"status": "built"}, "skipped", None, "not_validated"),        # the validation deadline came first
    ({"status": "cached"}, "fail", None, "failed_validation"),
    ({"status": "copied"}, "hang", None, "failed_validation"),
    ({"status": "built"}, "pass", {"status": "failed_verification", "verify": {"ok": False}}, "failed_verification"),
    ({"status": "present"}, "pass", {"status": "ok", "median_ms": 0.02, "verify": {"ok": True}}, "ok"),
])
def test_each_kernel_is_timed_only_when_built_and_validated(build, verdict, timed, state):
    k = {"id": "first", "roles": ["first", "search1"], "dir": "s/p/first", "config_name": "c"}
    entry = {"suite": "s", "name": "p", "problem": _problem(64, 64, 64), "tune": True, "kernels": [k]}
    validation = {} if verdict is None else {"s/p/first": {"verdict": verdict}}
    results = {"cublas": {"status": "ok", "median_ms": 0.01}, **({"first": timed} if timed else {})}
    r = S.problem_result(entry, {"s/p/first": build}, validation, results, {"kernel": "nvjet_x"})
    assert r["kernels"][0]["status"] == state and r["cublas"]["kernel"] == "nvjet_x"
    if state == "ok":
        assert r["first"]["us"] == pytest.approx(20.0) and r["first"]["vs_cublas"] == pytest.approx(0.5)
        assert r["tuned"]["id"] == "first" and r["tuned"]["roles"] == ["first", "search1"] and r["status"] == "ok"
    else:
        assert r["first"]["us"] is None and r["tuned"]["timed"] == 0 and r["status"] == "incomplete"


def test_targets_name_bf16_and_e4m3_only():
    s = {"m": {"f16": {"first": S.stats([("a", 0.5)]), "tuned": S.stats([]), "tuned_or_first": S.stats([("a", 0.5)])},
               "bf16": {"first": S.stats([("b", 1.0)]), "tuned": S.stats([]), "tuned_or_first": S.stats([("b", 1.0)])}}}
    lines = S.target_lines(s)
    assert len(lines) == 2 and all(line.startswith("m bf16") for line in lines)
    assert lines[0].endswith("1.000x over 1 -> MET")           # 1.00x is the bound: met


def test_model_lines_name_the_farthest_prediction():
    rows = [{"suite": "s", "name": "a", "first_us": 20.0, "first_predicted_us": 10.0, "first_config": "x"},
            {"suite": "s", "name": "b", "first_us": 10.0, "first_predicted_us": 11.0, "first_config": "y"},
            {"suite": "s", "name": "c", "first_us": None, "first_predicted_us": 11.0, "first_config": "z"}]
    (line,) = S.model_lines(rows, count=1)
    assert "over 2" in line and line.endswith("farthest: s:a x 10.0 -> 20.0 us")
    assert f"geomean {math.sqrt(2.0 * 10 / 11):.3f}" in line
    assert S.model_lines([rows[2]]) == []
