"""The watchdog: requests run in a spawned child; a child that never answers is killed as a hang."""
import os
import time

import pytest

from cutegen import GemmProblem, KernelConfig
from cutegen.commands import validate as V
from cutegen.runner import KernelInfo, Reply, Worker


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); it is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_a_child_that_sleeps_forever_is_killed_and_reported_as_a_hang():
    with Worker(startup_timeout=60) as w:
        first = w.request({"op": "ping"}, timeout=60)
        assert first.ok
        pid = first.value["pid"]
        assert pid != os.getpid()
        t0 = time.monotonic()
        reply = w.request({"op": "selftest_sleep"}, timeout=1.5)
        assert reply.status == "hang" and "no answer within 1.5 s" in reply.message
        assert 1.4 < time.monotonic() - t0 < 30
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the hung child must be killed"
        # the run goes on: the next request gets a fresh child
        after = w.request({"op": "ping"}, timeout=60)
        assert after.ok and after.value["pid"] != pid
        assert w.restarts == 1


def test_a_request_that_finishes_in_time_is_not_a_hang():
    with Worker(startup_timeout=60) as w:
        reply = w.request({"op": "selftest_sleep", "seconds": 0.2}, timeout=30)
        assert reply.ok and reply.value["slept"] == 0.2


def test_a_child_that_dies_is_a_crash_and_is_replaced():
    with Worker(startup_timeout=60) as w:
        pid = w.request({"op": "ping"}, timeout=60).value["pid"]
        reply = w.request({"op": "selftest_exit", "code": 7}, timeout=30)
        assert reply.status == "crash" and "exit code 7" in reply.message
        assert w.request({"op": "ping"}, timeout=60).value["pid"] != pid


def test_an_exception_is_an_error_and_keeps_the_child():
    with Worker(startup_timeout=60) as w:
        pid = w.request({"op": "ping"}, timeout=60).value["pid"]
        reply = w.request({"op": "selftest_raise", "message": "boom"}, timeout=30)
        assert reply.status == "error" and "RuntimeError: boom" in reply.message and not reply.fatal
        assert w.request({"op": "ping"}, timeout=60).value["pid"] == pid
        unknown = w.request({"op": "no_such_op"}, timeout=30)
        assert unknown.status == "error" and "unknown op" in unknown.message


def test_a_failed_start_up_is_reported_not_raised():
    with Worker(startup_timeout=60, init={"op": "selftest_raise", "message": "no CUDA"}) as w:
        reply = w.request({"op": "ping"}, timeout=30)
        assert reply.status == "crash" and "start-up failed" in reply.message and "no CUDA" in reply.message


def test_a_hanging_start_up_is_bounded_by_the_startup_timeout():
    with Worker(startup_timeout=1.0, init={"op": "selftest_sleep"}) as w:
        t0 = time.monotonic()
        reply = w.request({"op": "ping"}, timeout=30)
        assert reply.status == "hang" and time.monotonic() - t0 < 30


# --- what validate makes of a hang -------------------------------------------------------------------------
class ScriptedWorker:
    """Answers validate_case requests from a script of Replies, recording the cases it was sent."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.sent = []
        self.init_reply = None

    def request(self, task, timeout):
        self.sent.append(task["case"]["name"])
        return self.replies.pop(0)


class Args:
    no_manifest_shape = False
    no_probes = True
    timeout = 5.0
    seed = 0


def test_validate_reports_a_hang_with_its_configuration_and_moves_on(tmp_path, capsys):
    cfg = KernelConfig((128, 96, 128), (2, 2, 1), stages=3, tile_scheduler="stream_k")
    info = KernelInfo(tmp_path / "kernel.so", GemmProblem(4096, 4096, 4096), cfg, directory=tmp_path / "k")
    ok = Reply("ok", {"kind": "case", "ok": True, "rel_err": 1e-3, "tol": 1e-2})
    hang = Reply("hang", None, "no answer within 5 s; worker pid 123 killed", 5.0, True)
    w = ScriptedWorker([ok, hang, ok, ok, ok])
    rec = V.validate_one(w, info, [], Args(), print)
    assert rec["verdict"] == "hang"
    assert w.sent == ["manifest", "ragged"]          # the rest of this kernel's cases are not run
    assert "stream_k" in rec["reason"] and "128,96,128" in rec["reason"]
    out = capsys.readouterr().out
    assert "HANG" in out and "ragged" in out and '"tile_scheduler":"stream_k"' in out
    report = {"kernels": [rec], "unusable": []}
    s = V.summarize(report)
    assert not s["ok"] and s["hang"] == [info.label]


def test_validate_fails_a_kernel_on_a_wrong_answer_and_passes_a_clean_one(tmp_path):
    info = KernelInfo(tmp_path / "kernel.so", GemmProblem(4096, 4096, 4096), KernelConfig((128, 256, 64)))
    good = Reply("ok", {"kind": "case", "ok": True, "rel_err": 2e-3, "tol": 1e-2})
    bad = Reply("ok", {"kind": "case", "ok": False, "rel_err": 0.5, "tol": 1e-2, "reason": "relative error"})
    rec_ok = V.validate_one(ScriptedWorker([good] * 5), info, [], Args(), lambda *a: None)
    rec_bad = V.validate_one(ScriptedWorker([good, bad, good, good, good]), info, [], Args(), lambda *a: None)
    assert rec_ok["verdict"] == "pass" and rec_bad["verdict"] == "fail"
    s = V.summarize({"kernels": [rec_ok, rec_bad], "unusable": []})
    assert s["cases_run"] == 10 and s["cases_passed"] == 9 and s["max_rel_err"] == 0.5 and not s["ok"]


@pytest.mark.parametrize("code,verdict", [(0, "clean"), (86, "errors"), (1, "failed"), (None, "timeout")])
def test_sanitizer_verdicts(code, verdict):
    assert V.sanitizer_verdict(code) == verdict


def test_run_with_timeout_kills_the_whole_process_group():
    t0 = time.monotonic()
    rc, text = V.run_with_timeout(["bash", "-c", "sleep 600 & sleep 600; echo never"], 1.0)
    assert rc is None and "killed after 1 s" in text and time.monotonic() - t0 < 25
    rc, text = V.run_with_timeout(["bash", "-c", "echo hello; exit 86"], 10)
    assert rc == 86 and "hello" in text


def test_a_library_that_does_not_load_fails_once(tmp_path):
    info = KernelInfo(tmp_path / "kernel.so", GemmProblem(4096, 4096, 4096), KernelConfig((128, 256, 64)))
    err = Reply("error", None, 'OSError: kernel.so: cannot open shared object file\n  File "w.py", in load_library')
    w = ScriptedWorker([err] * 5)
    rec = V.validate_one(w, info, [], Args(), lambda *a: None)
    assert rec["verdict"] == "fail" and len(w.sent) == 1 and "cannot open" in rec["reason"]
