"""On a Hopper GPU: every kernel under generated/ validated the way ``cutegen validate`` does it.

For each kernel directory (generated/sm90a, generated/baseline, generated/coverage/...), built
beforehand (``cutegen build generated``; bench/gpu_checks.sh does it): its own problem size, ragged
M/N/K, batch 2 and batch 3 with padded leading dimensions and batch strides, a sub-tile problem,
alpha != 1 and beta != 0 where C exists, and the refusal probes (misaligned pointers, leading
dimensions, batch strides, extents), each under the watchdog (cutegen.runner.Worker). Then
compute-sanitizer (memcheck, racecheck, synccheck) on a sample: the smallest kernel of each
(backend, input type, mainloop schedule) group.

With ``CUTEGEN_VALIDATION_RECORDS=DIR`` set, the session writes one record per kernel hash it ran
into a new ``DIR/<date>-<device>-<time>.jsonl`` (cutegen.validation_records); committed under
generated/validation/, those records are what tests/test_validation_records.py checks in CI.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest

from cutegen import runner as R
from cutegen._atomic import atomic_write
from cutegen import validation_records as VR
from cutegen.commands import validate as V

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "generated"
KERNEL_DIRS = sorted(p.parent for p in GENERATED.rglob("manifest.json"))
if os.environ.get("CUTEGEN_ONLY_UNRECORDED"):
    # only the kernels whose hash has no passing Hopper record yet (bench/gpu_checks.sh ONLY_UNRECORDED=1)
    _todo = VR.unrecorded(REPO)
    KERNEL_DIRS = [d for d in KERNEL_DIRS if str(d.relative_to(REPO)) in _todo]
# compute-sanitizer runs the sample's kernels about 6 s each (three tools at once, H200, 2026-11-22).
SANITIZE_MAX = int(os.environ.get("CUTEGEN_SANITIZE_SAMPLE", "24"))


class Ledger:
    """What the session ran, per kernel directory, kept as records in this run's own new file.

    The file is rewritten (atomically) after every test, so a run stopped part-way (the GPU script's
    time budget) still leaves the records of every kernel it finished; it is never an older run's file.
    """

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.path: Path | None = None
        self.reports: dict[str, dict] = {}
        self.sanitizer: dict[str, str] = {}
        self.device: dict = {}
        self.now = dt.datetime.now(dt.timezone.utc)

    def records(self) -> list[dict]:
        source = "pytest -m gpu tests/test_gpu_validation.py"
        return [VR.record_from_report(rep, self.device, self.now.date().isoformat(), source,
                                      sanitizer=self.sanitizer.get(d))
                for d, rep in sorted(self.reports.items())]

    def flush(self) -> Path | None:
        if self.folder is None or not self.reports:
            return None
        if self.path is None:
            name = re.sub(r"[^a-z0-9]+", "-", str(self.device.get("name", "gpu")).lower()).strip("-")
            self.path = self.folder / f"{self.now:%Y-%m-%d}-{name}-{self.now:%H%M%S}.jsonl"
            return VR.write_records(self.path, self.records())     # refuses an existing file
        atomic_write(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records()).encode())
        return self.path


@pytest.fixture(scope="session")
def ledger():
    folder = os.environ.get("CUTEGEN_VALIDATION_RECORDS")
    book = Ledger(Path(folder) if folder else None)
    yield book
    if book.flush():
        print(f"\nvalidation records: {book.path}")


@pytest.fixture(scope="session")
def worker(ledger):
    w = R.Worker(init={"op": "init"})
    reply = w.request({"op": "ping"}, timeout=120)
    assert reply.ok, reply.message
    ledger.device = dict(w.init_reply.value)
    yield w
    w.close()


def _args(**kw):
    base = dict(no_manifest_shape=False, no_probes=False, timeout=60.0, seed=0)
    return argparse.Namespace(**{**base, **kw})


def _label(d: Path) -> str:
    return str(d.relative_to(GENERATED))


def test_there_are_kernels_to_validate():
    assert len(KERNEL_DIRS) >= (0 if os.environ.get("CUTEGEN_ONLY_UNRECORDED") else 2)


@pytest.mark.parametrize("directory", KERNEL_DIRS, ids=_label)
def test_kernel_validates(directory, worker, ledger):
    info = R.load_kernel_info(directory)     # KernelNotFound (a failure) when it was not built
    report = V.validate_one(worker, info, [], _args(), say=lambda *a, **k: None)
    ledger.reports[str(directory)] = report
    ledger.flush()
    cases = report["cases"]
    runs = [c for c in cases if c.get("kind") == "case" and not c.get("refused")]
    probes = [c for c in cases if c.get("kind") == "probe"]
    assert report["verdict"] == "pass", report["reason"]
    names = {c["case"] for c in runs}
    assert {"ragged", "ragged_batch2", "padded_batch3", "sub_tile"} <= names, names
    assert all(c["ok"] and c["rel_err"] < c["tol"] for c in runs)
    if info.problem.dtype_c != "void":
        assert any(c["beta"] != 0 for c in runs)
    # every probe the contract allows (fewer where an operand takes any alignment: 1-element or staged)
    expected = {c.name for c in R.refusal_probes(info.problem, info.config)}
    assert {p["case"] for p in probes} == expected
    assert all(p["ok"] and p["kernel_status"] == 1 and p["d_untouched"] for p in probes)


def sanitizer_sample(dirs=KERNEL_DIRS, limit=SANITIZE_MAX) -> list[Path]:
    """The smallest kernel (by its problem's flops) of each (backend, input type, mainloop schedule, set of
    non-default fields) group, cutegen's own kernels first."""
    groups: dict[tuple, tuple[int, Path]] = {}
    for d in dirs:
        m = json.loads((d / "manifest.json").read_text())
        p, c = m["problem"], m["config"]
        # Fields left at their defaults are left out of a manifest, so a new kernel form (a field that
        # only it sets) forms a group of its own and is sanitized too.
        key = (m["backend"], p["dtype_a"], c.get("mainloop_schedule"), tuple(sorted(c)), tuple(sorted(p)))
        flops = 2 * p["m"] * p["n"] * p["k"] * p.get("batch", 1)
        if key not in groups or flops < groups[key][0]:
            groups[key] = (flops, d)
    # cutegen's own explicit-type kernels first, then the CollectiveBuilder baselines
    picked = sorted(groups.items(), key=lambda kv: (kv[0][0] != "cutlass", kv[0]))
    return [d for _, (_, d) in picked][:limit]


@pytest.mark.parametrize("directory", sanitizer_sample(), ids=_label)
def test_sanitizer_is_clean(directory, worker, ledger):
    info = R.load_kernel_info(directory)
    result = V.sanitize_kernel(info, V.SANITIZER_TOOLS, 150.0, say=lambda *a, **k: None, parallel=True)
    ledger.sanitizer[str(directory)] = result["verdict"]
    ledger.flush()
    assert result["verdict"] == "clean", {t: r["summary"] or r["tail"][-800:] for t, r in result["tools"].items()}
