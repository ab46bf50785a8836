"""The CPU half of tuning: which kernels to measure for each problem, rendered and written down.

A plan directory holds ``plan.json`` and one rendered kernel directory per candidate
(``<problem name>/<candidate name>/kernel.cu`` + ``manifest.json``). It needs the search (egglog)
and, for the nvMMH contender, nvMatmulHeuristics; the GPU half (``measure``) needs neither, so a
plan made here is carried to the GPU machine and measured there.

Candidates per problem: the search's top k (``search1`` is its first pick), nvMMH's first legal
proposal (``nvmmh``) and CUTLASS's CollectiveBuilder default (``cutlass_default``, the same 128x256x64
baseline ``cutegen bench`` times). All are cutegen-rendered kernels with the same C ABI.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .._fields import loads_json
from .._atomic import atomic_write, output_lock
from .._fields import as_int
from ..config import KernelConfig
from ..errors import CutegenError, FieldError
from ..paths import check_name, confined
from ..problem import GemmProblem

PLAN_SCHEMA = "cutegen-tune-plan/1"
# The fixed default ``cutegen bench`` times (commands/bench.py BASELINE_CONFIG).
CUTLASS_DEFAULT = {"tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1], "stages": "auto",
                   "mainloop_schedule": "cooperative", "epilogue_schedule": "tma_warp_specialized_cooperative",
                   "tile_scheduler": "persistent"}
ORIGINS = ("search", "nvmmh", "cutlass_default")


def config_label(cfg: KernelConfig) -> str:
    """short_name plus the raster order and swizzle it leaves out (two search candidates may differ only there)."""
    if cfg.raster_order == "heuristic" and cfg.raster_swizzle == 1:
        return cfg.short_name()
    return f"{cfg.short_name()}_{cfg.raster_order}_swz{cfg.raster_swizzle}"


@dataclass
class Candidate:
    name: str                      # search1..searchK, nvmmh, cutlass_default
    origin: str                    # one of ORIGINS
    backend: str                   # cutlass (explicit types) or cutlass_builder
    config: KernelConfig
    directory: str                 # relative to the plan directory
    kernel_hash: str
    rank: int | None = None        # the search's rank, 1-based (search candidates only)
    predicted_us: float | None = None
    dsl_directory: str | None = None   # the same configuration as a built CuTe DSL kernel (--screen dsl)
    dsl_hash: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "origin": self.origin, "backend": self.backend, "config": self.config.to_dict(),
                "config_name": config_label(self.config), "directory": self.directory,
                "kernel_hash": self.kernel_hash, "rank": self.rank, "predicted_us": self.predicted_us,
                "dsl_directory": self.dsl_directory, "dsl_hash": self.dsl_hash}

    @classmethod
    def from_dict(cls, d: dict) -> "Candidate":
        if d.get("origin") not in ORIGINS:
            raise FieldError("candidate.origin", f"{d.get('origin')!r} is not one of {', '.join(ORIGINS)}")
        return cls(d["name"], d["origin"], d["backend"], KernelConfig.from_dict(d["config"], "candidate.config"),
                   d["directory"], d["kernel_hash"], d.get("rank"), d.get("predicted_us"), d.get("dsl_directory"),
                   d.get("dsl_hash"))


@dataclass
class ProblemPlan:
    name: str
    problem: GemmProblem
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)     # contenders left out, and why
    nvmmh: dict | None = None                          # nvmmh.Pick.to_dict(): the rule report

    def to_dict(self) -> dict:
        return {"name": self.name, "problem": self.problem.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates], "notes": self.notes, "nvmmh": self.nvmmh}

    @classmethod
    def from_dict(cls, d: dict) -> "ProblemPlan":
        return cls(d["name"], GemmProblem.from_dict(d["problem"]), [Candidate.from_dict(c) for c in d["candidates"]],
                   list(d.get("notes") or []), d.get("nvmmh"))


@dataclass
class Plan:
    top_k: int
    device_kind: str               # the kind nvMMH was asked about
    problems: list[ProblemPlan]
    single: bool = False           # one problem given by flags (its output is one kernel directory)
    finalists: int = 0             # --screen dsl: screened candidates kept for nvcc per problem (0: no screening)
    ranking: str = "prior"         # how the search ranked: the analytic prior, or a device kind's (learned) model

    def to_dict(self) -> dict:
        return {"schema": PLAN_SCHEMA, "top_k": self.top_k, "device_kind": self.device_kind, "single": self.single,
                "finalists": self.finalists, "ranking": self.ranking, "problems": [p.to_dict() for p in self.problems]}

    def write(self, directory: Path) -> Path:
        path = Path(directory) / "plan.json"
        atomic_write(path, (json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n").encode())
        return path

    @classmethod
    def load(cls, directory: str | Path) -> "Plan":
        path = Path(directory) / "plan.json"
        try:
            d = loads_json(path.read_text())
        except FileNotFoundError:
            raise CutegenError(f"{path}: no tuning plan there (make one with `cutegen tune --plan-only`)") from None
        except json.JSONDecodeError as e:
            raise FieldError(str(path), f"not valid JSON: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise CutegenError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        if not isinstance(d, dict) or d.get("schema") != PLAN_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise FieldError(f"{path}.schema", f"expected {PLAN_SCHEMA!r}, got {got!r}")
        try:
            plan = cls(as_int("top_k", d["top_k"], lo=1, hi=100), str(d["device_kind"]),
                       [ProblemPlan.from_dict(p) for p in d["problems"]],
                       bool(d.get("single")), as_int("finalists", d.get("finalists") or 0, lo=0),
                       str(d.get("ranking") or "prior"))
        except KeyError as e:
            raise FieldError(str(path), f"missing field {e.args[0]!r}") from None
        except (TypeError, AttributeError, ValueError) as e:
            raise FieldError(str(path), f"malformed plan: {e}") from None
        # every name and directory in the plan becomes a path: each stays inside the plan directory
        for i, pp in enumerate(plan.problems):
            check_name(pp.name, f"{path}.problems[{i}].name")
            for j, c in enumerate(pp.candidates):
                where = f"{path}.problems[{i}].candidates[{j}]"
                check_name(c.name, f"{where}.name")
                confined(directory, c.directory, f"{where}.directory")
                if c.dsl_directory is not None:
                    confined(directory, c.dsl_directory, f"{where}.dsl_directory")
        return plan


def _default_search(problem: GemmProblem, k: int) -> list[tuple]:
    """(config, cost, launch plan or None) of the search's top k."""
    from ..search import search  # egglog lives behind this import
    result = search(problem, k, backend="cutlass")
    return [(r.config, r.cost, r.plan) for r in result.ranked]


def device_search(device_kind: str, db_path=None) -> Callable:
    """The search as ``cutegen search --device KIND`` runs it: that kind's SM count, bandwidth and peak, and,
    when the results database holds measurements of the kind, its learned re-ranking (built once)."""
    state: dict = {}

    def run(problem: GemmProblem, k: int) -> list[tuple]:
        from ..search import search
        if "predictor" not in state:
            from ..results import ResultsDB
            from ..search.learned import Predictor
            pred = Predictor(device_kind, ResultsDB(db_path).measurements(op="gemm"))
            state["predictor"] = pred if pred.exact or pred.learned else None
        result = search(problem, k, backend="cutlass", device=device_kind, predictor=state["predictor"])
        return [(r.config, r.cost, r.plan) for r in result.ranked]

    run.ranking = f"device {device_kind}"   # type: ignore[attr-defined]
    return run


def _default_nvmmh(problem: GemmProblem, device_kind: str):
    from .. import nvmmh
    return nvmmh.pick(problem, device_kind)


def plan_problem(name: str, problem: GemmProblem, workdir: Path, *, top_k: int, device_kind: str,
                 search: Callable | None = None, nvmmh: Callable | None = None,
                 with_nvmmh: bool = True, with_default: bool = True, screen: Callable | None = None) -> ProblemPlan:
    """Search, pick the contenders and render every candidate under ``workdir/<name>/``.

    ``screen(problem, candidate) -> DSL directory or None`` builds the DSL twin of a search candidate
    that may be screened (``--screen dsl``)."""
    from ..render import render

    search = search or _default_search
    pp = ProblemPlan(name, problem, [])
    wanted: list[tuple[str, str, str, KernelConfig, int | None, float | None, object]] = []
    ranked = search(problem, top_k)
    if not ranked:
        raise CutegenError(f"{name}: the search found no legal configuration")
    # ``search`` gives (config, cost) or (config, cost, launch plan): a stream-K candidate is rendered (and so
    # timed and recorded) under the plan its cost was priced with, as `cutegen generate` writes the pick
    for i, (cfg, cost, *plan) in enumerate(ranked[:top_k], 1):
        wanted.append((f"search{i}", "search", "cutlass", cfg, i, cost, plan[0] if plan else None))
    if with_nvmmh:
        try:
            pick = (nvmmh or _default_nvmmh)(problem, device_kind)
            pp.nvmmh = pick.to_dict()
            if pick.chosen is None:
                pp.notes.append(f"nvmmh: none of its {len(pick.judged)} distinct proposals is legal")
            else:
                est = pick.chosen.proposal.estimated_us
                wanted.append(("nvmmh", "nvmmh", "cutlass", pick.chosen.config, None, est, None))
        except CutegenError as e:
            pp.notes.append(f"nvmmh: {e}")
    if with_default:
        wanted.append(("cutlass_default", "cutlass_default", "cutlass_builder",
                       KernelConfig.from_dict(CUTLASS_DEFAULT), None, None, None))
    for cname, origin, backend, cfg, rank, predicted, plan in wanted:
        rel = f"{name}/{cname}"
        cost = {"model": origin, "predicted_us": predicted} if predicted is not None else None
        if cost is not None and plan is not None:
            cost["launch_plan"] = plan.to_dict()
        try:
            kernel = render(problem, cfg, backend, cost=cost)
        except CutegenError as e:  # e.g. the default tile breaks a rule of this problem: say so, go on
            pp.notes.append(f"{cname}: not rendered: {e}")
            continue
        kernel.write(workdir / rel)
        cand = Candidate(cname, origin, backend, kernel.config, rel, kernel.kernel_hash, rank,
                         round(predicted, 3) if predicted is not None else None)
        if screen is not None and origin == "search":
            try:
                twin = screen(problem, cand, workdir)
            except CutegenError as e:
                pp.notes.append(f"{cname}: no DSL twin: {e}")
                twin = None
            if twin is not None:
                cand.dsl_directory, cand.dsl_hash = twin
        pp.candidates.append(cand)
    return pp


def dsl_screen(families=None, builder: Callable | None = None) -> Callable:
    """``screen`` for ``plan_problem``: build the DSL twin of each candidate whose family the DSL screens
    faithfully (``screening``), into ``<candidate dir>.dsl``; ``builder`` defaults to ``cutegen.dsl.build_dsl``."""
    from . import screening

    fams = screening.default_families() if families is None else families

    def screen(problem: GemmProblem, cand: Candidate, workdir: Path):
        if not screening.screenable(problem, cand.config, cand.predicted_us, fams):
            return None
        from ..dsl import dsl_supports, kernel_hash
        if dsl_supports(problem, cand.config):
            return None
        build = builder
        if build is None:
            from ..dsl import build_dsl as build
        rel = f"{cand.directory}.dsl"
        build(problem, cand.config, workdir / rel)
        return rel, kernel_hash(problem, cand.config)

    return screen


def make_plan(problems: list[tuple[str, GemmProblem]], workdir: str | Path, *, top_k: int = 8,
              device_kind: str = "h100-sxm", search: Callable | None = None, nvmmh: Callable | None = None,
              with_nvmmh: bool = True, with_default: bool = True, single: bool = False,
              screen: Callable | None = None, finalists: int = 2,
              say: Callable[[str], None] = lambda s: None) -> Plan:
    """The plan for ``problems`` written under ``workdir`` (plan.json + one directory per candidate)."""
    if not 1 <= top_k <= 100:
        raise FieldError("--top-k", f"expected 1 to 100, got {top_k}")
    names = [check_name(n, "problem name") for n, _ in problems]   # each names a directory under workdir
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FieldError("suite", f"problem names must be unique: {', '.join(dup)}")
    workdir = Path(workdir)
    if workdir.exists() and not workdir.is_dir():
        raise CutegenError(f"{workdir}: exists and is not a directory (the tuning work directory)")
    workdir.mkdir(parents=True, exist_ok=True)
    if single and len(problems) != 1:
        raise FieldError("single", f"a single-problem plan with {len(problems)} problems")
    plan = Plan(top_k, device_kind, [], single, finalists if screen is not None else 0,
                getattr(search, "ranking", "prior" if search is None else "given"))
    # one planner per work directory at a time: two would interleave candidate directories under one
    # plan.json (each candidate directory and plan.json are written whole; plan.json last)
    with output_lock(workdir):
        for name, problem in problems:
            pp = plan_problem(name, problem, workdir, top_k=top_k, device_kind=device_kind, search=search,
                              nvmmh=nvmmh, with_nvmmh=with_nvmmh, with_default=with_default, screen=screen)
            say(f"planned {name}: {', '.join(c.name + ' ' + config_label(c.config) for c in pp.candidates)}")
            if any(c.dsl_directory for c in pp.candidates):
                say(f"  DSL twins (screened): {', '.join(c.name for c in pp.candidates if c.dsl_directory)}")
            for note in pp.notes:
                say(f"  {note}")
            plan.problems.append(pp)
        plan.write(workdir)
    return plan
