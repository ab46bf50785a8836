"""cutegen.progress: a bar with an estimate on a terminal, one plain line per step in a log."""
from __future__ import annotations

import io
import re
import threading

from cutegen import progress as P
from cutegen.cli import main


def test_steps_print_one_numbered_line_per_step_when_not_a_terminal():
    log = io.StringIO()
    with P.Steps("build", 3, stream=log) as steps:
        assert not steps.terminal
        steps.step("a: built in 1.0 s")
        steps.log("a warning between steps")
        steps.step("b: cached")
        steps.step("c: FAILED")
    assert log.getvalue().splitlines() == ["[1/3] a: built in 1.0 s", "a warning between steps",
                                           "[2/3] b: cached", "[3/3] c: FAILED"]


def test_steps_total_may_come_late_and_quiet_or_no_stream_prints_nothing():
    log = io.StringIO()
    steps = P.Steps("build", stream=log)
    steps.step("before the total")
    steps.set_total(2)
    steps.step("after")
    assert log.getvalue().splitlines() == ["[1/?] before the total", "[2/2] after"]
    quiet = io.StringIO()
    for s in (P.Steps("x", 2, stream=quiet, quiet=True), P.Steps("x", 2, stream=None)):
        s.step("one")
        s.log("line")
        s.close()
        assert s.done == 1
    assert quiet.getvalue() == ""


def test_steps_from_many_threads_number_every_line_once():
    log = io.StringIO()
    steps = P.Steps("validate", 64, stream=log)
    threads = [threading.Thread(target=lambda i=i: steps.step(f"kernel {i}")) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    numbers = [int(re.match(r"\[(\d+)/64\] kernel \d+$", line).group(1)) for line in log.getvalue().splitlines()]
    assert numbers == list(range(1, 65))


def test_steps_estimate_the_time_left_from_the_pace_so_far(monkeypatch):
    clock = iter([100.0, 110.0])       # started at 100 s; 2 of 5 steps done at 110 s: 5 s a step, 3 left
    monkeypatch.setattr(P.time, "monotonic", lambda: next(clock))
    steps = P.Steps("bench", 5, stream=None)
    assert steps.estimate() is None                 # nothing done yet: no pace to go by
    steps.step()
    steps.step()
    assert steps.estimate() == 15.0


def test_steps_draw_a_bar_with_the_time_left_on_a_terminal(monkeypatch):
    monkeypatch.setattr(P, "_is_terminal", lambda stream, console: True)
    out = io.StringIO()
    with P.Steps("build", 2, stream=out) as steps:
        assert steps.terminal
        steps.step("k0: cached")
        steps.step("k1: cached")
    text = out.getvalue()
    assert "k0: cached" in text and "2/2" in text and "left" in text
    assert "[1/2]" not in text                       # the plain log lines are not printed on a terminal


def test_the_old_display_modules_are_the_one_progress_module():
    from cutegen.executor import progress as executor_progress
    from cutegen.tuning import progress as tuning_progress
    assert tuning_progress.Display is P.Display
    assert executor_progress.Progress is P.Progress and executor_progress.counts_line is P.counts_line


def _double(x):
    return 2 * x


def _fail(x):
    raise ValueError(f"bad {x}")


def test_the_local_executor_prints_a_line_per_task():
    from cutegen.executor import LocalExecutor
    log = io.StringIO()
    ex = LocalExecutor(progress=log)
    assert [o.value for o in ex.map(_double, [1, 2], names=["one", "two"])] == [2, 4]
    ex.map(_fail, [3], names=["three"])
    assert log.getvalue().splitlines() == ["[1/2] one", "[2/2] two", "[1/1] three: FAILED"]


def test_regen_prints_a_line_per_rendering_in_a_log(capfd):
    # stderr is a file here, not a terminal: one line per rendered kernel and baseline, then the verdicts.
    assert main(["regen", "--check", "--only", "sq1024_bf16_tn"]) == 0
    err = capfd.readouterr().err.splitlines()
    assert "[1/2] sq1024_bf16_tn kernel" in err and "[2/2] sq1024_bf16_tn baseline" in err


def test_the_builder_reports_each_kernel_as_a_step(tmp_path):
    # A cache hit needs no compiler: the builder only asks nvcc (here a stand-in) for its version string.
    from cutegen import build as B
    kernels = []
    for name in ("k0", "k1"):
        d = tmp_path / name
        d.mkdir()
        (d / "kernel.cu").write_text(f"// {name}\n")
        kernels.append(d)
    builder = B.Builder(jobs=1, cache=tmp_path / "cache", nvcc="/bin/true", progress=None)
    for d in kernels:
        key = B.cache_key((d / "kernel.cu").read_text(), nvcc_version=builder.nvcc_version,
                          cutlass_version=builder.cutlass_version)
        builder.entry(key).mkdir(parents=True)
        (builder.entry(key) / "kernel.so").write_bytes(b"stand-in")
    log = io.StringIO()
    with P.Steps("build", stream=log) as steps:   # the total comes from the builder
        summary = B.Builder(jobs=1, cache=tmp_path / "cache", nvcc="/bin/true", progress=steps).build(
            [B._job_for(d) for d in kernels])
    assert [r.status for r in summary.results] == ["cached", "cached"]
    assert log.getvalue().splitlines() == [f"[1/2] {kernels[0]}: cached", f"[2/2] {kernels[1]}: cached"]
    # The same builder on a stream prints the same lines itself (cutegen tune reads them).
    stream = io.StringIO()
    B.Builder(jobs=1, cache=tmp_path / "cache", nvcc="/bin/true", progress=stream).build(
        [B._job_for(d) for d in kernels])
    assert stream.getvalue().splitlines() == log.getvalue().splitlines()
