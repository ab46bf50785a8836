"""``cutegen validate --op NAME`` and ``cutegen bench --op NAME``: any registered operation through the seam.

The core knows no operation. It reads the problems (a suite TOML of ``[[case]]`` tables, or ``--problem`` JSON),
plans their kernels (the operation's search and renderer: the pick, the runners-up and the kernels that stand for a
peer, such as the CUTLASS 88 example's for attention), builds them, and runs the operation's GPU half, the module
named by ``Operation.runner``, in this one process:

- ``RUN_FIELDS``: suite fields that are run options, not problem fields (grouped GEMM: ``fill``);
- ``peer_kernels(problem) -> {role: config}``: kernels of the operation's own config type rendered beside the
  pick as peers (their role names start with one of ``Operation.peers``);
- ``validate(problem, kernel_dir) -> {"ok", "cases", "probes", "max_rel_error"}``: the operation's cases (ragged
  shapes and so on) against its float32 reference, and the refusals of its C ABI;
- ``bench(problem, kernels, options) -> {"flops", "bytes", "results": {name: {"status", "median_ms", "times_ms",
  "verify"}}}``: every kernel (role -> directory) and every library peer timed on the same inputs, each checked
  once against the reference first.

The core adds TFLOP/s, the ratios to every peer (``peer time / cutegen time``), the fraction of the HBM floor, writes
``<out>/<date>-<op>-<device>.json`` (after every problem) and a PNG, and files every kernel's timing in the results
database (the operation named by the problem; the peers' medians in ``peers_us``). A second bench with the same
database reuses a problem whose every kernel it already holds, timed on this device kind with its peers.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import importlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core import registry
from ..core.op import canonical
from ..errors import CutegenError, FieldError
from .gpu_info import device_info

BENCH_SCHEMA = "cutegen-opbench/1"
VALIDATE_SCHEMA = "cutegen-opvalidate/1"
VERDICTS = ("pass", "fail", "error", "hang", "crash", "not built", "not run")
INDEX = "index.json"
DIRS = "dirs.txt"
# Datasheet HBM bandwidth by device name, most specific first (the floor of a memory-bound call)
HBM_BANDWIDTH = (("H200", 4.8e12), ("H100 PCIE", 2.0e12), ("H100 NVL", 3.9e12), ("H100", 3.35e12),
                 ("H800", 3.35e12), ("H20", 4.0e12))


@dataclass(frozen=True)
class Case:
    """One problem of a suite: its name, the operation's problem, and run options (``RUN_FIELDS``)."""
    name: str
    problem: Any
    options: dict = field(default_factory=dict)


def operation(op_name: str):
    """The registered operation, refusing in one line one without a GPU half (GEMM has its own commands)."""
    op = registry.get(op_name)
    if not op.runner:
        raise CutegenError(f"--op {op_name}: the operation has no runner for `cutegen validate/bench --op` "
                           f"(GEMM: run the commands without --op)")
    return op


def runner_of(op) -> Any:
    return importlib.import_module(op.runner)


# --- problems --------------------------------------------------------------------------------------------
def load_cases(op_name: str, suite: str | None = None, problems: list[str] | tuple = (),
               only: list[str] | tuple = ()) -> list[Case]:
    """The suite's ``[[case]]`` tables (``name`` plus the problem's fields plus the runner's ``RUN_FIELDS``; an
    optional top-level ``op`` must name ``op_name``) and every ``--problem`` JSON object, filtered by ``only``."""
    op = operation(op_name)
    run_fields = tuple(getattr(runner_of(op), "RUN_FIELDS", ()))
    cases: list[Case] = []
    if suite:
        import tomllib
        path = Path(suite)
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except OSError as e:
            raise FieldError("--suite", f"cannot read {suite}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise FieldError("--suite", f"{suite}: not UTF-8 text (byte {e.start})") from None
        except tomllib.TOMLDecodeError as e:
            raise FieldError("--suite", f"{suite}: {e}") from None
        named = data.get("op", op_name)
        if named != op_name:
            raise FieldError(f"{path.name}: op", f"{named!r} is not --op {op_name!r}")
        unknown = sorted(set(data) - {"op", "case"})
        if unknown:
            raise FieldError(f"{path.name}: {unknown[0]}", "unknown top-level field (op, case)")
        tables = data.get("case")
        if not isinstance(tables, list) or not tables:
            raise FieldError(f"{path.name}", "no [[case]] tables")
        for i, t in enumerate(tables):
            where = f"{path.name}: case[{i}]"
            name = t.get("name")
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise FieldError(f"{where}.name", f"{name!r} is missing or not [A-Za-z0-9_.-]")
            body = {k: v for k, v in t.items() if k != "name" and k not in run_fields}
            problem = registry.problem_from_dict({**body, "op": op_name}, f"{where} ({name})")
            cases.append(Case(name, problem, {k: t[k] for k in run_fields if k in t}))
    for i, text in enumerate(problems):
        from .._fields import loads_json
        try:
            body = loads_json(text)
        except ValueError as e:
            raise FieldError(f"--problem[{i}]", f"not JSON: {e}") from None
        if not isinstance(body, dict):
            raise FieldError(f"--problem[{i}]", "expected a JSON object")
        options = {k: body.pop(k) for k in run_fields if k in body}
        problem = registry.problem_from_dict({**body, "op": op_name}, f"--problem[{i}]")
        cases.append(Case(problem.name, problem, options))
    if not cases:
        raise FieldError("--suite", f"no problems: give --suite FILE or --problem JSON for --op {op_name}")
    seen: set[str] = set()
    for c in cases:
        if c.name in seen:
            raise FieldError("--suite", f"problem name {c.name!r} appears twice")
        seen.add(c.name)
    if only:
        missing = sorted(set(only) - seen)
        if missing:
            raise FieldError("--only", f"{missing[0]!r} is not a problem of the suite")
        cases = [c for c in cases if c.name in set(only)]
    return cases


# --- plan (CPU: the operation's search and renderer) --------------------------------------------------------
def _kernel_hash(rendered) -> str:
    h = getattr(rendered, "kernel_hash", None)
    if isinstance(h, str) and h:
        return h
    files = getattr(rendered, "files", {})
    return hashlib.sha256(canonical({k: files[k] for k in sorted(files)}).encode()).hexdigest()[:16]


def plan(op_name: str, cases: list[Case], out: str | Path, top_k: int = 1, say: Callable = print) -> dict:
    """Search every case (``cutegen.core.search``), render its ``top_k`` picks ("cutegen", "cutegen-2", ...) and the
    runner's peer kernels, one directory per distinct kernel (``kernels/<hash>``), and an index of problem ->
    role -> kernel. The folder appears whole or not at all."""
    from ..core.search import search
    op = operation(op_name)
    run = runner_of(op)
    if top_k < 1:
        raise FieldError("--top-k", f"{top_k} is below 1")
    out = Path(out)
    rendered: dict[str, Any] = {}
    kernels: dict[str, dict] = {}
    index: dict[str, Any] = {"op": op_name, "problems": {}, "kernels": kernels}
    order: list[str] = []

    def add(problem, config, role: str) -> dict | None:
        refused = registry.backend_refusals(problem, config, op.backends[0]) if op.backends else []
        broken = [str(v) for v in registry.check(problem, config) if getattr(v, "enforced", True)] if op.check else []
        if refused or broken:
            say(f"  {role}: not rendered: {(refused or broken)[0]}")
            return None
        r = registry.render(problem, config)
        h = _kernel_hash(r)
        if h not in kernels:
            kernels[h] = {"dir": f"kernels/{h}", "config": config.to_dict(),
                          "class": getattr(problem, "kernel_class_name", "")}
            rendered[h] = r
        return {"dir": f"kernels/{h}", "hash": h, "config": config.to_dict()}

    for c in cases:
        t0 = time.perf_counter()
        res = search(c.problem, top_k)
        seconds = time.perf_counter() - t0
        ranked = list(getattr(res, "ranked", res))
        if not ranked:
            raise CutegenError(f"{c.name}: the search found no legal configuration")
        roles: dict[str, dict] = {}
        for i, r in enumerate(ranked[:top_k]):
            k = add(c.problem, r.config, f"cutegen{'' if i == 0 else f'-{i + 1}'}")
            if k is not None:
                k["predicted_us"] = round(float(r.cost), 4)
                roles[f"cutegen{'' if i == 0 else f'-{i + 1}'}"] = k
        if "cutegen" not in roles:
            raise CutegenError(f"{c.name}: the search's pick does not render")
        for role, config in dict(run.peer_kernels(c.problem)).items():
            k = add(c.problem, config, role)
            if k is not None:
                roles[role] = k
        order += [roles["cutegen"]["hash"]]
        index["problems"][c.name] = {"problem": c.problem.to_dict(), "options": c.options, "kernels": roles,
                                     "search_seconds": round(seconds, 4)}
        say(f"{c.name}: search {seconds * 1e3:.0f} ms, pick {_short(ranked[0].config)}; "
            f"{len(roles)} kernels ({', '.join(roles)})")
    build_order = list(dict.fromkeys(order + list(kernels)))
    from .._atomic import atomic_directory
    # whole or not at all, one writer at a time (the output lock); a fresh folder: no stale kernel survives
    with atomic_directory(out, keep_existing=False) as tmp:
        for h, r in rendered.items():
            r.write(tmp / kernels[h]["dir"])
        (tmp / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        (tmp / DIRS).write_text("".join(f"{kernels[h]['dir']}\n" for h in build_order))
    say(f"plan: {len(cases)} problems, {len(kernels)} kernels -> {out}")
    return index


def _short(config) -> str:
    name = getattr(config, "short_name", None)
    return name() if callable(name) else canonical(config.to_dict())


def load_index(kernels_dir: str | Path) -> dict | None:
    path = Path(kernels_dir) / INDEX
    if not path.is_file():
        return None
    try:
        index = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CutegenError(f"{path}: {e}") from None
    # what kernels_for reads, checked once: a damaged or hand-made index is one line, never a traceback
    if not (isinstance(index, dict) and isinstance(index.get("op"), str) and isinstance(index.get("problems"), dict)):
        raise FieldError(str(path), "expected an object with \"op\" and \"problems\" (cutegen bench --op ... --plan)")
    for name, entry in index["problems"].items():
        kernels = entry.get("kernels") if isinstance(entry, dict) else None
        if not isinstance(kernels, dict) or not isinstance(entry.get("problem"), dict):
            raise FieldError(f"{path}: problems.{name}", "expected an object with \"problem\" and \"kernels\"")
        for role, k in kernels.items():
            if not (isinstance(k, dict) and isinstance(k.get("dir"), str) and isinstance(k.get("hash"), str)
                    and isinstance(k.get("config"), dict)):
                raise FieldError(f"{path}: problems.{name}.kernels.{role}", "expected dir, hash and config")
            inside = (Path(kernels_dir) / k["dir"]).resolve()
            if Path(kernels_dir).resolve() not in inside.parents:
                raise FieldError(f"{path}: problems.{name}.kernels.{role}.dir",
                                 f"{k['dir']!r} leaves the plan folder {kernels_dir}")
    return index


def kernels_for(kernels_dir: str | Path, index: dict | None, case: Case) -> tuple[dict[str, dict], str]:
    """role -> {"dir", "hash", "config"} of the case's kernels (the plan's index, else a ``cutegen generate``
    directory ``<kernels_dir>/<problem name>`` as "cutegen"), or why there are none."""
    root = Path(kernels_dir)
    if index is not None:
        if index.get("op") != registry.operation_of(case.problem).name:
            return {}, f"{root / INDEX} is a plan of {index.get('op')!r}"
        entry = index["problems"].get(case.name)
        if entry is None:
            return {}, f"{case.name} is not in {root / INDEX} (plan it: cutegen bench --op ... --plan)"
        if canonical(entry["problem"]) != canonical(case.problem.to_dict()):
            return {}, f"{root / INDEX}: {case.name} was planned for another problem"
        return {role: {**k, "dir": str(root / k["dir"])} for role, k in entry["kernels"].items()}, ""
    d = root / case.problem.name
    manifest = d / "manifest.json"
    if not manifest.is_file():
        return {}, f"no {INDEX} in {root} and no kernel directory {d}"
    try:
        m = json.loads(manifest.read_text())
        if canonical(registry.problem_from_dict(m["problem"]).to_dict()) != canonical(case.problem.to_dict()):
            return {}, f"{manifest} is for another problem"
    except (KeyError, ValueError, json.JSONDecodeError) as e:
        return {}, f"{manifest}: {e}"
    return {"cutegen": {"dir": str(d), "hash": m.get("hash") or m.get("kernel_hash") or "", "config": m["config"]}}, ""


def build_dirs(dirs: list[str], jobs: int, say: Callable = print) -> dict[str, str]:
    """Build every directory that has no library yet (``cutegen.build``: the machine-wide lock and the content
    cache); dir -> "" built or the reason it is not."""
    from ..build import build
    todo = [d for d in dict.fromkeys(dirs) if not (Path(d) / "kernel.so").is_file()]
    if todo:
        summary = build(todo, jobs=jobs, progress=None)
        say(summary.line())
    return {d: "" if (Path(d) / "kernel.so").is_file() else "not built" for d in dict.fromkeys(dirs)}


# --- the device -------------------------------------------------------------------------------------------
def hbm_bandwidth(device_name: str | None) -> float | None:
    name = (device_name or "").upper()
    return next((bw for key, bw in HBM_BANDWIDTH if key in name), None)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _write_json(path: Path, doc: dict) -> None:
    from .._atomic import atomic_write
    atomic_write(path, (json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n").encode())


# --- where the runner runs ---------------------------------------------------------------------------------
class Runner:
    """Calls of the operation's GPU half: in a watchdog child (``isolate``, the default: ``cutegen.run.watchdog``, so a
    kernel that hangs or faults costs that call and a fresh child, not the run; kernel and peers of one problem
    still run in one process) or in this process (tests, debugging). ``call`` answers (status, value, message),
    status one of ok, error, hang, crash."""

    def __init__(self, op, isolate: bool = True, startup_timeout: float = 180.0):
        self.op = op
        self.isolate = isolate
        self.startup_timeout = startup_timeout
        self._worker = None

    def _child(self):
        if self._worker is None:
            from .watchdog import Worker
            self._worker = Worker(startup_timeout=self.startup_timeout)
        return self._worker

    def device(self) -> dict:
        if not self.isolate:
            return device_info()
        reply = self._child().request({"op": "op_device"}, self.startup_timeout)
        if not reply.ok:
            raise CutegenError(f"the GPU worker did not start: {reply.status}: {_first_line(reply.message)}")
        return reply.value

    def call(self, fn: str, problem, *args, timeout: float = 600.0) -> tuple[str, Any, str]:
        if not self.isolate:
            try:
                return "ok", getattr(runner_of(self.op), fn)(problem, *args), ""
            except Exception as e:  # noqa: BLE001 - this call's result, the run goes on
                return "error", None, f"{type(e).__name__}: {e}"[:400]
        reply = self._child().request({"op": "op_runner", "runner": self.op.runner, "fn": fn,
                                       "problem": problem.to_dict(), "args": [_plain(a) for a in args]}, timeout)
        return reply.status, reply.value, _first_line(reply.message)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def _first_line(message: str | None) -> str:
    return (message or "").strip().splitlines()[0][:400] if (message or "").strip() else ""


def _plain(a):
    """Arguments cross to the child as plain data (paths as strings)."""
    if isinstance(a, Path):
        return str(a)
    if isinstance(a, dict):
        return {k: _plain(v) for k, v in a.items()}
    return a


# --- validate ---------------------------------------------------------------------------------------------
def validate(op_name: str, cases: list[Case], kernels_dir: str | Path, *, json_path: str | None = None,
             device: dict | None = None, deadline: float = 0.0, timeout: float = 120.0, isolate: bool = True,
             startup_timeout: float = 180.0, say: Callable = print) -> dict:
    """Every distinct kernel of the cases (the pick, the runners-up, the peer kernels) through the operation's
    validation, once each, on the problem of the first case that names it; ``timeout`` seconds per kernel (then it
    is a hang, and the next kernel gets a fresh worker)."""
    op = operation(op_name)
    runner = Runner(op, isolate, startup_timeout)
    try:
        return _validate(op, runner, cases, kernels_dir, json_path, device, deadline, timeout, say)
    finally:
        runner.close()


def _validate(op, runner: "Runner", cases, kernels_dir, json_path, device, deadline, timeout, say) -> dict:
    op_name = op.name
    index = load_index(kernels_dir)
    kernels: dict[str, tuple[Case, str, dict]] = {}
    missing = []
    for c in cases:
        found, why = kernels_for(kernels_dir, index, c)
        if not found:
            missing.append({"name": c.name, "reason": why})
        for role, k in found.items():
            kernels.setdefault(k["dir"], (c, role, k))
    if not kernels:
        raise CutegenError(f"no kernel to validate: {missing[0]['reason'] if missing else 'empty suite'}")
    device = device or runner.device()
    t0 = time.monotonic()
    records: list[dict] = []

    def document() -> dict:
        summary = {v: sum(r["verdict"] == v for r in records) for v in VERDICTS}
        summary["kernels"] = len(kernels)
        summary["ok"] = summary["pass"] == len(kernels)
        doc = {"schema": VALIDATE_SCHEMA, "op": op_name, "date": _now().isoformat(timespec="seconds"), "device": device,
               "reference": op.reference, "kernels": records, "missing": missing, "summary": summary}
        if json_path:       # after every kernel: a run cut short keeps what it validated
            Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            _write_json(Path(json_path), doc)
        return doc

    for kdir, (c, role, k) in kernels.items():
        rec = {"dir": kdir, "hash": k["hash"], "config": k["config"], "role": role, "case": c.name,
               "problem": c.problem.to_dict()}
        if deadline and time.monotonic() - t0 > deadline:
            rec.update(verdict="not run", reason=f"deadline of {deadline:g} s")
        elif not (Path(kdir) / "kernel.so").is_file():
            rec.update(verdict="not built", reason=f"no {Path(kdir) / 'kernel.so'}")
        else:
            started = time.monotonic()
            status, got, message = runner.call("validate", c.problem, kdir, timeout=timeout)
            if status == "ok":
                rec.update(got)
                rec["verdict"] = "pass" if got.get("ok") else "fail"
            else:          # error: the runner raised; hang: no answer in time; crash: the worker died
                rec.update(verdict=status, ok=False, reason=message or status)
            rec["seconds"] = round(time.monotonic() - started, 2)
        records.append(rec)
        bad = [x for x in rec.get("cases", []) + rec.get("probes", []) if not x.get("ok")]
        say(f"{rec['verdict'].upper():8s} {role:10s} {Path(kdir).name} ({c.name})"
            + (f": {rec.get('reason')}" if rec.get("reason") else "")
            + "".join(f"\n  {json.dumps(x, default=str)[:300]}" for x in bad[:5]))
        document()
    doc = document()
    summary = doc["summary"]
    say(f"validate --op {op_name}: {summary['pass']}/{len(records)} pass"
        + "".join(f", {summary[v]} {v}" for v in ("fail", "error", "not built", "not run") if summary[v]))
    return doc


def passed_in(paths: list[str]) -> set[str] | None:
    """The kernel directories that passed in these validate reports (None: no report given)."""
    if not paths:
        return None
    out: set[str] = set()
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise FieldError("--validated", f"cannot read {p}: {e}") from None
        out |= {str(Path(r["dir"]).resolve()) for r in doc.get("kernels", []) if r.get("verdict") == "pass"}
    return out


# --- bench ------------------------------------------------------------------------------------------------
def peer_of(name: str, peers: tuple[str, ...]) -> str | None:
    """The peer a contender stands for: itself, or the peer a kernel role starts with ("cutlass88-2")."""
    for p in peers:
        if name == p or name.startswith(p + "-"):
            return p
    return None


def derive(entry: dict, peers: tuple[str, ...], hbm_bytes_per_s: float | None) -> dict:
    """TFLOP/s per contender; per peer the best of its contenders and ``ratio_vs_<peer>`` = peer time / cutegen
    time (above 1: cutegen is faster); the HBM floor (the operation's minimum bytes at the datasheet bandwidth)
    and the fraction of it each contender reaches."""
    flops = entry.get("flops") or 0
    res = entry["results"]
    for r in res.values():
        if r.get("status") == "ok" and r.get("median_ms"):
            r["tflops"] = flops / (r["median_ms"] * 1e-3) / 1e12 if flops else None
    ours = res.get("cutegen", {}).get("median_ms") if res.get("cutegen", {}).get("status") == "ok" else None
    best: dict[str, float] = {}
    for name, r in res.items():
        p = peer_of(name, peers)
        if p and r.get("status") == "ok" and r.get("median_ms"):
            best[p] = min(best.get(p, math.inf), r["median_ms"])
    entry["peer_ms"] = {p: best.get(p) for p in peers}
    entry["ratios"] = {p: (best[p] / ours if ours and p in best else None) for p in peers}
    floor_bytes = entry.get("bytes")
    if hbm_bytes_per_s and floor_bytes:
        floor_ms = floor_bytes / hbm_bytes_per_s * 1e3
        entry["hbm_floor_ms"] = floor_ms
        entry["fraction_of_hbm_floor"] = {n: floor_ms / r["median_ms"] for n, r in res.items()
                                          if r.get("status") == "ok" and r.get("median_ms")}
    return entry


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(entries: list[dict], peers: tuple[str, ...]) -> dict:
    return {"problems": len(entries),
            "vs": {p: {"geomean": geomean([e.get("ratios", {}).get(p) for e in entries]),
                       "n": sum(1 for e in entries if e.get("ratios", {}).get(p))} for p in peers},
            "reused": sorted(e["name"] for e in entries if e.get("reused")),
            "not_measured": sorted(e["name"] for e in entries
                                   if e["results"].get("cutegen", {}).get("status") != "ok")}


def _reusable(db, case: Case, kernels: dict[str, dict], kind: str) -> dict | None:
    """results from the database when it holds, for this device kind, a validated benchmark of every kernel of the
    case with its peers (the newest of each); None: time it."""
    if db is None:
        return None
    stored = db.measurements(device_kind=kind, problem=case.problem)
    out: dict[str, dict] = {}
    peers_us = None
    for role, k in kernels.items():
        mine = [m for m in stored if m.kernel_hash == k["hash"] and m.is_benchmark and m.validated and m.peers_us]
        if not mine:
            return None
        m = max(mine, key=lambda m: m.measured_at)
        out[role] = {"status": "ok", "median_ms": m.median_us / 1e3, "times_ms": [t / 1e3 for t in m.times_us],
                     "verify": {"ok": True, "rel_error": m.max_rel_error}, "reused": m.source,
                     "dir": k["dir"], "hash": k["hash"]}
        if role == "cutegen":
            peers_us = m.peers_us
    for name, us in (peers_us or {}).items():
        out.setdefault(name, {"status": "ok", "median_ms": us / 1e3, "reused": "peers_us of the cutegen record",
                              "verify": {"ok": True}})
    return out


def _record(case: Case, op, role: str, k: dict, r: dict, peers_us: dict, device: dict, source: str,
            measured_at: str):
    from .. import __version__
    from ..results import Measurement
    verify = r.get("verify") or {}
    return Measurement(
        problem=case.problem, config=registry.config_from_dict(op, k["config"]), kernel_hash=k["hash"],
        backend=op.backends[0] if op.backends else "cutlass", device_name=device["name"], device_kind=device["kind"],
        sm_count=device.get("sm_count"), cuda=device.get("cuda"), cutegen=__version__,
        timing_method=f"cutegen bench --op {op.name}: {r.get('method', 'CUDA events')}",
        times_us=tuple(t * 1e3 for t in r.get("times_ms") or [r["median_ms"]]), median_us=r["median_ms"] * 1e3,
        validated=bool(verify.get("ok")), max_rel_error=verify.get("rel_error"),
        source=f"{source}#{case.name}/{role}", measured_at=measured_at, peers_us=peers_us or None)


def bench(op_name: str, cases: list[Case], kernels_dir: str | Path, out_dir: str | Path, *, db=None,
          validated: set[str] | None = None, device: dict | None = None, deadline: float = 0.0,
          options: dict | None = None, plot: bool = True, suite: str = "", reuse: bool = True,
          timeout: float = 600.0, isolate: bool = True, startup_timeout: float = 180.0,
          say: Callable = print) -> tuple[dict, Path]:
    """Time every case (see the module's docstring), ``timeout`` seconds per problem; returns the document and its
    path."""
    op = operation(op_name)
    runner = Runner(op, isolate, startup_timeout)
    try:
        return _bench(op, runner, cases, kernels_dir, out_dir, db, validated, device, deadline, options, plot, suite,
                      reuse, timeout, say)
    finally:
        runner.close()


def _bench(op, runner: "Runner", cases, kernels_dir, out_dir, db, validated, device, deadline, options, plot, suite,
           reuse, timeout, say) -> tuple[dict, Path]:
    op_name = op.name
    run = runner_of(op)
    index = load_index(kernels_dir)
    device = device or runner.device()
    started = _now()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", device["name"].lower()).strip("-") or "unknown-device"
    path = out_dir / f"{started.strftime('%Y-%m-%d')}-{op_name}-{slug}.json"
    hbm = hbm_bandwidth(device["name"])
    entries: list[dict] = []
    t0 = time.monotonic()

    def write() -> dict:
        doc = {"schema": BENCH_SCHEMA, "op": op_name, "date": started.isoformat(timespec="seconds"),
               "device": device, "suite": suite, "peers": list(op.peers), "reference": op.reference,
               "method": {"timer": "the operation's runner: CUDA events around back-to-back calls, median of rounds",
                          "verification": "each contender once against the float32 reference before timing",
                          "ratios": "peer time / cutegen time, per peer the best of its contenders"},
               "hbm_bytes_per_s": hbm, "problems": entries, "summary": summarize(entries, op.peers),
               "seconds": round(time.monotonic() - t0, 1)}
        _write_json(path, doc)
        return doc

    for c in cases:
        entry: dict[str, Any] = {"name": c.name, "problem": c.problem.to_dict(), "options": c.options}
        kernels, why = kernels_for(kernels_dir, index, c)
        if validated is not None:
            dropped = [r for r, k in kernels.items() if str(Path(k["dir"]).resolve()) not in validated]
            for r in dropped:
                entry.setdefault("not_timed", {})[r] = "did not pass validation"
                del kernels[r]
        for r in [r for r, k in kernels.items() if not (Path(k["dir"]) / "kernel.so").is_file()]:
            entry.setdefault("not_timed", {})[r] = "not built"
            del kernels[r]
        if deadline and time.monotonic() - t0 > deadline:
            entry["results"] = {"cutegen": {"status": "skipped", "reason": f"deadline of {deadline:g} s"}}
            entries.append(entry)
            write()
            say(f"SKIP  {c.name}: deadline")
            continue
        reused = _reusable(db, c, kernels, device["kind"]) if kernels and reuse else None
        if reused is not None:
            entry["results"] = reused
            entry["reused"] = True
            run_flops = getattr(run, "flops", None)       # the run's own count where options change it (fill)
            entry["flops"] = (run_flops(c.problem, c.options) if run_flops
                              else op.flops(c.problem) if op.flops else None)
            entry["bytes"] = getattr(run, "floor_bytes", lambda p, o: None)(c.problem, c.options)
        else:
            status, got, message = runner.call("bench", c.problem, {r: k["dir"] for r, k in kernels.items()},
                                               {**c.options, **(options or {})}, timeout=timeout)
            if status != "ok":     # error, hang or crash: every contender of this problem says so
                got = {"results": {r: {"status": status, "reason": message or status} for r in kernels or ("cutegen",)}}
            entry.update({k: v for k, v in got.items() if k != "results"})
            entry["results"] = got["results"]
            for r, k in kernels.items():
                entry["results"].setdefault(r, {"status": "error", "reason": "the runner returned nothing"})
                entry["results"][r].update(dir=k["dir"], hash=k["hash"], config=k["config"])
            if "cutegen" not in kernels:
                entry["results"]["cutegen"] = {"status": "missing",
                                               "reason": why or entry.get("not_timed", {}).get("cutegen", "")}
            if db is not None:
                peers_us = {n: r["median_ms"] * 1e3 for n, r in entry["results"].items()
                            if n not in kernels and r.get("status") == "ok" and r.get("median_ms")}
                ms = [_record(c, op, role, k, entry["results"][role], peers_us, device, path.name,
                              started.isoformat(timespec="seconds"))
                      for role, k in kernels.items() if entry["results"][role].get("status") == "ok"]
                if ms:
                    db.add_many(ms)
                    entry["stored"] = len(ms)
        derive(entry, op.peers, hbm)
        entries.append(entry)
        write()
        ratios = ", ".join(f"{v:.3f}x {p}" for p, v in entry["ratios"].items() if v)
        say(f"{'REUSED' if entry.get('reused') else 'BENCH '} {c.name}: "
            f"{_fmt_tf(entry['results'].get('cutegen'))} TFLOP/s; {ratios or 'no ratio'}")
    doc = write()
    if plot:
        try:
            plot_doc(doc, path.with_suffix(".png"))
            say(f"wrote {path.with_suffix('.png')}")
        except ImportError as e:
            say(f"plot skipped ({e})")
    say(format_table(doc))
    return doc, path


def _fmt_tf(r: dict | None) -> str:
    return f"{r['tflops']:.1f}" if r and r.get("tflops") else (r or {}).get("status", "-")


def format_table(doc: dict) -> str:
    """TFLOP/s of cutegen and each peer (the best of its contenders), the ratios, the fraction of the floor."""
    peers = doc["peers"]
    head = ["problem", "cutegen"] + peers + [f"x {p}" for p in peers] + ["% floor"]
    rows = [head]
    for e in doc["problems"]:
        res = e["results"]
        flops = e.get("flops") or 0
        cell = [e["name"] + (" (reused)" if e.get("reused") else ""), _fmt_tf(res.get("cutegen"))]
        for p in peers:
            ms = (e.get("peer_ms") or {}).get(p)
            cell.append(f"{flops / (ms * 1e-3) / 1e12:.1f}" if ms and flops else "-")
        cell += [f"{(e.get('ratios') or {}).get(p):.3f}" if (e.get("ratios") or {}).get(p) else "-" for p in peers]
        frac = (e.get("fraction_of_hbm_floor") or {}).get("cutegen")
        cell.append(f"{frac * 100:.0f}" if frac else "-")
        rows.append(cell)
    s = doc["summary"]
    rows.append(["geomean", ""] + [""] * len(peers) +
                [f"{s['vs'][p]['geomean']:.3f}" if s["vs"][p]["geomean"] else "-" for p in peers] + [""])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append(f"op {doc['op']}, device {doc['device'].get('name')}; ratios: peer time / cutegen time")
    return "\n".join(lines)


def plot_doc(doc: dict, png: Path) -> None:
    """Two panels per problem (matplotlib, no display): TFLOP/s of cutegen and of the best contender of each peer,
    and cutegen's ratio to each peer (peer time / cutegen time, log scale; above 1: cutegen is faster)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = doc["problems"]
    names = [e["name"] for e in problems]
    series = {"cutegen": [((e["results"].get("cutegen") or {}).get("tflops") or 0.0) for e in problems]}
    for p in doc["peers"]:
        series[p] = [(e.get("flops") or 0) / ((e.get("peer_ms") or {}).get(p) * 1e-3) / 1e12
                     if (e.get("peer_ms") or {}).get(p) and e.get("flops") else 0.0 for e in problems]
    x = list(range(len(names)))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(min(18.0, max(8.0, 0.5 * len(names) + 3)), 8.0))
    width = 0.8 / len(series)
    for i, (label, ys) in enumerate(series.items()):
        top.bar([v + i * width for v in x], ys, width, label=label)
    top.set_ylabel("TFLOP/s (useful FLOPs)")
    top.legend(fontsize=7, ncol=len(series))
    top.set_title(f"cutegen bench --op {doc['op']} on {doc['device'].get('name')} ({doc['date'][:10]})", fontsize=9)
    width = 0.8 / max(1, len(doc["peers"]))
    for i, p in enumerate(doc["peers"]):
        ys = [(e.get("ratios") or {}).get(p) or float("nan") for e in problems]
        bottom.bar([v + i * width for v in x], ys, width, label=f"x {p}", color=f"C{i + 1}")
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.set_yscale("log")
    bottom.set_ylabel("peer time / cutegen time")
    bottom.legend(fontsize=7, ncol=len(doc["peers"]))
    bottom.set_xticks([v + 0.4 - width / 2 for v in x])
    bottom.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
