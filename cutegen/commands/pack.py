"""cutegen pack: a set of GEMM shapes in, a dispatching kernel library out (CMake package + PyTorch op).

The command writes source only; the pack's own CMake project compiles its kernels in parallel
(``cmake --build B -j N``), on whatever machine builds it. The searches (one per sampled shape and one
per class's fallback) are the command's parallel work: ``--executor dask`` runs them as CPU tasks on a
Dask cluster; selection, rendering and writing stay here, and the files are byte-identical either way.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._fields import finite_float
from ..errors import CutegenError, FieldError

HELP = "generate a kernel pack for a shapes file: selection, dispatch, plan API, CMake package, PyTorch op"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..packs.targets import kinds
    p.add_argument("shapes", help="shapes TOML ([[shape]] tables; M, N, K as numbers, lists or {min, max})")
    p.add_argument("-o", "--out", required=True, help="output folder; one pack per target in OUT/<target>/")
    p.add_argument("--max-kernels", type=int, default=16, help="at most this many kernels per pack (default 16)")
    p.add_argument("--tolerance", type=finite_float, default=0.03,
                   help="a shape is covered within this fraction of its best known time (default 0.03)")
    p.add_argument("--target", action="append", choices=kinds(), metavar="KIND",
                   help=f"device kind, repeatable ({', '.join(kinds())}; default: the GPU present, else "
                        "$CUTEGEN_DEVICE, else h100-sxm); its SM count, bandwidth and peak price the candidates, as "
                        "`cutegen search --device`")
    p.add_argument("--name", default="cutegen_pack", help="library, CMake package and target name")
    p.add_argument("--db", metavar="PATH",
                   help="use measured times from this results database ('default': cutegen.results' default "
                        "path). Without it: the default database merged with the committed seed, where it holds "
                        "measurements of the target kind (the learned ranking, as `cutegen search`), else the cost "
                        "model's predictions")
    p.add_argument("--prior", action="store_true",
                   help="select by the analytic prior's predictions alone, whatever the database holds")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every file that would change")
    p.add_argument("--wave-tiles", action=argparse.BooleanOptionalAction, default=None,
                   help="search tiles of any N a multiple of 8 up to 256 with their full-width WGMMA (default: on for "
                        "a new pack, unless $CUTEGEN_WAVE_TILES=0; with --check, as the pack's pack.json states, "
                        "absent meaning off). --tune's candidate plans and selections from measurements search without")
    p.add_argument("--measured", metavar="RESULTS_JSON",
                   help="bench/gpu_pack.py's results for this very pack (one target): measured shapes run on their "
                        "measured-fastest kernel, and each (N, K) with measurements dispatches M by measured segments "
                        "whose boundaries are where two kernels' measured curves cross; COVERAGE.md adds "
                        "torch.matmul's time. No GPU: the measurements are read from the file")
    p.add_argument("--no-vendor", dest="vendor", action="store_false",
                   help="route nothing to cuBLASLt. By default (the vendor tactic), with --measured, the M segments and "
                        "set shapes where no generated kernel came within --tolerance of torch.matmul's measured time "
                        "(cuBLAS) run on cuBLASLt through the same plan API and PyTorch op, and the CMake package links "
                        "CUDA::cublasLt; without measurements nothing is routed to it (never on prediction alone)")
    p.add_argument("--vendor-algorithms", metavar="JSON",
                   help="cuBLASLt's algorithms timed on the GPU (bench/gpu_vendor_algos.sh: the heuristic's first 8 at "
                        "each measured shape, with torch.matmul): each vendor segment and shape runs the index of that "
                        "list measured fastest (the heuristic's first unless another is more than 2%% faster); on "
                        "another device or cuBLASLt version the pack runs the first, and cutegen_pack_explain says so")
    p.add_argument("--summary-only", action="store_true",
                   help="write (or with --check compare) only pack.json and COVERAGE.md, the record of what was "
                        "selected and why; the sources are regenerated from the shapes file by the same command "
                        "without this flag. Other files in OUT/<target>/ are left alone")
    g = p.add_argument_group("measured selection (--tune; cutegen/packs/tune.py)")
    g.add_argument("--tune", action="store_true",
                   help="select by measurement. With --plan-only: search and render the candidates (the search's "
                        "top k per search, nvMMH's pick per sampled shape, the CUTLASS default; de-duplicated, capped) "
                        "as a candidate pack plus tune.json in OUT/<target>/, for bench/gpu_pack.sh to build and time "
                        "on the GPU into a results database. Without it: select from that database (--db; no GPU): "
                        "the cover and each (N, K)'s M segments come from the measured times, boundaries where two "
                        "kernels' measured curves cross")
    g.add_argument("--records", metavar="JSONL[.gz]",
                   help="with --tune: select from these measurement records (JSON lines, as --export-records writes "
                        "them) instead of a results database")
    g.add_argument("--export-records", metavar="JSONL[.gz]",
                   help="with --tune: also write the records the selection read (every pack --tune record of the "
                        "set's shapes on the target), so that the selection can be checked without the database")
    g.add_argument("--exclude-measured", metavar="DB|JSONL[.gz]",
                   help="with --tune --plan-only: leave out the candidates this database (or records file) already "
                        "measured at the set's shapes; the cap takes the next ones (a second tuning round whose "
                        "records join the first's)")
    g.add_argument("--plan-only", action="store_true", help="with --tune: make the candidates, then stop (CPU half)")
    g.add_argument("--off-sample", metavar="M,M,...",
                   help="with --tune: M values timed at every (N, K) besides the sampled ones, fixed before tuning "
                        "(default: 3,12,24,48,96,100,200,300,700,1500,3000,6000; those inside each range and not "
                        "sampled)")
    g.add_argument("--tune-top-k", type=int, default=3, help="with --tune: the search's top k per search (default 3)")
    g.add_argument("--tune-max-candidates", type=int, default=56,
                   help="with --tune: at most this many candidates (default 56: about 2.5 minutes of 16 nvcc jobs on "
                        "the H200 machine); the rest are left out with a warning")
    g.add_argument("--no-nvmmh", action="store_true", help="with --tune: leave nvMMH's picks out")
    g.add_argument("--no-default", action="store_true", help="with --tune: leave the CUTLASS default out")
    from .. import executor
    executor.add_arguments(p)  # dask: the per-shape searches run on the cluster's workers


def _open_db(spec: str | None):
    if spec is None:
        return None
    try:
        from ..results import ResultsDB
    except ImportError:
        raise CutegenError("--db: cutegen.results (the results database, issue 11) is not installed here") from None
    return ResultsDB(None if spec == "default" else spec)


def _records_or_db(spec: str | None):
    """A results database, or the records of a JSON-lines file (.jsonl, .jsonl.gz) in one."""
    if spec is None:
        return None
    from ..packs import tune as pack_tune
    if spec.endswith((".jsonl", ".jsonl.gz")):
        return pack_tune.read_records(spec)
    if not Path(spec).is_file():
        raise CutegenError(f"--exclude-measured: {spec}: no such file")
    return _open_db(spec)


def run(args: argparse.Namespace) -> int:
    from .. import executor as X
    if args.max_kernels < 1:
        raise FieldError("--max-kernels", f"expected a positive integer, got {args.max_kernels}")
    from ..packs.select import one_blas_thread
    with X.from_args(args) as ex, one_blas_thread():      # the whole command: small products (select.py)
        status = _run(args, None if ex.name == "local" else ex)
        if ex.name != "local":
            print(ex.summary.text(), file=sys.stderr)
    return status


def _readable_text(path: str) -> None:
    """A one-line error for a shapes file that cannot be read as UTF-8 text (before any search runs)."""
    try:
        Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise CutegenError(f"{path}: no such shapes file") from None
    except OSError as e:
        raise CutegenError(f"{path}: cannot read the shapes file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise FieldError(path, f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None


def _wave_tiles(args: argparse.Namespace, root: Path) -> bool:
    """The searches' wave-tiles option for the pack at ``root``: --wave-tiles / --no-wave-tiles, else with --check
    what the pack's pack.json states (absent: off, every pack made before the option), else a new search's (on)."""
    from ..search import ranking
    if args.wave_tiles is not None:
        return bool(args.wave_tiles)
    stated = root / "pack.json"
    if args.check and stated.is_file():
        try:
            wave = json.loads(stated.read_text()).get("wave_tiles", False)
        except (OSError, ValueError) as e:
            raise CutegenError(f"{stated}: unreadable ({e})") from None
        if not isinstance(wave, bool):
            raise FieldError(f"{stated}: wave_tiles", f"expected true or false, got {wave!r}")
        return wave
    return ranking.wave_tiles_for_new_searches()


def _run(args: argparse.Namespace, ex) -> int:
    from .. import packs
    from ..search import ranking
    _readable_text(args.shapes)
    from ..packs import grouped as pack_grouped
    pack_grouped.load(args.shapes)      # a bad [[moe]] table fails here, in one line, before any search
    if Path(args.out).exists() and not Path(args.out).is_dir():    # before the searches, not after
        raise CutegenError(f"-o/--out: {args.out} exists and is not a directory")
    if args.prior and args.db:
        raise FieldError("--prior", "cannot be combined with --db (--db ranks by its measurements)")
    if args.plan_only and not args.tune:
        raise FieldError("--plan-only", "needs --tune")
    if args.tune and args.measured:
        raise FieldError("--measured", "cannot be combined with --tune (--tune reads the results database)")
    if args.tune and args.summary_only and args.plan_only:
        raise FieldError("--summary-only", "a --plan-only candidate pack is built on the GPU: it needs its sources")
    if args.tune_max_candidates < 1:
        raise FieldError("--tune-max-candidates", f"expected a positive integer, got {args.tune_max_candidates}")
    from ..packs import tune as pack_tune
    off_sample = pack_tune.parse_off_sample(args.off_sample)
    targets = list(dict.fromkeys(args.target or [ranking.resolve_kind(None)[0]]))
    if (args.records or args.export_records) and (not args.tune or args.plan_only):
        raise FieldError("--records" if args.records else "--export-records", "needs --tune (without --plan-only)")
    if args.vendor_algorithms and (not args.vendor or args.plan_only or not (args.tune or args.measured)):
        raise FieldError("--vendor-algorithms", "needs a pack with the vendor tactic and measurements (--measured, or "
                         "--tune without --plan-only; not --no-vendor)")
    if args.vendor_algorithms:                      # a bad file fails now, in one line, not after the selection
        from ..packs import vendor as pack_vendor
        pack_vendor.load_algorithms(args.vendor_algorithms)
    if args.exclude_measured and not (args.tune and args.plan_only):
        raise FieldError("--exclude-measured", "needs --tune --plan-only")
    if args.records and args.db:
        raise FieldError("--records", "give a results database (--db) or records (--records), not both")
    if args.tune and not args.plan_only and not args.records:
        args.db = args.db or "default"
    db = pack_tune.read_records(args.records) if args.records else _open_db(args.db)
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    stale_total = 0
    if db is None and not args.prior:
        # a bad or oversized shapes file fails here, in one line, before the ranking fits or says anything
        from ..packs import shapes as pack_shapes, targets as pack_targets
        for kind in targets:
            packs.check_size(args.shapes, pack_shapes.expand(pack_shapes.load(args.shapes),
                                                             pack_targets.target(kind).sms))
    for kind in targets:
        used = db
        if db is None and not args.prior:
            # the default ranking (cutegen.search.ranking): the kind's measurements where the database has any
            rk = ranking.choose(device=kind, kind_from="--target")
            say(rk.describe())
            used = ranking.open_db() if rk.method != "prior" else None
        if args.tune and args.plan_only:
            predictor = None
            if used is not None and not args.prior:
                from ..search.learned import cache
                predictor = cache.predictor(kind, used)
            files = packs.make_tune_plan(args.shapes, kind, name=args.name, say=say, executor=ex, progress=True,
                                         off_sample=off_sample, top_k=args.tune_top_k, cap=args.tune_max_candidates,
                                         with_nvmmh=not args.no_nvmmh, with_default=not args.no_default,
                                         predictor=predictor, exclude_db=_records_or_db(args.exclude_measured))
        elif args.tune:
            files = packs.make_tuned_pack(args.shapes, kind, db, max_kernels=args.max_kernels,
                                          tolerance=args.tolerance, name=args.name, say=say, executor=ex,
                                          off_sample=off_sample, vendor=args.vendor,
                                          vendor_algorithms=args.vendor_algorithms)
            if args.export_records:
                from ..packs import targets as pack_targets
                t = pack_targets.target(kind)
                _, pts, off = pack_tune.timed_shapes(args.shapes, t, off_sample)
                recs = pack_tune.records_of(db, t, pts + off)
                pack_tune.write_records(args.export_records, recs)
                say(f"  wrote {args.export_records}: {len(recs)} records")
        else:
            files = packs.make_pack(args.shapes, kind, max_kernels=args.max_kernels, tolerance=args.tolerance,
                                    name=args.name, db=used, say=say, executor=ex, progress=True,
                                    measured=args.measured, vendor=args.vendor,
                                    vendor_algorithms=args.vendor_algorithms,
                                    wave_tiles=_wave_tiles(args, Path(args.out) / kind))
        root = Path(args.out) / kind
        prune = not args.summary_only
        if args.summary_only:
            files = packs.summary(files)
        if args.check:
            stale = packs.differences(root, files, prune)
            stale_total += len(stale)
            for rel in stale:
                print(f"would change: {root / rel}")
            if not stale:
                print(f"{root}: up to date ({len(files)} files)")
            continue
        changed = packs.write(root, files, prune)
        print(f"{root}: {len(files)} files, {len(changed)} changed")
        print((root / "COVERAGE.md").read_text().split("\n| shape")[0].strip())
    return 1 if stale_total else 0
