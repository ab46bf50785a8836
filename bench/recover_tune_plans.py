"""Add the launch plan to `cutegen tune` records written before tune recorded it.

    python bench/recover_tune_plans.py OUT_DIR [RECORDS.jsonl ...]

Until records kept their plan, tune timed every candidate through ``cutegen_gemm`` (no plan argument: the ABI's
default, CUTLASS's heuristic) and its records said nothing of it. The candidates' manifests in tune's plan
directories (``OUT_DIR/<plan dir>/<problem>/<candidate>/manifest.json``) say which plan each kernel was rendered
with. A stream-K record whose problem, candidate and kernel hash match exactly one such manifest gets that plan;
a record no manifest matches keeps none (it is costed as before). Other lines are left byte for byte; running
it again changes nothing. Default records: ``bench/results/*tune*records.jsonl``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def manifests(out: Path) -> dict[tuple[str, str, str], set[str]]:
    """(problem, candidate, kernel hash) -> the canonical plans its manifests record."""
    found: dict[tuple[str, str, str], set[str]] = {}
    for m in sorted(out.glob("*/*/*/manifest.json")):
        d = json.loads(m.read_text())
        if d.get("launch_plan"):
            key = (m.parent.parent.name, m.parent.name, d.get("hash", ""))
            found.setdefault(key, set()).add(json.dumps(d["launch_plan"], sort_keys=True))
    return found


def recover(path: Path, plans: dict) -> tuple[int, int, int]:
    """Rewrite ``path`` with the plans found; (stream-K records, plans added, plans already there)."""
    from cutegen._atomic import atomic_write

    lines, streamk, added, had = [], 0, 0, 0
    for line in path.read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        # a DSL twin takes no plan (the C ABI's cutegen_gemm_plan is the C++ kernel's)
        if r is None or r["config"].get("tile_scheduler") != "stream_k" or r.get("backend") == "dsl":
            lines.append(line)
            continue
        streamk += 1
        if r.get("launch_plan"):
            had += 1
            lines.append(line)
            continue
        problem, candidate = r["source"].split("#", 1)[1].rsplit("/", 1)
        hit = plans.get((problem, candidate, r["kernel_hash"]), set())
        if len(hit) == 1:
            r["launch_plan"] = json.loads(next(iter(hit)))
            line = json.dumps(r, sort_keys=True)
            added += 1
        lines.append(line)
    atomic_write(path, ("\n".join(lines) + "\n").encode())
    return streamk, added, had


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    plans = manifests(Path(argv[0]))
    files = [Path(f) for f in argv[1:]] or sorted((ROOT / "bench" / "results").glob("*tune*records.jsonl"))
    for f in files:
        streamk, added, had = recover(f, plans)
        print(f"{f.name}: {streamk} stream-K records, {added} plans recovered, {had} had one, "
              f"{streamk - added - had} left without")
    return 0


if __name__ == "__main__":
    sys.exit(main())
