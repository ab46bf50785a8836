"""Differential fuzz campaign of the reachable space (issue 23, part 1): random problems, candidates
sampled from the search's ranked lists, every launch plan a candidate allows, run on the GPU against
a float32 reference.

Four steps; only ``plan`` needs the search (egglog), so it runs here and the rest on the GPU machine:

  plan    python bench/fuzz_campaign.py plan --pairs 520 --seed 2026 --out bench/fuzz/seed2026
          Random problems in groups (dtype family, layout, alignment class, a few size anchors per
          group, so that configurations repeat), each searched (top 12), candidates drawn from ranks
          1..12 (weighted towards the top), deduplicated by kernel hash under a kernel budget, every
          allowed launch plan of a stream-K candidate a case of its own. Writes <out>/plan.json and
          prints the shard sizes.
  render  python bench/fuzz_campaign.py render <plan dir> --shard N --dest DIR
          Renders each of the shard's kernels once (DIR/<kernel hash>/kernel.cu + manifest.json) and
          checks the hash against the plan's.
  run     python bench/fuzz_campaign.py run <plan dir> --shard N --kernels DIR --out OUT
          Every (problem, launch plan) case of each built kernel through the runner's watchdog worker
          (``validate_case``: random inputs, float32 reference, beta != 0 where the problem has it,
          2 launches on one workspace): OUT/cases-shardN.jsonl (one record per case, written as it
          finishes) and OUT/summary-shardN.json.
  report  python bench/fuzz_campaign.py report <plan dir> <results file or dir>...
          Pairs, kernels, cases, passes, failures grouped by configuration features, and the smallest
          conjunctions of features that hold on every failure and on the fewest passes: the candidate
          predicates of a rule. Writes bench/results/<date>-<device>-fuzz.json.

bench/gpu_fuzz.sh runs render, build and run for one shard on the GPU machine.
"""
from __future__ import annotations

import argparse
import collections
import datetime as _dt
import hashlib
import itertools
import json
import math
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLAN_SCHEMA = "cutegen-fuzz-plan/1"
CASE_SCHEMA = "cutegen-fuzz-case/1"
REPORT_SCHEMA = "cutegen-fuzz-report/1"

# Element-type families: what a problem's dtype fields are. The first five are core (every layout gets
# a group of each); the others get groups at random.
FAMILIES = {
    "bf16": {"dtype": "bf16"},
    "f16": {"dtype": "f16"},
    "tf32": {"dtype": "tf32"},
    "e4m3": {"dtype": "e4m3"},
    "e5m2": {"dtype": "e5m2"},
    "bf16_f32": {"dtype": "bf16", "dtype_c": "f32", "dtype_d": "f32"},
    "f16_f32": {"dtype": "f16", "dtype_c": "f32", "dtype_d": "f32"},
    "e4m3_e5m2": {"dtype_a": "e4m3", "dtype_b": "e5m2", "dtype_c": "bf16", "dtype_d": "bf16"},
    "e4m3_fast": {"dtype": "e4m3", "fp8_fast_accum": True},
    "e4m3_f16": {"dtype": "e4m3", "dtype_c": "f16", "dtype_d": "f16"},
    "bf16_void": {"dtype": "bf16", "dtype_c": "void"},
}
CORE_FAMILIES = ("bf16", "f16", "tf32", "e4m3", "e5m2")
LAYOUTS = ("tn", "nt", "nn", "tt")
ALIGNED = 4            # a dimension's class: 2-adic valuation 0..3, or ALIGNED (a multiple of 16 elements)
TOP_K = 12
MAX_M = 16384
SMS = 132              # split counts above the SM count are lowered by CUTLASS (SM90-SPLITK-SPLITS-SMS)


def rank_weights(n: int) -> list[float]:
    """Draw weights of ranks 1..n: towards the top, every rank reachable (rank 12 about 1/4 of rank 1)."""
    return [1.0 / (r ** 0.55) for r in range(1, n + 1)]


# ------------------------------------------------------------------------------------------------
# Problems
# ------------------------------------------------------------------------------------------------

def contiguous_dims(layout: str, layout_c: str) -> set[str]:
    """The dimensions that are some operand's contiguous extent (they decide the alignments)."""
    a_row, b_row = layout[0] == "t", layout[1] == "t"
    dims = {"k" if a_row else "m", "n" if b_row else "k", "n" if layout_c == "row" else "m"}
    return dims


def with_class(x: float, v: int | None, rng: random.Random) -> int:
    """The nearest extent to ``x`` of 2-adic class ``v`` (None: any, ALIGNED: multiple of 16)."""
    if v is None:
        return max(1, int(round(x)))
    if v == ALIGNED:
        return max(16, int(round(x / 16)) * 16)
    unit = 1 << v
    q = max(1, int(round(x / unit)))
    if q % 2 == 0:
        q += 1 if (q == 0 or rng.random() < 0.5) else -1
    return max(1, q) * unit


def log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def sample_anchor(rng: random.Random, max_macs: int, big_m: bool = False) -> tuple[float, float, float]:
    """A size regime: M from 1 to 16k (a fifth of them at most 16; ``big_m``: 8k to 16k), N likewise
    from 1, K small (up to 256), medium or huge (8k to 128k)."""
    if big_m:
        m = log_uniform(rng, 8192, MAX_M)
    else:
        m = log_uniform(rng, 1, 16) if rng.random() < 0.2 else log_uniform(rng, 16, MAX_M)
    n = log_uniform(rng, 1, 16) if rng.random() < 0.1 else log_uniform(rng, 16, MAX_M)
    u = rng.random()
    k = log_uniform(rng, 1, 256) if u < 0.25 else (log_uniform(rng, 256, 8192) if u < 0.7 else
                                                   log_uniform(rng, 8192, 131072))
    while m * n * k > max_macs:      # shrink the larger of M and N first, K last (huge K is the point)
        if big_m and n > 16:
            n /= 2
        elif max(m, n) > 64 and not big_m:
            if m >= n:
                m /= 2
            else:
                n /= 2
        else:
            k /= 2
    return m, n, k


def make_groups(rng: random.Random, families: list[str], layouts: list[str], extra: int,
                alignment: str, max_macs: int, anchors: int) -> list[dict]:
    """Every (core family, layout) once, every other family once (a random layout), then ``extra``
    groups of 16-bit inputs with K unaligned (``alignment`` any). Every third group's first size regime
    has M from 8k to 16k."""
    core = [f for f in families if f in CORE_FAMILIES] or list(families)
    combos = [(f, lay) for f in core for lay in layouts]
    combos += [(f, rng.choice(layouts)) for f in families if f not in core]   # every family at least once
    n_fixed = len(combos)
    # the extra groups: 16-bit inputs (where the search ranks cp.async kernels) with K unaligned
    sixteen = [f for f in families if f in ("bf16", "f16", "bf16_f32", "f16_f32")] or list(families)
    combos += [(rng.choice(sixteen), rng.choice(layouts)) for _ in range(extra)]
    groups = []
    for i, (fam, lay) in enumerate(combos):
        layout_c = "col" if rng.random() < 0.15 else "row"
        classes = {}
        for d in sorted(contiguous_dims(lay, layout_c)):
            if alignment == "aligned" or (rng.random() < 0.55 and not (i >= n_fixed and d == "k")):
                classes[d] = ALIGNED
            else:
                classes[d] = rng.choice((0, 1, 2, 3))
        groups.append({"id": f"g{i:02d}", "family": fam, "layout": lay, "layout_c": layout_c, "classes": classes,
                       "anchors": [sample_anchor(rng, max_macs, big_m=(a == 0 and i % 3 == 0))
                                   for a in range(anchors)]})
    return groups


def group_label(g: dict) -> str:
    cls = ",".join(f"{d}{'A' if v == ALIGNED else v}" for d, v in sorted(g["classes"].items()))
    return f"{g['family']} {g['layout']}{'' if g['layout_c'] == 'row' else ' Ccol'} [{cls}]"


def sample_problem(group: dict, index: int, seed: int, max_macs: int, max_elements: int) -> dict:
    """Problem ``index`` of ``group``: an anchor jittered by up to ~35 % per dimension (some dimensions
    kept exactly), extents moved to the group's alignment class, random batch, scalars and padding."""
    from cutegen.problem import GemmProblem

    rng = random.Random(f"{seed}:{group['id']}:{index}")
    anchor = group["anchors"][index % len(group["anchors"])]
    dims = {}
    for d, x in zip("mnk", anchor):
        if rng.random() >= 0.25:
            x *= math.exp(rng.uniform(-0.35, 0.35))
        if d != "k":
            x = min(x, MAX_M)       # M and N from 1 to 16k; K goes further
        dims[d] = with_class(x, group["classes"].get(d), rng)
        if d != "k" and dims[d] > MAX_M:
            dims[d] = with_class(dims[d] - (dims[d] - MAX_M) - (1 << min(group["classes"].get(d) or 0, 4)),
                                 group["classes"].get(d), rng)
    # Whole tiles along a dimension whose class allows it (K a multiple of 128 is a multiple of every
    # tile K): so that "K % tile_K != 0" and its complement both occur among the kernels of one group.
    # A stream of its own, so the other draws (and the search cache) stay as they were.
    whole = random.Random(f"{seed}:{group['id']}:{index}:whole")
    for d, p in (("k", 0.3), ("m", 0.15), ("n", 0.15)):
        if group["classes"].get(d) in (None, ALIGNED) and whole.random() < p and dims[d] >= 96:
            dims[d] = max(128, int(round(dims[d] / 128)) * 128)
            if d != "k":
                dims[d] = min(dims[d], MAX_M)
    batch = 1 if rng.random() < 0.7 else rng.randint(2, 4)
    fam = FAMILIES[group["family"]]
    void_c = fam.get("dtype_c") == "void"

    def too_big() -> bool:
        m, n, k = dims["m"], dims["n"], dims["k"]
        return (m * n * k * batch > max_macs or max(m * k, k * n, m * n) * batch > max_elements)

    while too_big():
        if batch > 1:
            batch -= 1
            continue
        d = max(("m", "n", "k"), key=lambda x: dims[x])
        dims[d] = with_class(dims[d] / 2, group["classes"].get(d), rng)
    data = {"m": dims["m"], "n": dims["n"], "k": dims["k"], "batch": batch, "layout": group["layout"],
            "layout_c": group["layout_c"], **fam}
    data["alpha"] = rng.choice((1.0, 1.0, 0.5, -1.5, 2.0))
    data["beta"] = 0.0 if void_c else rng.choice((0.0, 1.0, 1.0, 0.5, -0.75, 2.0))
    base = GemmProblem.from_dict(data)
    for op in "abc":
        if rng.random() < 0.2:          # a padded leading dimension that keeps the alignment class
            align = getattr(base, f"alignment_{op}")
            data[f"ld{op}"] = base.contiguous_extent(op)[1] + align * rng.randint(1, 8)
    return GemmProblem.from_dict(data).to_dict()


# ------------------------------------------------------------------------------------------------
# The search, cached
# ------------------------------------------------------------------------------------------------

def code_digest() -> str:
    """What the search's answer depends on: the search, the rules and the core model's source."""
    h = hashlib.sha256()
    for sub in ("search", "legality"):
        for p in sorted((ROOT / sub).rglob("*.py")):
            h.update(str(p.relative_to(ROOT)).encode())
            h.update(p.read_bytes())
    for name in ("config.py", "problem.py", "launch_plan.py", "dtypes.py", "swap_ab.py", "staging.py", "smem.py"):
        p = ROOT / "cutegen" / name
        if p.exists():
            h.update(name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def search_one(args: tuple) -> dict:
    """(problem dict, top_k, device) -> the ranked list as plain data, each with its kernel hash."""
    problem_dict, top_k, device = args
    from cutegen.manifest import kernel_hash
    from cutegen.problem import GemmProblem
    from cutegen.search import search

    problem = GemmProblem.from_dict(problem_dict)
    t0 = time.perf_counter()
    try:
        result = search(problem, top_k=top_k, device=device)
    except Exception as e:   # a problem the search cannot take is a finding of its own, not a crash here
        return {"ranked": [], "error": f"{type(e).__name__}: {e}", "seconds": round(time.perf_counter() - t0, 3)}
    ranked = [{"config": r.config.to_dict(), "cost": round(r.cost, 4),
               "plan": r.plan.to_dict() if r.plan is not None else None,
               "hash": kernel_hash(problem, r.config, "cutlass")} for r in result.ranked]
    return {"ranked": ranked, "seconds": round(time.perf_counter() - t0, 3)}


class SearchCache:
    """Ranked lists on disk, one JSON file per (problem, top_k, device, code digest)."""

    def __init__(self, directory: Path | None, top_k: int, device: str | None):
        self.dir, self.top_k, self.device = directory, top_k, device
        self.digest = code_digest()
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)

    _executor = None

    def _pool(self, jobs: int):
        """One pool of search processes for the whole plan (each imports egglog once)."""
        if self._executor is None:
            import concurrent.futures
            import multiprocessing
            self._executor = concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def _path(self, problem: dict) -> Path | None:
        if self.dir is None:
            return None
        key = json.dumps({"p": problem, "k": self.top_k, "d": self.device, "c": self.digest}, sort_keys=True)
        return self.dir / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")

    def get_many(self, problems: list[dict], jobs: int) -> list[dict]:
        out: list[dict | None] = [None] * len(problems)
        todo = []
        for i, p in enumerate(problems):
            path = self._path(p)
            if path is not None and path.exists():
                try:
                    out[i] = json.loads(path.read_text())
                    continue
                except json.JSONDecodeError:
                    pass
            todo.append(i)
        tasks = [(problems[i], self.top_k, self.device) for i in todo]
        if jobs > 1 and len(tasks) > 1:
            results = list(self._pool(jobs).map(search_one, tasks, chunksize=2))
        else:
            results = [search_one(t) for t in tasks]
        for i, res in zip(todo, results):
            out[i] = res
            path = self._path(problems[i])
            if path is not None and not res.get("error"):
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(res, sort_keys=True))
                os.replace(tmp, path)
        return out  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# Launch plans of a candidate
# ------------------------------------------------------------------------------------------------

def candidate_plans(problem, config, search_plan: dict | None) -> list[dict | None]:
    """The launch plans one (problem, candidate) pair runs: None (cutegen_gemm) for a kernel without
    the stream-K scheduler; for a stream-K kernel the search's own plan, the heuristic (1 and 2 splits),
    data-parallel, stream-K, split-K at 2, 3, half and all of the k-blocks (at most the SM count) and a
    nondeterministic split-K, each kept only where ``check_plan`` allows it."""
    from cutegen.launch_plan import LaunchPlan, k_tiles
    from cutegen.legality.stream_k import check_plan

    if config.tile_scheduler != "stream_k":
        return [None]
    kt = k_tiles(problem.k, config.tile_shape[2])
    own = LaunchPlan.from_dict(search_plan) if search_plan else LaunchPlan()
    plans = [own, LaunchPlan("heuristic"), LaunchPlan("heuristic", 2), LaunchPlan("data_parallel"),
             LaunchPlan("stream_k")]
    for s in sorted({2, 3, kt // 2, min(kt, SMS)}):
        if 2 <= s <= min(kt, SMS):
            plans.append(LaunchPlan("split_k", s))
    plans.append(LaunchPlan("split_k", 2, "nondeterministic"))
    out, seen = [], set()
    for p in plans:
        if p in seen:
            continue
        seen.add(p)
        broken, _ = check_plan(problem, config, p)
        if not broken:
            out.append(p.to_dict())
    return out


def plan_label(plan: dict | None) -> str:
    if not plan:
        return "gemm"
    from cutegen.launch_plan import LaunchPlan
    return LaunchPlan.from_dict(plan).label().replace(" ", "_")


# ------------------------------------------------------------------------------------------------
# plan
# ------------------------------------------------------------------------------------------------

def weighted_choice(rng: random.Random, ranks: list[int], weights: list[float]) -> int:
    total = sum(weights[r] for r in ranks)
    x = rng.random() * total
    for r in ranks:
        x -= weights[r]
        if x < 0:
            return r
    return ranks[-1]


class Selector:
    """Picks the pairs: ranks drawn by weight, an already chosen kernel preferred (with probability
    ``reuse``, and always once the group's or the campaign's kernel budget is spent)."""

    def __init__(self, seed: int, kernels_max: int, group_budget: int, reuse: float, second: float):
        self.seed, self.kernels_max, self.group_budget = seed, kernels_max, group_budget
        self.reuse, self.second = reuse, second
        self.kernels: dict[str, dict] = {}        # hash -> {"config", "group", "pairs": [...]}
        self.group_kernels: collections.Counter = collections.Counter()

    def pick(self, pid: str, group: str, ranked: list[dict], fixed_ranks: list[int] | None = None) -> list[int]:
        """0-based ranks chosen for one problem (empty: no candidate within the budget)."""
        if fixed_ranks is not None:
            return [r for r in fixed_ranks if r < len(ranked)]
        rng = random.Random(f"{self.seed}:select:{pid}")
        weights = rank_weights(len(ranked))
        want = 2 if rng.random() < self.second else 1
        picked: list[int] = []
        for _ in range(want):
            avail = [r for r in range(len(ranked)) if r not in picked
                     and ranked[r]["hash"] not in {ranked[p]["hash"] for p in picked}]
            if not avail:
                break
            reuse = [r for r in avail if ranked[r]["hash"] in self.kernels]
            full = (self.group_kernels[group] >= self.group_budget
                    or len(self.kernels) + sum(ranked[p]["hash"] not in self.kernels for p in picked) >= self.kernels_max)
            if reuse and (full or rng.random() < self.reuse):
                picked.append(weighted_choice(rng, reuse, weights))
            elif not full:
                picked.append(weighted_choice(rng, avail, weights))
        return picked

    def take(self, group: str, entry: dict) -> None:
        if entry["hash"] not in self.kernels:
            self.kernels[entry["hash"]] = {"config": entry["config"], "group": group}
            self.group_kernels[group] += 1


def build_plan(args) -> dict:
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem

    families = args.families.split(",") if args.families else list(FAMILIES)
    layouts = args.layouts.split(",") if args.layouts else list(LAYOUTS)
    for f in families:
        if f not in FAMILIES:
            raise SystemExit(f"fuzz_campaign plan: --families: unknown family {f!r} ({', '.join(FAMILIES)})")
    for lay in layouts:
        if lay not in LAYOUTS:
            raise SystemExit(f"fuzz_campaign plan: --layouts: unknown layout {lay!r} ({', '.join(LAYOUTS)})")
    rng = random.Random(f"{args.seed}:groups")
    fixed: list[tuple[dict, list[int]]] = []
    if args.problems:
        doc = json.loads(Path(args.problems).read_text())
        for i, entry in enumerate(doc):
            p = GemmProblem.from_dict(entry["problem"], where=f"{args.problems}[{i}].problem").to_dict()
            ranks = [int(r) - 1 for r in entry.get("ranks", [1])]
            fixed.append((p, ranks))
        groups = [{"id": "fixed", "family": "-", "layout": "-", "layout_c": "-", "classes": {}, "anchors": []}]
    else:
        extra = args.extra_groups if args.extra_groups is not None else 5
        groups = make_groups(rng, families, layouts, extra, args.alignment, args.max_macs, args.anchors)
    group_budget = max(2, math.ceil(args.kernels_max / len(groups)))
    cache = SearchCache(None if args.no_cache else Path(args.cache), TOP_K, args.device)
    sel = Selector(args.seed, args.kernels_max, group_budget, args.reuse, args.second)
    problems, pairs, searched, skipped, search_errors = [], [], 0, 0, []
    search_seconds = 0.0
    t0 = time.monotonic()
    max_problems = args.max_problems or 6 * args.pairs
    index = 0
    batch = max(8, 16 * args.jobs)
    while (len(pairs) < args.pairs and index < max_problems) if not fixed else index < len(fixed):
        todo = []
        for i in range(index, index + batch) if not fixed else range(len(fixed)):
            if fixed:
                todo.append(("fixed", f"p{i:04d}", fixed[i][0], fixed[i][1]))
            else:
                g = groups[i % len(groups)]
                todo.append((g["id"], f"p{i:04d}", sample_problem(g, i // len(groups), args.seed, args.max_macs,
                                                                 args.max_elements), None))
        index += len(todo)
        results = cache.get_many([t[2] for t in todo], args.jobs)
        for (gid, pid, pdict, franks), res in zip(todo, results):
            if len(pairs) >= args.pairs and not fixed:
                break
            searched += 1
            search_seconds += res.get("seconds", 0.0)
            if res.get("error"):
                search_errors.append({"problem": pid, "error": res["error"]})
            ranked = res["ranked"]
            chosen = sel.pick(pid, gid, ranked, franks) if ranked else []
            if not chosen:
                skipped += 1
                continue
            problems.append({"id": pid, "group": gid, "problem": pdict, "ranked": len(ranked)})
            for r in chosen:
                entry = ranked[r]
                sel.take(gid, entry)
                pairs.append({"id": f"{pid}.r{r + 1}", "problem": pid, "rank": r + 1, "kernel": entry["hash"],
                              "cost_us": entry["cost"], "search_plan": entry["plan"]})
        if not args.quiet:
            print(f"  searched {searched} problems: {len(pairs)} pairs, {len(sel.kernels)} kernels, "
                  f"{skipped} problems without a candidate in the budget ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    cache.close()
    if len(pairs) < args.pairs and not fixed:
        print(f"fuzz_campaign plan: only {len(pairs)} of {args.pairs} pairs after {searched} problems "
              f"(raise --kernels-max or --max-problems)", file=sys.stderr)

    by_pid = {p["id"]: p for p in problems}
    cases = []
    kernel_pairs: dict[str, list[str]] = collections.defaultdict(list)
    for pair in pairs:
        kernel_pairs[pair["kernel"]].append(pair["id"])
        problem = GemmProblem.from_dict(by_pid[pair["problem"]]["problem"])
        config = KernelConfig.from_dict(sel.kernels[pair["kernel"]]["config"])
        for j, lp in enumerate(candidate_plans(problem, config, pair["search_plan"])):
            cases.append({"id": f"{pair['id']}.{plan_label(lp)}", "pair": pair["id"], "problem": pair["problem"],
                          "kernel": pair["kernel"], "plan": lp, "repeat": args.repeat,
                          "seed": int(hashlib.sha256(f"{args.seed}:{pair['id']}:{j}".encode()).hexdigest()[:6], 16)})
    kernels = []
    for h, k in sel.kernels.items():
        first_pair = next(p for p in pairs if p["kernel"] == h)
        kernels.append({"hash": h, "group": k["group"], "config": k["config"],
                        "render_problem": first_pair["problem"], "pairs": kernel_pairs[h],
                        "cases": sum(c["kernel"] == h for c in cases),
                        "est_seconds": round(sum(case_seconds(by_pid[c["problem"]]["problem"], c["repeat"])
                                                 for c in cases if c["kernel"] == h), 2)})
    assign_shards(kernels, args.shards)
    return {"schema": PLAN_SCHEMA, "seed": args.seed, "code_digest": cache.digest, "top_k": TOP_K,
            "device": args.device,
            "settings": {"pairs": args.pairs, "kernels_max": args.kernels_max, "group_budget": group_budget,
                         "reuse": args.reuse, "second": args.second, "max_macs": args.max_macs,
                         "max_elements": args.max_elements, "repeat": args.repeat, "shards": args.shards,
                         "families": families, "layouts": layouts, "alignment": args.alignment,
                         "problems_file": args.problems},
            "rank_weights": [round(w, 4) for w in rank_weights(TOP_K)],
            "stats": {"problems_searched": searched, "problems_without_candidate": skipped,
                      "search_errors": search_errors, "search_seconds": round(search_seconds, 1)},
            "groups": [dict(g, label=group_label(g) if g["id"] != "fixed" else "fixed problems",
                            anchors=[[round(x) for x in a] for a in g["anchors"]]) for g in groups],
            "problems": problems, "pairs": pairs, "kernels": kernels, "cases": cases}


def case_seconds(problem: dict, repeat: int) -> float:
    """A rough GPU-side time of one case: the worker round trip, the inputs, the reference, the launches."""
    macs = problem["m"] * problem["n"] * problem["k"] * problem.get("batch", 1)
    return 0.25 + macs * 2 / 25e12 + repeat * macs * 2 / 300e12


def assign_shards(kernels: list[dict], shards: int) -> None:
    """Kernels to shards: equal kernel counts (the build decides a shard's time), then equal run time."""
    load = [[0, 0.0] for _ in range(shards)]
    for k in sorted(kernels, key=lambda k: (-k["est_seconds"], k["hash"])):
        s = min(range(shards), key=lambda i: (load[i][0], load[i][1], i))
        k["shard"] = s + 1
        load[s][0] += 1
        load[s][1] += k["est_seconds"]
    kernels.sort(key=lambda k: (k["shard"], k["hash"]))


def shard_table(plan: dict) -> list[dict]:
    rows = []
    for s in range(1, plan["settings"]["shards"] + 1):
        ks = [k for k in plan["kernels"] if k["shard"] == s]
        hs = {k["hash"] for k in ks}
        rows.append({"shard": s, "kernels": len(ks), "pairs": sum(len(k["pairs"]) for k in ks),
                     "cases": sum(1 for c in plan["cases"] if c["kernel"] in hs),
                     "stream_k_kernels": sum(k["config"]["tile_scheduler"] == "stream_k" for k in ks),
                     "est_run_seconds": round(sum(k["est_seconds"] for k in ks))})
    return rows


def print_plan_summary(plan: dict, out=sys.stdout) -> None:
    from cutegen.config import KernelConfig

    ks = plan["kernels"]
    print(f"plan: seed {plan['seed']}: {plan['stats']['problems_searched']} problems searched, "
          f"{len(plan['problems'])} used, {len(plan['pairs'])} pairs, {len(ks)} distinct kernels, "
          f"{len(plan['cases'])} cases (code digest {plan['code_digest']})", file=out)
    reuse = collections.Counter(len(k["pairs"]) for k in ks)
    print("  pairs per kernel: " + ", ".join(f"{n}: {c}" for n, c in sorted(reuse.items())), file=out)
    ranks = collections.Counter(p["rank"] for p in plan["pairs"])
    print("  ranks sampled: " + ", ".join(f"{r}: {ranks[r]}" for r in sorted(ranks)), file=out)
    probs = {p["id"]: p["problem"] for p in plan["problems"]}
    fam = collections.Counter()
    for p in plan["pairs"]:
        q = probs[p["problem"]]
        fam[(q["dtype_a"] if q["dtype_a"] == q["dtype_b"] else q["dtype_a"] + q["dtype_b"])
            + ("/fast" if q.get("fp8_fast_accum") else "") + f"->{q['dtype_d']}" + ("/voidC" if q["dtype_c"] == "void" else "")] += 1
    print("  pairs by types: " + ", ".join(f"{k} {v}" for k, v in sorted(fam.items())), file=out)
    lay = collections.Counter(("t" if probs[p["problem"]]["layout_a"] == "row" else "n")
                              + ("t" if probs[p["problem"]]["layout_b"] == "row" else "n") for p in plan["pairs"])
    print("  pairs by layout: " + ", ".join(f"{k} {v}" for k, v in sorted(lay.items())), file=out)
    feats = collections.Counter()
    for k in ks:
        c = KernelConfig.from_dict(k["config"])
        feats[c.mainloop_load] += 1
        feats[c.tile_scheduler] += 1
        feats["swap_ab" if c.swap_ab else "no_swap"] += 1
        feats["staged" if (c.stage_a or c.stage_b) else "unstaged"] += 1
        feats[c.mainloop_schedule] += 1
    print("  kernels by feature: " + ", ".join(f"{k} {v}" for k, v in sorted(feats.items())), file=out)
    extents = [probs[p["problem"]] for p in plan["pairs"]]
    print(f"  M {min(e['m'] for e in extents)}..{max(e['m'] for e in extents)}, "
          f"N {min(e['n'] for e in extents)}..{max(e['n'] for e in extents)}, "
          f"K {min(e['k'] for e in extents)}..{max(e['k'] for e in extents)}; "
          f"beta != 0 in {sum(e['beta'] != 0 for e in extents)}, batch > 1 in {sum(e['batch'] > 1 for e in extents)}, "
          f"a padded leading dimension in {sum(bool(e.get('lda') or e.get('ldb') or e.get('ldc')) for e in extents)} pairs", file=out)
    print("shards (each: bash bench/gpu_fuzz.sh <plan dir> <shard>):", file=out)
    for row in shard_table(plan):
        print(f"  shard {row['shard']}: {row['kernels']} kernels ({row['stream_k_kernels']} stream-K), "
              f"{row['pairs']} pairs, {row['cases']} cases, about {row['est_run_seconds']} s of cases", file=out)


def cmd_plan(args) -> int:
    plan = build_plan(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from cutegen._atomic import atomic_write
    atomic_write(out / "plan.json", (json.dumps(plan, sort_keys=True, separators=(",", ":")) + "\n").encode())
    print_plan_summary(plan)
    print(f"wrote {out / 'plan.json'}")
    return 0


def load_plan(plan_dir: str | os.PathLike) -> dict:
    path = Path(plan_dir)
    path = path / "plan.json" if path.is_dir() else path
    try:
        plan = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"fuzz_campaign: {path}: cannot read the plan ({e})")
    if plan.get("schema") != PLAN_SCHEMA:
        raise SystemExit(f"fuzz_campaign: {path}: schema {plan.get('schema')!r}, expected {PLAN_SCHEMA}")
    return plan


def shard_kernels(plan: dict, shard: int) -> list[dict]:
    if shard == 0:
        return list(plan["kernels"])
    shards = plan["settings"]["shards"]
    if not 1 <= shard <= shards:
        raise SystemExit(f"fuzz_campaign: --shard {shard}: the plan has shards 1..{shards} (0: all)")
    return [k for k in plan["kernels"] if k["shard"] == shard]


# ------------------------------------------------------------------------------------------------
# render (GPU machine or here)
# ------------------------------------------------------------------------------------------------

def cmd_render(args) -> int:
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem
    from cutegen.render import render

    plan = load_plan(args.plan)
    probs = {p["id"]: p["problem"] for p in plan["problems"]}
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    bad = 0
    ks = shard_kernels(plan, args.shard)
    if args.done:        # only kernels with a case an earlier call did not run
        done = {r["case"] for r in read_results(args.done) if r["verdict"] not in ("not_run", "not_built")}
        todo = {c["kernel"] for c in plan["cases"] if c["id"] not in done}
        ks = [k for k in ks if k["hash"] in todo]
    for k in ks:
        problem = GemmProblem.from_dict(probs[k["render_problem"]])
        config = KernelConfig.from_dict(k["config"])
        try:
            rk = render(problem, config)
        except Exception as e:   # recorded: the run step reports the kernel as not built
            print(f"RENDER FAILED {k['hash']}: {type(e).__name__}: {e}")
            bad += 1
            continue
        if rk.kernel_hash != k["hash"]:
            print(f"HASH MISMATCH {k['hash']}: rendered {rk.kernel_hash} (the plan was made on other code)")
            bad += 1
            continue
        rk.write(dest / k["hash"])
    print(f"rendered {len(ks) - bad} of {len(ks)} kernels of shard {args.shard} into {dest}")
    return 0 if not bad else 1


# ------------------------------------------------------------------------------------------------
# build (GPU machine)
# ------------------------------------------------------------------------------------------------

BUILD_FAILED = "build-failed.txt"    # in a kernel directory: why nvcc failed (the run step reports it)


def cmd_build(args) -> int:
    """Build the rendered kernels with ``--jobs`` nvcc processes, the kernels with the most cases first;
    a failed compile leaves its message in <kernel>/build-failed.txt as soon as it fails."""
    import concurrent.futures
    from cutegen.build import Builder, _job_for

    plan = load_plan(args.plan)
    cases = {k["hash"]: k["cases"] for k in plan["kernels"]}
    want = {k["hash"] for k in shard_kernels(plan, args.shard)}
    kdir = Path(args.kernels)
    dirs = sorted((d for d in kdir.iterdir() if d.name in want and (d / "kernel.cu").is_file()),
                  key=lambda d: (-cases.get(d.name, 0), d.name))
    print(f"{len(dirs)} kernel directories", flush=True)
    builder = Builder(jobs=args.jobs, progress=sys.stdout, timeout=args.timeout)
    builder._total, builder._done = len(dirs), 0

    def one(d: Path):
        r = builder.build_one(_job_for(d))
        if not r.ok:
            (d / BUILD_FAILED).write_text(r.message + "\n")
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, dirs))
    n = collections.Counter(r.status for r in results)
    print(f"built {n['built']}, cached {n['cached']}, failed {n['failed']}")
    return 0 if not n["failed"] else 1


# ------------------------------------------------------------------------------------------------
# run (GPU machine; CUTEGEN_RUNNER_DEVICE=cpu runs it on the host with a stand-in library)
# ------------------------------------------------------------------------------------------------

def runner_case(problem, case: dict):
    """The runner's Case for one fuzz case: the problem's own sizes, scalars and leading dimensions."""
    from cutegen import runner as R
    return R.Case(case["id"], problem.m, problem.n, problem.k, problem.batch, problem.alpha, problem.beta,
                  ld_pad=R.problem_ld_pads(problem), seed=case["seed"] % 1_000_000, plan=dict(case["plan"] or {}),
                  repeat=case["repeat"])


def verdict_of(reply, value: dict | None) -> str:
    """pass | wrong | kernel_error | refused | error | hang | crash."""
    if reply.status in ("hang", "crash"):
        return reply.status
    if reply.status == "error":
        return "error"
    if value.get("refused"):
        return "refused"
    if reply.fatal:
        return "crash"          # the CUDA context broke (a sticky fault), whatever the result said
    if value.get("ok"):
        return "pass"
    if value.get("kernel_status", 0) != 0:
        return "kernel_error"
    return "wrong"


def cmd_run(args) -> int:
    from cutegen import runner as R
    from cutegen.problem import GemmProblem

    plan = load_plan(args.plan)
    t_start = time.monotonic()
    probs = {p["id"]: p["problem"] for p in plan["problems"]}
    ks = shard_kernels(plan, args.shard)
    cases_by_kernel = collections.defaultdict(list)
    for c in plan["cases"]:
        cases_by_kernel[c["kernel"]].append(c)
    done = {r["case"] for r in read_results(args.done) if r["verdict"] not in ("not_run", "not_built")} \
        if args.done else set()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # a call that resumes an earlier one (--done) names its files apart, so both can sit in one folder
    tag = f"shard{args.shard}" + (_dt.datetime.now(_dt.timezone.utc).strftime("-%H%M%S") if args.done else "")
    jsonl = out / f"cases-{tag}.jsonl"
    counts: collections.Counter = collections.Counter()
    failures = []
    device = None
    date = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    worker = R.Worker(startup_timeout=args.startup_timeout, init={"op": "init"})
    with open(jsonl, "w") as f:
        def emit(rec: dict) -> None:
            rec = {"schema": CASE_SCHEMA, "date": date, **rec}
            f.write(json.dumps(rec, sort_keys=True, default=R.json_default) + "\n")
            f.flush()
            counts[rec["verdict"]] += 1
            if rec["verdict"] in FAILED:
                failures.append({k: rec.get(k) for k in ("case", "kernel", "verdict", "reason", "rel_err")})

        try:
            for k in ks:
                kcases = [c for c in cases_by_kernel[k["hash"]] if c["id"] not in done]
                if not kcases:
                    continue
                base = {"kernel": k["hash"], "shard": k["shard"]}
                if args.deadline and time.monotonic() - t_start > args.deadline:
                    for c in kcases:
                        emit({**base, "case": c["id"], "verdict": "not_run", "reason": "deadline reached"})
                    continue
                try:
                    info = R.load_kernel_info(Path(args.kernels) / k["hash"])
                    if info.hash and info.hash != k["hash"]:
                        raise R.KernelNotFound(f"manifest hash {info.hash} is not the plan's {k['hash']}")
                except (R.CutegenError, ValueError) as e:
                    failed = Path(args.kernels) / k["hash"] / BUILD_FAILED
                    verdict = "build_failed" if failed.is_file() else "not_built"
                    why = failed.read_text().strip() if failed.is_file() else str(e)
                    for c in kcases:
                        emit({**base, "case": c["id"], "verdict": verdict, "reason": why})
                    print(f"{verdict.upper()} {k['hash']}: {why.splitlines()[0] if why else ''}")
                    continue
                bad_runs = 0
                for c in kcases:
                    if args.deadline and time.monotonic() - t_start > args.deadline:
                        emit({**base, "case": c["id"], "verdict": "not_run", "reason": "deadline reached"})
                        continue
                    if bad_runs >= args.max_hangs:
                        emit({**base, "case": c["id"], "verdict": "not_run",
                              "reason": f"skipped after {bad_runs} hangs or crashes of this kernel"})
                        continue
                    problem = GemmProblem.from_dict(probs[c["problem"]])
                    rc = runner_case(problem, c)
                    task = {"op": "validate_case", "library": str(info.library), "problem": problem.to_dict(),
                            "config": info.config.to_dict(), "case": rc.to_dict(), "tolerance": R.tolerance(problem),
                            "seed": plan["seed"]}
                    reply = worker.request(task, args.timeout)
                    if worker.init_reply is not None and worker.init_reply.ok and device is None:
                        device = worker.init_reply.value
                    value = dict(reply.value) if isinstance(reply.value, dict) else {}
                    verdict = verdict_of(reply, value)
                    if verdict in ("hang", "crash"):
                        bad_runs += 1
                    reason = value.get("reason") or reply.message
                    if reply.fatal and verdict not in ("hang", "crash"):
                        reason = (reason + "; CUDA context broken afterwards (sticky fault)").strip("; ")
                    rec = {**base, "case": c["id"], "pair": c["pair"], "problem": c["problem"], "plan": c["plan"],
                           "repeat": c["repeat"], "verdict": verdict, "reason": reason,
                           "seconds": round(reply.seconds, 3)}
                    for key in ("rel_err", "tol", "nan", "inf", "written_outside", "launch", "launches",
                                "kernel_status", "kernel_message", "workspace_bytes", "kernel_seconds"):
                        if key in value:
                            rec[key] = value[key]
                    emit(rec)
                    if verdict != "pass" or not args.quiet:
                        err = f" rel_err {value['rel_err']:.2e}" if isinstance(value.get("rel_err"), float) else ""
                        print(f"{verdict.upper():12} {c['id']} [{k['hash']} {info.config.short_name()}]{err}"
                              + (f": {reason.splitlines()[0][:200]}" if verdict != "pass" and reason else ""),
                              flush=True)
        finally:
            worker.close()
    summary = {"schema": "cutegen-fuzz-summary/1", "date": date, "plan_seed": plan["seed"],
               "code_digest": plan["code_digest"], "shard": args.shard, "kernels": len(ks),
               "cases": sum(counts.values()), "verdicts": dict(sorted(counts.items())), "device": device,
               "seconds": round(time.monotonic() - t_start, 1), "failures": failures}
    (out / f"summary-{tag}.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=R.json_default) + "\n")
    print(f"fuzz run shard {args.shard}: {len(ks)} kernels, {summary['cases']} cases: "
          + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) + f" ({summary['seconds']} s)")
    return 0 if all(v == "pass" for v in counts) else 1


# ------------------------------------------------------------------------------------------------
# report (here)
# ------------------------------------------------------------------------------------------------

FAILED = ("wrong", "kernel_error", "refused", "error", "hang", "crash", "build_failed")


def case_features(problem, config, plan: dict | None) -> dict[str, str]:
    """The facts a rule could be written on, as strings (one case: problem, configuration, launch plan)."""
    from cutegen.dtypes import DTYPES
    from cutegen.launch_plan import LaunchPlan, k_tiles
    from cutegen.runner import tile_extents

    tm, tn, tk = tile_extents(config)
    lp = LaunchPlan.from_dict(plan) if plan else None
    splits_k = bool(lp and (lp.decomposition in ("split_k", "stream_k") or (lp.decomposition == "heuristic" and lp.splits > 1)))
    narrow = [op for op, dt in (("A", problem.dtype_a), ("B", problem.dtype_b), ("C", problem.dtype_d))
              if getattr(problem, f"alignment_{op.lower()}") * DTYPES[dt].bits < 128]
    return {
        "dtypes": f"{problem.dtype_a}{'' if problem.dtype_a == problem.dtype_b else '/' + problem.dtype_b}->"
                  f"{problem.dtype_d}" + ("/voidC" if problem.dtype_c == "void" else "")
                  + ("/fast" if problem.fp8_fast_accum else ""),
        "layout": problem.blas_layout + ("" if problem.layout_c == "row" else "/Ccol"),
        "narrow_operands": "".join(narrow) or "none",
        "mainloop_load": config.mainloop_load,
        "mainloop_schedule": config.mainloop_schedule,
        "epilogue": config.epilogue_schedule,
        "tile_scheduler": config.tile_scheduler,
        "cluster": "x".join(map(str, config.cluster_shape[:2])),
        "tile": "x".join(map(str, config.tile_shape)),
        "swap_ab": str(bool(config.swap_ab)),
        "staged": ("A" if config.stage_a else "") + ("B" if config.stage_b else "") or "none",
        "plan": lp.decomposition if lp else "gemm",
        "plan_splits_k": str(splits_k),
        "plan_nondeterministic": str(bool(lp and lp.reduction == "nondeterministic")),
        "k_ragged": str(problem.k % tk != 0),
        "m_ragged": str(problem.m % tm != 0),
        "n_ragged": str(problem.n % tn != 0),
        "k_tiles_1": str(k_tiles(problem.k, tk) == 1),
        "beta_nonzero": str(problem.beta != 0),
        "batch_gt_1": str(problem.batch > 1),
        "ld_padded": str(bool(problem.lda or problem.ldb or problem.ldc)),
        "m_le_16": str(problem.m <= 16),
        "raster": f"{config.raster_order}/{config.raster_swizzle}",
    }


def rules_now(problem, config, plan: dict | None, memo: dict | None = None) -> list[str]:
    """The rule IDs that reject this case under the current code (the plan may predate a rule)."""
    from cutegen.launch_plan import LaunchPlan
    from cutegen.legality import check_config
    from cutegen.legality.stream_k import check_plan

    key = (problem, config)
    if memo is None or key not in memo:
        report = check_config(problem, config)
        found = {v.rule_id for v in getattr(report, "violations", report or [])}
        if memo is None:
            memo = {}
        memo[key] = found
    ids = set(memo[key])
    if plan or config.tile_scheduler == "stream_k":
        ids |= {v.rule_id for v in check_plan(problem, config, LaunchPlan.from_dict(plan))[0]}
    return sorted(ids)


def separating_predicates(rows: list[tuple[dict, bool]], max_terms: int = 3, limit: int = 8) -> list[dict]:
    """Conjunctions of up to ``max_terms`` feature=value terms that hold on every failing case, fewest
    passing cases first (then fewest terms): what a rule separating the failures could say."""
    fails = [f for f, bad in rows if bad]
    passes = [f for f, bad in rows if not bad]
    if not fails:
        return []
    common = [(k, v) for k, v in fails[0].items() if all(f.get(k) == v for f in fails)]
    found = []
    for n in range(1, max_terms + 1):
        for terms in itertools.combinations(common, n):
            if len({k for k, _ in terms}) < n:
                continue
            hits = sum(all(p.get(k) == v for k, v in terms) for p in passes)
            found.append({"predicate": " and ".join(f"{k}={v}" for k, v in terms), "terms": n,
                          "failures": len(fails), "passes_matching": hits})
    found.sort(key=lambda x: (x["passes_matching"], x["terms"], x["predicate"]))
    # drop a conjunction whose pass count a shorter one already reaches
    best: list[dict] = []
    for x in found:
        if any(b["passes_matching"] <= x["passes_matching"] and set(b["predicate"].split(" and ")) <= set(x["predicate"].split(" and "))
               for b in best):
            continue
        best.append(x)
        if len(best) >= limit:
            break
    return best


def failure_cover(rows: list[tuple[dict, bool]], max_terms: int = 3, rounds: int = 6) -> list[dict]:
    """Greedy: the conjunction (up to ``max_terms`` feature=value terms) that explains the most failing
    cases not yet explained, weighted by its precision (failures / cases it holds on), then again on
    the rest: when the failures have more than one cause, one predicate per cause."""
    fail_rows = [f for f, bad in rows if bad]
    pass_rows = [f for f, bad in rows if not bad]
    terms: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(fail_rows):
        for kv in f.items():
            terms.setdefault(kv, [0, 0])[0] |= 1 << i
    for i, f in enumerate(pass_rows):
        for kv in f.items():
            if kv in terms:
                terms[kv][1] |= 1 << i
    left = (1 << len(fail_rows)) - 1
    out = []
    for _ in range(rounds):
        if not left:
            break
        live = sorted(kv for kv, (fm, _) in terms.items() if fm & left)
        best = None
        for n in range(1, max_terms + 1):
            for combo in itertools.combinations(live, n):
                if len({k for k, _ in combo}) < n:
                    continue
                fm, pm = left, (1 << len(pass_rows)) - 1
                for kv in combo:
                    fm &= terms[kv][0]
                    pm &= terms[kv][1]
                if not fm:
                    continue
                f, q = fm.bit_count(), pm.bit_count()
                key = (f * f / (f + q), -n)      # failures explained, weighted by the predicate's precision
                if best is None or key > best[0]:
                    best = (key, combo, fm, pm)
        if best is None:
            break
        _, combo, fm, pm = best
        out.append({"predicate": " and ".join(f"{k}={v}" for k, v in combo), "failures": fm.bit_count(),
                    "passes_matching": pm.bit_count()})
        left &= ~fm
    return out


def read_results(paths: list[str]) -> list[dict]:
    recs: dict[str, dict] = {}
    files = []
    for p in map(Path, paths):
        files += sorted(p.glob("cases-*.jsonl")) if p.is_dir() else [p]
    if not files:
        raise SystemExit("fuzz_campaign: no cases-*.jsonl among " + ", ".join(paths))
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                print(f"fuzz_campaign report: {path}:{n}: not JSON (a cut-off last line?); skipped", file=sys.stderr)
                continue
            if not isinstance(rec, dict) or "case" not in rec or "verdict" not in rec:
                print(f"fuzz_campaign: {path}:{n}: not a case record; skipped", file=sys.stderr)
                continue
            old = recs.get(rec["case"])
            if old is None or old["verdict"] in ("not_run", "not_built"):   # a later run of a case wins over none
                recs[rec["case"]] = rec
    return list(recs.values())


def device_slug(device: dict | None) -> str:
    name = (device or {}).get("name") or (device or {}).get("device_name") or ""
    name = name.lower()
    for key in ("h200", "h100", "h20", "gh200"):
        if key in name:
            return key
    return "".join(ch if ch.isalnum() else "-" for ch in name).strip("-") or "unknown"


def build_report(plan: dict, recs: list[dict], devices: list) -> dict:
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem

    probs = {p["id"]: GemmProblem.from_dict(p["problem"]) for p in plan["problems"]}
    cfgs = {k["hash"]: KernelConfig.from_dict(k["config"]) for k in plan["kernels"]}
    by_case = {r["case"]: r for r in recs}
    rows, cases_out, memo = [], [], {}
    for c in plan["cases"]:
        r = by_case.get(c["id"])
        verdict = r["verdict"] if r else "missing"
        feats = case_features(probs[c["problem"]], cfgs[c["kernel"]], c["plan"])
        rejected = rules_now(probs[c["problem"]], cfgs[c["kernel"]], c["plan"], memo)
        feats["illegal_now"] = str(bool(rejected))
        if verdict in ("pass",) + FAILED:
            rows.append((feats, verdict in FAILED))
        cases_out.append({"case": c["id"], "kernel": c["kernel"], "verdict": verdict, "rules_now": rejected,
                          **({k: r[k] for k in ("rel_err", "reason", "seconds", "launches") if r and k in r})})
    verdicts = collections.Counter(x["verdict"] for x in cases_out)
    failed = [x for x in cases_out if x["verdict"] in FAILED]
    ran = [x for x in cases_out if x["verdict"] in ("pass",) + FAILED]
    # What the rules of today say about what ran: a failure they reject is explained; a pass they
    # reject is the cost of a conservative rule (evidence to lift it, or to narrow it)
    legality_now = {"failures_rejected": sum(bool(x["rules_now"]) for x in failed),
                    "failures_still_legal": sum(not x["rules_now"] for x in failed),
                    "passes_rejected": sum(bool(x["rules_now"]) for x in ran if x["verdict"] == "pass"),
                    "rejecting_rules": dict(collections.Counter(r for x in ran for r in x["rules_now"]))}
    failing_kernels = sorted({x["kernel"] for x in failed})
    by_feature: dict[str, dict] = {}
    for feats, bad in rows:
        for k, v in feats.items():
            e = by_feature.setdefault(k, {}).setdefault(v, {"pass": 0, "fail": 0})
            e["fail" if bad else "pass"] += 1
    groups = collections.Counter()
    for x in failed:
        c = next(cc for cc in plan["cases"] if cc["id"] == x["case"])
        f = case_features(probs[c["problem"]], cfgs[c["kernel"]], c["plan"])
        groups[(x["verdict"], f["mainloop_load"], f["tile_scheduler"], f["plan"], f["k_ragged"], f["staged"],
                f["swap_ab"])] += 1
    run_pairs = {c["pair"] for c in plan["cases"] if by_case.get(c["id"], {}).get("verdict") in ("pass",) + FAILED}
    return {
        "schema": REPORT_SCHEMA,
        "date": min((r.get("date", "") for r in recs), default="")[:10],
        "device": next((d for d in devices if d), None),
        "plan": {"seed": plan["seed"], "code_digest": plan["code_digest"], "pairs": len(plan["pairs"]),
                 "kernels": len(plan["kernels"]), "cases": len(plan["cases"]), "problems": len(plan["problems"])},
        "pairs_run": len(run_pairs),
        "kernels_run": len({x["kernel"] for x in cases_out if x["verdict"] in ("pass",) + FAILED}),
        "cases_run": sum(verdicts[v] for v in ("pass",) + FAILED),
        "verdicts": dict(sorted(verdicts.items())),
        "failing_kernels": [{"hash": h, "config": cfgs[h].short_name(),
                             "cases_failed": sum(x["kernel"] == h for x in failed),
                             "cases": sum(x["kernel"] == h for x in cases_out)} for h in failing_kernels],
        "failure_groups": [{"verdict": g[0], "mainloop_load": g[1], "tile_scheduler": g[2], "plan": g[3],
                            "k_ragged": g[4], "staged": g[5], "swap_ab": g[6], "cases": n}
                           for g, n in groups.most_common()],
        "legality_now": legality_now,
        "separating_predicates": separating_predicates(rows),
        "failure_cover": failure_cover(rows),
        "by_feature": by_feature,
        "failures": failed,
        "cases": cases_out,
    }


def print_report(rep: dict) -> None:
    p = rep["plan"]
    v = rep["verdicts"]
    print(f"fuzz report: plan seed {p['seed']} ({p['pairs']} pairs, {p['kernels']} distinct kernels, {p['cases']} cases); "
          f"run: {rep['pairs_run']} pairs, {rep['kernels_run']} kernels, {rep['cases_run']} cases on "
          f"{(rep['device'] or {}).get('name', 'an unknown device')}")
    print("  verdicts: " + ", ".join(f"{k} {n}" for k, n in v.items()))
    fails = sum(v.get(x, 0) for x in FAILED)
    print(f"  passed {v.get('pass', 0)} of {rep['cases_run']}, failed {fails}")
    ln = rep["legality_now"]
    print(f"  under today's rules: {ln['failures_rejected']} failures rejected, {ln['failures_still_legal']} still legal; "
          f"{ln['passes_rejected']} passes rejected" + (f" (by {ln['rejecting_rules']})" if ln["rejecting_rules"] else ""))
    for k in rep["failing_kernels"]:
        print(f"  failing kernel {k['hash']} {k['config']}: {k['cases_failed']} of {k['cases']} cases")
    if rep["failure_groups"]:
        print("  failures by (verdict, mainloop load, scheduler, plan, K % tile_K != 0, staged, swap AB):")
        for g in rep["failure_groups"]:
            print(f"    {g['cases']:4d}  {g['verdict']}, {g['mainloop_load']}, {g['tile_scheduler']}, {g['plan']}, "
                  f"k_ragged={g['k_ragged']}, staged={g['staged']}, swap_ab={g['swap_ab']}")
    if rep["separating_predicates"]:
        print("  predicates true on every failure, fewest passes first (a rule candidate; check it on both sides):")
        for s in rep["separating_predicates"]:
            print(f"    {s['predicate']}: {s['failures']} failures, {s['passes_matching']} passes also match")
    if rep["failure_cover"] and (len(rep["failure_cover"]) > 1 or rep["failure_cover"][0]["passes_matching"]):
        print("  the failures explained one cause at a time (greedy; each predicate on as few passes as possible):")
        for s in rep["failure_cover"]:
            print(f"    {s['predicate']}: {s['failures']} failures, {s['passes_matching']} passes also match")
    for f in rep["failures"][:40]:
        print(f"  {f['verdict'].upper():12} {f['case']} [{f['kernel']}]: {(f.get('reason') or '')[:160]}")


def cmd_report(args) -> int:
    plan = load_plan(args.plan)
    recs = read_results(args.results)
    devices = []
    for p in map(Path, args.results):
        for s in (sorted(p.glob("summary-*.json")) if p.is_dir() else sorted(p.parent.glob("summary-*.json"))):
            try:
                devices.append(json.loads(s.read_text()).get("device"))
            except (OSError, json.JSONDecodeError):
                pass
    if args.shard:
        keep = {k["hash"] for k in shard_kernels(plan, args.shard)}
        plan = dict(plan, kernels=[k for k in plan["kernels"] if k["hash"] in keep],
                    cases=[c for c in plan["cases"] if c["kernel"] in keep])
        pids = {c["problem"] for c in plan["cases"]}
        plan["pairs"] = [p for p in plan["pairs"] if p["kernel"] in keep]
        plan["problems"] = [p for p in plan["problems"] if p["id"] in pids]
    rep = build_report(plan, recs, devices)
    print_report(rep)
    out = Path(args.json) if args.json else (ROOT / "bench" / "results" /
                                             f"{rep['date'] or _dt.date.today().isoformat()}-{device_slug(rep['device'])}-fuzz.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0 if not any(rep["verdicts"].get(x) for x in FAILED) else 1


# ------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fuzz_campaign.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="sample problems, search them, pick candidates and cases (needs egglog)")
    p.add_argument("--pairs", type=int, default=520, help="(problem, candidate) pairs to sample [520]")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--out", required=True, help="plan directory (plan.json is written there)")
    p.add_argument("--kernels-max", type=int, default=150, help="distinct kernels at most [150]")
    p.add_argument("--shards", type=int, default=3, help="GPU calls the kernels are split into [3]")
    p.add_argument("--reuse", type=float, default=0.6,
                   help="probability of taking an already chosen kernel when the ranked list has one [0.6]")
    p.add_argument("--second", type=float, default=0.3, help="probability that a problem gives a second pair [0.3]")
    p.add_argument("--families", default="", help=f"comma-separated type families [{','.join(FAMILIES)}]")
    p.add_argument("--layouts", default="", help="comma-separated layouts [tn,nt,nn,tt]")
    p.add_argument("--alignment", choices=("any", "aligned"), default="any",
                   help="aligned: every contiguous extent a multiple of 16 elements [any]")
    p.add_argument("--extra-groups", type=int, default=None,
                   help="groups beyond one per (core family, layout) and one per other family: 16-bit inputs "
                        "with K unaligned [5]")
    p.add_argument("--anchors", type=int, default=2, help="size regimes per group [2]")
    p.add_argument("--max-macs", type=int, default=2**34, help="M*N*K*batch at most [2^34]")
    p.add_argument("--max-elements", type=int, default=2**27, help="elements of one operand at most [2^27]")
    p.add_argument("--max-problems", type=int, default=0, help="problems searched at most [6 x pairs]")
    p.add_argument("--repeat", type=int, default=2, help="launches per case on one workspace [2]")
    p.add_argument("--problems", default="", metavar="JSON",
                   help="explicit problems instead of random ones: [{\"problem\": {...}, \"ranks\": [1, 4]}, ...]")
    p.add_argument("--device", default=None, help="device kind the search ranks for (as cutegen search --device) [none]")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="search processes [2]")
    p.add_argument("--cache", default=str(ROOT / "out" / "fuzz-search-cache"), help="search cache directory")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(fn=cmd_plan)
    r = sub.add_parser("render", help="render a shard's kernels (no egglog needed)")
    r.add_argument("plan")
    r.add_argument("--shard", type=int, required=True, help="shard number; 0: every kernel")
    r.add_argument("--dest", required=True)
    r.add_argument("--done", nargs="*", default=[], metavar="RESULTS",
                   help="cases-*.jsonl files or folders of an earlier call: render only kernels with cases left")
    r.set_defaults(fn=cmd_render)
    u = sub.add_parser("run", help="run a shard's cases on its built kernels (GPU; CPU twin with CUTEGEN_RUNNER_DEVICE=cpu)")
    u.add_argument("plan")
    u.add_argument("--shard", type=int, required=True)
    u.add_argument("--kernels", required=True, help="the folder render wrote and build built (<hash>/kernel.so)")
    u.add_argument("--out", required=True)
    u.add_argument("--timeout", type=float, default=60.0, help="seconds one case may take before it is a hang [60]")
    u.add_argument("--startup-timeout", type=float, default=180.0)
    u.add_argument("--deadline", type=float, default=0.0, help="start no case after this many seconds (0: none)")
    u.add_argument("--max-hangs", type=int, default=2, help="hangs or crashes of one kernel before its other cases are skipped [2]")
    u.add_argument("--done", nargs="*", default=[], metavar="RESULTS",
                   help="cases-*.jsonl files or folders of an earlier call: skip the cases they ran")
    u.add_argument("-q", "--quiet", action="store_true", help="print only failures")
    u.set_defaults(fn=cmd_run)
    b = sub.add_parser("build", help="build a shard's rendered kernels (nvcc; GPU machine)")
    b.add_argument("plan")
    b.add_argument("--shard", type=int, required=True)
    b.add_argument("--kernels", required=True, help="the folder render wrote")
    b.add_argument("--jobs", type=int, default=16)
    b.add_argument("--timeout", type=float, default=300.0, help="seconds one nvcc may take [300]")
    b.set_defaults(fn=cmd_build)
    e = sub.add_parser("report", help="summarize results, group failures by configuration features")
    e.add_argument("plan")
    e.add_argument("results", nargs="+", help="cases-*.jsonl files or folders holding them")
    e.add_argument("--shard", type=int, default=0, help="only this shard's kernels [0: all]")
    e.add_argument("--json", default="", help="report file [bench/results/<date>-<device>-fuzz.json]")
    e.set_defaults(fn=cmd_report)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
