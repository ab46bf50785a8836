"""Inputs that cannot hurt (issue 23, part 3): names confined to the output directory, outputs written
whole under a lock with nothing a kill leaves for good, one-line errors for malformed input (with one
test running every subcommand over a corpus of it), costs that rank any problem the model accepts,
finite numbers, meaningful alignments, regen --check judging the --out tree, db import's counts."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from cutegen.cli import main
from cutegen.config import KernelConfig
from cutegen.errors import CutegenError, FieldError
from cutegen.problem import GemmProblem

REPO = Path(__file__).resolve().parents[1]
SMALL = GemmProblem(m=256, n=256, k=256)
CFG_A = KernelConfig(tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1), mainloop_schedule="cooperative",
                     epilogue_schedule="tma_warp_specialized_cooperative")
CFG_B = CFG_A.replace(tile_shape=(128, 256, 64))


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Locks, scratch and results in this test's own folders; one toolchain string everywhere."""
    monkeypatch.setenv("CUTEGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTEGEN_RESULTS_DB", str(tmp_path / "results.sqlite"))
    monkeypatch.setattr("cutegen.manifest.nvcc_version", lambda *a: "13.0")
    monkeypatch.setattr("cutegen.manifest.cutlass_version", lambda *a: "4.2.0")


def atomic_directory(*a, **k):
    from cutegen._atomic import atomic_directory as f   # imported late: the module predates the helpers
    return f(*a, **k)


def leftovers(*a, **k):
    from cutegen._atomic import leftovers as f
    return f(*a, **k)


def output_lock(*a, **k):
    from cutegen._atomic import output_lock as f
    return f(*a, **k)


def scratch_directory(*a, **k):
    from cutegen._atomic import scratch_directory as f
    return f(*a, **k)


def remove_dead_scratch(*a, **k):
    from cutegen._atomic import remove_dead_scratch as f
    return f(*a, **k)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``cutegen argv`` in this process; an escaping exception is a
    failure of the test, reported with its traceback."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:   # noqa: BLE001 - the point: nothing may escape main()
        pytest.fail(f"cutegen {' '.join(argv)} raised:\n{traceback.format_exc()}")
    return rc, out.getvalue(), err.getvalue()


def one_line_error(argv: list[str], *needles: str) -> str:
    rc, _, err = run_cli(argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc != 0, f"cutegen {argv}: exit 0"
    assert len(lines) == 1 and "Traceback" not in err, f"cutegen {argv}: stderr {err!r}"
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def kernel(config=CFG_A, problem=SMALL):
    from cutegen.render import render
    return render(problem, config, "cutlass")


# --- path traversal ----------------------------------------------------------------------------------

SUITE_ENTRY = 'm = 256\nn = 256\nk = 256\ndtype = "bf16"\nlayout = "tn"\n'


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs", "a/b", "..", ".hidden", "tab\there", "caf\u00e9", "x" * 201])
def test_suite_names_that_are_not_one_safe_path_component_are_refused(tmp_path, name):
    from cutegen.suites import load_suite
    suite = tmp_path / "s.toml"
    suite.write_text(f"[[problem]]\nname = {json.dumps(name)}\n{SUITE_ENTRY}", encoding="utf-8")
    with pytest.raises(FieldError, match=r"s\.toml:problem\[0\]\.name"):
        load_suite(suite)


def test_suite_names_within_the_character_set_load():
    from cutegen.suites import load_suite
    # every checked-in suite keeps loading (its names are letters, digits, '_', '-', '.')
    for suite in sorted((REPO / "bench").glob("*.toml")):
        text = suite.read_text()
        if "[[problem]]" in text:
            assert load_suite(suite)


def test_tune_plan_only_with_a_traversing_name_writes_nothing_outside(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(f'[[problem]]\nname = "../../escape"\n{SUITE_ENTRY}')
    work = tmp_path / "a" / "b" / "work"
    one_line_error(["tune", "--suite", str(suite), "--plan-only", "--workdir", str(work), "--top-k", "1",
                    "--no-nvmmh", "--no-default", "--device-kind", "h100-sxm", "--quiet"], "name", "../../escape")
    assert not (tmp_path / "a" / "escape").exists() and not (tmp_path / "escape").exists()


def _plan(directory: str, name: str = "p", cand: str = "search1") -> dict:
    return {"schema": "cutegen-tune-plan/1", "top_k": 1, "device_kind": "h100-sxm", "single": False,
            "problems": [{"name": name, "problem": SMALL.to_dict(), "notes": [], "candidates": [
                {"name": cand, "origin": "search", "backend": "cutlass", "config": CFG_A.to_dict(),
                 "directory": directory, "kernel_hash": "0" * 16}]}]}


@pytest.mark.parametrize("directory,name,cand", [("../../x", "p", "search1"), ("/etc", "p", "search1"),
                                                 ("p/search1", "../up", "search1"), ("p/search1", "p", "../c"),
                                                 ("p/link", "p", "search1")])
def test_from_plan_refuses_paths_that_leave_the_plan_directory(tmp_path, directory, name, cand):
    from cutegen.tuning.plan import Plan
    plan_dir = tmp_path / "plan"
    (plan_dir / "p").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", plan_dir / "p" / "link")          # a link out of the plan directory
    (plan_dir / "plan.json").write_text(json.dumps(_plan(directory, name, cand)))
    with pytest.raises(FieldError, match=r"plan\.json\.problems\[0\]"):
        Plan.load(plan_dir)
    one_line_error(["tune", "--from-plan", str(plan_dir), "--quiet"], "plan.json")
    # the same plan with a directory inside it loads
    (plan_dir / "plan.json").write_text(json.dumps(_plan("p/search1")))
    assert Plan.load(plan_dir).problems[0].candidates[0].directory == "p/search1"


# --- whole outputs, one writer at a time, nothing left by a kill ------------------------------------

def test_atomic_directory_swaps_in_whole_and_keeps_files_it_does_not_own(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / "old.txt").write_text("old")
    (d / "build").mkdir()
    (d / "build" / "user.o").write_text("user")
    with atomic_directory(d) as new:
        assert (new / "old.txt").read_text() == "old"         # starts as a copy of what is there
        (new / "old.txt").unlink()
        (new / "a").write_text("A")
        assert not (d / "a").exists()                          # nothing appears before the swap
    assert sorted(p.name for p in d.iterdir()) == ["a", "build"] and (d / "build" / "user.o").read_text() == "user"
    assert leftovers(d) == []
    # an exception inside: the old directory stays as it was, the temporary one goes
    with pytest.raises(RuntimeError):
        with atomic_directory(d) as new:
            (new / "a").write_text("half")
            raise RuntimeError("killed halfway")
    assert (d / "a").read_text() == "A" and leftovers(d) == []


def test_a_second_writer_waits_for_the_first_and_the_result_is_one_kernel_whole(tmp_path):
    d = tmp_path / "k"
    ka, kb = kernel(CFG_A), kernel(CFG_B)
    inside, release, done_b = threading.Event(), threading.Event(), threading.Event()

    def writer_a():  # a first writer stopped between its two files
        with atomic_directory(d) as new:
            (new / "kernel.cu").write_text(ka.files["kernel.cu"])
            inside.set()
            release.wait(10)
            (new / "manifest.json").write_text(ka.files["manifest.json"])

    def writer_b():
        kb.write(d)
        done_b.set()

    ta = threading.Thread(target=writer_a)
    ta.start()
    assert inside.wait(10)
    tb = threading.Thread(target=writer_b)
    tb.start()
    time.sleep(0.5)
    assert not done_b.is_set()                 # held back by the lock, not interleaving its files
    assert not (d / "kernel.cu").exists()      # and nothing of A's half is visible
    release.set()
    ta.join(10)
    tb.join(10)
    assert done_b.is_set()
    man = json.loads((d / "manifest.json").read_text())
    assert man["kernel_hash"] == kb.kernel_hash and (d / "kernel.cu").read_text() == kb.files["kernel.cu"]
    with pytest.raises(CutegenError, match="another cutegen process"):
        with output_lock(d):
            with output_lock(d, timeout=0.2):   # a second holder times out with a one-line error
                pass


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from cutegen._atomic import atomic_directory
with atomic_directory(Path(sys.argv[1])) as new:
    (new / "kernel.cu").write_text("half")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_a_killed_writer_leaves_the_next_write_removes(tmp_path):
    d = tmp_path / "k"
    ka = kernel(CFG_A)
    ka.write(d)
    (d / ".kernel.cu.abcd1234.tmp").write_text("from a killed file-by-file writer")
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(d)], env=os.environ.copy(), cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    left = leftovers(d)
    assert any(p.name.startswith(".k.cutegen-new-") for p in left) and any(p.suffix == ".tmp" for p in left)
    assert (d / "kernel.cu").read_text() == ka.files["kernel.cu"]     # the kill left the old directory whole
    assert ka.write(d) == []                                           # same bytes: nothing changed ...
    assert leftovers(d) == []                                          # ... but the leftovers are gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "k"]


def test_regen_removes_what_a_killed_regen_left(tmp_path, monkeypatch):
    from cutegen import _api
    monkeypatch.setattr(_api, "choose", lambda problem, backend="cutlass", ranking=None: (CFG_A, None, ["fixed"]))
    suite = tmp_path / "s.toml"
    suite.write_text(f'[[problem]]\nname = "a"\n{SUITE_ENTRY}')
    out = tmp_path / "gen"
    assert run_cli(["regen", "--suite", str(suite), "--out", str(out)])[0] == 0
    kdir = out / "sm90a" / SMALL.name
    (kdir / ".manifest.json.zz99yy88.tmp").write_text("x")          # what the old file-by-file regen left
    (out / "sm90a" / f".{SMALL.name}.cutegen-new-abcdefgh").mkdir()  # what a killed swap leaves
    assert leftovers(kdir)
    rc, stdout, _ = run_cli(["regen", "--suite", str(suite), "--out", str(out)])
    assert rc == 0 and leftovers(kdir) == [] and "regen: 0 file(s) written" in stdout


SCRATCH_KILLED = """
import os, signal, sys
from cutegen._atomic import scratch_directory
with scratch_directory("cutegen-build-", root=sys.argv[1]) as d:
    (d / "kernel.o").write_bytes(b"0" * 100000)
    print(d, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_builds_scratch_directory_is_removed_by_the_next_build(tmp_path):
    import cutegen.build as build_mod
    import cutegen._atomic as atomic_mod
    assert build_mod.scratch_directory is atomic_mod.scratch_directory   # Builder._compile works in one
    root = tmp_path / "tmp"
    proc = subprocess.run([sys.executable, "-c", SCRATCH_KILLED, str(root)], capture_output=True, text=True, cwd=REPO)
    dead = Path(proc.stdout.strip())
    assert proc.returncode == -signal.SIGKILL and (dead / "kernel.o").is_file()
    with scratch_directory("cutegen-build-", root=root) as live:
        assert not dead.exists() and not Path(str(dead) + ".lock").exists()
        assert remove_dead_scratch("cutegen-build-", root) == [] and live.is_dir()   # a live one stays
    assert list(root.iterdir()) == []


def test_pack_write_is_whole_or_nothing(tmp_path, monkeypatch):
    from cutegen import packs
    root = tmp_path / "pack"
    old = {"CMakeLists.txt": "old kernels k1\n", "kernels/k1/kernel.cu": "k1\n"}
    packs.write(root, old)
    new = {"CMakeLists.txt": "new kernels k2\n", "kernels/k2/kernel.cu": "k2\n", "pack.json": "{}\n"}
    real = Path.write_bytes
    calls = []

    def dies_on_second(self, data):
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between two files")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        packs.write(root, new)
    monkeypatch.setattr(Path, "write_bytes", real)
    # the CMakeLists.txt still names the kernels that are there
    assert (root / "CMakeLists.txt").read_text() == "old kernels k1\n" and (root / "kernels/k1/kernel.cu").is_file()
    assert leftovers(root) == []
    assert sorted(packs.write(root, new)) == ["CMakeLists.txt", "kernels/k1/kernel.cu", "kernels/k2/kernel.cu",
                                              "pack.json"]
    assert not (root / "kernels" / "k1").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(CutegenError, match="not a directory"):
        packs.write(tmp_path / "file", new)


def test_output_naming_an_existing_file_is_a_one_line_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    one_line_error(["generate", "--no-build", "--m", "256", "--n", "256", "--k", "256", "-o", str(f),
                    "--config", json.dumps(CFG_A.to_dict())], str(f), "not a directory")
    one_line_error(["db", "export", "-o", str(tmp_path)], "--output")
    suite = tmp_path / "s.toml"
    suite.write_text(f'[[problem]]\nname = "a"\n{SUITE_ENTRY}')
    shapes = tmp_path / "shapes.toml"
    shapes.write_text("[[shape]]\nm = 128\nn = 256\nk = 256\n")
    for argv in (["regen", "--suite", str(suite), "--out", str(f)], ["bench", "--suite", str(suite), "--out", str(f)],
                 ["tune", "--suite", str(suite), "-o", str(f), "--device-kind", "h100-sxm", "--quiet"],
                 ["tune", "--suite", str(suite), "--plan-only", "--workdir", str(f), "--quiet"],
                 ["pack", str(shapes), "-o", str(f)], ["validate", str(tmp_path), "--json", str(tmp_path)]):
        one_line_error(argv, str(f) if "--json" not in argv else "--json")
    assert f.read_text() == "x"


# --- one-line errors ---------------------------------------------------------------------------------

def test_non_utf8_input_to_check_and_db_import_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a": 1}\n\xff\xfe\n')
    for argv in (["check", "config", str(bad)], ["check", "config", "--jsonl", str(bad)],
                 ["check", "tensor-map", "--jsonl", str(bad)], ["check", "pipeline", str(bad)],
                 ["db", "import", str(bad)]):
        one_line_error(argv, str(bad), "UTF-8")


@pytest.mark.parametrize("body,needle", [
    ({"schema": "cutegen-bench/1"}, "'device'"),                                           # KeyError
    ({"schema": "cutegen-validate/1", "date": "2026-11-26",
      "kernels": [{"config": {}, "problem": {"m": 1, "n": 1, "k": 1}, "cases": "x"}]}, "AttributeError"),
    ({"rows": [1], "method": 1}, "TypeError"),
    ({"schema": 5}, "not a result file"),
    ({"schema": "cutegen-bench/1", "device": "H100", "date": "2026-11-26",
      "problems": [{"problem": {"m": 1, "n": 1, "k": 1, "beta": float("inf")}}]}, "NaN"),
])
def test_malformed_result_files_are_one_line_errors(tmp_path, body, needle):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(body))       # json writes inf as Infinity: refused like any invalid JSON
    one_line_error(["db", "import", str(f)], str(f), needle if needle != "NaN" else "Infinity")


def test_c_strings_take_any_name():
    import ast
    import re

    from cutegen.render import _cstring
    name = 'caf\u00e9\tx"\\1\u4e2d\n' + "y" * 120
    lit = _cstring(name)
    assert all(32 <= ord(c) < 127 for c in lit.replace("\n    ", ""))          # pure ASCII source
    pieces = re.findall(r'"((?:[^"\\]|\\.)*)"', lit)
    assert b"".join(ast.literal_eval('b"' + p + '"') for p in pieces) == name.encode("utf-8")   # C and Python agree on these escapes


# --- every subcommand over malformed inputs ----------------------------------------------------------

CORPUS = {
    "bad_utf8": b"\xff\xfe\x00not utf-8\n",
    "truncated_json": b'{"problem": {"m": 1',
    "truncated_toml": b'[[problem]]\nname = "a',
    "wrong_types_json": b'{"problem": "x", "config": [1], "schema": 5, "problems": 3, "rows": 1, "method": 2}',
    "missing_fields_json": b"{}",
    "list_json": b"[1, 2]",
    "nan_json": b'{"problem": {"m": 128, "n": 128, "k": 128, "alpha": NaN}, "config": {"tile_shape": [128, 128, 64]}}',
    "huge_json": b'{"problem": {"m": 100000000000000000000000, "n": 1, "k": 1}, "config": {"tile_shape": [128, 128, 64]}}',
    "negative_json": b'{"problem": {"m": -5, "n": 1, "k": 1}, "config": {"tile_shape": [128, -128, 64]}}',
    "wrong_types_toml": b'[[problem]]\nname = "a"\nm = "x"\nn = 1\nk = 1\n',
    "nan_toml": b'[[problem]]\nname = "a"\nm = 128\nn = 128\nk = 128\nalpha = nan\n',
    "huge_toml": b'[[problem]]\nname = "a"\nm = 9223372036854775807\nn = 1\nk = 1\n',
    "negative_toml": b'[[problem]]\nname = "a"\nm = -1\nn = 1\nk = 1\n',
    "traversal_toml": b'[[problem]]\nname = "../../x"\nm = 128\nn = 128\nk = 128\n',
    "shape_toml": b'[[shape]]\nname = 5\nm = {min = 5}\nn = -1\nk = 1e400\nweight = nan\n',
    "empty": b"",
}


def _commands(f: str, tmp: Path) -> list[list[str]]:
    text = Path(f).read_bytes().decode("utf-8", "replace") if Path(f).is_file() else f
    return [
        ["check", "tensor-map", "--jsonl", f], ["check", "config", f], ["check", "config", "--jsonl", f],
        ["check", "pipeline", f], ["build", f], ["validate", f],
        ["regen", "--check", "--suite", f, "--out", str(tmp / "o")], ["bench", "--suite", f, "--out", str(tmp / "o")],
        ["db", "import", f], ["db", "stats", "--db", f], ["db", "export", "--db", f],
        ["tune", "--suite", f, "--plan-only", "--workdir", str(tmp / "w"), "--quiet"], ["tune", "--from-plan", f],
        ["pack", f, "-o", str(tmp / "p")],
        ["generate", "--no-build", "--config", text, "-o", str(tmp / "g")],
        ["generate", "--no-build", "--problem", text, "-o", str(tmp / "g")],
        ["attention", "generate", "--no-build", "--config", text, "-o", str(tmp / "a")],
        ["attention", "generate", "--no-build", "--problem", text, "-o", str(tmp / "a")],
        ["attention", "search", "--problem", text],
        # any operation through validate, bench and the database (cutegen.run.ops)
        ["bench", "--op", "attention", "--suite", f, "--kernels", str(tmp / "k"), "--plan"],
        ["bench", "--op", "grouped_gemm", "--problem", text, "--kernels", str(tmp / "k"), "--plan"],
        ["validate", "--op", "attention", f, "--suite", f], ["db", "list", "--db", f],
    ]


NUMERIC = [
    ["search", "--m", "-1", "--n", "1", "--k", "1"], ["search", "--m", "nan", "--n", "1", "--k", "1"],
    ["search", "--m", "99999999999999", "--n", "1", "--k", "1"], ["search", "--m", "8", "--n", "8", "--k", "8", "--lda", "-3"],
    ["generate", "--no-build", "--beta", "nan"], ["generate", "--no-build", "--m", "8", "--n", "8", "--k", "8", "--beta", "inf"],
    ["generate", "--no-build", "--problem", '{"m": 8, "n": 8, "k": 8, "alignment_a": 1024}'],
    ["pack", "shapes.toml", "-o", "p", "--tolerance", "nan"], ["tune", "--m", "8", "--n", "8", "--k", "8", "--iters", "-5"],
    ["validate", "x", "--timeout", "inf"], ["bench", "--deadline", "nan"], ["build", "x", "--timeout", "-inf"],
    ["nonsense"], ["db", "nonsense"],
    ["attention", "search", "--head-dim", "nan"], ["attention", "search", "--scale", "inf"],
    ["attention", "search", "--batch", "-2"], ["attention", "search", "--seqlen-q", "99999999999999"],
    ["attention", "generate", "--no-build", "--top-k", "0", "-o", "a"], ["attention", "nonsense"],
]


def test_every_subcommand_answers_malformed_input_with_one_line(tmp_path):
    """Every subcommand `cutegen --help` lists, over bad UTF-8, truncated JSON/TOML, wrong types, missing
    fields, NaN, huge and negative numbers, and paths that are directories: a non-zero exit and one line
    on stderr, never a traceback. (``check --jsonl`` answers line by line on stdout by design: there the
    answer is error records and a non-zero exit.) No nvcc and no GPU: every case fails before either."""
    from cutegen.commands import COMMANDS
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    files = []
    for name, data in CORPUS.items():
        for ext in (".json", ".toml", ".jsonl"):
            (corpus / f"{name}{ext}").write_bytes(data)
            files.append(str(corpus / f"{name}{ext}"))
    folder = corpus / "a_directory"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"problem": 1}')
    (folder / "plan.json").write_text(json.dumps(_plan("../x")))
    files.append(str(folder))
    cases = [argv for f in files for argv in _commands(f, tmp_path)] + NUMERIC
    assert {argv[0] for argv in cases} >= set(COMMANDS)            # every subcommand is exercised
    failures = []
    for argv in cases:
        rc, out, err = run_cli(argv)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        batch = "--jsonl" in argv and not lines and out and all("error" in json.loads(x) or "legal" in json.loads(x)
                                                                   for x in out.splitlines())
        empty_batch = Path(argv[-1]).name.startswith("empty") and argv[:2] in (["db", "import"],) or \
            ("--jsonl" in argv and Path(argv[-1]).name.startswith("empty"))
        if empty_batch and rc == 0:
            continue                        # no records, no lines: nothing is wrong with an empty batch
        if rc == 0 or "Traceback" in err or not (len(lines) == 1 or batch):
            failures.append(f"{argv!r}: exit {rc}, stderr {lines[:3]!r}")
    assert not failures, f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures[:20])


# --- costs that rank any problem the model accepts -----------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(1048576, 1048576, 524288), (2147483647, 2147483647, 65536)])
def test_huge_problems_rank(m, n, k):
    # before: the first was "no legal configuration" (its picoseconds passed ILLEGAL_COST = 10^15), the
    # second crashed inside egglog (picoseconds past i64)
    from search import search
    r = search(GemmProblem(m=m, n=n, k=k), top_k=3)
    assert len(r.ranked) == 3 and r.ranked[0].cost > 1e8 and r.ranked[0].cost <= r.ranked[1].cost


def test_cost_units_are_picoseconds_until_they_would_not_fit():
    from search.schedule_rewrites import ILLEGAL_COST, MAX_LEGAL_UNITS, cost_units, units_per_us
    assert units_per_us([12.5, 3.0e6]) == 1e6                       # every suite problem: unchanged picoseconds
    assert units_per_us([MAX_LEGAL_UNITS / 1e6]) == 1e6               # the bound itself still fits
    per = units_per_us([MAX_LEGAL_UNITS / 1e6 * 1.01])
    assert per == 1e5 and cost_units(MAX_LEGAL_UNITS / 1e6 * 1.01, per) <= MAX_LEGAL_UNITS < ILLEGAL_COST
    per = units_per_us([7.9e14])
    assert cost_units(7.9e14, per) <= MAX_LEGAL_UNITS and cost_units(7.8e14, per) < cost_units(7.9e14, per)
    with pytest.raises(ValueError):
        units_per_us([float("inf")])


# --- numbers: finite, alignments meaningful ----------------------------------------------------------------

@pytest.mark.parametrize("field", ["alpha", "beta"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinity_are_refused(field, value):
    with pytest.raises(FieldError, match=field):
        GemmProblem(m=8, n=8, k=8, **{field: value})
    assert GemmProblem(m=8, n=8, k=8, **{field: 2.5}).to_dict()[field] == 2.5


def test_nan_in_json_is_refused_and_manifests_stay_json(tmp_path):
    from cutegen._fields import loads_json
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}'):
        with pytest.raises(json.JSONDecodeError, match="not a number JSON allows"):
            loads_json(text)
    one_line_error(["generate", "--no-build", "--problem", '{"m": 8, "n": 8, "k": 8, "beta": NaN}'], "--problem")
    one_line_error(["generate", "--no-build", "--m", "8", "--n", "8", "--k", "8", "--beta", "nan"], "--beta")


@pytest.mark.parametrize("dtype,op,ok,too_wide", [("bf16", "a", 8, 16), ("e4m3", "b", 16, 32), ("tf32", "a", 4, 8)])
def test_alignment_is_at_most_16_bytes_worth(dtype, op, ok, too_wide):
    base = dict(m=4096, n=4096, k=4096, dtype_a=dtype, dtype_b=dtype)
    if dtype == "tf32":
        base.update(dtype_c="f32", dtype_d="f32")
    assert getattr(GemmProblem(**base, **{f"alignment_{op}": ok}), f"alignment_{op}") == ok
    with pytest.raises(FieldError, match=f"alignment_{op}"):
        GemmProblem(**base, **{f"alignment_{op}": too_wide})
    with pytest.raises(FieldError, match="alignment_c"):
        GemmProblem(m=4096, n=4096, k=4096, alignment_c=1024)


# --- regen --check judges the --out tree ------------------------------------------------------------------

def test_checked_in_tree_is_judged_from_the_out_tree_not_the_installed_package(tmp_path):
    from cutegen.commands.regen import render_task
    checkout = tmp_path / "checkout"                   # another checkout (a worktree, a copy, a wheel's user)
    (checkout / "generated").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "cutegen"\n')
    odd_k = GemmProblem.from_dict({"m": 2048, "n": 2048, "k": 2046})           # the builder's default: cp.async
    status, why = render_task(("baseline", odd_k, checkout / "generated" / "baseline" / "sm90a" / "p", False))
    assert status == "illegal" and "SM90-CPASYNC-SYNCCHECK" in why
    # outside any cutegen checkout's generated/ (or inside another project's), it is rendered
    other = tmp_path / "other"
    (other / "generated").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "not-cutegen"\n')
    for d in (tmp_path / "plain", other / "generated"):
        status, k = render_task(("baseline", odd_k, d / "baseline" / "sm90a" / "p", False))
        assert status == "ok" and k.config.mainloop_load == "cp_async"


# --- db import counts -----------------------------------------------------------------------------------

def test_db_import_counts_are_right_while_another_writer_adds_records(tmp_path, monkeypatch):
    from cutegen.commands import db as db_cmd
    from cutegen.results import Measurement, ResultsDB

    def meas(i: int, source: str) -> Measurement:
        return Measurement(problem=GemmProblem(64 * (i + 1), 128, 256), config=KernelConfig((128, 128, 64)),
                           kernel_hash="h", device_name="NVIDIA H200", device_kind="h200", sm_count=132,
                           timing_method="cuda-events", times_us=(10.0,), median_us=10.0, validated=True,
                           source=source, measured_at="2026-11-26")

    f = tmp_path / "2026-11-26-import.jsonl"
    f.write_text("".join(json.dumps(meas(i, "file").to_dict()) + "\n" for i in range(3)))
    path = tmp_path / "results.sqlite"
    real_print = print

    def print_and_race(*args, **kw):   # after the file's transaction: another process adds 5 records
        if args and str(args[0]).startswith(str(f)):
            with ResultsDB(path, seed=None) as other:
                other.add_many([meas(i, "other") for i in range(5)])
        real_print(*args, **kw)

    monkeypatch.setattr(db_cmd, "print", print_and_race, raising=False)
    rc, out, _ = run_cli(["db", "import", "--db", str(path), "--no-seed", str(f)])
    assert rc == 0 and "3 new, 0 already present" in out, out
    rc, out, _ = run_cli(["db", "import", "--db", str(path), "--no-seed", str(f)])
    assert rc == 0 and "0 new, 3 already present" in out, out


def test_two_pack_writers_at_once_neither_fails_and_the_pack_is_one_of_them_whole(tmp_path):
    from cutegen import packs
    root = tmp_path / "pack"
    sets = [{"CMakeLists.txt": f"kernels {w}\n", **{f"kernels/{w}{i}/kernel.cu": f"{w}{i}\n" for i in range(4)}}
            for w in ("a", "b")]
    errors = []

    def writer(files):
        try:
            for _ in range(15):
                packs.write(root, files)
        except BaseException as e:   # noqa: BLE001 - the test reports any
            errors.append(repr(e))

    threads = [threading.Thread(target=writer, args=(s,)) for s in sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)     # 30 whole-directory writes with fsyncs: slow on a loaded 2-core machine, never a hang
    assert not any(t.is_alive() for t in threads), "a pack writer did not finish in 600 s"
    assert errors == []
    now = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert now in ({*sets[0]}, {*sets[1]}) and leftovers(root) == []
    w = (root / "CMakeLists.txt").read_text().split()[1]
    assert all((root / f"kernels/{w}{i}/kernel.cu").read_text() == f"{w}{i}\n" for i in range(4))


def test_swap_without_rename_exchange_and_a_kill_between_its_two_renames(tmp_path, monkeypatch):
    import cutegen._atomic as atomic_mod
    monkeypatch.setattr(atomic_mod, "_exchange", lambda a, b: False)    # a file system without RENAME_EXCHANGE
    d = tmp_path / "k"
    ka, kb = kernel(CFG_A), kernel(CFG_B)
    ka.write(d)
    assert kb.write(d) and json.loads((d / "manifest.json").read_text())["kernel_hash"] == kb.kernel_hash
    assert leftovers(d) == []
    # killed between "rename d away" and "rename the new one in": no d, the old contents beside it
    os.rename(d, tmp_path / ".k.cutegen-old-abcd1234")
    assert leftovers(d) == [tmp_path / ".k.cutegen-old-abcd1234"]
    assert kb.write(d) and (d / "kernel.cu").read_text() == kb.files["kernel.cu"] and leftovers(d) == []
