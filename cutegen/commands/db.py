"""`cutegen db`: the results database (cutegen.results).

    cutegen db import FILE...             load bench, calibration, DSL-comparison, validate or exported files
    cutegen db export [--format jsonl]    every record, one JSON object per line (or one JSON list)
    cutegen db stats                      records per device kind, problems, configurations, date range
    cutegen db list [--op attention]      one line per record: operation, problem, backend, kernel, time, peers
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

from ..errors import CutegenError

HELP = "the results database: import GPU result files, export, stats, list"


def _op_filter(p) -> None:
    p.add_argument("--op", metavar="NAME",
                   help="only the records of this operation (gemm, attention, grouped_gemm, ...)")


def _common(p) -> None:
    p.add_argument("--db", metavar="PATH", help="database file (default: $CUTEGEN_RESULTS_DB, else the user cache dir)")
    p.add_argument("--no-seed", action="store_true",
                   help="leave out the repository's read-only seed (bench/results/seed.sqlite)")


def _op(args) -> str | None:
    """--op, checked against the registered operations (one line for an unknown one)."""
    if getattr(args, "op", None) is None:
        return None
    from ..core import registry
    return registry.get(args.op).name


def _open(args, seed: bool = True, readonly: bool = False):
    from ..results import ResultsDB
    return ResultsDB(args.db, seed=None if (args.no_seed or not seed) else True, readonly=readonly)


def add_import(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--compact", action="store_true",
                   help="afterwards vacuum the file and leave WAL mode (how bench/results/seed.sqlite is kept)")
    _common(p)


def run_import(args) -> int:
    from ..results.importers import load
    batches = [(f, load(f)) for f in args.files]      # read every file before writing any: a bad one writes nothing
    new = 0
    with _open(args, seed=False) as db:
        for f, ms in batches:
            # counted inside each file's transaction: db.count() before and after would also count what
            # a concurrent importer added in between (and print negative "already present" numbers)
            _, inserted = db.add_many_counted(ms)
            new += inserted
            print(f"{f}: {len(ms)} records, {inserted} new")
        if args.compact:
            db.compact()
    print(f"{new} new, {sum(len(ms) for _, ms in batches) - new} already present -> {db.path}")
    return 0


def add_export(p) -> None:
    p.add_argument("--format", choices=("jsonl", "json"), default="jsonl")
    p.add_argument("--device", metavar="KIND", help="only this device kind (h100-sxm, h200, ...)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    _op_filter(p)
    _common(p)


def run_export(args) -> int:
    with _open(args, readonly=True) as db:
        rows = [m.to_dict() for m in db.measurements(device_kind=args.device, op=_op(args))]
    if args.format == "jsonl":
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    else:
        text = json.dumps(rows, indent=1, sort_keys=True) + "\n"
    if args.output:
        from .._atomic import atomic_write
        try:
            atomic_write(args.output, text.encode())
        except OSError as e:
            raise CutegenError(f"--output: cannot write {args.output}: {e.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0


def add_stats(p) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable")
    _op_filter(p)
    _common(p)


def stats(measurements) -> dict:
    """Per device kind: records, benchmark records, validated, problems, configurations, backends, date range."""
    by = defaultdict(list)
    for m in measurements:
        by[m.device_kind].append(m)
    out = {}
    for kind, ms in sorted(by.items()):
        dates = sorted(m.measured_at[:10] for m in ms)
        out[kind] = {"records": len(ms), "benchmarks": sum(m.is_benchmark for m in ms),
                     "validated": sum(m.validated for m in ms),
                     "problems": len({m.problem for m in ms}), "configurations": len({m.config for m in ms}),
                     "backends": dict(sorted(_count(m.backend for m in ms).items())),
                     "devices": sorted({m.device_name for m in ms}), "first": dates[0], "last": dates[-1]}
    return out


def _count(xs) -> dict:
    c: dict = defaultdict(int)
    for x in xs:
        c[x] += 1
    return c


def run_stats(args) -> int:
    with _open(args, readonly=True) as db:
        s = stats(db.measurements(op=_op(args)))
        where = f"{db.path}" + (f" + seed {db.seed}" if db.seed else "")
    if args.json:
        print(json.dumps(s, indent=1, sort_keys=True))
        return 0
    print(f"results: {where}")
    head = ("device kind", "records", "benchmarks", "validated", "problems", "configs", "dates", "backends")
    rows = [(kind, r["records"], r["benchmarks"], r["validated"], r["problems"], r["configurations"],
             f"{r['first']}..{r['last']}", ", ".join(f"{b} {n}" for b, n in r["backends"].items()))
            for kind, r in s.items()]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for line in (head, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    if not s:
        print("no records")
    return 0


def add_list(p) -> None:
    p.add_argument("--device", metavar="KIND", help="only this device kind (h100-sxm, h200, ...)")
    p.add_argument("--problem", metavar="TEXT", help="only problems whose name contains TEXT")
    p.add_argument("--benchmarks", action="store_true", help="only benchmark timings (no validation runs)")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of the table")
    _op_filter(p)
    _common(p)


def list_rows(measurements, problem_text: str | None = None, benchmarks: bool = False) -> list[dict]:
    """The records as rows of the listing: newest first, then by problem."""
    rows = []
    for m in measurements:
        name = getattr(m.problem, "name", "")
        if (problem_text and problem_text not in name) or (benchmarks and not m.is_benchmark):
            continue
        peers = m.peers_us or ({"cublas": m.cublas_us} if m.cublas_us else {})
        rows.append({"op": m.op, "problem": name, "backend": m.backend, "kernel": m.kernel_hash,
                     "device_kind": m.device_kind, "median_us": round(m.median_us, 3), "validated": m.validated,
                     "peers_us": {k: round(v, 3) for k, v in peers.items()}, "measured_at": m.measured_at,
                     "source": m.source})
    rows.sort(key=lambda r: (r["measured_at"], r["op"], r["problem"]), reverse=True)
    return rows


def run_list(args) -> int:
    with _open(args, readonly=True) as db:
        rows = list_rows(db.measurements(device_kind=args.device, op=_op(args)), args.problem, args.benchmarks)
    if args.json:
        sys.stdout.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        return 0
    head = ("op", "problem", "backend", "kernel", "device", "median us", "ok", "peers (us)", "measured")
    table = [(r["op"], r["problem"], r["backend"], r["kernel"], r["device_kind"], f"{r['median_us']:.1f}",
              "yes" if r["validated"] else "no", " ".join(f"{k} {v:.1f}" for k, v in r["peers_us"].items()),
              r["measured_at"][:16]) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
    for line in (head, *table):
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    print(f"{len(rows)} records" + (f" of {args.op}" if args.op else ""))
    return 0


SUBCOMMANDS = {
    "import": ("load GPU result files (bench, calibration, DSL comparison, validate, exported JSONL)", add_import,
               run_import),
    "export": ("write every record as JSON lines (or one JSON list)", add_export, run_export),
    "stats": ("records per device kind, problems, configurations, date range", add_stats, run_stats),
    "list": ("one line per record (any operation): problem, backend, kernel, time, peers; --op filters",
             add_list, run_list),
}
