"""The GPU half of tuning: build a plan's candidates, time and validate them, record, write the best.

``Tuner`` takes its builder, timer, validator and results database as arguments (``gpu.py`` has the
real ones), so the whole flow runs on a CPU with fakes in the tests. Per problem:

1. answered from the database when this device kind already has validated measurements of it
   (unless ``force``): the best measured kernel is re-rendered from its configuration, no GPU;
2. otherwise every candidate is built (all problems at once: one parallel, cached build), then timed
   with cuBLAS in one process, each verified against a float32 reference first; a candidate that
   fails verification, or does not build, is reported and not timed;
3. the fastest verified candidate is validated like ``cutegen validate`` does; if that fails, the next;
4. every timed candidate becomes a ``Measurement`` (``add_many``: one transaction per problem), and the winner is
   written as a kernel directory whose manifest says it was tuned, among which candidates, and by how
   much it beat the search's first pick, cuBLAS, nvMMH's pick and the CUTLASS default.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .._atomic import atomic_directory
from ..errors import CutegenError
from ..problem import GemmProblem
from .plan import Candidate, Plan, ProblemPlan, config_label

TIMING_METHOD = "cuda-events median; queue primed behind a spin kernel; input sets rotated over >= 4x L2"
# What a tuned kernel directory holds: a C++ kernel (DSL times screen candidates; they are not written).
KERNEL_BACKENDS = ("cutlass", "cutlass_builder")


@dataclass
class Outcome:
    """What tuning one problem found."""
    name: str
    problem: GemmProblem
    source: str                                   # "measured" or "database"
    chosen: dict | None = None                    # the written kernel: name, origin, config, median_us, ...
    candidates: list[dict] = field(default_factory=list)
    cublas_us: float | None = None
    directory: str | None = None
    notes: list[str] = field(default_factory=list)
    ran_on: dict | None = None                    # on a cluster: the GPU task's worker, GPU, clock, retries

    def ratio(self, name: str) -> float | None:
        """How many times faster the chosen kernel is than candidate ``name`` (> 1: faster)."""
        other = next((c for c in self.candidates if c["name"] == name and c.get("median_us")), None)
        if other is None or not self.chosen:
            return None
        return other["median_us"] / self.chosen["median_us"]

    def to_dict(self) -> dict:
        ch = self.chosen or {}
        return {"name": self.name, "problem": self.problem.to_dict(), "source": self.source, "chosen": self.chosen,
                "candidates": self.candidates, "cublas_us": self.cublas_us, "directory": self.directory,
                "speedup_vs_first_pick": self.ratio("search1"),
                "speedup_vs_cublas": (self.cublas_us / ch["median_us"]) if self.cublas_us and ch else None,
                "speedup_vs_nvmmh": self.ratio("nvmmh"), "speedup_vs_cutlass_default": self.ratio("cutlass_default"),
                "notes": self.notes, **({"ran_on": self.ran_on} if self.ran_on else {})}


def _us(res: dict) -> float | None:
    return res["median_ms"] * 1e3 if res.get("status") == "ok" and res.get("median_ms") else None


def validation_order(results: dict, names) -> list[str]:
    """The verified, timed kernels among ``names``, fastest first (ties: by name): the order validation walks."""
    timed = [(_us(results[n]), n) for n in names
             if n in results and _us(results[n]) and (results[n].get("verify") or {}).get("ok")]
    return [n for _, n in sorted(timed)]


def time_and_validate(timer, validator, problem: GemmProblem, contenders: list[dict], kernels: dict) -> dict:
    """The GPU half of one problem, the same in this process and in a cluster's GPU task: time every
    contender (cuBLAS among them), then validate the fastest verified kernel, the next when it fails, until
    one passes. ``kernels``: {name: (directory, config, library)} of the candidates (not cuBLAS).
    Returns {"results": {name: timing}, "validations": [[name, ok, why], ...] in the order they ran}."""
    results = timer(problem, contenders)
    validations = []
    for name in validation_order(results, kernels):
        directory, config, library = kernels[name]
        ok, why = (True, "not validated (no validator)") if validator is None else \
            validator(directory, problem, config, library)
        validations.append([name, bool(ok), why])
        if ok:
            break
    return {"results": results, "validations": validations}


class Tuner:
    def __init__(self, plan: Plan, plan_dir: str | Path, out: str | Path, *, db, builder: Callable,
                 timer=None, validator: Callable | None = None, device_kind: str | None = None,
                 force: bool = False, single: bool = False, display=None, versions: dict | None = None,
                 measurement=None, kind_of: Callable | None = None, deadline: float | None = None):
        """``out``: the kernel directory (``single``: one problem) or the folder of one directory per
        problem name. ``timer``: ``timer(problem, contenders) -> {name: result}`` and
        ``timer.device() -> {name, sm_count, ...}``; None when no GPU is at hand (then every problem
        must be answered from the database). A timer with ``measure`` (``tuning.remote.RemoteGPU``) times
        and validates each problem in a GPU task of its executor, all problems submitted at once.
        ``measurement`` and ``kind_of`` default to ``cutegen.results.Measurement`` and
        ``cutegen.results.device_kind``. ``deadline`` (a
        ``time.monotonic()`` value): no problem starts timing after it; the rest are reported skipped."""
        from ..progress import Display
        self.plan, self.plan_dir, self.out = plan, Path(plan_dir), Path(out)
        self.db, self.builder, self.timer, self.validator = db, builder, timer, validator
        self.force, self.single = force, single
        self.display = display or Display(quiet=True)
        self.versions = versions or {}
        self._device = None
        self._kind = device_kind
        self.records: list = []
        self._dropped: set[tuple[str, str]] = set()   # (problem, candidate) screened out by the DSL
        self.deadline = deadline
        self.seconds: dict[str, float] = {}          # wall time of the build and timing phases
        self._measurement_cls, self._kind_of = measurement, kind_of
        # One run: its records share this start time and a source prefix, which is how the tuning
        # curve (bench/tuning_curve.py) groups a problem's candidates back together.
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if single and len(plan.problems) != 1:
            raise CutegenError(f"one output directory for {len(plan.problems)} problems")

    # -- the device ---------------------------------------------------------------------------------
    def device(self) -> dict:
        if self._device is None:
            if self.timer is None:
                raise CutegenError("no GPU to measure on (and the results database has no answer)")
            self._device = self.timer.device()
        return self._device

    @property
    def device_kind(self) -> str:
        """The kind the database is asked about: --device-kind, else the GPU's."""
        if self._kind is None:
            self._kind = self.measured_kind
        return self._kind

    @property
    def measured_kind(self) -> str:
        """The kind of the GPU at hand: what every new measurement is filed under, whatever was asked."""
        return self._kind_of_device(self.device())

    def _kind_of_device(self, d: dict) -> str:
        """The kind a measurement on GPU ``d`` is filed under (on a cluster: the GPU that timed it)."""
        kind_of = self._kind_of
        if kind_of is None:
            from ..results import device_kind as kind_of
        return kind_of(d.get("name") or "", d.get("sm_count"))

    def out_dir(self, pp: ProblemPlan) -> Path:
        return self.out if self.single else self.out / pp.name

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> list[Outcome]:
        outcomes: dict[str, Outcome] = {}
        todo: list[ProblemPlan] = []
        for pp in self.plan.problems:
            hit = None if self.force else self._from_database(pp)
            if hit is not None:
                outcomes[pp.name] = hit
            else:
                todo.append(pp)
        if todo and self.timer is not None and self.measured_kind != self.device_kind:
            raise CutegenError(f"--device-kind {self.device_kind} but the GPU here is a {self.measured_kind} "
                               f"({self.device().get('name')}): measurements are filed under the GPU's kind")
        if todo and self.timer is None:
            raise CutegenError(f"no GPU to measure on, and the results database has no validated measurement "
                               f"on {self.device_kind} of: {', '.join(pp.name for pp in todo)}")
        if todo:
            screened = self._screen(todo) if self.plan.finalists else {}
            if self.records:                  # the DSL screen's times
                self.db.add_many(self.records)
            t = time.monotonic()
            built = self._build(todo, screened)
            self.seconds["build"] = round(time.monotonic() - t, 3)
            t = time.monotonic()
            self.display.stage("time", "timing", len(todo))
            if hasattr(self.timer, "measure"):    # GPU tasks on an executor (tuning.remote.RemoteGPU)
                self._measure_remote(todo, built, screened, outcomes)
            else:
                self._measure_here(todo, built, screened, outcomes)
            self.seconds["time"] = round(time.monotonic() - t, 3)
        return [outcomes[pp.name] for pp in self.plan.problems]

    def _measure_here(self, todo: list[ProblemPlan], built: dict, screened: dict,
                      outcomes: dict[str, Outcome]) -> None:
        for pp in todo:
            if self.deadline is not None and time.monotonic() > self.deadline:
                outcomes[pp.name] = Outcome(pp.name, pp.problem, "skipped", notes=["the timing deadline passed"])
                self.display.log(f"SKIP   {pp.name}: the timing deadline passed")
                continue
            done = len(self.records)
            outcomes[pp.name] = self._measure(pp, built, screened.get(pp.name, {}))
            if len(self.records) > done:   # one transaction per problem: a run cut short keeps what it measured
                self.db.add_many(self.records[done:])

    def _from_database(self, pp: ProblemPlan) -> Outcome | None:
        from ..render import render
        if self._kind is None and self.timer is None:
            raise CutegenError("the device kind is unknown without a GPU: give --device-kind")
        ms = [m for m in self.db.measurements(device_kind=self.device_kind, problem=pp.problem)
              if m.validated and m.backend in KERNEL_BACKENDS and getattr(m, "is_benchmark", True)]
        if not ms:
            return None
        best = min(ms, key=lambda m: m.median_us)
        # The plan usually holds the kernel already rendered (the GPU machine cannot render: no jinja2).
        same = next((c for c in pp.candidates if c.config == best.config and c.backend == best.backend), None)
        if same is not None:
            src = self.plan_dir / same.directory
            files = {f: (src / f).read_text() for f in ("kernel.cu", "manifest.json")}
        else:
            files = render(pp.problem, best.config, best.backend).files
        cands = [{"name": m.kernel_hash, "backend": m.backend, "config_name": config_label(m.config),
                  "median_us": m.median_us, "measured_at": m.measured_at, "source": m.source}
                 for m in sorted(ms, key=lambda m: m.median_us)]
        out = Outcome(pp.name, pp.problem, "database", candidates=cands, cublas_us=best.cublas_us)
        out.chosen = {"name": best.kernel_hash, "origin": "database", "backend": best.backend,
                      "config": best.config.to_dict(), "config_name": config_label(best.config),
                      "median_us": best.median_us, "measured_at": best.measured_at, "device_name": best.device_name}
        d = self.out_dir(pp)
        with atomic_directory(d) as new:           # the tuned directory appears whole
            (new / "kernel.cu").write_bytes(files["kernel.cu"].encode())
            with contextlib.suppress(FileNotFoundError):
                (new / "kernel.so").unlink()      # another kernel's library: the build below makes this one's
            self._write_manifest(new, json.loads(files["manifest.json"]), out)
        built = self.builder([d])
        ok, msg = built.get(str(d), (False, "not built"))
        if not ok:
            out.notes.append(f"kernel not built here: {msg.splitlines()[0] if msg else 'failed'}")
        out.directory = str(d)
        self.display.log(f"db     {pp.name}: {len(ms)} validated measurements on {self.device_kind}; best "
                         f"{config_label(best.config)} {best.median_us:.1f} us (no GPU run)")
        return out

    def _screen(self, todo: list[ProblemPlan]) -> dict[str, dict[str, float]]:
        """--screen dsl: time the DSL twins; returns, per problem, the DSL time of every screened candidate.
        The ones outside the ``plan.finalists`` fastest are not compiled with nvcc."""
        from .screening import finalists
        out: dict[str, dict[str, float]] = {}
        for pp in todo:
            twins = [c for c in pp.candidates if c.dsl_directory]
            if len(twins) <= self.plan.finalists:
                continue  # nothing to save: every twin would be a finalist
            contenders = [{"name": f"{c.name}.dsl", "library": str(self.plan_dir / c.dsl_directory / "kernel.so")}
                          for c in twins] + [{"name": "cublas"}]
            self.display.log(f"screen {pp.name}: {len(twins)} DSL twins")
            res = self.timer(pp.problem, contenders)
            cub = _us(res.get("cublas", {}))
            dsl_us = {}
            for c in twins:
                r = res.get(f"{c.name}.dsl", {})
                us = _us(r)
                if us and (r.get("verify") or {}).get("ok"):
                    dsl_us[c.name] = us
                    self.records.append(self._measurement(pp, c, r, us, cub, self.device(), dsl=True))
            keep = set(finalists(dsl_us, self.plan.finalists))
            out[pp.name] = {n: us for n, us in dsl_us.items()}
            dropped = sorted(set(dsl_us) - keep)
            self.display.log(f"screen {pp.name}: finalists {', '.join(sorted(keep))}; not compiled: "
                             f"{', '.join(dropped) or 'none'}")
            self._dropped.update((pp.name, n) for n in dropped)
        return out

    def _build(self, todo: list[ProblemPlan], screened: dict | None = None) -> dict[str, tuple[bool, str]]:
        # Most important first (a build deadline cuts from the end): every problem's first pick, then the
        # contenders, then the search's runners-up rank by rank.
        prio = {"nvmmh": 1.5, "cutlass_default": 1.6}
        cands = [(prio.get(c.origin, c.rank or 99), i, c) for i, pp in enumerate(todo) for c in pp.candidates
                 if (pp.name, c.name) not in self._dropped]
        dirs = [self.plan_dir / c.directory for _, _, c in sorted(cands, key=lambda x: x[:2])]
        self.display.stage("build", "building", len(dirs))
        if not dirs:
            return {}
        return self.builder(dirs)

    def _contenders(self, pp: ProblemPlan, built: dict) -> tuple[list[dict], dict[str, Candidate]]:
        """What one problem's timing request names: every candidate not screened out (its library, or why
        there is none), then cuBLAS."""
        contenders = []
        by_name: dict[str, Candidate] = {}
        for c in pp.candidates:
            if (pp.name, c.name) in self._dropped:
                continue
            d = self.plan_dir / c.directory
            ok, msg = built.get(str(d), (False, "not built"))
            lib = d / "kernel.so"
            by_name[c.name] = c
            plan = self._launch_plan(c)
            contenders.append({"name": c.name, "library": str(lib) if ok else None,
                               "reason": "" if ok else f"build failed: {(msg or '').strip().splitlines()[0] if msg else ''}",
                               **({"launch_plan": plan} if plan else {})})
        contenders.append({"name": "cublas"})
        return contenders, by_name

    def _launch_plan(self, c: Candidate) -> dict | None:
        """The plan a stream-K candidate is timed under, as ``cutegen bench`` times a kernel: its manifest's
        ``launch_plan`` (the search's choice, else the ABI's default). Recorded with its measurement."""
        try:
            man = json.loads((self.plan_dir / c.directory / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return man.get("launch_plan") or None

    def _kernels(self, by_name: dict[str, Candidate]) -> dict:
        """{name: (directory, config, library)}: what validation needs of each candidate."""
        return {n: (self.plan_dir / c.directory, c.config, str(self.plan_dir / c.directory / "kernel.so"))
                for n, c in by_name.items()}

    def _measure_remote(self, todo: list[ProblemPlan], built: dict, screened: dict,
                        outcomes: dict[str, Outcome]) -> None:
        """Every problem one GPU task of the timer's executor (``timer.measure``), all submitted at once; the
        replies are recorded here, the only writer of the database and the output directories."""
        asks = []
        for pp in todo:
            contenders, by_name = self._contenders(pp, built)
            asks.append((pp, contenders, self._kernels(by_name)))
            self.display.timing(pp.name, len(contenders) - 1)
        deadline_epoch = None if self.deadline is None else time.time() + (self.deadline - time.monotonic())
        replies = self.timer.measure([(pp.name, pp.problem, c, k) for pp, c, k in asks], deadline_epoch)
        for (pp, _, _), reply in zip(asks, replies):
            ran_on = {"worker": reply.worker, "host": reply.host, "pid": reply.pid, "gpu": reply.gpu,
                      "started": reply.started, "finished": reply.finished, "retried": reply.retried}
            if not reply.ok:
                # No finished attempt: nothing of an interrupted one reaches the database.
                outcomes[pp.name] = Outcome(pp.name, pp.problem, "measured", ran_on=ran_on,
                                            notes=[f"the GPU task failed: {reply.error}"])
                self.display.log(f"FAIL   {pp.name}: GPU task: {reply.error}")
                continue
            if reply.value.get("status") == "skipped":
                outcomes[pp.name] = Outcome(pp.name, pp.problem, "skipped", notes=[reply.value["message"]])
                self.display.log(f"SKIP   {pp.name}: {reply.value['message']}")
                continue
            done = len(self.records)
            outcomes[pp.name] = self._measure(pp, built, screened.get(pp.name, {}), measured=reply.value)
            outcomes[pp.name].ran_on = ran_on
            if len(self.records) > done:
                self.db.add_many(self.records[done:])

    def _measure(self, pp: ProblemPlan, built: dict, dsl_us: dict | None = None,
                 measured: dict | None = None) -> Outcome:
        """One problem: time and validate here (``measured`` None) or take a GPU task's reply; then the
        candidates' statuses, the records and the kernel directory of the one that won."""
        out = Outcome(pp.name, pp.problem, "measured", notes=list(pp.notes))
        contenders, by_name = self._contenders(pp, built)
        dsl_us = dsl_us or {}
        if measured is None:
            self.display.timing(pp.name, len(contenders) - 1)
            measured = time_and_validate(self.timer, self.validator, pp.problem, contenders, self._kernels(by_name))
        results = measured["results"]
        cub = results.get("cublas", {})
        out.cublas_us = _us(cub)
        for c in pp.candidates:
            if (pp.name, c.name) in self._dropped:
                out.candidates.append({
                    "name": c.name, "origin": c.origin, "backend": c.backend, "rank": c.rank,
                    "config": c.config.to_dict(), "config_name": config_label(c.config), "kernel_hash": c.kernel_hash,
                    "predicted_us": c.predicted_us, "status": "screened_out", "median_us": None,
                    "dsl_us": dsl_us.get(c.name), "reason": "not among the DSL screen's finalists"})
                continue
            res = results.get(c.name, {"status": "missing", "reason": "no result"})
            verify = res.get("verify") or {}
            out.candidates.append({
                "name": c.name, "origin": c.origin, "backend": c.backend, "rank": c.rank,
                "config": c.config.to_dict(), "config_name": config_label(c.config), "kernel_hash": c.kernel_hash,
                "predicted_us": c.predicted_us, "status": res.get("status"), "median_us": _us(res),
                "rel_err": verify.get("rel_err"), "reason": res.get("reason", ""),
                **({"dsl_us": dsl_us[c.name]} if c.name in dsl_us else {})})
        device = measured.get("device") or self.device()
        plans = {c["name"]: c["launch_plan"] for c in contenders if c.get("launch_plan")}
        by_cand = {x["name"]: x for x in out.candidates}
        for name, ok, why in measured["validations"]:   # fastest verified first, up to the first that passed
            x = by_cand[name]
            x["validation"] = why if ok else f"FAILED: {why}"
            if ok:
                out.chosen = x
                break
            x["status"] = "failed_validation"
            self.display.log(f"FAIL   {pp.name} {x['name']}: validation: {why}")
        for x in out.candidates:
            if x["median_us"]:
                valid = x.get("status") != "failed_validation"
                self.records.append(self._measurement(pp, by_name[x["name"]], results[x["name"]], x["median_us"],
                                                      out.cublas_us, device, validated=valid,
                                                      launch_plan=plans.get(x["name"])))
        if out.chosen is None:
            out.notes.append("no candidate was built, verified and validated")
            self.display.log(f"NONE   {pp.name}: no candidate passed")
            return out
        src = self.plan_dir / by_name[out.chosen["name"]].directory
        d = self.out_dir(pp)
        with atomic_directory(d) as new:           # the tuned directory appears whole
            for f in ("kernel.cu", "kernel.so"):
                with contextlib.suppress(FileNotFoundError):
                    (new / f).unlink()
                if (src / f).exists():
                    shutil.copyfile(src / f, new / f)
                    os.chmod(new / f, 0o755 if f.endswith(".so") else 0o644)
            self._write_manifest(new, json.loads((src / "manifest.json").read_text()), out)
        out.directory = str(d)
        self.display.best_so_far(pp.name, f"{out.chosen['name']} {out.chosen['config_name']}",
                                 out.chosen["median_us"], out.cublas_us)
        return out

    def _measurement(self, pp: ProblemPlan, c: Candidate, res: dict, median_us: float, cublas_us, device: dict,
                     validated: bool = True, dsl: bool = False, launch_plan: dict | None = None):
        from .. import __version__
        Measurement = self._measurement_cls
        if Measurement is None:
            from ..results import Measurement
        verified = bool((res.get("verify") or {}).get("ok"))
        return Measurement(
            problem=pp.problem, config=c.config, kernel_hash=c.dsl_hash if dsl else c.kernel_hash,
            backend="dsl" if dsl else c.backend,
            device_name=device.get("name") or "", device_kind=self._kind_of_device(device), sm_count=device.get("sm_count"),
            sm_clock_mhz=device.get("sm_clock_mhz"), driver=self.versions.get("driver"),
            cuda=device.get("torch_cuda"), cutlass=self.versions.get("cutlass"), cutegen=__version__,
            timing_method=TIMING_METHOD, times_us=tuple(t * 1e3 for t in res.get("times_ms") or ()),
            median_us=median_us, validated=verified and validated,
            max_rel_error=(res.get("verify") or {}).get("rel_err"), cublas_us=cublas_us,
            source=f"cutegen-tune {self.started}#{pp.name}/{c.name}{'.dsl' if dsl else ''}", measured_at=self.started,
            **({"launch_plan": launch_plan} if launch_plan else {}))

    def _write_manifest(self, d: Path, manifest: dict, out: Outcome) -> None:
        from ..manifest import dumps
        o = out.to_dict()
        manifest["tuning"] = {
            "tuned": True, "source": out.source, "device_kind": self.device_kind,
            "chosen": out.chosen, "candidates": out.candidates, "cublas_us": out.cublas_us,
            **{k: o[k] for k in ("speedup_vs_first_pick", "speedup_vs_cublas", "speedup_vs_nvmmh",
                                 "speedup_vs_cutlass_default")},
            "notes": out.notes}
        (d / "manifest.json").write_bytes(dumps(manifest).encode())   # d: a private atomic_directory


def records_lines(records: list) -> str:
    """Every measurement as one JSON line (``Measurement.to_dict()``): what ``cutegen db import X.jsonl`` reads."""
    return "".join(json.dumps(m.to_dict(), sort_keys=True) + "\n" for m in records)


def records_document(outcomes: list[Outcome], records: list, device: dict | None, versions: dict, *,
                     seconds: dict | None = None, executor: list[str] | None = None) -> dict:
    """The run as JSON: every outcome (what won, by how much, what failed) and every measurement; with
    ``seconds`` the phases' wall times (``Tuner.seconds``), with ``executor`` its summary lines."""
    doc = {"schema": "cutegen-tune/1", "device": device or {}, "versions": versions,
           "timing_method": TIMING_METHOD,
           "problems": [o.to_dict() for o in outcomes],
           "measurements": [m.to_dict() for m in records]}
    if seconds is not None:
        doc["seconds"] = seconds
    if executor is not None:
        doc["executor"] = executor
    return doc

