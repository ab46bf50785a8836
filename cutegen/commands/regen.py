"""cutegen regen: re-render every kernel of the benchmark suite; --check fails on any changed byte."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import CutegenError, FieldError, IllegalConfig
from ..problem import GemmProblem
from ..suites import load_suite, select_suite  # noqa: F401 - re-exported (bench scripts, tests)
from .generate import label

HELP = "re-render generated/ for bench/suite.toml (search + render); --check: fail if any byte would change"
# Every checked-in suite and the tree it renders into (``--all``).
SUITES = (("bench/suite.toml", "generated"), ("bench/coverage.toml", "generated/coverage"),
          ("bench/llm.toml", "generated/llm"), ("bench/forms_splitk.toml", "generated/forms"),
          ("bench/unaligned.toml", "generated/unaligned"), ("bench/layouts.toml", "generated/layouts"))
BASELINE = {"tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1], "stages": "auto",
            "mainloop_schedule": "cooperative", "epilogue_schedule": "tma_warp_specialized_cooperative"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every file that would change")
    p.add_argument("--suite", default="bench/suite.toml", help="the problem list (default: bench/suite.toml)")
    p.add_argument("--out", default="generated", help="root of the generated tree (default: generated)")
    p.add_argument("--from-manifests", action="store_true",
                   help="re-render from the stored manifests instead of searching (no egglog needed)")
    p.add_argument("--all", action="store_true",
                   help="every checked-in suite into its own tree: " + ", ".join(f"{s} -> {o}" for s, o in SUITES))
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="only the suite problems with this name (repeatable)")
    p.add_argument("--ranking", choices=("manifest", "learned", "prior"), default="manifest",
                   help="manifest (default): rank each kernel as its manifest states (cost.ranking and "
                        "cost.device_kind; a manifest that states none, as every tree generated before rankings "
                        "were stated, is the analytic prior as calibrated), a problem with no manifest yet as "
                        "`generate` would; learned: re-rank by the committed seed's measurements of --device's "
                        "kind (a deliberate change of the kernels: they need GPU validation records); prior: "
                        "the analytic prior for --device's kind. Learned rankings read the committed seed "
                        "(bench/results/seed.sqlite) only, never a user database, so a tree regenerates to the "
                        "same bytes on every machine")
    p.add_argument("--device", metavar="KIND",
                   help="device kind for --ranking learned/prior and for problems with no manifest (default: the "
                        "GPU present, else $CUTEGEN_DEVICE, else the target's default kind)")
    from .. import executor
    executor.add_arguments(p)  # the searches fan out; --from-manifests always renders here


def kernel_dir(root: Path, problem: GemmProblem) -> Path:
    return root / problem.target / problem.name


def baseline_dir(root: Path, problem: GemmProblem) -> Path:
    return root / "baseline" / problem.target / problem.name


def _render_searched(problem: GemmProblem, ranking=None):
    from .. import render as render_mod
    from .. import _api
    config, cost, _ = _api.choose(problem, ranking=ranking)
    return render_mod.render(problem, config, "cutlass", cost=cost)


def ranking_for(directory: Path, rank: dict | None):
    """The ranking a kernel is regenerated with (``rank``: the --ranking mode and the resolved --device; None:
    as the manifest states). Learned rankings read the committed seed alone: the bytes must not depend on the
    machine's user database."""
    import json

    from ..search import ranking
    rank = rank or {"mode": "manifest"}
    mode, device = rank["mode"], rank.get("device")
    manifest = directory / "manifest.json"
    cost = None
    if manifest.is_file():
        try:
            cost = json.loads(manifest.read_text()).get("cost")
        except (OSError, ValueError) as e:
            raise CutegenError(f"{manifest}: unreadable ({e})") from None
    if mode == "manifest" and manifest.is_file():
        return ranking.from_cost_record(cost)
    if device is None:
        device = ranking.resolve_kind(None)[0]
    # --ranking learned/prior re-ranks; the search option stays as the manifest states (absent: off), and a
    # problem with no manifest yet gets a new search's (on)
    wave = bool((cost or {}).get("wave_tiles", False)) if manifest.is_file() else None
    return ranking.choose(device=device, prior=mode == "prior", db=ranking.seed_db(), kind_from=rank.get("kind_from"),
                          wave_tiles=wave)


def baseline_config(problem: GemmProblem) -> dict:
    """The CollectiveBuilder baseline: BASELINE, or where TMA cannot read A/B or write C/D, what CUTLASS's
    generator emits for unaligned operands (sm90_utils.py:596-612): the same tile in a 1x1 cluster, the
    cp.async cooperative mainloop when A or B is below 16 bytes, the no-smem epilogue."""
    from ..legality.cp_async import tma_can_load, tma_can_store
    if tma_can_load(problem) and tma_can_store(problem):
        return BASELINE
    out = dict(BASELINE, epilogue_schedule="no_smem")
    if not tma_can_load(problem):
        out.update(cluster_shape=[1, 1, 1], mainloop_load="cp_async")
    return out


def _render_baseline(problem: GemmProblem):
    from ..config import KernelConfig
    from ..core import registry
    return registry.render(problem, KernelConfig.from_dict(baseline_config(problem)), "cutlass_builder")


def _checked_in(directory: Path) -> bool:
    """Whether ``directory`` is inside the generated/ tree of a cutegen checkout: the nearest ancestor
    with a pyproject.toml naming the project cutegen, judged from ``directory`` itself (the --out tree).
    Not from where the cutegen package is installed: with a wheel, a venv of another worktree or a copy
    of the repository, the installed package's generated/ is not the tree being rendered or checked."""
    path = Path(directory).resolve()
    for root in path.parents:
        if (root / "pyproject.toml").is_file() and _is_cutegen_project(root / "pyproject.toml"):
            try:
                path.relative_to(root / "generated")
                return True
            except ValueError:
                return False
    return False


def _is_cutegen_project(pyproject: Path) -> bool:
    import tomllib
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name") == "cutegen"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        return False


def render_task(item: tuple) -> tuple[str, object]:
    """One rendering (an executor task): ("ok", kernel), ("illegal", why) or ("error", why)."""
    kind, problem, directory, from_manifests = item[:4]
    rank = item[4] if len(item) > 4 else None
    from .. import render as render_mod
    try:
        if from_manifests:
            if not (directory / "manifest.json").is_file():
                raise CutegenError(f"{directory}: no manifest.json to re-render from")
            return "ok", render_mod.render_manifest(directory, keep_toolchain=False)
        if kind == "baseline" and baseline_config(problem).get("mainloop_load") == "cp_async" \
                and _checked_in(directory):
            return "illegal", ("the builder's unaligned default is a cp.async kernel, which fails compute-sanitizer "
                               "synccheck (SM90-CPASYNC-SYNCCHECK): generated/ holds sanitizer-clean kernels only")
        if kind == "kernel":
            return "ok", _render_searched(problem, ranking_for(directory, rank))
        return "ok", _render_baseline(problem)
    except IllegalConfig as e:
        return "illegal", str(e)
    except CutegenError as e:
        return "error", str(e)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "all", False):
        if args.only:
            raise FieldError("--only", "cannot be combined with --all (names are per suite)")
        status = 0
        for suite, out in SUITES:
            print(f"== {suite} -> {out}")
            status |= run(argparse.Namespace(**{**vars(args), "all": False, "suite": suite, "out": out}))
        return status
    from .. import executor as X
    root = Path(args.out)
    if root.exists() and not root.is_dir():      # one line now, not one error per kernel later
        raise CutegenError(f"--out: {root} exists and is not a directory")
    suite = select_suite(args.suite, args.only)
    changed: list[Path] = []
    failures: list[str] = []
    expected_dirs: set[Path] = set()
    # the kind is resolved here, once: a task on a Dask worker must not rank for the worker's GPU
    mode = getattr(args, "ranking", "manifest")
    device, kind_from = getattr(args, "device", None), "--device"
    if device is None:
        from ..search.ranking import resolve_kind
        device, kind_from = resolve_kind(None)
    rank = {"mode": mode, "device": device, "kind_from": kind_from}
    items = [(name, (kind, problem, directory, args.from_manifests, rank)) for name, problem in suite
             for kind, directory in (("kernel", kernel_dir(root, problem)), ("baseline", baseline_dir(root, problem)))]
    # Re-rendering from manifests reads this machine's files and searches nothing: it stays here.
    local = X.LocalExecutor(progress=sys.stderr) if args.from_manifests else None
    with local or X.from_args(args, progress=sys.stderr) as ex:
        outcomes = ex.map(render_task, [it for _, it in items], kind="cpu",
                          names=[f"{name} {it[0]}" for name, it in items])
        if ex.name != "local":
            print(ex.summary.text(), file=sys.stderr)
    for (name, (kind, problem, directory, *_)), outcome in zip(items, outcomes):
        expected_dirs.add(directory)
        if not outcome.ok:
            failures.append(f"{name} ({kind}): {outcome.error}")
            continue
        status, kernel = outcome.value
        if status == "illegal":
            if kind == "baseline":  # the fixed baseline does not fit every problem; say so, go on
                print(f"skip     {name} baseline: {kernel}", file=sys.stderr)
                expected_dirs.discard(directory)
                continue
            failures.append(f"{name}: {kernel}")
            continue
        if status == "error":
            failures.append(f"{name} ({kind}): {kernel}")
            continue
        ranked = (kernel.manifest.get("cost") or {}).get("ranking", "prior") if kind == "kernel" else "builder"
        if args.check:
            diff = kernel.differences(directory)
            changed += diff
            print(f"{'differs' if diff else 'same':8s} {directory} [{label(kernel.config)}; {ranked}]")
        else:
            written = kernel.write(directory)
            changed += written
            print(f"{'wrote' if written else 'same':8s} {directory} [{label(kernel.config)}; {ranked}]")
    # Stale means "in no problem of the suite": with --only, the rest of the suite is not stale.
    for _, problem in (load_suite(args.suite) if args.only else []):
        expected_dirs.update((kernel_dir(root, problem), baseline_dir(root, problem)))
    # regen owns <out>/<target>/ and <out>/baseline/<target>/ only: other trees under <out> (another
    # suite's, e.g. generated/coverage) are not its to call stale.
    owned = {d.parent for d in expected_dirs}
    stale = sorted(d.parent for own in owned if own.is_dir() for d in own.glob("*/manifest.json")
                   if d.parent not in expected_dirs)
    for d in stale:
        print(f"stale    {d} (not in {args.suite})", file=sys.stderr)
    for f in failures:
        print(f"error    {f}", file=sys.stderr)
    if args.check:
        if changed or stale:
            print(f"regen --check: {len(changed)} file(s) would change" +
                  (f", {len(stale)} stale kernel dir(s)" if stale else "") + ":", file=sys.stderr)
            for path in changed:
                print(f"  {path}", file=sys.stderr)
            return 1
        print(f"regen --check: {len(suite)} problem(s), no byte would change")
    else:
        print(f"regen: {len(changed)} file(s) written for {len(suite)} problem(s)")
    return 1 if failures else 0
