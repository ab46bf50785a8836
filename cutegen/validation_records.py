"""GPU validation records: which kernel hash ran correctly on which Hopper device, and when.

One JSON object per line, one file per GPU run under ``generated/validation/`` (``*.jsonl``). Files
are only ever added: a later run writes a new file, so the history of every hash stays. A kernel
under ``generated/`` counts as validated when some record for its manifest's hash passed on a
Hopper (compute capability 9.x) device; tests/test_validation_records.py fails in CI for any kernel
without one, so a re-rendered kernel cannot land unvalidated.

Records come from the GPU test suite (``pytest -m gpu``, tests/test_gpu_validation.py, through
``bench/gpu_checks.sh``) or are converted from a ``cutegen validate --json`` report::

    python -m cutegen.validation_records convert REPORT.json [...] --out generated/validation/NAME.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Iterable

from ._atomic import atomic_write
from .errors import CutegenError, FieldError

SCHEMA = "cutegen-validation-record/1"
# Every record has these keys (values may be null where the run did not know them: driver, sanitizer).
FIELDS = ("schema", "kernel_hash", "directory", "backend", "device_name", "compute_capability", "driver",
          "driver_api", "date", "cases_run", "cases_passed", "probes", "probes_agreed", "max_rel_error",
          "sanitizer", "verdict", "source")
SANITIZER_VERDICTS = (None, "clean", "errors", "failed", "timeout", "unavailable")


def records_dir(repo: str | os.PathLike) -> Path:
    return Path(repo) / "generated" / "validation"


def is_hopper(record: dict) -> bool:
    """Compute capability 9.x: H100, H200, H20, H800, GH200."""
    return str(record.get("compute_capability") or "").split(".")[0] == "9"


def passed(record: dict) -> bool:
    """Every case ran and passed, every refusal probe agreed, and the sanitizer (where run) was clean."""
    return (record["verdict"] == "pass" and record["cases_run"] > 0
            and record["cases_passed"] == record["cases_run"] and record["probes_agreed"] == record["probes"]
            and record["sanitizer"] in (None, "clean"))


def check_record(record: object, where: str) -> dict:
    """The record itself, or FieldError naming the file, line and field that is wrong."""
    if not isinstance(record, dict):
        raise FieldError(where, "expected a JSON object")
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise FieldError(f"{where}: {missing[0]}", f"missing (a record has {', '.join(FIELDS)})")
    if record["schema"] != SCHEMA:
        raise FieldError(f"{where}: schema", f"{record['schema']!r} is not {SCHEMA!r}")
    if not re.fullmatch(r"[0-9a-f]{16}", str(record["kernel_hash"])):
        raise FieldError(f"{where}: kernel_hash", f"{record['kernel_hash']!r} is not 16 hex digits")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", str(record["date"])):
        raise FieldError(f"{where}: date", f"{record['date']!r} is not YYYY-MM-DD")
    for f in ("cases_run", "cases_passed", "probes", "probes_agreed"):
        if not isinstance(record[f], int) or record[f] < 0:
            raise FieldError(f"{where}: {f}", f"{record[f]!r} is not a count")
    if record["cases_passed"] > record["cases_run"] or record["probes_agreed"] > record["probes"]:
        raise FieldError(where, "more passed than run")
    if record["sanitizer"] not in SANITIZER_VERDICTS:
        raise FieldError(f"{where}: sanitizer", f"{record['sanitizer']!r} not in {SANITIZER_VERDICTS}")
    if not record["device_name"]:
        raise FieldError(f"{where}: device_name", "empty")
    return record


def read_records(folder: str | os.PathLike) -> list[dict]:
    """Every record of every ``*.jsonl`` file in ``folder`` (none when it does not exist)."""
    out = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{i}"
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as e:
                raise FieldError(where, f"not valid JSON: {e}") from None
            out.append(check_record(doc, where))
    return out


def kernel_hashes(root: str | os.PathLike) -> dict[str, str]:
    """{kernel directory relative to the repository: manifest hash} for every manifest under root."""
    root = Path(root)
    repo = root.parent
    out = {}
    for m in sorted(root.rglob("manifest.json")):
        doc = json.loads(m.read_text())
        out[str(m.parent.relative_to(repo))] = str(doc["hash"])
    return out


def unvalidated(kernels: dict[str, str], records: Iterable[dict]) -> dict[str, str]:
    """The kernels (directory: hash) with no passing record for their hash on a Hopper device."""
    good = {r["kernel_hash"] for r in records if is_hopper(r) and passed(r)}
    return {d: h for d, h in kernels.items() if h not in good}


def unrecorded(repo: str | os.PathLike) -> dict[str, str]:
    """The kernels under ``repo``/generated (directory relative to repo: hash) the committed records do not
    cover yet: what ``bench/gpu_checks.sh ONLY_UNRECORDED=1`` builds and validates."""
    return unvalidated(kernel_hashes(Path(repo) / "generated"), read_records(records_dir(repo)))


def relative_directory(directory: str | os.PathLike | None) -> str | None:
    """``generated/...`` of a kernel directory, wherever the repository was checked out."""
    if not directory:
        return None
    parts = Path(directory).parts
    return str(Path(*parts[parts.index("generated"):])) if "generated" in parts else str(directory)


def record_from_report(kernel: dict, device: dict, date: str, source: str, driver: str | None = None,
                       sanitizer: str | None = None) -> dict:
    """A record from one kernel entry of a ``cutegen validate`` report (or the GPU suite's equivalent)."""
    cases = kernel.get("cases", [])
    runs = [c for c in cases if c.get("kind") == "case" and not c.get("refused")]
    probes = [c for c in cases if c.get("kind") == "probe"]
    errs = [c["rel_err"] for c in runs if isinstance(c.get("rel_err"), float)]
    failed_without_kind = [c for c in cases if "kind" not in c]   # hang, crash or worker error
    rec = {"schema": SCHEMA, "kernel_hash": kernel["hash"], "directory": relative_directory(kernel.get("directory")),
           "backend": kernel.get("backend"), "device_name": device.get("name"),
           "compute_capability": device.get("compute_capability"), "driver": driver or device.get("driver"),
           "driver_api": device.get("driver_api"), "date": date[:10],
           "cases_run": len(runs) + len(failed_without_kind),
           "cases_passed": sum(1 for c in runs if c.get("ok")),
           "probes": len(probes), "probes_agreed": sum(1 for c in probes if c.get("ok")),
           "max_rel_error": max(errs) if errs else None, "sanitizer": sanitizer,
           "verdict": kernel.get("verdict"), "source": source}
    return check_record(rec, f"{source}: {kernel.get('kernel', kernel['hash'])}")


def write_records(path: str | os.PathLike, records: list[dict]) -> Path:
    """Write a new record file; an existing one is never rewritten (runs add files)."""
    path = Path(path)
    if path.exists():
        raise CutegenError(f"{path} exists: a run writes a new record file, it never rewrites one")
    for i, r in enumerate(records, 1):
        check_record(r, f"{path}: record {i}")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode())
    return path


def convert(reports: list[str], out: str, driver: str | None, sanitize: str | None) -> list[dict]:
    """Records from ``cutegen validate --json`` reports; ``sanitize`` (a --sanitize-only report) adds
    the sanitizer verdict to the kernels it ran on (matched by library path)."""
    san: dict[str, str] = {}
    if sanitize:
        for s in json.loads(Path(sanitize).read_text()).get("sanitizer", []):
            san[str(Path(s["library"]).parent)] = s["verdict"]
    records = []
    for path in reports:
        doc = json.loads(Path(path).read_text())
        device = doc.get("device") or {}
        if not device.get("name"):
            raise FieldError(f"{path}: device", "the report names no device: no record can be made from it")
        for k in doc.get("kernels", []):
            records.append(record_from_report(k, device, doc["date"], source=path, driver=driver,
                                              sanitizer=san.get(str(k.get("directory")))))
    write_records(out, records)
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cutegen.validation_records", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="records from cutegen validate --json reports, into a new file")
    c.add_argument("reports", nargs="+")
    c.add_argument("--out", required=True, help="the new .jsonl file (must not exist)")
    c.add_argument("--driver", help="the driver version of the run, where the report does not carry it")
    c.add_argument("--sanitize", help="a --sanitize-only report of the same run")
    s = sub.add_parser("missing", help="kernels under generated/ with no passing Hopper record")
    s.add_argument("--repo", default=".")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "convert":
            recs = convert(args.reports, args.out, args.driver, args.sanitize)
            print(f"wrote {len(recs)} records to {args.out}")
            return 0
        missing = unvalidated(kernel_hashes(Path(args.repo) / "generated"), read_records(records_dir(args.repo)))
        for d, h in missing.items():
            print(f"{h}  {d}")
        print(f"{len(missing)} kernel directories without a passing Hopper validation record")
        return 1 if missing else 0
    except CutegenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
