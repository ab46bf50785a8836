"""`cutegen db import/export/stats` over the result files committed in bench/results/."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cutegen.cli import main
from cutegen.errors import CutegenError
from cutegen.results import ResultsDB
from cutegen.results.importers import VALIDATE_METHOD, load

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
FILES = sorted(RESULTS.glob("*.json"))
ORACLES = sorted((RESULTS.parents[1] / "tests" / "data").glob("config_oracle_*.jsonl"))


def test_bench_file_keeps_device_date_versions_method():
    ms = load(RESULTS / "2026-11-22-nvidia-h200.json")
    assert len(ms) == 54                                   # 27 problems x (pick + builder baseline)
    m = next(m for m in ms if m.source.endswith("sq1024_bf16_tn/cutegen"))
    assert (m.device_name, m.device_kind, m.sm_count) == ("NVIDIA H200", "h200", 132)
    assert m.measured_at == "2026-11-22T03:49:26+00:00"
    assert (m.driver, m.cutlass, m.cuda, m.cutegen) == ("580.159.04", "4.2.0", "13.0", "0.1.0")
    assert m.timing_method == "cuda-events/median/warmup10/iters50/l2x4"
    assert len(m.times_us) == 50 and m.median_us == pytest.approx(10.368, abs=1e-3)
    assert m.cublas_us == pytest.approx(8.928, abs=1e-3) and m.validated and m.kernel_hash == "874c32cd639f9d15"
    assert {x.backend for x in ms} == {"cutlass", "cutlass_builder"}


def test_calibration_and_validate_formats():
    cal = load(RESULTS / "2026-11-22-calibration-h200.json")
    assert len(cal) == 108 and {m.measured_at for m in cal} == {"2026-11-22"}   # date from the file name
    assert {m.timing_method for m in cal} == {"cuda-events/median/iters20/l2x4"}
    val = load(RESULTS / "2026-11-22-nvidia-h200-validate.json")
    assert val and all(m.timing_method == VALIDATE_METHOD and not m.is_benchmark for m in val)


def test_config_oracle_lines():
    ms = load(ORACLES[0])
    assert ms and all(m.backend == "cutlass_builder" and m.timing_method.startswith("cuda-events/mean/") for m in ms)
    m = next(m for m in ms if m.source.endswith("coop_tile_m-bf16tn-cbf16dbf16-128x128x64-c1x1-sauto-coop-tmacoop-pers"
                                                "-m2048n2048k2048"))
    assert m.median_us == pytest.approx(34.195, abs=1e-3) and m.measured_at == "2026-11-22T02:53:08Z"
    h100 = load(next(f for f in ORACLES if "h100" in f.name))
    assert {x.device_kind for x in h100} == {"h100-sxm"}


def test_unknown_format_is_named(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"hello": 1}')
    with pytest.raises(CutegenError, match="not a result file"):
        load(f)
    f.write_text("{")
    with pytest.raises(CutegenError, match="not JSON"):
        load(f)


def test_import_idempotent_export_round_trip(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    args = ["db", "import", *map(str, FILES), "--db", str(db)]
    assert main(args) == 0
    first = capsys.readouterr().out.splitlines()[-1]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("0 new")
    n = int(first.split()[0])
    out = tmp_path / "all.jsonl"
    assert main(["db", "export", "--db", str(db), "--no-seed", "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == n
    again = tmp_path / "again.sqlite"
    assert main(["db", "import", str(out), "--db", str(again)]) == 0
    a = ResultsDB(db, seed=None).measurements()
    b = ResultsDB(again, seed=None).measurements()
    assert a == b and len(a) == n
    capsys.readouterr()
    assert main(["db", "stats", "--db", str(db), "--no-seed", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert sum(r["records"] for r in s.values()) == n and s["h200"]["first"] == "2026-11-22"


def test_bad_file_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    db = tmp_path / "r.sqlite"
    assert main(["db", "import", str(FILES[0]), str(bad), "--db", str(db)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert ResultsDB(db, seed=None).count() == 0


def test_committed_seed_holds_every_committed_result():
    """bench/results/seed.sqlite holds bench/results/*.json and the config oracles: re-import when adding."""
    seed = RESULTS / "seed.sqlite"
    conn = sqlite3.connect(f"file:{seed}?mode=ro&immutable=1", uri=True)
    keys = {k for (k,) in conn.execute("SELECT record_key FROM measurements")}
    expected = {m.record_key for f in FILES + ORACLES for m in load(f)}
    assert expected <= keys, f"{len(expected - keys)} records of bench/results/*.json are missing from the seed"
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
