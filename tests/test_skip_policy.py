"""The CI skip policy of tests/conftest.py: with --no-cpu-skips only gpu-marked tests may skip."""
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
INI = "[pytest]\nmarkers =\n    gpu: needs a Hopper GPU\n"


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    return pytester


def test_a_cpu_skip_fails_the_run_and_is_named(suite):
    suite.makepyfile(test_a="import pytest\ndef test_ok():\n    pass\n"
                            "def test_cpu():\n    pytest.skip('optional thing missing')\n")
    strict = suite.runpytest("--no-cpu-skips")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(["*FORBIDDEN*test_a.py::test_cpu: optional thing missing*",
                                 "skips: 0 gpu-marked (allowed), 1 other*"])
    assert suite.runpytest().ret == pytest.ExitCode.OK       # without the flag: reported, not fatal


def test_a_module_skipped_at_import_fails_the_run(suite):
    suite.makepyfile(test_b="import pytest\npytest.importorskip('no_such_module_here')\n"
                            "def test_x():\n    pass\n")
    result = suite.runpytest("--no-cpu-skips")
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*FORBIDDEN*test_b.py*no_such_module_here*"])


def test_gpu_skips_are_allowed_and_printed(suite, monkeypatch):
    suite.makepyfile(test_c="import pytest\npytestmark = pytest.mark.gpu\n"
                            "def test_one():\n    pass\ndef test_two():\n    pass\n")
    result = suite.runpytest("--no-cpu-skips", "-p", "no:cacheprovider")
    # on a machine without torch or a Hopper GPU both skip (allowed); with one, both pass
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK
    assert outcomes.get("skipped", 0) + outcomes.get("passed", 0) == 2
    if outcomes.get("skipped"):
        result.stdout.fnmatch_lines(["*allowed (gpu)*test_c.py: 2 test(s)*", "skips: 2 gpu-marked (allowed), 0 other"])


def test_under_xdist_a_cpu_skip_and_a_module_skip_still_fail_the_run(suite):
    # The README's test command runs two pytest-xdist workers (-n 2): a worker forwards only failed collect
    # reports, so a module skipped at import must become a collection error there, and a test's skip must
    # still reach the controller's ledger.
    pytest.importorskip("xdist")
    suite.makepyfile(test_b="import pytest\npytest.importorskip('no_such_module_here')\n"
                            "def test_x():\n    pass\n")
    modules = suite.runpytest("--no-cpu-skips", "-n", "2")
    assert modules.ret != pytest.ExitCode.OK
    modules.stdout.fnmatch_lines(["*module skipped at collection (--no-cpu-skips)*no_such_module_here*"])
    (suite.path / "test_b.py").unlink()
    suite.makepyfile(test_a="import pytest\ndef test_ok():\n    pass\n"
                            "def test_cpu():\n    pytest.skip('optional thing missing')\n")
    tests = suite.runpytest("--no-cpu-skips", "-n", "2")
    assert tests.ret == pytest.ExitCode.TESTS_FAILED
    tests.stdout.fnmatch_lines(["*FORBIDDEN*test_a.py::test_cpu: optional thing missing*"])
    assert suite.runpytest("-n", "2").ret == pytest.ExitCode.OK


def test_each_xdist_worker_gets_its_own_nvcc_lock():
    from conftest import _worker_nvcc_lock
    from cutegen.build import DEFAULT_LOCK
    env = {"PYTEST_XDIST_WORKER": "gw1"}
    _worker_nvcc_lock(env)
    assert env["CUTEGEN_NVCC_LOCK"] == f"{DEFAULT_LOCK}.gw1"
    env = {"PYTEST_XDIST_WORKER": "gw0", "CUTEGEN_NVCC_LOCK": "/tmp/mine.lock"}
    _worker_nvcc_lock(env)
    assert env["CUTEGEN_NVCC_LOCK"] == "/tmp/mine.lock"      # a lock the caller chose is kept
    env = {}
    _worker_nvcc_lock(env)
    assert "CUTEGEN_NVCC_LOCK" not in env                    # without xdist: the shared default
