"""cutegen pack --tune (issue 22 part 2): candidates, bounds, the GPU step's records, and the selection from a
results database. The databases here are synthetic (made-up times with a known crossing): they test the
selection logic, never a reported figure."""
from __future__ import annotations

import json
import math

import pytest

from cutegen.config import KernelConfig
from cutegen.errors import CutegenError, FieldError
from cutegen.packs import measured, render, shapes, targets, tune
from cutegen.packs.select import class_key
from cutegen.results import Measurement, ResultsDB

SMALL_M = {"tile_shape": [64, 8, 128], "cluster_shape": [1, 1, 1], "mainloop_schedule": "pingpong",
           "epilogue_schedule": "tma_warp_specialized", "tile_scheduler": "persistent", "swap_ab": True}


def _shapes_file(tmp_path, m_max=512, n=4096, k=4096, extra=""):
    p = tmp_path / "s.toml"
    p.write_text(f'[[shape]]\nname = "lin"\ndtype = "bf16"\nlayout = "tn"\nm = {{min = 1, max = {m_max}}}\n'
                 f"n = {n}\nk = {k}\n{extra}")
    return p


def _configs(problem):
    from cutegen.legality import check_config
    out = []
    for d in (SMALL_M, tune.CUTLASS_DEFAULT):
        rep = check_config(problem, KernelConfig.from_dict(d))
        assert rep.legal, rep
        out.append(rep.config)
    return out


def small_us(m):   # kernel A: cheap at small M, grows fast
    return 10.0 + 0.1 * m


def big_us(m):     # kernel B: a fixed cost, grows slowly; the curves cross at M = 222.2 (linear in M)
    return 30.0 + 0.01 * m


def _synthetic_db(tmp_path, shapes_all, configs, fns, kind="h200", skip=()):
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    recs = []
    for s in shapes_all:
        if s.problem.m in skip:
            continue
        for cfg, fn in zip(configs, fns):
            recs.append(Measurement(problem=s.problem, config=cfg, kernel_hash="h", backend="cutlass",
                                    device_name="NVIDIA H200", device_kind=kind, timing_method="test",
                                    median_us=fn(s.problem.m), validated=True, cublas_us=25.0,
                                    source="cutegen-pack-tune test", measured_at="2026-11-26"))
    db.add_many(recs)
    return db


def _setup(tmp_path, **kw):
    f = _shapes_file(tmp_path, **kw)
    t = targets.target("h200")
    entries, points, off = tune.timed_shapes(str(f), t, tune.DEFAULT_OFF_SAMPLE)
    return f, t, points, off


def test_off_sample_shapes_are_inside_the_range_and_never_a_sample_point(tmp_path):
    f, t, points, off = _setup(tmp_path, m_max=512)
    sampled = {s.problem.m for s in points}
    ms = [s.problem.m for s in off]
    assert ms == [m for m in tune.DEFAULT_OFF_SAMPLE if m <= 512 and m not in sampled]
    assert len(ms) >= 8 and not set(ms) & sampled
    assert all(s.weight == points[0].weight for s in off)
    # a value above the range is left out; one that is a sample point too
    assert 700 not in ms and 1 not in {s.problem.m for s in tune.off_sample_shapes(
        shapes.load(f), points, (1, 700))}


def test_measured_selection_puts_the_boundary_where_the_measured_curves_cross(tmp_path):
    f, t, points, off = _setup(tmp_path)
    every = points + off
    a, b = _configs(points[0].problem)
    db = _synthetic_db(tmp_path, every, [a, b], [small_us, big_us])
    sel, pts = tune.select_measured(every, len(points), t, db, max_kernels=4, tolerance=0.03)
    assert [k.config.to_json() for k in sel.kernels] == sorted([a.to_json(), b.to_json()],
                                                               key=lambda j: j != a.to_json()) or \
        {k.config.to_json() for k in sel.kernels} == {a.to_json(), b.to_json()}
    ia = next(j for j, k in enumerate(sel.kernels) if k.config.to_json() == a.to_json())
    ib = 1 - ia
    for r in sel.rows:
        m = r.shape.problem.m
        want = ia if small_us(m) <= big_us(m) else ib
        assert r.kernel == want, (m, r.kernel)
        assert r.source == "measured" and r.cublas_us == 25.0
        assert r.point == ("sampled" if r.shape in points else "off-sample")
        assert r.predicted_us is not None and r.predicted_us > 0
    segs = measured.segments(pts[(4096, 4096)])
    assert [g.kernel for g in segs] == [ia, ib]
    # measured at 200 and 256: A 30 / 35.6, B 32 / 32.56; linear in log2 M they cross at M = 220.6
    lo = 200.0 * (256 / 200) ** (2.0 / (2.0 + 3.04))
    assert segs[1].lo == math.ceil(lo) == 221
    assert segs[1].lo & (segs[1].lo - 1) != 0          # not a power of two


def test_measured_pack_renders_its_segments_and_coverage(tmp_path):
    f, t, points, off = _setup(tmp_path)
    every = points + off
    a, b = _configs(points[0].problem)
    db = _synthetic_db(tmp_path, every, [a, b], [small_us, big_us], skip=(48,))
    sel, pts = tune.select_measured(every, len(points), t, db, max_kernels=4, tolerance=0.03)
    files = render.pack_files(sel, {}, "p", f.name, measured=pts, vendor_on=False)   # generated kernels alone
    cov = files["COVERAGE.md"]
    assert "| point |" in cov and "torch.matmul (us)" in cov and "predicted (us)" in cov
    assert "off-sample" in cov and "sampled" in cov
    assert "## Dispatch by M (measured segments" in cov and "M 1-220:" in cov and "M >= 221:" in cov
    # the shape nothing measured (M = 48, off-sample) is priced, and says so
    row48 = next(line for line in cov.splitlines() if line.startswith("| lin m48n4096k4096 "))
    assert "| predicted |" in row48
    assert "1 shape(s) have no measurement" in cov
    # the generated dispatcher holds the measured boundary, not a power of two
    assert "221" in files["src/dispatch.cpp"]
    cov_json = json.loads(files["pack.json"])["coverage"]["rows"]
    assert sum(1 for r in cov_json if r.get("point") == "off-sample") == len(off)
    # the vendor tactic on (the default): where both kernels measured slower than torch.matmul (25 us) by more than
    # the tolerance (M >= 200: A 30+ us, B 32+ us), the pack routes to cuBLASLt; below, the kernels stay
    sel2, pts2 = tune.select_measured(every, len(points), t, db, max_kernels=4, tolerance=0.03)
    shipped = render.pack_files(sel2, {}, "p", f.name, measured=pts2)
    assert "src/vendor_cublaslt.cpp" in shipped and "vendor_cublaslt" in shipped["COVERAGE.md"]


def test_measurements_of_another_kind_or_unvalidated_are_not_used(tmp_path):
    f, t, points, off = _setup(tmp_path)
    a, b = _configs(points[0].problem)
    db = _synthetic_db(tmp_path, points + off, [a, b], [small_us, big_us], kind="h100-sxm")
    with pytest.raises(CutegenError, match="no validated measurement on h200"):
        tune.select_measured(points + off, len(points), t, db, max_kernels=4, tolerance=0.03)


def test_too_many_timed_shapes_is_a_one_line_error(tmp_path):
    p = tmp_path / "many.toml"
    p.write_text('[[shape]]\ndtype = "bf16"\nlayout = "tn"\nm = [' + ", ".join(str(i) for i in range(1, 1100))
                 + "]\nn = 4096\nk = 4096\n")
    t = targets.target("h200")
    entries, points, off = tune.timed_shapes(str(p), t, tune.DEFAULT_OFF_SAMPLE)
    with pytest.raises(FieldError, match="PACK-TUNE-SHAPES-MAX: 1099 shapes to time .*1099 at N=4096 K=4096"):
        tune.check_timed(str(p), points + off)
    tune.check_timed(str(p), (points + off)[:tune.MAX_TIMED_SHAPES])     # the bound itself passes


def test_candidates_are_deduplicated_capped_with_a_warning_and_prioritised(tmp_path, monkeypatch):
    f, t, points, off = _setup(tmp_path, m_max=64)
    a, b = _configs(points[0].problem)
    from dataclasses import replace
    c = replace(a, stages=(a.stages or 4) - 1)
    # every search returns the same two configurations (a first): they are one candidate each, not one per search
    monkeypatch.setattr(tune, "search_task", lambda item: [a, c, b][:item[1]])
    said = []
    cands, notes = tune.candidates(points, t, top_k=3, with_nvmmh=False, with_default=True, say=said.append)
    keys = [x.key for x in cands]
    assert len(keys) == len(set(keys)) == 3
    assert cands[0].key == a.to_json() and cands[0].priority == 1.0
    assert len([o for o in cands[0].origins if o.startswith("search1")]) >= 2
    # the CUTLASS default (b): found by the search at rank 3 and as the default (rank 1.2): ranked before c
    assert cands[1].key == b.to_json() and "cutlass_default" in cands[1].origins and cands[2].key == c.to_json()
    assert not said
    cands, notes = tune.candidates(points, t, top_k=3, with_nvmmh=False, with_default=True, cap=2, say=said.append)
    assert [x.key for x in cands] == [a.to_json(), b.to_json()]
    assert said and "PACK-TUNE-CANDIDATES-MAX: 3 distinct candidates; keeping the 2" in said[0]
    assert any("PACK-TUNE-CANDIDATES-MAX" in n for n in notes)


def test_the_gpu_step_records_resume_and_select(tmp_path, monkeypatch):
    """measure_gpu.run with the GPU task replaced by synthetic times: records land in the database, a second
    run times nothing already there, and the selection reads them back."""
    from cutegen.packs import measure_gpu
    f, t, points, off = _setup(tmp_path, m_max=256)
    a, b = _configs(points[0].problem)
    cands = [tune.Candidate(class_key(points[0].problem), cfg, points[0].problem, ["test"], 1.0) for cfg in (a, b)]
    files = tune.plan_files(str(f), t, cands, points, off, "cand", [])
    plan_dir = tmp_path / "plan" / "h200"
    for rel, text in files.items():
        (plan_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (plan_dir / rel).write_text(text)
    timed = []

    def fake(item):
        pack_dir, so, group, kernels, todo, end = item
        rows = []
        for s in group["shapes"]:
            idx = todo.get(str(s["m"]))
            if not idx:
                continue
            timed.append((s["m"], tuple(idx)))
            rows.append({"m": s["m"], "matmul_us": 25.0, "kernels": {
                str(i): {"us": (small_us, big_us)[i](s["m"]), "times": [1.0], "rel_err": 1e-3, "ok": True}
                for i in idx}})
        return {"device": {"name": "NVIDIA H200", "sm_count": 132, "torch_cuda": "13.0"}, "shapes": rows,
                "skipped": []}

    monkeypatch.setattr(measure_gpu, "measure_group", fake)
    db_path = tmp_path / "tune.sqlite"
    s1 = measure_gpu.run(str(plan_dir), "x.so", str(db_path), say=lambda m: None)
    n_shapes = len(points) + len(off)
    assert s1["recorded"] == 2 * n_shapes and len(timed) == n_shapes
    timed.clear()
    s2 = measure_gpu.run(str(plan_dir), "x.so", str(db_path), say=lambda m: None)
    assert s2["pairs_todo"] == 0 and s2["recorded"] == 0 and not timed
    db = ResultsDB(db_path, seed=None)
    sel, pts = tune.select_measured(points + off, len(points), t, db, max_kernels=4, tolerance=0.03)
    assert all(r.source == "measured" for r in sel.rows)
    assert len(sel.kernels) == 2


def test_the_default_off_sample_values_are_the_gpu_scripts():
    """pack --tune times the same off-sample M values bench/gpu_pack.sh times through the op."""
    import re
    from pathlib import Path
    script = (Path(__file__).resolve().parent.parent / "bench" / "gpu_pack.sh").read_text()
    assert tuple(sorted(int(x) for x in re.search(r"OFF_SAMPLE:-([\d,]+)", script).group(1).split(","))) == \
        tune.DEFAULT_OFF_SAMPLE
    assert len(tune.DEFAULT_OFF_SAMPLE) >= tune.MIN_OFF_SAMPLE
    assert tune.parse_off_sample("300, 3,3") == (3, 300)
    with pytest.raises(FieldError, match="--off-sample"):
        tune.parse_off_sample("3,x")
    with pytest.raises(FieldError, match="--off-sample"):
        tune.parse_off_sample("0,5")


def test_exported_records_reproduce_the_selection_and_other_sources_are_ignored(tmp_path):
    """--export-records then --records: the same selection without the database; a record that pack --tune did
    not make (another timing harness) is not read."""
    f, t, points, off = _setup(tmp_path)
    every = points + off
    a, b = _configs(points[0].problem)
    db = _synthetic_db(tmp_path, every, [a, b], [small_us, big_us])
    # tune's cold-L2 record of kernel B at M = 1, far faster: ignored (another source)
    db.add(Measurement(problem=points[0].problem, config=b, kernel_hash="h", backend="cutlass",
                       device_name="NVIDIA H200", device_kind="h200", timing_method="x", median_us=0.5,
                       validated=True, source="cutegen-tune 2026", measured_at="2026-11-26"))
    recs = tune.records_of(db, t, every)
    assert len(recs) == 2 * len(every) and all(m.source.startswith(tune.SOURCE_PREFIX) for m in recs)
    path = tmp_path / "m.jsonl.gz"
    tune.write_records(path, recs)
    first = path.read_bytes()
    tune.write_records(path, recs)
    assert path.read_bytes() == first                       # deterministic bytes
    sel1, _ = tune.select_measured(every, len(points), t, db, max_kernels=4, tolerance=0.03)
    sel2, _ = tune.select_measured(every, len(points), t, tune.read_records(path), max_kernels=4, tolerance=0.03)
    assert [(r.kernel, r.time_us) for r in sel1.rows] == [(r.kernel, r.time_us) for r in sel2.rows]
    assert sel1.rows[0].time_us == small_us(1)              # not the other harness's 0.5 us
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(FieldError, match="bad.jsonl:1"):
        tune.read_records(tmp_path / "bad.jsonl")


def test_a_second_round_leaves_out_what_was_measured(tmp_path, monkeypatch):
    f, t, points, off = _setup(tmp_path, m_max=64)
    a, b = _configs(points[0].problem)
    monkeypatch.setattr(tune, "search_task", lambda item: [a, b][:item[1]])
    db = _synthetic_db(tmp_path, points + off, [a], [small_us])
    said = []
    cands, notes = tune.candidates(points, t, top_k=2, with_nvmmh=False, with_default=False, say=said.append,
                                   exclude=tune.measured_keys(db, t, points + off))
    assert [c.key for c in cands] == [b.to_json()]
    assert any("1 candidates already measured" in n for n in notes)


@pytest.mark.parametrize("extra, field", [
    (["--plan-only"], "--plan-only"),
    (["--tune", "--measured", "x.json"], "--measured"),
    (["--tune", "--plan-only", "--records", "x.jsonl"], "--records"),
    (["--tune", "--records", "x.jsonl", "--db", "y.sqlite"], "--records"),
    (["--tune", "--exclude-measured", "x.jsonl"], "--exclude-measured"),
    (["--tune", "--plan-only", "--off-sample", "3,z"], "--off-sample"),
    (["--tune", "--plan-only", "--tune-max-candidates", "0"], "--tune-max-candidates"),
])
def test_cli_refuses_bad_tune_options_in_one_line(tmp_path, capsys, extra, field):
    from cutegen.cli import main
    f = _shapes_file(tmp_path)
    assert main(["pack", str(f), "-o", str(tmp_path / "o"), "--target", "h200"] + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err


def test_the_newest_timing_method_wins_where_a_shape_has_two(tmp_path):
    f, t, points, off = _setup(tmp_path)
    every = points + off
    a, b = _configs(points[0].problem)
    db = _synthetic_db(tmp_path, every, [a, b], [small_us, big_us])          # timing_method "test": rank 1
    q = points[0].problem                                                     # M = 1: A wins under method 1
    db.add_many([Measurement(problem=q, config=cfg, kernel_hash="h", backend="cutlass", device_name="NVIDIA H200",
                             device_kind="h200", timing_method="pack-tune/2: primed", median_us=us, validated=True,
                             cublas_us=20.0, source="cutegen-pack-tune v2", measured_at="2026-11-26")
                 for cfg, us in ((a, 50.0), (b, 40.0))])
    assert tune.method_rank("pack-tune/2: x") == 2 and tune.method_rank("pack-tune: x") == 1
    sel, _ = tune.select_measured(every, len(points), t, db, max_kernels=4, tolerance=0.03)
    r = sel.rows[0]
    assert r.shape.problem.m == 1 and sel.kernels[r.kernel].config == b and r.time_us == 40.0 and r.cublas_us == 20.0
    assert sel.rows[1].time_us == small_us(sel.rows[1].shape.problem.m)     # other shapes: method 1 is all there is
