"""The database schema and its migrations, versioned by ``PRAGMA user_version``.

Migration N takes a database at version N-1 to version N inside the caller's transaction. Add a
migration to change the schema; never edit one that has shipped (seed copies and users' caches hold it).
"""
from __future__ import annotations

import sqlite3

MIGRATIONS: tuple[str, ...] = (
    # 1: one row per measurement. Problems and configurations are stored once each as canonical JSON (so
    # nothing a record says is lost) and referenced by id; searchable facts get columns.
    """
    CREATE TABLE problems (
        id           INTEGER PRIMARY KEY,
        key          TEXT NOT NULL UNIQUE,          -- canonical JSON of GemmProblem.to_dict()
        kernel_class TEXT NOT NULL,
        m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, batch INTEGER NOT NULL
    );
    CREATE TABLE configs (
        id   INTEGER PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,                   -- KernelConfig.hash
        json TEXT NOT NULL                           -- KernelConfig.to_json()
    );
    CREATE TABLE measurements (
        id            INTEGER PRIMARY KEY,
        record_key    TEXT NOT NULL UNIQUE,
        problem_id    INTEGER NOT NULL REFERENCES problems(id),
        config_id     INTEGER NOT NULL REFERENCES configs(id),
        kernel_hash   TEXT NOT NULL,
        backend       TEXT NOT NULL,
        device_name   TEXT NOT NULL,
        device_kind   TEXT NOT NULL,
        sm_count      INTEGER,
        sm_clock_mhz  REAL,
        driver        TEXT,
        cuda          TEXT,
        cutlass       TEXT,
        cutegen       TEXT,
        timing_method TEXT NOT NULL,
        times_us      TEXT NOT NULL,                 -- JSON list
        median_us     REAL NOT NULL CHECK (median_us > 0),
        validated     INTEGER NOT NULL,
        max_rel_error REAL,
        cublas_us     REAL,
        source        TEXT NOT NULL,
        measured_at   TEXT NOT NULL
    );
    CREATE INDEX measurements_kind_problem ON measurements (device_kind, problem_id);
    """,
    # 2: the launch plan a stream-K kernel ran under (canonical JSON of LaunchPlan.to_dict(); NULL: the kernel's
    # default or no plan). Records of version 1 keep NULL: none of them stored one.
    """
    ALTER TABLE measurements ADD COLUMN launch_plan TEXT
    """,
    # 3: measurements of any operation. problems.op names the operation whose problem the key is (the records of
    # versions 1 and 2 are GEMMs: the default fills them); measurements.peers_us holds the in-process peers timed
    # beside the kernel (canonical JSON {peer: median microseconds}; NULL: none recorded, as in every older record).
    """
    ALTER TABLE problems ADD COLUMN op TEXT NOT NULL DEFAULT 'gemm';
    CREATE INDEX problems_op ON problems (op);
    ALTER TABLE measurements ADD COLUMN peers_us TEXT
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring ``conn`` (in autocommit mode) to SCHEMA_VERSION; returns the version found before."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise RuntimeError(f"results database schema {found} is newer than this cutegen ({SCHEMA_VERSION})")
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS[version - 1].split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
        return found
    except BaseException:
        conn.execute("ROLLBACK")
        raise
