"""ResultsDB: every measurement cutegen has seen, in one SQLite file, plus a read-only seed copy.

Writes are one ``BEGIN IMMEDIATE`` transaction each (``add_many``: one for the lot) in WAL mode with a
busy timeout, so concurrent writers queue instead of failing and a killed writer leaves either all or
none of its transaction. Queries read the user's database first, then the seed committed in the
repository (``bench/results/seed.sqlite``); a record present in both is returned once.
"""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Iterable, Iterator

from ..core import registry
from ..core.op import config_hash, config_json
from ..errors import CutegenError
from ..problem import GemmProblem
from .measurement import Measurement, problem_key
from .schema import SCHEMA_VERSION, migrate

ENV_PATH = "CUTEGEN_RESULTS_DB"
BUSY_TIMEOUT_MS = 60_000
# The seed lives in the repository next to the GPU results it was imported from.
REPO_SEED = Path(__file__).resolve().parents[2] / "bench" / "results" / "seed.sqlite"

_COLUMNS = ("record_key", "problem_id", "config_id", "kernel_hash", "backend", "device_name", "device_kind",
            "sm_count", "sm_clock_mhz", "driver", "cuda", "cutlass", "cutegen", "timing_method", "times_us",
            "median_us", "validated", "max_rel_error", "cublas_us", "source", "measured_at", "launch_plan", "peers_us")
_SELECT = ("SELECT m.*, p.key AS problem_json, c.json AS config_json FROM measurements m "
           "JOIN problems p ON p.id = m.problem_id JOIN configs c ON c.id = m.config_id")


def default_path() -> Path:
    """``$CUTEGEN_RESULTS_DB``, else ``<user cache dir>/cutegen/results.sqlite`` (platformdirs)."""
    env = os.environ.get(ENV_PATH)
    if env:
        return Path(env).expanduser()
    import platformdirs
    return Path(platformdirs.user_cache_dir("cutegen", appauthor=False)) / "results.sqlite"


def _row(conn: sqlite3.Connection, m: Measurement) -> tuple:
    """The measurement's row, inserting its problem and configuration first where they are new."""
    key = problem_key(m.problem)
    cols = registry.db_columns(m.problem)       # the problem's operation fills the searchable columns
    conn.execute("INSERT OR IGNORE INTO problems (key, kernel_class, m, n, k, batch, op) VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (key, cols["kernel_class"], cols["m"], cols["n"], cols["k"], cols["batch"], m.op))
    pid = conn.execute("SELECT id FROM problems WHERE key = ?", (key,)).fetchone()[0]
    chash = config_hash(m.config)
    conn.execute("INSERT OR IGNORE INTO configs (hash, json) VALUES (?, ?)", (chash, config_json(m.config)))
    cid = conn.execute("SELECT id FROM configs WHERE hash = ?", (chash,)).fetchone()[0]
    return (m.record_key, pid, cid, m.kernel_hash, m.backend, m.device_name, m.device_kind, m.sm_count,
            m.sm_clock_mhz, m.driver, m.cuda, m.cutlass, m.cutegen, m.timing_method,
            json.dumps(list(m.times_us), separators=(",", ":")), m.median_us, int(m.validated), m.max_rel_error,
            m.cublas_us, m.source, m.measured_at,
            json.dumps(m.launch_plan, sort_keys=True, separators=(",", ":")) if m.launch_plan is not None else None,
            json.dumps(m.peers_us, sort_keys=True, separators=(",", ":")) if m.peers_us is not None else None)


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})"))


def _measurement(r: sqlite3.Row) -> Measurement:
    problem = registry.problem_from_dict(json.loads(r["problem_json"]))     # no "op" in the key: GEMM
    return Measurement(
        problem=problem,
        config=registry.config_from_dict(registry.operation_of(problem), json.loads(r["config_json"])),
        kernel_hash=r["kernel_hash"], backend=r["backend"], device_name=r["device_name"],
        device_kind=r["device_kind"], sm_count=r["sm_count"], sm_clock_mhz=r["sm_clock_mhz"], driver=r["driver"],
        cuda=r["cuda"], cutlass=r["cutlass"], cutegen=r["cutegen"], timing_method=r["timing_method"],
        times_us=tuple(json.loads(r["times_us"])), median_us=r["median_us"], validated=bool(r["validated"]),
        max_rel_error=r["max_rel_error"], cublas_us=r["cublas_us"], source=r["source"],
        measured_at=r["measured_at"],
        # a version-1 file (the committed seed until it is rebuilt) has no such column: no plan was kept
        launch_plan=json.loads(r["launch_plan"]) if "launch_plan" in r.keys() and r["launch_plan"] else None,
        peers_us=json.loads(r["peers_us"]) if "peers_us" in r.keys() and r["peers_us"] else None)


# Versions a read-only connection reads as they are: every migration since only adds nullable columns that
# _measurement reads as absent (a read-only file cannot be migrated, and the committed seed must stay readable).
READABLE_VERSIONS = (1, 2, 3)


def _open_readonly(path: Path, what: str, flags: str, remedy: str) -> sqlite3.Connection:
    """A read-only connection to an existing database of a version it reads (``flags``: URI extras)."""
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro{flags}", uri=True)
        conn.row_factory = sqlite3.Row
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as e:
        raise CutegenError(f"{what} {path}: {e}") from None
    if version not in READABLE_VERSIONS:
        readable = " or ".join(map(str, READABLE_VERSIONS))
        raise CutegenError(f"{what} {path}: schema {version}, this cutegen reads {readable} ({remedy})")
    return conn


class ResultsDB:
    """The user's results database (created on first use) merged with the repository's read-only seed.

    ``seed``: path of a read-only database merged into queries; the default is the repository's
    ``bench/results/seed.sqlite`` when it exists; ``None`` merges nothing. A seed that is the database
    itself is not merged twice.
    """

    def __init__(self, path: str | os.PathLike | None = None, seed: str | os.PathLike | None | bool = True,
                 readonly: bool = False):
        self.path = Path(path).expanduser() if path is not None else default_path()
        # readonly: never create, migrate or switch the journal mode (a file that is read, e.g. the committed
        # seed through `cutegen db stats --db`, keeps its bytes); writes raise
        self.readonly = readonly
        if seed is True:
            seed = REPO_SEED if REPO_SEED.exists() else None
        self.seed = Path(seed) if seed else None
        if self.seed is not None and self.seed.resolve() == self.path.resolve():
            self.seed = None
        self._conn: sqlite3.Connection | None = None
        self._seed_conn: sqlite3.Connection | None = None

    # --- connections -------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self._conn is None and self.readonly:
            if not self.path.exists():         # nothing measured yet: an empty database, nothing created
                conn = sqlite3.connect(":memory:", isolation_level=None)
                conn.row_factory = sqlite3.Row
                migrate(conn)
                self._conn = conn
                return conn
            self._conn = _open_readonly(self.path, "results database", "", "open it once for writing to migrate it")
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                    migrate(conn)
            except (sqlite3.Error, RuntimeError, OSError) as e:
                raise CutegenError(f"results database {self.path}: {e}") from None
            self._conn = conn
        return self._conn

    def _open_seed(self) -> sqlite3.Connection | None:
        if self.seed is None or not self.seed.exists():
            return None
        if self._seed_conn is None:
            # immutable=1: never writes, never takes a lock, works from a read-only checkout.
            self._seed_conn = _open_readonly(self.seed, "results seed", "&immutable=1",
                                             "re-import it with `cutegen db import`")
        return self._seed_conn

    def close(self) -> None:
        for c in (self._conn, self._seed_conn):
            if c is not None:
                c.close()
        self._conn = self._seed_conn = None

    def __enter__(self) -> "ResultsDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writes --------------------------------------------------------------------------
    def add(self, m: Measurement) -> int:
        """Store one measurement; returns its row id (the existing row's id when already stored)."""
        return self.add_many([m])[0]

    def add_many(self, ms: Iterable[Measurement]) -> list[int]:
        """Store measurements in one transaction: all of them land or none does. Idempotent."""
        return self.add_many_counted(ms)[0]

    def add_many_counted(self, ms: Iterable[Measurement]) -> tuple[list[int], int]:
        """``add_many``, and how many of the measurements were new: counted inside the transaction (the
        rows its inserts changed), so a concurrent writer cannot make the count wrong."""
        ms = list(ms)
        inserted = 0
        if self.readonly:
            raise CutegenError(f"results database {self.path} was opened read-only")
        conn = self._open()
        sql = (f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
               "ON CONFLICT(record_key) DO NOTHING")
        ids: list[int] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:       # still locked after the busy timeout, read-only file, full disk...
            raise CutegenError(f"results database {self.path}: {e}") from None
        try:
            for m in ms:
                row = _row(conn, m)
                inserted += conn.execute(sql, row).rowcount
                ids.append(conn.execute("SELECT id FROM measurements WHERE record_key = ?", (row[0],)).fetchone()[0])
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            conn.execute("ROLLBACK")
            raise CutegenError(f"results database {self.path}: {e}") from None
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return ids, inserted

    def compact(self) -> None:
        """Make the file self-contained and small (rollback journal, vacuumed): how the seed is committed.

        The next writer that opens it through ResultsDB switches it back to WAL.
        """
        conn = self._open()
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("VACUUM")
        self.close()

    # --- reads ---------------------------------------------------------------------------
    def _query(self, where: str, args: tuple, op: str | None = None) -> Iterator[Measurement]:
        seen: set[str] = set()
        found: list[tuple[str, Measurement]] = []
        for conn in (self._open(), self._open_seed()):
            if conn is None:
                continue
            conn_where, conn_args = where, args
            if op is not None:
                if _has_column(conn, "problems", "op"):
                    conn_where = f"{where} AND p.op = ?" if where else "WHERE p.op = ?"
                    conn_args = (*args, op)
                elif op != registry.DEFAULT_OP:
                    continue          # a file from before operations were recorded holds GEMMs only
            for r in conn.execute(f"{_SELECT} {conn_where} ORDER BY m.id", conn_args):
                if r["record_key"] not in seen:
                    seen.add(r["record_key"])
                    found.append((r["record_key"], _measurement(r)))
        # A run imported before plans were kept and again since (a user's cache next to the rebuilt seed) is
        # one measurement under two keys: the copy that knows its plan stands for both.
        planned = {m.planless_key for _, m in found if m.launch_plan is not None}
        yield from (m for key, m in found if m.launch_plan is not None or key not in planned)

    def measurements(self, device_kind: str | None = None, problem: GemmProblem | None = None,
                     op: str | None = None) -> list[Measurement]:
        """Every stored measurement, optionally of one device kind, one exact problem and/or one operation
        (``op``: "gemm", "attention", ...; a file of schema 1 or 2 holds GEMMs only)."""
        conds, args = [], []
        if device_kind is not None:
            conds.append("m.device_kind = ?")
            args.append(device_kind)
        if problem is not None:
            conds.append("p.key = ?")
            args.append(problem_key(problem))
        where = ("WHERE " + " AND ".join(conds)) if conds else ""
        return list(self._query(where, tuple(args), op=op))

    def best(self, problem: GemmProblem, device_kind: str) -> Measurement | None:
        """The fastest validated benchmark of exactly this problem on this device kind."""
        ms = [m for m in self.measurements(device_kind, problem) if m.validated and m.is_benchmark]
        return min(ms, key=lambda m: m.median_us) if ms else None

    def count(self) -> int:
        return sum(1 for _ in self._query("", ()))

    def _raw(self, sql: str, args: tuple = ()) -> list[tuple]:
        """Rows of ``sql`` from the user's database and the seed, without building measurements (cheap)."""
        rows: list[tuple] = []
        for conn in (self._open(), self._open_seed()):
            if conn is not None:
                try:
                    rows += [tuple(r) for r in conn.execute(sql, args)]
                except sqlite3.Error as e:
                    raise CutegenError(f"results database {self.path}: {e}") from None
        return rows

    def _raw_of_op(self, columns: str, where: str, args: tuple, op: str | None) -> list[tuple]:
        """``SELECT columns FROM measurements m [WHERE where]`` over both files, of one operation (None: any); a file
        of schema 1 or 2 holds GEMMs only."""
        rows: list[tuple] = []
        for conn in (self._open(), self._open_seed()):
            if conn is None:
                continue
            conds, conn_args, join = ([where] if where else []), tuple(args), ""
            if op is not None:
                if _has_column(conn, "problems", "op"):
                    join = " JOIN problems p ON p.id = m.problem_id"
                    conds.append("p.op = ?")
                    conn_args = (*conn_args, op)
                elif op != registry.DEFAULT_OP:
                    continue
            sql = f"SELECT {columns} FROM measurements m{join}" + (f" WHERE {' AND '.join(conds)}" if conds else "")
            try:
                rows += [tuple(r) for r in conn.execute(sql, conn_args)]
            except sqlite3.Error as e:
                raise CutegenError(f"results database {self.path}: {e}") from None
        return rows

    def holds_kind(self, device_kind: str, op: str | None = None) -> bool:
        """Whether any measurement of ``device_kind`` (of operation ``op``; None: any) is stored (one indexed query
        per file, no decoding)."""
        return bool(self._raw_of_op("1", "m.device_kind = ?", (device_kind,), op))

    def fingerprint(self, op: str | None = None) -> str:
        """A digest of what ``measurements(op=op)`` returns: the sorted record keys of both files (a record key is
        a digest of the whole record). Equal fingerprints, equal measurements; what caches of models fitted
        on the database are keyed by."""
        import hashlib

        keys = sorted({r[0] for r in self._raw_of_op("m.record_key", "", (), op)})
        return hashlib.sha256("\n".join(keys).encode()).hexdigest()
