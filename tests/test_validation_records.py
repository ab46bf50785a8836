"""Every kernel under generated/ has run correctly on a Hopper GPU: a passing record for its hash.

The records live in generated/validation/*.jsonl, one file per GPU run (bench/gpu_checks.sh writes
one; cutegen.validation_records explains the format). When a kernel is added or re-rendered its
manifest hash changes and ``test_every_checked_in_kernel_has_a_passing_hopper_record`` fails, naming
it, until the GPU suite has run over it and its record file is committed. That failure is the
point: run ``bash bench/gpu_checks.sh`` on the GPU machine and commit the file it writes.
"""
import json
from pathlib import Path

import pytest

from cutegen import FieldError
from cutegen import validation_records as V
from cutegen.errors import CutegenError

REPO = Path(__file__).resolve().parents[1]


def test_every_checked_in_kernel_has_a_passing_hopper_record():
    kernels = V.kernel_hashes(REPO / "generated")
    assert len(kernels) >= 2
    missing = V.unvalidated(kernels, V.read_records(V.records_dir(REPO)))
    assert missing == {}, (
        f"{len(missing)} kernel(s) under generated/ have no passing validation record on a Hopper GPU for "
        "their manifest hash (new or re-rendered): run `bash bench/gpu_checks.sh` on the GPU machine and "
        "commit the generated/validation/*.jsonl it writes.\n" + "\n".join(f"  {h}  {d}" for d, h in missing.items()))


def test_record_files_are_well_formed_and_name_hopper_runs():
    files = sorted(V.records_dir(REPO).glob("*.jsonl"))
    assert files, "no record file under generated/validation"
    records = V.read_records(V.records_dir(REPO))
    assert all(r["device_name"] and r["date"] for r in records)
    assert any(V.is_hopper(r) and V.passed(r) for r in records)


def record(**changes):
    base = {"schema": V.SCHEMA, "kernel_hash": "0123456789abcdef", "directory": "generated/sm90a/x",
            "backend": "cutlass", "device_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
            "driver": "580.159.04", "driver_api": 13000, "date": "2026-11-23", "cases_run": 5, "cases_passed": 5,
            "probes": 7, "probes_agreed": 7, "max_rel_error": 1.5e-3, "sanitizer": None, "verdict": "pass",
            "source": "test"}
    return {**base, **changes}


@pytest.mark.parametrize("changes,counts", [
    ({}, True),
    ({"sanitizer": "clean"}, True),
    ({"compute_capability": "8.0", "device_name": "NVIDIA A100"}, False),   # not a Hopper device
    ({"cases_passed": 4}, False),                                           # one case failed
    ({"probes_agreed": 6}, False),                                          # one refusal probe disagreed
    ({"verdict": "hang"}, False),
    ({"sanitizer": "errors"}, False),
    ({"cases_run": 0, "cases_passed": 0}, False),                           # nothing ran
])
def test_only_a_full_pass_on_hopper_validates_a_hash(changes, counts):
    kernels = {"generated/sm90a/x": "0123456789abcdef"}
    assert (V.unvalidated(kernels, [record(**changes)]) == {}) is counts


def test_a_re_rendered_kernel_is_unvalidated_until_its_new_hash_has_a_record():
    old = record()
    kernels = {"generated/sm90a/x": "fedcba9876543210", "generated/sm90a/y": "0123456789abcdef"}
    assert V.unvalidated(kernels, [old]) == {"generated/sm90a/x": "fedcba9876543210"}
    assert V.unvalidated(kernels, [old, record(kernel_hash="fedcba9876543210")]) == {}


def test_records_are_read_from_every_file_and_bad_lines_name_file_and_field(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps(record()) + "\n")
    (tmp_path / "b.jsonl").write_text("\n" + json.dumps(record(kernel_hash="fedcba9876543210")) + "\n")
    (tmp_path / "notes.txt").write_text("not a record file")
    assert [r["kernel_hash"] for r in V.read_records(tmp_path)] == ["0123456789abcdef", "fedcba9876543210"]
    (tmp_path / "c.jsonl").write_text(json.dumps({k: v for k, v in record().items() if k != "date"}) + "\n")
    with pytest.raises(FieldError) as e:
        V.read_records(tmp_path)
    assert "c.jsonl:1" in str(e.value) and "date" in str(e.value)
    (tmp_path / "c.jsonl").write_text(json.dumps(record(cases_passed=6)) + "\n")
    with pytest.raises(FieldError, match="more passed than run"):
        V.read_records(tmp_path)
    (tmp_path / "c.jsonl").write_text("{not json\n")
    with pytest.raises(FieldError, match="c.jsonl:1"):
        V.read_records(tmp_path)


def test_a_record_file_is_never_rewritten(tmp_path):
    path = tmp_path / "run.jsonl"
    V.write_records(path, [record()])
    with pytest.raises(CutegenError, match="never rewrites"):
        V.write_records(path, [record(verdict="fail")])
    assert V.read_records(tmp_path)[0]["verdict"] == "pass"


def test_convert_a_validate_report(tmp_path):
    cases = ([{"kind": "case", "case": f"c{i}", "ok": True, "rel_err": 1e-3 * (i + 1)} for i in range(4)]
             + [{"kind": "case", "case": "big", "ok": None, "refused": True}]
             + [{"kind": "probe", "case": f"p{i}", "ok": i != 2} for i in range(3)])
    report = {"date": "2026-11-22T03:49:17+00:00",
              "device": {"name": "NVIDIA H200", "compute_capability": "9.0", "driver_api": 13000},
              "kernels": [{"kernel": "k", "hash": "542e6c7172f9de64", "backend": "cutlass", "verdict": "fail",
                           "directory": "/somewhere/generated/sm90a/bf16_tn", "cases": cases},
                          {"kernel": "h", "hash": "642e6c7172f9de64", "backend": "cutlass", "verdict": "hang",
                           "directory": "/somewhere/generated/sm90a/bf16_nt",
                           "cases": [{"case": "manifest", "ok": False, "status": "hang"}]}]}
    (tmp_path / "v.json").write_text(json.dumps(report))
    out = tmp_path / "out" / "r.jsonl"
    assert V.main(["convert", str(tmp_path / "v.json"), "--out", str(out), "--driver", "580.159.04"]) == 0
    first, hang = V.read_records(out.parent)
    assert first["directory"] == "generated/sm90a/bf16_tn" and first["date"] == "2026-11-22"
    assert (first["cases_run"], first["cases_passed"], first["probes"], first["probes_agreed"]) == (4, 4, 3, 2)
    assert first["max_rel_error"] == pytest.approx(4e-3) and first["driver"] == "580.159.04"
    assert not V.passed(first)
    assert hang["cases_run"] == 1 and hang["cases_passed"] == 0 and not V.passed(hang)
    report["device"] = None
    (tmp_path / "v.json").write_text(json.dumps(report))
    assert V.main(["convert", str(tmp_path / "v.json"), "--out", str(tmp_path / "other.jsonl")]) == 2
