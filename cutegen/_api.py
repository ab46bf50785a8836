"""The top-level Python API: what the ``cutegen`` commands do, as functions that return objects.

Re-exported by ``cutegen/__init__.py``; the command modules call these functions, so the CLI and the
API cannot disagree. Heavy dependencies (egglog for the search, the GPU runner) are imported inside the
functions: ``import cutegen`` works on a machine without them.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Mapping, Sequence, Union

from .config import KernelConfig
from .errors import CutegenError, FieldError
from .problem import DEFAULT_PROBLEM, GemmProblem

if TYPE_CHECKING:
    from .build import BuildResult
    from .render import RenderedKernel
    from .search.engine import SearchResult
    from .search.ranking import Ranking
    from .tuning.measure import Outcome
    from .tuning.plan import Plan

#: A problem as a :class:`~cutegen.GemmProblem` or as its JSON object (``{"m": 8192, "n": 3072, "k": 1024,
#: "dtype": "bf16", "layout": "tn"}``; the fields of ``cutegen generate --problem``).
ProblemLike = Union[GemmProblem, Mapping[str, Any]]

#: The problem ``cutegen`` with no arguments generates a kernel for.


def as_problem(problem: ProblemLike | None, where: str = "problem") -> GemmProblem:
    """``problem`` as a :class:`~cutegen.GemmProblem` (None: the default 4096x4096x4096 bf16 TN problem)."""
    if problem is None:
        return GemmProblem.from_dict(DEFAULT_PROBLEM, where=where)
    if isinstance(problem, GemmProblem):
        return problem
    if isinstance(problem, Mapping):
        return GemmProblem.from_dict(dict(problem), where=where)
    raise FieldError(where, f"expected a GemmProblem or a dict of its fields, got {type(problem).__name__}")


# -- search ---------------------------------------------------------------------------------------
def default_ranking(device: str | None = None, prior: bool = False, db: str | os.PathLike | None = None,
                    target: str = "sm90a", wave_tiles: bool | None = None) -> "Ranking":
    """The ranking a search uses (``cutegen.search.ranking.Ranking``): the learned correction of the device
    kind's measurements where the results database ``db`` (default: the user's, merged with the committed seed)
    holds any, else the analytic prior; ``prior=True``: the prior. The kind: ``device``, else the GPU present,
    else ``$CUTEGEN_DEVICE``, else the target's default kind. ``wave_tiles``: tiles of any N a multiple of 8 with
    their full-width WGMMA (None: on, unless ``$CUTEGEN_WAVE_TILES=0``; cutegen.search.ranking)."""
    from .search import ranking

    return ranking.choose(device=device, prior=prior, db=ranking.open_db(str(db)) if db is not None else None,
                          target=target, wave_tiles=wave_tiles)


def device_predictor(device: str | None, db: str | os.PathLike | None = None):
    """``(device kind, learned.Predictor or None)`` of the default ranking for ``device`` (see
    :func:`default_ranking`)."""
    r = default_ranking(device, db=db)
    return r.device_kind, r.search_kwargs()["predictor"]


def find_kernels(problem: ProblemLike, top_k: int = 5, *, backend: str = "cutlass", device: str | None = None,
                 db: str | os.PathLike | None = None, explain: bool = False, prior: bool = False) -> "SearchResult":
    """Search the legal Hopper kernel configurations of ``problem`` and rank them by predicted time.

    What ``cutegen search`` prints. ``result.ranked`` is a list of ``Ranked`` (``.config`` a complete
    :class:`~cutegen.KernelConfig`, ``.cost`` predicted microseconds, ``.breakdown`` the cost terms, ``.plan``
    a stream-K kernel's launch plan), cheapest first; ``result.pruned_by_rule`` counts the candidates each
    legality rule rejected. ``device`` (``"h100-sxm"``, ``"h200"``, ...) prices the candidates for that
    device kind and, where the results database ``db`` has measured it, ranks by measurement or the learned
    correction (the default ranking, :func:`default_ranking`: ``device`` defaults to the GPU present, else
    ``$CUTEGEN_DEVICE``, else the target's default kind; ``prior=True`` ranks by the analytic prior alone).
    ``backend="dsl"`` also prunes what the CuTe DSL backend refuses.

    Named ``find_kernels`` because ``cutegen.search`` is the search's subpackage.
    """
    from .search import search

    if not 1 <= top_k <= 100:
        raise FieldError("top_k", f"expected 1 to 100, got {top_k}")
    problem = as_problem(problem)
    ranking = default_ranking(device, prior, db, problem.target)
    return search(problem, top_k=top_k, explain=explain, backend=backend, **ranking.search_kwargs())


def config_label(config: KernelConfig) -> str:
    """``short_name`` plus the raster settings it leaves out."""
    extra = "" if config.raster_order == "heuristic" and config.raster_swizzle == 1 else \
        f" raster {config.raster_order} swizzle {config.raster_swizzle}"
    return config.short_name() + extra


def choose(problem: GemmProblem, top_k: int = 3, backend: str = "cutlass",
           ranking: "Ranking | None" = None) -> tuple[KernelConfig, dict, list[str]]:
    """The search's best configuration, the cost record for the manifest, and the reasons to print.

    ``ranking`` (cutegen.search.ranking.Ranking; None: the prior as calibrated, unstated) is what the
    search ranks by; the cost record states it. The cost record holds only what the model predicts
    (deterministic), never search timings, so that the manifest's bytes depend on the problem, the
    configuration and the ranking (for a learned one: the measurements it learned from) alone.
    """
    from .search import search  # egglog lives behind this import
    result = search(problem, top_k, backend=backend, **(ranking.search_kwargs() if ranking is not None else {}))
    if not result.ranked:
        raise CutegenError(f"the search found no legal configuration for {problem.name} "
                           f"(pruned: {dict(result.pruned_by_rule) or 'nothing'})")
    best = result.ranked[0]
    bd = dict(best.breakdown or {})
    why = [f"search: {result.candidates_legal} legal of {result.candidates_judged} judged "
           f"({result.candidates_total} in the e-graph's space, {result.egraph_nodes} e-nodes, "
           f"{result.search_seconds:.2f} s); picked the cheapest by the cost model"]
    if ranking is not None:
        why.append(ranking.describe())
    line = f"predicted {best.cost:.1f} us"
    if "predicted_tflops" in bd:
        line += f" = {bd['predicted_tflops']:.0f} TFLOP/s"
    for key in ("waves", "stages", "instruction_efficiency", "mainloop_us", "epilogue_us_per_tile"):
        if key in bd:
            line += f", {key} {bd[key]:g}"
    if best.prediction is not None:
        line += f" ({best.prediction.source}; the prior alone {best.prediction.prior_us:.1f} us)"
    why.append(line)
    for other in result.ranked[1:]:
        delta = (other.cost / best.cost - 1) * 100 if best.cost else 0.0
        why.append(f"runner-up {config_label(other.config)}: {other.cost:.1f} us (+{delta:.1f}%)")
    if result.pruned_by_rule:
        top = sorted(result.pruned_by_rule.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        why.append("pruned by rule: " + ", ".join(f"{rule} {n}" for rule, n in top))
    if best.chain:
        why.append("rewrite chain: " + " -> ".join(best.chain))
    cost = {"model": "cutegen.search.cost", "predicted_us": best.cost, "breakdown": bd,
            **(ranking.cost_fields() if ranking is not None else {})}
    if ranking is not None and ranking.method != "prior" and best.prediction is not None:
        cost["prediction"] = best.prediction.to_dict()   # measured, learned or prior; sigma; distance
    if best.plan is not None:   # a stream-K kernel: the run-time decomposition the search chose
        cost["launch_plan"] = best.plan.to_dict()
        why.append(f"launch plan {best.plan.label()} (of {', '.join(bd.get('plans_considered', {}))})")
    return best.config, cost, why


# -- generate -------------------------------------------------------------------------------------
@dataclass
class GeneratedKernel:
    """A kernel directory written by :func:`generate`: what ``cutegen generate`` prints, as fields."""
    directory: Path                      #: the kernel directory (kernel.cu or kernel.py, manifest.json)
    kernel: "RenderedKernel"             #: the rendered files, the complete configuration, the manifest
    why: list[str]                       #: why this configuration (search statistics, runners-up, rules)
    warnings: list[str] = field(default_factory=list)   #: documented rules broken that are not enforced
    library: Path | None = None          #: the compiled shared library, when it was built
    build: "BuildResult | None" = None   #: the nvcc build's result (C++ backends), when it ran
    build_note: str = ""                 #: why a requested build did not run ("nvcc not found")

    @property
    def problem(self) -> GemmProblem:
        """The problem the kernel was generated for."""
        return self.kernel.problem

    @property
    def config(self) -> KernelConfig:
        """The complete configuration (every choice CUTLASS's builder would make, filled in)."""
        return self.kernel.config

    @property
    def kernel_hash(self) -> str:
        """16 hex digits naming what the kernel computes and how (backend, configuration, problem kind, not
        sizes): the name validation records use."""
        return self.kernel.kernel_hash

    @property
    def ok(self) -> bool:
        """False only when a build was attempted and failed."""
        return self.build is None or self.build.ok

    @property
    def source_file(self) -> Path:
        """``kernel.cu`` (C++ backends) or ``kernel.py`` (CuTe DSL) in the kernel directory."""
        return self.directory / ("kernel.py" if self.kernel.backend == "dsl" else "kernel.cu")

    def lines(self) -> list[str]:
        """The report ``cutegen generate`` prints."""
        out = [f"kernel   {self.source_file}", f"manifest {self.directory / 'manifest.json'}",
               f"problem  {self.problem.name}", f"config   {config_label(self.config)} (hash {self.kernel_hash})"]
        out += [f"why      {line}" for line in self.why]
        out += [f"warning  {w}" for w in self.warnings]
        if self.library is not None:
            status = f" ({self.build.status}, {self.build.seconds:.1f} s)" if self.build is not None else ""
            out.append(f"library  {self.library}{status}")
        elif self.build_note:
            out.append(f"build    {self.build_note}")
        return out


def generate(problem: ProblemLike | None = None, out: str | os.PathLike | None = None, *,
             config: KernelConfig | Mapping[str, Any] | None = None, backend: str = "cutlass", build: bool = True,
             jobs: int | None = None, progress: "IO[str] | None | str" = "stderr",
             say: Callable[[str], None] | None = None, device: str | None = None, prior: bool = False,
             db: str | os.PathLike | None = None, ranking: "Ranking | None" = None) -> GeneratedKernel:
    """Search, render and (where nvcc is found, unless ``build=False``) compile the kernel for ``problem``.

    What ``cutegen generate`` does. ``out`` is the kernel directory (default
    ``generated/<target>/<problem name>``); its files are written atomically. ``config`` renders that
    configuration instead of searching (it may leave what CUTLASS's CollectiveBuilder would choose unset).
    ``backend``: ``"cutlass"`` (explicit CuTe types), ``"cutlass_builder"`` (the CollectiveBuilder
    baseline) or ``"dsl"`` (CuTe DSL). A failed build is reported in ``.build`` (``.ok`` is False), not
    raised; a problem or configuration that breaks a rule raises :class:`~cutegen.CutegenError` naming it.
    ``progress``: where the build reports (the current ``sys.stderr`` by default; None: silent). ``say``
    receives the report's lines (:meth:`GeneratedKernel.lines`) as they become known: all but the
    library's before the build starts. What the search ranks by: ``ranking`` (a
    ``cutegen.search.ranking.Ranking``), else :func:`default_ranking` of ``device``, ``prior`` and ``db``: the
    learned correction where the results database holds measurements of the device kind (default: the GPU
    present, else ``$CUTEGEN_DEVICE``, else the target's default kind), the analytic prior with ``prior=True``;
    the manifest's cost record states which.
    """
    from . import render as render_mod

    problem = as_problem(problem)
    if config is not None:
        if not isinstance(config, KernelConfig):
            config = KernelConfig.from_dict(dict(config), where="config")
        cost, why = None, ["configuration given (no search)"]
    else:
        config, cost, why = choose(problem, backend=backend,
                                   ranking=ranking if ranking is not None
                                   else default_ranking(device, prior, db, problem.target))
    kernel = render_mod.render(problem, config, backend, cost=cost)
    directory = Path(out) if out is not None else Path("generated") / problem.target / problem.name
    kernel.write(directory)
    legality = kernel.manifest.get("legality") or {}
    warned = set(legality.get("warnings") or [])
    warnings = [r for r in legality.get("reasons") or [] if r.split(":", 1)[0] in warned]
    result = GeneratedKernel(directory, kernel, why, warnings)
    if say is not None:   # the report so far, before a build that may take minutes
        for line in result.lines():
            say(line)
    if build:
        _build_generated(result, cost, jobs, progress)
        if say is not None and (result.library is not None or result.build_note):
            say(result.lines()[-1])
    return result


def _build_generated(result: GeneratedKernel, cost, jobs: int | None, progress) -> None:
    from .build import build as build_kernels, find_nvcc
    if find_nvcc() is None:
        result.build_note = "skipped: nvcc not found (run `cutegen build` where it is)"
    elif result.kernel.backend == "dsl":
        from .dsl import build_dsl
        result.library = Path(build_dsl(result.problem, result.config, result.directory, cost=cost))
    else:
        from .progress import Steps
        with Steps("build", 1, stream=progress) as steps:
            result.build = build_kernels([result.directory], jobs=jobs, progress=steps).results[0]
        result.library = result.build.library if result.build.ok else None


# -- pack -----------------------------------------------------------------------------------------
@dataclass
class PackResult:
    """One target's pack written (or checked) by :func:`pack`."""
    target: str                      #: the device kind the pack was selected for
    directory: Path                  #: the pack's folder (a CMake project and a PyTorch extension)
    files: dict[str, str] = field(repr=False)   #: every file of the pack, path relative to ``directory``
    changed: list[str] = field(default_factory=list)   #: files written (or, with ``check``, that would change)

    @property
    def coverage(self) -> str:
        """The summary at the top of COVERAGE.md (kernels, shapes, how close each shape runs to its best)."""
        return self.files["COVERAGE.md"].split("\n| shape")[0].strip()


def pack(shapes: str | os.PathLike, out: str | os.PathLike, *, targets: Sequence[str] = ("h100-sxm",),
         max_kernels: int = 16, tolerance: float = 0.03, name: str = "cutegen_pack",
         db: str | os.PathLike | None = None, check: bool = False,
         say: Callable[[str], None] = lambda msg: None) -> dict[str, PackResult]:
    """A kernel pack for a shapes file: one dispatching library per target, in ``out/<target>/``.

    What ``cutegen pack`` does. ``shapes`` is a TOML file of ``[[shape]]`` tables (M, N, K as numbers, lists
    or ``{min, max}`` ranges; see ``examples/pack/``). At most ``max_kernels`` kernels are chosen so that every
    shape runs within ``tolerance`` of its best predicted (or, with the results database ``db``, measured)
    time. ``check=True`` writes nothing and lists in ``.changed`` every file that would change. ``say``
    receives progress messages.
    """
    from . import packs
    from .packs.targets import kinds

    if max_kernels < 1:
        raise FieldError("max_kernels", f"expected a positive integer, got {max_kernels}")
    for kind in targets:
        if kind not in kinds():
            raise FieldError("target", f"{kind!r} is not one of {', '.join(kinds())}")
    database = None
    if db is not None:
        from .results import ResultsDB
        database = ResultsDB(None if str(db) == "default" else str(db))
    results = {}
    for kind in dict.fromkeys(targets):
        files = packs.make_pack(str(shapes), kind, max_kernels=max_kernels, tolerance=tolerance, name=name,
                                db=database, say=say)
        root = Path(out) / kind
        changed = packs.differences(root, files) if check else packs.write(root, files)
        results[kind] = PackResult(kind, root, files, changed)
    return results


# -- tune -----------------------------------------------------------------------------------------
def _tune_args(**overrides) -> argparse.Namespace:
    """``cutegen tune``'s arguments at their defaults, with ``overrides`` (the API's keywords)."""
    from .commands import tune as tune_cmd

    parser = argparse.ArgumentParser(prog="cutegen tune")
    tune_cmd.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise TypeError(f"unknown tuning option {key!r}")
        setattr(args, key, value)
    return args


def _named_problems(problems) -> list[tuple[str, GemmProblem]]:
    if isinstance(problems, (GemmProblem, Mapping)):
        problems = [problems]
    out = []
    for i, p in enumerate(problems):
        gp = as_problem(p, where=f"problems[{i}]")
        out.append((gp.name, gp))
    return out


def plan_tuning(problems: ProblemLike | Sequence[ProblemLike], workdir: str | os.PathLike = "out/tune", *,
                top_k: int = 8, device_kind: str | None = None, nvmmh: bool = True, cutlass_default: bool = True,
                db: str | os.PathLike | None = None, quiet: bool = True) -> "Plan":
    """The CPU half of tuning: search and render each problem's candidates under ``workdir``.

    What ``cutegen tune --plan-only`` does: the search's ``top_k``, nvMatmulHeuristics' first legal pick
    (``nvmmh``) and the CUTLASS 128x256x64 default (``cutlass_default``), rendered with a ``plan.json``.
    Carry ``workdir`` to a GPU machine and call :func:`tune` with the plan there (no egglog needed).
    """
    from .commands import tune as tune_cmd
    from .progress import Display

    args = _tune_args(workdir=str(workdir), top_k=top_k, device_kind=device_kind, no_nvmmh=not nvmmh,
                      no_default=not cutlass_default, db=None if db is None else str(db), quiet=quiet)
    with Display(quiet=quiet) as display:
        plan, _ = tune_cmd.plan_from_args(args, display, problems=_named_problems(problems))
    return plan


def tune(problems: "ProblemLike | Sequence[ProblemLike] | Plan | str | os.PathLike",
         out: str | os.PathLike | None = None, *, workdir: str | os.PathLike = "out/tune", top_k: int = 8,
         device_kind: str | None = None, db: str | os.PathLike | None = None, force: bool = False,
         jobs: int | None = None, warmup: int = 10, iters: int = 50, timeout: float = 240.0,
         nvmmh: bool = True, cutlass_default: bool = True, quiet: bool = False) -> "list[Outcome]":
    """Measure instead of trusting the cost model: time the candidates with cuBLAS on this GPU, keep the best.

    What ``cutegen tune`` does (needs a Hopper GPU and nvcc). ``problems``: one problem or several (searched
    here, needs egglog), or the folder holding a :func:`plan_tuning` plan's ``plan.json`` (or that
    ``Plan`` itself, with ``workdir`` its folder). Every
    time is recorded in the results database ``db``; a problem this device kind has measured already is
    answered from it (``force=True`` measures again). The winner of each problem is written under ``out``
    (one problem: the kernel directory, default ``tuned/sm90a/<problem>``; several: one directory each
    under ``out``, default ``tuned/sm90a``). Returns one ``Outcome`` per problem (``.chosen``,
    ``.candidates``, ``.cublas_us``, ``.to_dict()`` with the speedups).
    """
    import time

    from .commands import tune as tune_cmd
    from .progress import Display
    from .tuning.plan import Plan

    if iters < 50:
        raise FieldError("iters", f"{iters} is below 50")
    t0 = time.monotonic()
    from_plan = None
    if isinstance(problems, Plan):
        from_plan = workdir
    elif isinstance(problems, (str, os.PathLike)):
        from_plan = problems
    args = _tune_args(output=None if out is None else str(out), workdir=str(workdir), top_k=top_k,
                      device_kind=device_kind, db=None if db is None else str(db), force=force, jobs=jobs,
                      warmup=warmup, iters=iters, timeout=timeout, no_nvmmh=not nvmmh,
                      no_default=not cutlass_default, quiet=quiet,
                      from_plan=None if from_plan is None else str(from_plan))
    with Display(quiet=quiet) as display:
        if isinstance(problems, Plan):
            plan, plan_dir = problems, Path(workdir)
        else:
            plan, plan_dir = tune_cmd.plan_from_args(
                args, display, problems=None if from_plan is not None else _named_problems(problems))
        outcomes, _, _, _ = tune_cmd.measure_plan(args, plan, plan_dir, display, t0)
    return outcomes
