"""GEMM suites on the GPU: the first pick, the tuned pick, the CUTLASS default and cuBLAS (issue 24, "Measure").

Three halves, two machines (egglog is on the CPU machine only; see bench/gpu_suites.sh):

  here:  python bench/suites.py plan --suite bench/midsize.toml [--chunk 1/2] [--tune-worst 8 --from R.json]
         -> out/suites-plan-<label>/: plan.json and one rendered kernel directory per (problem, kernel)
  GPU:   bash bench/gpu_suites.sh out/suites-plan-<label>      (build, validate, time: `build` and `time` below)
  here:  python bench/suites.py report R1.json R2.json ... --json merged.json --png ratios.png

Per problem the plan holds:
- ``first``: `cutegen generate --device KIND`'s pick (the default ranking for that kind: learned from the results
  database's measurements of it where it holds any; the committed seed alone unless --db names a user database),
  rendered by the same call a user's `generate` makes;
- ``default``: CUTLASS's CollectiveBuilder default, 128x256x64 cluster 2x1 cooperative (what `cutegen bench`
  and `cutegen tune` call the CUTLASS default). Its source depends on the dtypes, layouts and epilogue only,
  so the build compiles it once per kind of problem (the cache is content-addressed);
- for the problems tuned (``--tune``): the search's next candidates under the same ranking and nvMatmulHeuristics'
  pick, up to ``--tune-compiles`` distinct kernels per problem in all (first pick and default included).

On the GPU every built kernel is validated (`cutegen validate`: its own size, ragged M/N/K, beta != 0, batches with
padded strides, every launch plan a stream-K kernel allows, refusal probes) before it is timed; one that fails is
reported and not timed. The rest are timed per problem in one process with cuBLAS (torch.matmul;
torch._scaled_mm for FP8): CUDA events, median, queue primed, input sets rotated over 4x the L2, each
verified against a float32 reference first (the `cutegen tune` / `cutegen bench` harness). Ratios are
cuBLAS's time over the kernel's: above 1, the kernel is faster.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

PLAN_SCHEMA = "cutegen-suites-plan/1"
RUN_SCHEMA = "cutegen-suites-run/1"
REPORT_SCHEMA = "cutegen-suites-report/1"
ROLES = ("first", "default")
#: Build seconds per parallel batch of distinct sources (H200 machine, 16 nvcc jobs: about 70 s per 16 kernels).
BUILD_S_PER_BATCH = 70.0
#: The targets of issue 24 (H200): first picks' geomean per suite (bf16) and per dtype e4m3, the floor, tuned.
TARGETS = {"first_geomean": 1.00, "floor": 0.90, "tuned_geomean": 1.05, "e4m3_first_geomean": 1.05}


class SuitesError(Exception):
    """A bad input: printed as one line (``suites.py CMD: error: ...``), exit status 2."""


# ------------------------------------------------------------------------------------------------
# Small pieces with logic (tested in tests/test_bench_suites.py)
# ------------------------------------------------------------------------------------------------

def parse_chunk(text: str) -> tuple[int, int]:
    """``I/N`` -> (I, N), 1 <= I <= N."""
    parts = str(text).split("/")
    try:
        i, n = (int(p) for p in parts)
    except ValueError:
        raise SuitesError(f"--chunk: expected I/N (e.g. 1/2), got {text!r}") from None
    if n < 1 or not 1 <= i <= n:
        raise SuitesError(f"--chunk: {text!r} is not a part of a whole (need 1 <= I <= N)")
    return i, n


def chunk_slice(items: list, index: int, count: int) -> list:
    """The ``index``-th (1-based) of ``count`` contiguous parts of ``items``, sizes differing by at most one
    (the first ``len % count`` parts one longer); every item is in exactly one part."""
    if count < 1 or not 1 <= index <= count:
        raise SuitesError(f"chunk {index}/{count}: need 1 <= I <= N")
    if count > len(items):
        raise SuitesError(f"chunk {index}/{count}: only {len(items)} problems to split")
    base, extra = divmod(len(items), count)
    start = (index - 1) * base + min(index - 1, extra)
    return items[start:start + base + (1 if index <= extra else 0)]


def ratio(cublas_us, kernel_us):
    """cuBLAS's time over the kernel's (above 1: the kernel is faster); None where either is missing."""
    if not cublas_us or not kernel_us or cublas_us <= 0 or kernel_us <= 0:
        return None
    return cublas_us / kernel_us


def geomean(values):
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def stats(named: list[tuple[str, float | None]], floor: float = TARGETS["floor"]) -> dict:
    """geomean, min (and whose), how many under ``floor`` (and whose) of the ratios that exist; ``missing``: the
    names without one."""
    have = [(n, r) for n, r in named if r]
    out = {"n": len(have), "missing": [n for n, r in named if not r]}
    if not have:
        return {**out, "geomean": None, "min": None, "min_name": None, "under": []}
    worst = min(have, key=lambda x: x[1])
    return {**out, "geomean": geomean([r for _, r in have]), "min": worst[1], "min_name": worst[0],
            "under": [n for n, r in have if r < floor]}


def problem_key(suite: str, name: str) -> str:
    return f"{suite}:{name}"


def sha256_text(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _read_json(path: Path, what: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SuitesError(f"{path}: no such file ({what})") from None
    except json.JSONDecodeError as e:
        raise SuitesError(f"{path}: not valid JSON ({what}): {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SuitesError(f"{path}: cannot read ({what}): {e}") from None
    if not isinstance(doc, dict):
        raise SuitesError(f"{path}: expected a JSON object ({what}), got {type(doc).__name__}")
    return doc


def _write_json(path: Path, doc: dict) -> None:
    from cutegen._atomic import atomic_write
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(path), (json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n").encode())


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------
# Rows: one per (suite, problem), from a run's JSON or a merged report (what `report` and `--tune-worst` read)
# ------------------------------------------------------------------------------------------------

def rows_of_run(doc: dict, path: str) -> list[dict]:
    """The flat rows of one run JSON (``RUN_SCHEMA``)."""
    rows = []
    for i, p in enumerate(doc.get("problems") or []):
        try:
            prob = p["problem"]
            row = {"suite": p["suite"], "name": p["name"], "dtype": prob["dtype_a"],
                   "layout": _blas_layout(prob), "m": prob["m"], "n": prob["n"], "k": prob["k"],
                   "status": p.get("status"), "tune": bool(p.get("tune")), "from": [f"{path} ({doc.get('label')})"],
                   "date": doc.get("date")}
        except (KeyError, TypeError):
            raise SuitesError(f"{path}: problems[{i}] lacks suite, name or problem fields") from None
        cub = p.get("cublas") or {}
        row["cublas_us"] = cub.get("us")
        row["cublas_kernel"] = cub.get("kernel")
        for role in ROLES:
            r = p.get(role) or {}
            row[f"{role}_us"] = r.get("us")
            row[f"{role}_config"] = r.get("config_name")
            row[f"{role}_vs_cublas"] = ratio(row["cublas_us"], r.get("us"))
            row[f"{role}_status"] = r.get("status")
        fk = next((k for k in p.get("kernels") or [] if "first" in (k.get("roles") or [])), {})
        row["first_predicted_us"] = fk.get("predicted_us")
        t = p.get("tuned") or {}
        row["tuned_us"] = t.get("us") if p.get("tune") else None
        row["tuned_config"] = t.get("config_name") if p.get("tune") else None
        row["tuned_of"] = t.get("timed") if p.get("tune") else None
        row["tuned_vs_cublas"] = ratio(row["cublas_us"], row["tuned_us"])
        rows.append(row)
    return rows


def _blas_layout(prob: dict) -> str:
    a = "t" if prob.get("layout_a", "row") == "row" else "n"
    b = "n" if prob.get("layout_b", "col") == "col" else "t"
    return a + b


def load_rows(paths: list[str]) -> tuple[list[dict], list[dict]]:
    """Rows from run JSONs and/or merged reports, merged per (suite, name); and the runs' headers.

    Per problem: the first pick, the default and cuBLAS come from the latest run that timed the first pick outside a
    tune chunk (else the latest that timed it at all); the tuned pick and its own cuBLAS time from the latest tune
    run. Ratios are always within one run (one process)."""
    if not paths:
        raise SuitesError("no result files given")
    runs: list[tuple[str, dict]] = []
    headers = []
    for path in paths:
        doc = _read_json(Path(path), "a suites run or report")
        schema = doc.get("schema")
        if schema == RUN_SCHEMA:
            runs.append((str(path), doc))
            headers.append({k: doc.get(k) for k in ("label", "date", "device", "versions", "ranking")})
        elif schema == REPORT_SCHEMA:
            for r in doc.get("rows") or []:
                runs.append((str(path), {"schema": RUN_SCHEMA, "label": "report", "date": r.get("date"),
                                         "_rows": [r]}))
            headers += doc.get("runs") or []
        else:
            raise SuitesError(f"{path}: schema {schema!r} is neither {RUN_SCHEMA!r} nor {REPORT_SCHEMA!r}")
    kinds = {(h.get("device") or {}).get("kind") for h in headers if (h.get("device") or {}).get("kind")}
    if len(kinds) > 1:
        raise SuitesError(f"the result files come from different device kinds ({', '.join(sorted(kinds))}): "
                          "merge one kind at a time")
    merged: dict[str, dict] = {}
    order: list[str] = []
    primary = ("cublas_us", "cublas_kernel", "status", "date", "first_predicted_us") + tuple(
        f"{role}_{x}" for role in ROLES for x in ("us", "config", "vs_cublas", "status"))
    for path, doc in sorted(runs, key=lambda x: x[1].get("date") or ""):
        for row in doc.get("_rows") or rows_of_run(doc, path):
            key = problem_key(row["suite"], row["name"])
            old = merged.get(key)
            if old is None:
                merged[key] = {**row, "primary_from_tune": row.get("primary_from_tune", bool(row.get("tune"))),
                               "tuned_cublas_us": row.get("tuned_cublas_us") or
                               (row.get("cublas_us") if row.get("tuned_us") else None)}
                order.append(key)
                continue
            new = dict(old)
            # the first pick, default and cuBLAS: a later run's, unless it is a tune run and the earlier one is not
            if row.get("first_us") and (not old.get("first_us") or not row.get("tune") or old["primary_from_tune"]):
                for f in primary:
                    new[f] = row.get(f)
                new["primary_from_tune"] = bool(row.get("tune"))
            if row.get("tuned_us"):          # the tuned pick: the latest tune run's, with its own cuBLAS time
                for f in ("tuned_us", "tuned_config", "tuned_of", "tuned_vs_cublas"):
                    new[f] = row.get(f)
                new["tuned_cublas_us"] = row.get("tuned_cublas_us") or row.get("cublas_us")
            new["tune"] = bool(old.get("tune") or row.get("tune"))
            new["from"] = list(dict.fromkeys((old.get("from") or []) + (row.get("from") or [])))
            merged[key] = new
    return [merged[k] for k in order], headers


def summarize(rows: list[dict]) -> dict:
    """Per suite and dtype: first pick, default and tuned against cuBLAS (geomean, min, under 0.9), plus the suite's
    tuned figure with untuned problems counted at their first pick."""
    out: dict[str, dict] = {}
    for suite in dict.fromkeys(r["suite"] for r in rows):
        out[suite] = {}
        srows = [r for r in rows if r["suite"] == suite]
        for dtype in dict.fromkeys(r["dtype"] for r in srows):
            d = [r for r in srows if r["dtype"] == dtype]
            tuned = [r for r in d if r.get("tune")]
            out[suite][dtype] = {
                "problems": len(d),
                "first": stats([(r["name"], r.get("first_vs_cublas")) for r in d]),
                "default": stats([(r["name"], r.get("default_vs_cublas")) for r in d]),
                "first_vs_default": stats([(r["name"], ratio(r.get("default_us"), r.get("first_us"))) for r in d]),
                "tuned": stats([(r["name"], r.get("tuned_vs_cublas")) for r in tuned]),
                "tuned_or_first": stats([(r["name"], r.get("tuned_vs_cublas") if r.get("tuned_vs_cublas")
                                          else r.get("first_vs_cublas")) for r in d]),
            }
    return out


def target_lines(summary: dict) -> list[str]:
    """The issue's targets against the summary (bf16: first picks' geomean and floor, tuned; e4m3: first picks'
    geomean), one line each: MET / MISSED / NOT MEASURED."""
    lines = []

    def verdict(ok):
        return "NOT MEASURED" if ok is None else ("MET" if ok else "MISSED")

    for suite, by in summary.items():
        for dtype, s in by.items():
            f = s["first"]
            if dtype == "e4m3":
                g = f["geomean"]
                lines.append(f"{suite} e4m3 first picks geomean >= {TARGETS['e4m3_first_geomean']:.2f}x cuBLAS: "
                             f"{_x(g)} over {f['n']} -> {verdict(None if g is None else g >= TARGETS['e4m3_first_geomean'])}")
                continue
            if dtype != "bf16":          # the targets name bf16 and e4m3; other dtypes are in the table only
                continue
            g = f["geomean"]
            lines.append(f"{suite} {dtype} first picks geomean >= {TARGETS['first_geomean']:.2f}x: {_x(g)} over "
                         f"{f['n']} -> {verdict(None if g is None else g >= TARGETS['first_geomean'])}")
            lines.append(f"{suite} {dtype} first picks none under {TARGETS['floor']:.2f}x: "
                         f"{len(f['under'])} under (min {_x(f['min'])} {f['min_name'] or ''}) -> "
                         f"{verdict(None if f['min'] is None else not f['under'])}")
            t = s["tuned_or_first"]
            if s["tuned"]["n"]:
                lines.append(f"{suite} {dtype} tuned (untuned at their first pick) geomean >= "
                             f"{TARGETS['tuned_geomean']:.2f}x: {_x(t['geomean'])} over {t['n']} "
                             f"({s['tuned']['n']} tuned: {_x(s['tuned']['geomean'])}) -> "
                             f"{verdict(t['geomean'] >= TARGETS['tuned_geomean'] if t['geomean'] else None)}")
    return lines


def _x(v) -> str:
    return "-" if v is None else f"{v:.3f}x"


def summary_table(summary: dict) -> list[str]:
    lines = [f"{'suite':10} {'dtype':5} {'n':>3}  {'first geo':>9} {'min':>6} {'<0.9':>4}  {'default geo':>11} "
             f"{'first/default':>13}  {'tuned geo':>9} {'tuned n':>7}  {'suite tuned-or-first':>20}"]
    for suite, by in summary.items():
        for dtype, s in by.items():
            f, d, t, tf = s["first"], s["default"], s["tuned"], s["tuned_or_first"]
            lines.append(f"{suite:10} {dtype:5} {s['problems']:>3}  {_x(f['geomean']):>9} {_x(f['min']):>6} "
                         f"{len(f['under']):>4}  {_x(d['geomean']):>11} {_x(s['first_vs_default']['geomean']):>13}  "
                         f"{_x(t['geomean']):>9} {t['n']:>7}  {_x(tf['geomean']):>20}")
            if f["under"]:
                lines.append(f"{'':17}first picks under {TARGETS['floor']:.2f}x: {', '.join(f['under'])}")
            if f["missing"]:
                lines.append(f"{'':17}no first-pick ratio (not timed): {', '.join(f['missing'])}")
    return lines


def model_lines(rows: list[dict], count: int = 6) -> list[str]:
    """How far the ranking's prediction of each first pick was from its measured time: the geomean of measured over
    predicted and the ``count`` farthest (what a calibration of the cost model would start from)."""
    have = [(r, r["first_us"] / r["first_predicted_us"]) for r in rows
            if r.get("first_us") and r.get("first_predicted_us")]
    if not have:
        return []
    far = sorted(have, key=lambda x: -abs(math.log(x[1])))[:count]
    return [f"first picks, measured / predicted: geomean {geomean([q for _, q in have]):.3f} over {len(have)}, "
            f"mean |ln| {sum(abs(math.log(q)) for _, q in have) / len(have):.3f}; farthest: "
            + ", ".join(f"{r['suite']}:{r['name']} {r['first_config']} {r['first_predicted_us']:.1f} -> "
                        f"{r['first_us']:.1f} us" for r, _ in far)]


def worst(rows: list[dict], count: int, suites: set[str] | None = None) -> list[dict]:
    """The ``count`` rows with the lowest first-pick ratio to cuBLAS (rows without one, i.e. a first pick that
    failed or was not timed, count as the worst); ``suites`` restricts them."""
    if count < 1:
        raise SuitesError(f"--tune-worst: expected at least 1, got {count}")
    cand = [r for r in rows if suites is None or r["suite"] in suites]
    cand.sort(key=lambda r: (r.get("first_vs_cublas") or 0.0, r["suite"], r["name"]))
    return cand[:count]


# ------------------------------------------------------------------------------------------------
# plan (CPU machine, egglog)
# ------------------------------------------------------------------------------------------------

def _suite_stem(path: str) -> str:
    return Path(path).stem


def select_problems(suites: list[str], only: list[str]) -> list[tuple[str, str, object]]:
    """(suite stem, name, GemmProblem) of every problem of the suites (in order), restricted to ``only``
    (``NAME`` or ``SUITE:NAME``)."""
    from cutegen.errors import CutegenError
    from cutegen.suites import load_suite
    out = []
    stems = [_suite_stem(s) for s in suites]
    if len(set(stems)) != len(stems):
        raise SuitesError(f"--suite: two suites share a file stem ({', '.join(stems)}): their problems would mix")
    for path, stem in zip(suites, stems):
        try:
            out += [(stem, n, p) for n, p in load_suite(path)]
        except CutegenError as e:
            raise SuitesError(str(e)) from None
    if only:
        keys = {problem_key(s, n) for s, n, _ in out} | {n for _, n, _ in out}
        unknown = [o for o in only if o not in keys]
        if unknown:
            raise SuitesError(f"--only: not in {', '.join(suites)}: {', '.join(unknown)}")
        out = [(s, n, p) for s, n, p in out if n in only or problem_key(s, n) in only]
    return out


def _git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                           cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10, cwd=Path(__file__).resolve().parent).stdout.strip()
        return r.stdout.strip() + ("+dirty" if dirty else "") if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _ranking(device: str, db: str | None):
    from cutegen.search import ranking
    return ranking.choose(device=device, db=ranking.open_db(db) if db else ranking.seed_db())


def _plan_of_kernel(kernel) -> dict | None:
    return kernel.manifest.get("launch_plan") or None


def plan_problem(stem: str, name: str, problem, plan_dir: Path, rank, *, tune: bool, tune_compiles: int,
                 nvmmh: bool, device: str, variants: bool = False, say=print) -> dict:
    """Render one problem's kernels into ``plan_dir/<stem>/<name>/<id>``; returns its plan entry."""
    from cutegen._api import generate
    from cutegen.config import KernelConfig
    from cutegen.errors import CutegenError
    from cutegen.render import render
    from cutegen.tuning.plan import CUTLASS_DEFAULT, config_label

    base = Path(stem) / name
    entry = {"suite": stem, "name": name, "problem": problem.to_dict(), "tune": tune, "kernels": [], "notes": []}
    seen: dict[tuple, dict] = {}

    def add(kid: str, origin: str, kernel, rank_no=None, predicted=None) -> bool:
        """One kernel directory, unless the problem already has this kernel (then it gains the role)."""
        key = (kernel.backend, kernel.kernel_hash, json.dumps(_plan_of_kernel(kernel), sort_keys=True))
        if key in seen:
            seen[key]["roles"].append(kid)
            return False
        rel = base / kid
        kernel.write(plan_dir / rel)
        k = {"id": kid, "roles": [kid], "origin": origin, "backend": kernel.backend, "dir": str(rel),
             "config": kernel.config.to_dict(), "config_name": config_label(kernel.config),
             "kernel_hash": kernel.kernel_hash, "launch_plan": _plan_of_kernel(kernel),
             "source_sha256": sha256_text(kernel.files["kernel.cu"]), "rank": rank_no,
             "predicted_us": round(predicted, 3) if predicted is not None else None}
        seen[key] = k
        entry["kernels"].append(k)
        return True

    # the first pick, exactly as `cutegen generate --device KIND` writes it (search, rank, render, manifest)
    try:
        g = generate(problem, plan_dir / base / "first", build=False, ranking=rank, progress=None)
    except CutegenError as e:
        entry["notes"].append(f"first: no kernel: {e}")
        say(f"  {stem}:{name}: first pick: {e}")
        return entry
    add("first", "generate", g.kernel, 1, (g.kernel.manifest.get("cost") or {}).get("predicted_us"))
    entry["ranking"] = (g.kernel.manifest.get("cost") or {}).get("ranking", "prior")
    try:
        add("default", "cutlass_default", render(problem, KernelConfig.from_dict(CUTLASS_DEFAULT), "cutlass_builder"))
    except CutegenError as e:   # the default tile breaks a rule of this problem: say so, go on
        entry["notes"].append(f"default: not rendered: {e}")
    if tune:
        _plan_tune(entry, problem, rank, tune_compiles, nvmmh, device, add, render, variants)
    return entry


def structure_key(config: dict) -> str:
    """A configuration without its raster order and swizzle: candidates that differ only there are one structure."""
    return json.dumps({k: v for k, v in config.items() if k not in ("raster_order", "raster_swizzle")}, sort_keys=True)


def shape_key(config: dict) -> str:
    """The tile, orientation and mainloop schedule: what the ranking's errors are mostly about (NOTES.md, suites run 1)."""
    return json.dumps([config.get("tile_shape"), bool(config.get("swap_ab")), config.get("mainloop_schedule"),
                       config.get("split_k_slices", 1)])


def tune_order(ranked: list, have: list[dict], variants: bool = False) -> list[int]:
    """The order in which the search's ``ranked`` candidates (objects with ``.config``) join a problem's tune set
    that already holds ``have`` (plan kernels with ``config``). Without ``variants``, in three passes, each in rank
    order: a new tile, orientation or mainloop schedule (``shape_key``); then any other new structure (cluster,
    stages, epilogue, ...: all but raster order and swizzle); then the raster variants of what is held (each costs a
    compile and rarely moves the time much). With ``variants``: rank order."""
    if variants:
        return list(range(len(ranked)))
    shapes = {shape_key(k["config"]) for k in have}
    held = {structure_key(k["config"]) for k in have}
    passes: tuple[list, list, list] = ([], [], [])
    for i, r in enumerate(ranked):
        cfg = r.config.to_dict()
        shape, struct = shape_key(cfg), structure_key(cfg)
        level = 0 if shape not in shapes else 1 if struct not in held else 2
        passes[level].append(i)
        shapes.add(shape)
        held.add(struct)
    return passes[0] + passes[1] + passes[2]


def _plan_tune(entry, problem, rank, tune_compiles, nvmmh, device, add, render, variants=False) -> None:
    from cutegen.errors import CutegenError
    from cutegen.search import search

    def sources() -> int:
        return len({k["source_sha256"] for k in entry["kernels"]})

    if nvmmh and sources() < tune_compiles:
        try:
            from cutegen import nvmmh as nv
            pick = nv.pick(problem, device)
            if pick.chosen is None:
                entry["notes"].append(f"nvmmh: none of its {len(pick.judged)} distinct proposals is legal")
            else:
                add("nvmmh", "nvmmh", render(problem, pick.chosen.config, "cutlass"), None,
                    pick.chosen.proposal.estimated_us)
        except (CutegenError, ImportError) as e:
            entry["notes"].append(f"nvmmh: {e}")
    result = search(problem, max(8 * tune_compiles, 64), backend="cutlass", **rank.search_kwargs())
    ranked = list(result.ranked)
    first = next(k for k in entry["kernels"] if k["id"] == "first")
    if ranked and ranked[0].config.to_dict() != first["config"]:
        entry["notes"].append(f"the search's rank 1 ({ranked[0].config.short_name()}) is not generate's pick "
                              f"({first['config_name']})")
    # rank 1 is the first pick: skip it, then walk the order tune_order gives until the compiles are spent
    rest = [(i, r) for i, r in enumerate(ranked, 1) if r.config.to_dict() != first["config"]]
    order = tune_order([r for _, r in rest], entry["kernels"], variants)
    for j in order:
        if sources() >= tune_compiles:
            break
        i, r = rest[j]
        cost = {"model": "search", "predicted_us": r.cost}
        if r.plan is not None:
            cost["launch_plan"] = r.plan.to_dict()
        try:
            kernel = render(problem, r.config, "cutlass", cost=cost)
        except CutegenError as e:
            entry["notes"].append(f"search{i}: not rendered: {e}")
            continue
        add(f"search{i}", "search", kernel, i, r.cost)
    if sources() < tune_compiles:
        entry["notes"].append(f"tune: {sources()} distinct sources (the search ranked {len(ranked)})")


def cmd_plan(args) -> int:
    import shutil
    from cutegen.errors import CutegenError
    if not args.suite:
        raise SuitesError("--suite: give at least one suite file")
    if args.tune_compiles < 2:
        raise SuitesError(f"--tune-compiles: expected at least 2 (the first pick and one more), got {args.tune_compiles}")
    problems = select_problems(args.suite, args.only)
    stems = {s for s, _, _ in problems}
    tune_keys: set[str] = set()
    tune_how = None
    if args.tune_worst:
        if not args.from_results:
            raise SuitesError("--tune-worst needs --from: the results (run or report JSONs) to rank by")
        rows, _ = load_rows(args.from_results)
        bad = worst(rows, args.tune_worst, stems)
        tune_keys = {problem_key(r["suite"], r["name"]) for r in bad}
        tune_how = (f"the {len(bad)} worst first picks against cuBLAS in {', '.join(args.from_results)}: "
                    + ", ".join(f"{r['suite']}:{r['name']} {_x(r.get('first_vs_cublas'))}" for r in bad))
        problems = [p for p in problems if problem_key(p[0], p[1]) in tune_keys]
    elif args.tune:
        if args.tune == ["all"]:
            tune_keys = {problem_key(s, n) for s, n, _ in problems}
        else:
            known = {problem_key(s, n) for s, n, _ in problems} | {n for _, n, _ in problems}
            unknown = [t for t in args.tune if t not in known]
            if unknown:
                raise SuitesError(f"--tune: not among the problems selected: {', '.join(unknown)}")
            tune_keys = {problem_key(s, n) for s, n, _ in problems if n in args.tune or problem_key(s, n) in args.tune}
            problems = [p for p in problems if problem_key(p[0], p[1]) in tune_keys]
        tune_how = "given: " + ", ".join(sorted(tune_keys))
    if not problems:
        raise SuitesError("no problem selected")
    ci, cn = parse_chunk(args.chunk)
    total = len(problems)
    problems = chunk_slice(problems, ci, cn)
    label = args.label or "+".join(dict.fromkeys(s for s, _, _ in problems)) + \
        ("-tune" if tune_keys else "") + (f"-{ci}of{cn}" if cn > 1 else "")
    from cutegen.paths import check_name
    try:
        check_name(label, "--label")
    except CutegenError as e:
        raise SuitesError(str(e)) from None
    out = Path(args.out or f"out/suites-plan-{label}")
    if out.exists() and not out.is_dir():
        raise SuitesError(f"--out: {out} exists and is not a directory")
    if out.exists():
        if not (out / "plan.json").is_file() and any(out.iterdir()):
            raise SuitesError(f"--out: {out} is not empty and holds no plan.json (not removing it)")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        rank = _ranking(args.device, args.db)
    except CutegenError as e:
        raise SuitesError(f"--device/--db: {e}") from None
    print(f"suites plan {label}: {len(problems)} of {total} problems; {rank.describe()}", flush=True)
    t0 = time.monotonic()
    entries = []
    for stem, name, problem in problems:
        tune = problem_key(stem, name) in tune_keys
        e = plan_problem(stem, name, problem, out, rank, tune=tune, tune_compiles=args.tune_compiles,
                         nvmmh=not args.no_nvmmh, device=args.device, variants=args.tune_raster_variants)
        entries.append(e)
        ks = ", ".join(f"{'/'.join(k['roles'])} {k['config_name']}" for k in e["kernels"])
        print(f"  {stem}:{name}: {ks}" + (f"  [{'; '.join(e['notes'])}]" if e["notes"] else ""), flush=True)
    sources = {k["source_sha256"] for e in entries for k in e["kernels"]}
    dirs = sum(len(e["kernels"]) for e in entries)
    est_build = math.ceil(len(sources) / 16) * BUILD_S_PER_BATCH
    est_time = 25 + 3 * len(entries) + 0.6 * dirs
    doc = {"schema": PLAN_SCHEMA, "label": label, "created": _utc_now(), "chunk": {"index": ci, "count": cn,
           "problems_before_chunking": total},
           "suites": {_suite_stem(s): {"path": s, "sha256": sha256_text(Path(s).read_bytes())} for s in args.suite
                      if _suite_stem(s) in {e["suite"] for e in entries}},
           "device_kind": args.device, "ranking": rank.describe(), "ranking_label": rank.label,
           "db": args.db or "the committed seed alone (bench/results/seed.sqlite), as a fresh install",
           "search_env": {k: os.environ.get(k) for k in ("CUTEGEN_WAVE_TILES", "CUTEGEN_DEVICE")},
           "commit": _git_commit(), "tune": {"compiles": args.tune_compiles, "nvmmh": not args.no_nvmmh,
                                             "selection": tune_how, "order": "rank order" if
                                             args.tune_raster_variants else "new tiles/orientations/schedules, "
                                             "then other new structures, then raster variants (suites.tune_order)"},
           "estimate": {"kernel_dirs": dirs, "distinct_sources": len(sources), "build_s": est_build,
                        "validate_and_time_s": round(est_time), "note": "16 nvcc jobs on the H200 machine"},
           "problems": entries}
    _write_json(out / "plan.json", doc)
    print(f"wrote {out / 'plan.json'}: {len(entries)} problems, {dirs} kernel directories, {len(sources)} distinct "
          f"sources (about {est_build:.0f} s of build with 16 jobs, {est_time:.0f} s to validate and time); "
          f"planned in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


# ------------------------------------------------------------------------------------------------
# the GPU machine: build and time (no egglog, no jinja2 needed)
# ------------------------------------------------------------------------------------------------

def load_plan(plan_dir: str | Path) -> dict:
    plan_dir = Path(plan_dir)
    doc = _read_json(plan_dir / "plan.json", "a suites plan (make one with `python bench/suites.py plan`)")
    if doc.get("schema") != PLAN_SCHEMA:
        raise SuitesError(f"{plan_dir / 'plan.json'}: schema {doc.get('schema')!r}, expected {PLAN_SCHEMA!r}")
    from cutegen.errors import CutegenError
    from cutegen.paths import confined
    try:
        for i, e in enumerate(doc["problems"]):
            for j, k in enumerate(e["kernels"]):
                confined(plan_dir, k["dir"], f"problems[{i}].kernels[{j}].dir")
    except (KeyError, TypeError) as e:
        raise SuitesError(f"{plan_dir / 'plan.json'}: malformed plan ({e})") from None
    except CutegenError as e:
        raise SuitesError(f"{plan_dir / 'plan.json'}: {e}") from None
    return doc


def build_order(plan: dict) -> list[dict]:
    """Every kernel of the plan, most important first (a build deadline cuts from the end): each problem's first
    pick, then the defaults, then nvMMH's picks, then the search's candidates rank by rank."""
    prio = {"generate": 0.0, "cutlass_default": 1.0, "nvmmh": 1.5}
    ks = [((prio.get(k["origin"], 1.0 + (k.get("rank") or 99)), i), k)
          for i, e in enumerate(plan["problems"]) for k in e["kernels"]]
    return [k for _, k in sorted(ks, key=lambda x: x[0])]


def cmd_build(args) -> int:
    """Build the plan's kernels with ``--jobs`` nvcc at once through the cutegen cache; each distinct source once,
    its library copied to every directory that holds it; no compile starts after ``--deadline`` seconds.
    Writes ``--json`` {dir: {status, seconds, message}} (after every compile: a run cut short keeps what it did)."""
    import concurrent.futures
    import threading
    from cutegen._atomic import atomic_write
    from cutegen.build import Builder, _job_for
    from cutegen.errors import CutegenError

    plan_dir = Path(args.plan)
    plan = load_plan(plan_dir)
    t_end = time.monotonic() + args.deadline if args.deadline > 0 else None
    order = build_order(plan)
    groups: dict[str, list[Path]] = {}
    for k in order:
        groups.setdefault(k["source_sha256"], []).append(plan_dir / k["dir"])
    try:
        builder = Builder(jobs=args.jobs, progress=sys.stdout, timeout=args.timeout)
    except CutegenError as e:
        raise SuitesError(f"build: {e}") from None
    status: dict[str, dict] = {}
    lock = threading.Lock()

    def save():
        with lock:
            _write_json(Path(args.json), {"plan": plan.get("label"), "kernels": status})

    def one(dirs: list[Path]) -> None:
        rel = [str(d.relative_to(plan_dir)) for d in dirs]
        if t_end is not None and time.monotonic() > t_end:
            for r in rel:
                status[r] = {"status": "not_built", "message": "the build deadline passed before it started"}
            return
        try:
            res = builder.build_one(_job_for(dirs[0]))
        except Exception as e:  # noqa: BLE001 - one kernel's failure must not stop the others
            res = None
            msg = f"{type(e).__name__}: {e}"
        if res is not None and res.ok:
            lib = Path(res.library).read_bytes()
            for d in dirs[1:]:
                atomic_write(d / "kernel.so", lib, mode=0o755)
            for j, r in enumerate(rel):
                status[r] = {"status": res.status if j == 0 else "copied", "seconds": round(res.seconds, 1),
                             "message": ""}
        else:
            msg = (res.message if res is not None else msg) or "failed"
            for r in rel:
                status[r] = {"status": "failed", "message": msg[:4000]}
        save()

    builder._total = len(groups)   # the "[n/N]" of its progress lines (build_one alone does not set it)
    print(f"build: {len(order)} kernel directories, {len(groups)} distinct sources, {builder.jobs} jobs", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=builder.jobs) as pool:
        list(pool.map(one, groups.values()))
    save()
    counts: dict[str, int] = {}
    for v in status.values():
        counts[v["status"]] = counts.get(v["status"], 0) + 1
    print("build: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), flush=True)
    for r, v in status.items():
        if v["status"] == "failed":
            print(f"FAILED {r}: {v['message'].splitlines()[0] if v['message'] else ''}", flush=True)
    return 0


def cmd_dirs(args) -> int:
    """The plan's kernel directories (build order), optionally only those with a library."""
    plan_dir = Path(args.plan)
    for k in build_order(load_plan(plan_dir)):
        d = plan_dir / k["dir"]
        if not args.built or (d / "kernel.so").is_file():
            print(d)
    return 0


def _validation_of(report: dict | None, plan_dir: Path) -> dict[str, dict]:
    """{kernel dir relative to the plan: its validation summary} from a `cutegen validate --json` report."""
    out = {}
    if not report:
        return out
    root = plan_dir.resolve()
    for k in report.get("kernels") or []:
        d = k.get("directory")
        if not d:
            continue
        try:
            rel = str(Path(d).resolve().relative_to(root))
        except ValueError:
            continue
        cases = [c for c in k.get("cases") or [] if c.get("kind") == "case" and not c.get("refused")]
        probes = [c for c in k.get("cases") or [] if c.get("kind") == "probe"]
        out[rel] = {"verdict": k.get("verdict"), "reason": (k.get("reason") or "")[:600],
                    "cases_run": len(cases), "cases_passed": sum(bool(c.get("ok")) for c in cases),
                    "probes": len(probes), "probes_agreed": sum(bool(c.get("ok")) for c in probes),
                    "plans": sorted({c["case"] for c in cases if str(c.get("case", "")).startswith("plan_")}),
                    "max_rel_err": max((c["rel_err"] for c in cases if isinstance(c.get("rel_err"), float)),
                                       default=None)}
    return out


def cublas_kernel_names(problem) -> dict:
    """cuBLAS's CUDA kernels for ``problem``, by torch.profiler, through the very call the timing makes
    (``_runner_worker.CublasCall`` on the same operand layout)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from cutegen import _runner_worker as W
    from cutegen.run.cases import Case, problem_ld_pads

    case = Case("bench", problem.m, problem.n, problem.k, problem.batch, problem.alpha, problem.beta,
                ld_pad=problem_ld_pads(problem))
    bufs = W.make_buffers(problem, case, W.new_generator(7))
    call = W.CublasCall(problem, [bufs], problem.alpha, problem.beta)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = call.tf32
    try:
        for _ in range(3):
            call(0)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call(0)
            torch.cuda.synchronize()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    names = list(dict.fromkeys(e.name for e in prof.events() if e.device_type.name == "CUDA"))
    gemm = [n for n in names if any(s in n for s in ("nvjet", "gemm", "Gemm", "splitK", "cutlass", "sm90_xmma"))]
    del bufs, call
    torch.cuda.empty_cache()
    return {"kernel": (gemm or names or [None])[0], "kernels": [n[:300] for n in names],
            "split_k_reduce": any("splitKreduce" in n for n in names)}


def _versions(device: dict) -> dict:
    import platform
    from cutegen import __version__, manifest
    try:
        from cutegen.commands.bench import driver_version
        driver = driver_version()
    except Exception:  # noqa: BLE001
        driver = None
    return {"driver": driver or device.get("driver"), "cutlass": manifest.cutlass_version(),
            "nvcc": manifest.nvcc_version(), "torch": device.get("torch"), "torch_cuda": device.get("torch_cuda"),
            "cublas": device.get("cublas"), "python": platform.python_version(), "cutegen": __version__}


def _us(res: dict) -> float | None:
    return res["median_ms"] * 1e3 if res.get("status") == "ok" and res.get("median_ms") else None


def problem_result(entry: dict, build: dict, validation: dict, results: dict | None, cublas_names: dict | None,
                   skipped: str | None = None) -> dict:
    """One problem's outcome from its plan entry, the build and validation of its kernels and the timing reply."""
    out = {"suite": entry["suite"], "name": entry["name"], "problem": entry["problem"], "tune": entry["tune"],
           "ranking": entry.get("ranking"), "notes": list(entry.get("notes") or []), "kernels": []}
    results = results or {}
    cub = results.get("cublas") or {}
    out["cublas"] = {"us": _us(cub), "status": cub.get("status", "not timed" if results else None),
                     "api": cub.get("api"), "notes": cub.get("notes"), "reason": cub.get("reason"),
                     "graph_us": cub["graph_median_ms"] * 1e3 if cub.get("graph_median_ms") else None,
                     **(cublas_names or {})}
    for k in entry["kernels"]:
        b = build.get(k["dir"]) or {"status": "unknown", "message": "no build record"}
        v = validation.get(k["dir"])
        r = results.get(k["id"])
        if b["status"] not in ("built", "cached", "copied", "present"):
            state = "not_built"
        elif v is None or v["verdict"] == "skipped":      # not reached before the validation deadline
            state = "not_validated"
        elif v["verdict"] != "pass":
            state = "failed_validation"
        elif r is None:
            state = skipped or "not_timed"
        elif r.get("status") == "ok" and (r.get("verify") or {}).get("ok"):
            state = "ok"
        else:
            state = r.get("status") or "error"
        kr = {**{f: k.get(f) for f in ("id", "roles", "origin", "backend", "config_name", "config", "kernel_hash",
                                       "launch_plan", "rank", "predicted_us")},
              "build": {"status": b["status"], "message": (b.get("message") or "").splitlines()[0][:300]
                        if b.get("message") else ""},
              "validation": v, "status": state, "us": _us(r) if r and state == "ok" else None,
              "min_us": r["min_ms"] * 1e3 if r and state == "ok" and r.get("min_ms") else None,
              "graph_us": r["graph_median_ms"] * 1e3 if r and state == "ok" and r.get("graph_median_ms") else None,
              "rel_err": (r.get("verify") or {}).get("rel_err") if r else None,
              "reason": (r.get("reason") or "")[:300] if r else None}
        out["kernels"].append(kr)
    for role in ROLES:
        k = next((x for x in out["kernels"] if role in x["roles"]), None)
        out[role] = None if k is None else {"id": k["id"], "config_name": k["config_name"], "status": k["status"],
                                            "us": k["us"], "vs_cublas": ratio(out["cublas"]["us"], k["us"])}
    out["tuned"] = None
    if entry["tune"]:
        timed = [x for x in out["kernels"] if x["us"]]
        best = min(timed, key=lambda x: x["us"]) if timed else None
        out["tuned"] = {"timed": len(timed), "of": len(out["kernels"]),
                        **({"id": best["id"], "roles": best["roles"], "config_name": best["config_name"],
                            "us": best["us"], "vs_cublas": ratio(out["cublas"]["us"], best["us"]),
                            "vs_first": ratio((out["first"] or {}).get("us"), best["us"])} if best else {})}
    first_us = (out["first"] or {}).get("us")
    out["status"] = "ok" if first_us and out["cublas"]["us"] else (skipped or "incomplete")
    return out


def measurements_of(result: dict, device: dict, versions: dict, started: str, label: str) -> list:
    """The results database's records of one problem's timed kernels (what `cutegen db import` reads)."""
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem
    from cutegen.results import Measurement, device_kind
    from cutegen.tuning.measure import TIMING_METHOD
    recs = []
    problem = GemmProblem.from_dict(result["problem"])
    for k in result["kernels"]:
        if k["status"] != "ok" or not k.get("_times_us"):
            continue
        recs.append(Measurement(
            problem=problem, config=KernelConfig.from_dict(k["config"]), kernel_hash=k["kernel_hash"],
            backend=k["backend"], device_name=device.get("name") or "",
            device_kind=device_kind(device.get("name") or "", device.get("sm_count")), sm_count=device.get("sm_count"),
            sm_clock_mhz=device.get("sm_clock_mhz"), driver=versions.get("driver"), cuda=device.get("torch_cuda"),
            cutlass=versions.get("cutlass"), cutegen=versions.get("cutegen"), timing_method=TIMING_METHOD,
            times_us=tuple(k["_times_us"]), median_us=k["us"], validated=True, max_rel_error=k.get("rel_err"),
            cublas_us=result["cublas"]["us"],
            source=f"cutegen-suites {started}#{label}/{result['suite']}/{result['name']}/{k['id']}",
            measured_at=started, **({"launch_plan": k["launch_plan"]} if k.get("launch_plan") else {})))
    return recs


def cmd_time(args) -> int:
    """Time every validated kernel of the plan with cuBLAS, one problem at a time, in one worker process."""
    from cutegen import runner as R
    from cutegen.errors import CutegenError
    from cutegen.problem import GemmProblem
    from cutegen.tuning.gpu import RunnerTimer
    from cutegen.tuning.measure import TIMING_METHOD, records_lines

    t0 = time.monotonic()
    plan_dir = Path(args.plan)
    plan = load_plan(plan_dir)
    build = (_read_json(Path(args.build), "the build record").get("kernels") or {}) if args.build and \
        Path(args.build).is_file() else {}
    for e in plan["problems"]:     # a library with no build record (the build was cut off while writing it)
        for k in e["kernels"]:
            if k["dir"] not in build and (plan_dir / k["dir"] / "kernel.so").is_file():
                build[k["dir"]] = {"status": "present", "message": "a library with no build record"}
    vreport = _read_json(Path(args.validate), "the validation report") if args.validate and \
        Path(args.validate).is_file() else None
    validation = _validation_of(vreport, plan_dir)
    started = _utc_now()
    label = plan.get("label") or plan_dir.name
    on_gpu = os.environ.get("CUTEGEN_RUNNER_DEVICE", "cuda") != "cpu"
    names: dict[str, dict] = {}
    if on_gpu and not args.no_cublas_names:
        t_names = time.monotonic()
        for e in plan["problems"]:
            if time.monotonic() - t_names > args.names_budget:
                names[problem_key(e["suite"], e["name"])] = {"kernel": None, "names_note": "profiling budget spent"}
                continue
            try:
                names[problem_key(e["suite"], e["name"])] = cublas_kernel_names(GemmProblem.from_dict(e["problem"]))
            except Exception as ex:  # noqa: BLE001 - the names are a nicety; the timing must go on
                names[problem_key(e["suite"], e["name"])] = {"kernel": None, "names_note": f"{type(ex).__name__}: {ex}"}
        print(f"cuBLAS kernel names: {len(names)} problems in {time.monotonic() - t_names:.0f} s", flush=True)
    timer = RunnerTimer(warmup=args.warmup, iters=args.iters, l2_multiple=args.l2_multiple, timeout=args.timeout)
    doc = {"schema": RUN_SCHEMA, "label": label, "date": started, "plan": {k: plan.get(k) for k in (
        "created", "chunk", "suites", "device_kind", "ranking", "ranking_label", "db", "search_env", "commit",
        "tune", "estimate")}, "ranking": plan.get("ranking"), "timing_method": TIMING_METHOD,
        "harness": {"warmup": args.warmup, "iters": args.iters, "l2_multiple": args.l2_multiple,
                    "ratio": "cuBLAS time / kernel time (above 1: the kernel is faster)",
                    "cublas": "torch.matmul/addmm (torch._scaled_mm for FP8), in the same worker process",
                    "validated_before_timing": "cutegen validate: own size, ragged M/N/K, beta != 0, batches with "
                                               "padded strides, every launch plan of a stream-K kernel, refusal probes"},
        "device": {}, "versions": {}, "seconds": {}, "problems": []}
    records: list = []
    try:
        try:
            device = timer.device()
        except CutegenError as e:
            doc["error"] = f"the GPU worker did not start: {e}"
            _write_json(Path(args.json), doc)
            raise SuitesError(f"time: {e}") from None
        from cutegen.results import device_kind
        doc["device"] = {**device, "kind": device_kind(device.get("name") or "", device.get("sm_count"))}
        doc["versions"] = _versions(device)
        out_json, out_rec = Path(args.json), Path(args.records) if args.records else None
        for e in plan["problems"]:
            key = problem_key(e["suite"], e["name"])
            problem = GemmProblem.from_dict(e["problem"])
            if args.deadline > 0 and time.monotonic() - t0 > args.deadline:
                res = problem_result(e, build, validation, None, names.get(key), skipped="skipped: timing deadline")
                doc["problems"].append(res)
                print(f"SKIP   {key}: the timing deadline passed", flush=True)
                continue
            contenders = []
            for k in e["kernels"]:
                v = validation.get(k["dir"])
                if v is not None and v["verdict"] == "pass":
                    contenders.append({"name": k["id"], "library": str(plan_dir / k["dir"] / "kernel.so"),
                                       **({"launch_plan": k["launch_plan"]} if k.get("launch_plan") else {})})
            contenders.append({"name": "cublas"})
            results = timer(problem, contenders)
            res = problem_result(e, build, validation, results, names.get(key))
            for k in res["kernels"]:
                r = results.get(k["id"]) or {}
                if k["status"] == "ok":
                    k["_times_us"] = [t * 1e3 for t in r.get("times_ms") or ()]
            recs = measurements_of(res, device, doc["versions"], started, label)
            for k in res["kernels"]:
                k.pop("_times_us", None)
            records += recs
            doc["problems"].append(res)
            f, d, t = res["first"] or {}, res["default"] or {}, res["tuned"] or {}
            print(f"{key:44s} cuBLAS {_f(res['cublas']['us'])} us | first {f.get('config_name', '-')} "
                  f"{_f(f.get('us'))} us {_x(f.get('vs_cublas'))} | default {_f(d.get('us'))} {_x(d.get('vs_cublas'))}"
                  + (f" | tuned {t.get('config_name', '-')} {_f(t.get('us'))} {_x(t.get('vs_cublas'))}"
                     f" ({t.get('timed')}/{t.get('of')} timed)" if e["tune"] else "")
                  + f" | {str(res['cublas'].get('kernel') or '')[:60]}", flush=True)
            doc["seconds"]["time"] = round(time.monotonic() - t0, 1)
            _write_json(out_json, doc)        # after every problem: a run cut short keeps what it measured
            if out_rec is not None:
                from cutegen._atomic import atomic_write
                atomic_write(out_rec, records_lines(records).encode())
    finally:
        timer.close()
    rows = rows_of_run(doc, str(args.json))
    doc["summary"] = summarize(rows)
    _write_json(Path(args.json), doc)
    if args.records:
        from cutegen._atomic import atomic_write
        atomic_write(Path(args.records), records_lines(records).encode())
    print("\n".join(summary_table(doc["summary"])))
    print(f"wrote {args.json} ({len(doc['problems'])} problems)"
          + (f" and {args.records} ({len(records)} measurements)" if args.records else ""), flush=True)
    return 0


def _f(v) -> str:
    return "-" if v is None else f"{v:.1f}"


# ------------------------------------------------------------------------------------------------
# report: merge chunks, print, plot
# ------------------------------------------------------------------------------------------------

def plot(rows: list[dict], headers: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(dict.fromkeys(r["suite"] for r in rows))
    widest = max(sum(1 for r in rows if r["suite"] == s) for s in suites)
    fig, axes = plt.subplots(len(suites), 1, figsize=(max(8.0, 0.32 * widest + 2), 4.2 * len(suites)), squeeze=False)
    series = (("first pick", "first_vs_cublas", "tab:blue"), ("tuned (<= 8 compiles)", "tuned_vs_cublas", "tab:green"),
              ("CUTLASS default 128x256x64", "default_vs_cublas", "tab:gray"))
    for ax, suite in zip(axes[:, 0], suites):
        srows = [r for r in rows if r["suite"] == suite]
        used = [s for s in series if any(r.get(s[1]) for r in srows)]
        width = 0.8 / max(1, len(used))
        for i, (label, key, color) in enumerate(used):
            xs = [j + (i - (len(used) - 1) / 2) * width for j in range(len(srows))]
            ax.bar(xs, [r.get(key) or 0.0 for r in srows], width, label=label, color=color)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(TARGETS["floor"], color="tab:red", lw=0.8, ls="--", label=f"{TARGETS['floor']:.2f}x")
        ax.set_xticks(range(len(srows)))
        ax.set_xticklabels([f"{r['name']} ({r['dtype']})" if r["dtype"] not in r["name"] else r["name"]
                            for r in srows], rotation=55, ha="right", fontsize=6)
        ax.set_xlim(-0.6, len(srows) - 0.4)
        ax.set_ylabel("cuBLAS time / kernel time")
        s = summarize(srows)[suite]
        title = "; ".join(f"{dt}: first {_x(v['first']['geomean'])} (min {_x(v['first']['min'])}, "
                          f"{len(v['first']['under'])} < {TARGETS['floor']:.1f})"
                          + (f", tuned {_x(v['tuned']['geomean'])} over {v['tuned']['n']}" if v['tuned']['n'] else "")
                          for dt, v in s.items())
        ax.set_title(f"{suite}: {title}", fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    h = headers[-1] if headers else {}
    rankings = list(dict.fromkeys(x.get("ranking") for x in headers if x.get("ranking")))
    rank_text = rankings[0] if len(rankings) == 1 else \
        f"{len(rankings)} runs ranked differently (each run's ranking: the report JSON's runs)" if rankings else ""
    dev = (h.get("device") or {}).get("name", "")
    vers = h.get("versions") or {}
    fig.suptitle(f"cutegen vs cuBLAS, {dev} ({(h.get('date') or '')[:10]}; torch {vers.get('torch', '?')}, "
                 f"cuBLAS {vers.get('cublas', '?')}, driver {vers.get('driver', '?')})\n{rank_text}",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_report(args) -> int:
    rows, headers = load_rows(args.results)
    summary = summarize(rows)
    for line in summary_table(summary):
        print(line)
    print()
    for line in target_lines(summary):
        print(line)
    for line in model_lines(rows):
        print(line)
    if args.json:
        _write_json(Path(args.json), {"schema": REPORT_SCHEMA, "created": _utc_now(), "sources": args.results,
                                      "runs": headers, "targets": TARGETS, "summary": summary,
                                      "target_lines": target_lines(summary), "rows": rows})
        print(f"wrote {args.json}")
    if args.png:
        plot(rows, headers, args.png)
        print(f"wrote {args.png}")
    return 0


# ------------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="suites.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan", help="search and render the first picks, defaults and tune candidates (CPU, egglog)")
    pl.add_argument("--suite", action="append", default=[], metavar="TOML", help="a suite file (repeatable)")
    pl.add_argument("--only", action="append", default=[], metavar="NAME", help="NAME or SUITE:NAME (repeatable)")
    pl.add_argument("--chunk", default="1/1", metavar="I/N",
                    help="the I-th of N contiguous, near-equal parts of the problems selected [1/1]")
    pl.add_argument("--tune", nargs="+", default=[], metavar="NAME",
                    help="tune these problems (NAME or SUITE:NAME; 'all': every problem selected); only they are planned")
    pl.add_argument("--tune-worst", type=int, default=0, metavar="N",
                    help="tune the N problems whose first picks ran slowest against cuBLAS in --from; only they are planned")
    pl.add_argument("--from", dest="from_results", nargs="+", default=[], metavar="JSON",
                    help="run JSONs (gpu_suites.sh) or a merged report (suites.py report --json) to rank by")
    pl.add_argument("--tune-compiles", type=int, default=8,
                    help="distinct kernels per tuned problem, first pick and default included [8]")
    pl.add_argument("--tune-raster-variants", action="store_true",
                    help="fill the tune set in the search's rank order (default: candidates that differ from one "
                         "already held only in raster order or swizzle come after every new structure)")
    pl.add_argument("--no-nvmmh", action="store_true", help="leave nvMatmulHeuristics' pick out of the tune set")
    pl.add_argument("--device", default="h200", help="the device kind the first pick is ranked for [h200]")
    pl.add_argument("--db", metavar="PATH", help="a user results database merged with the seed (default: the "
                                                 "committed seed alone, as a fresh install ranks)")
    pl.add_argument("--label", help="the chunk's name (default: suites, -tune, -IofN)")
    pl.add_argument("--out", help="plan directory (default out/suites-plan-<label>); replaced if it holds a plan")
    pl.set_defaults(fn=cmd_plan)
    b = sub.add_parser("build", help="build the plan's kernels (GPU machine: nvcc + CUTLASS headers)")
    b.add_argument("plan")
    b.add_argument("--jobs", type=int, default=16)
    b.add_argument("--deadline", type=float, default=0.0, help="start no compile after this many seconds (0: none)")
    b.add_argument("--timeout", type=float, default=300.0, help="seconds one nvcc may take [300]")
    b.add_argument("--json", required=True, help="the build record to write")
    b.set_defaults(fn=cmd_build)
    d = sub.add_parser("dirs", help="the plan's kernel directories in build order")
    d.add_argument("plan")
    d.add_argument("--built", action="store_true", help="only those with a library")
    d.set_defaults(fn=cmd_dirs)
    t = sub.add_parser("time", help="time the validated kernels with cuBLAS (GPU machine)")
    t.add_argument("plan")
    t.add_argument("--build", help="the build record (suites.py build --json)")
    t.add_argument("--validate", help="`cutegen validate --json` over the plan's kernel directories")
    t.add_argument("--json", required=True, help="the results JSON to write")
    t.add_argument("--records", help="also write the measurements as JSON lines (`cutegen db import`)")
    t.add_argument("--deadline", type=float, default=0.0, help="start no problem after this many seconds (0: none)")
    t.add_argument("--timeout", type=float, default=90.0, help="seconds one problem's timing may take [90]")
    t.add_argument("--warmup", type=int, default=10)
    t.add_argument("--iters", type=int, default=50)
    t.add_argument("--l2-multiple", type=int, default=4)
    t.add_argument("--no-cublas-names", action="store_true", help="skip torch.profiler's cuBLAS kernel names")
    t.add_argument("--names-budget", type=float, default=60.0, help="seconds for the cuBLAS names in all [60]")
    t.set_defaults(fn=cmd_time)
    r = sub.add_parser("report", help="merge run JSONs, print the figures per suite and dtype, plot the ratios")
    r.add_argument("results", nargs="+", help="run JSONs and/or merged reports")
    r.add_argument("--json", help="write the merged report")
    r.add_argument("--png", help="write the ratio plot (one panel per suite)")
    r.set_defaults(fn=cmd_report)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except SuitesError as e:
        print(f"suites.py {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
