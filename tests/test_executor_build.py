"""The Dask compile path end to end without a real compiler: a stand-in nvcc (deterministic, 2.5 s per
"compile") on a real 127.0.0.1 cluster of two workers. What CI checks in seconds here, the compile tests
(tests/test_executor_compile.py) check again with nvcc and CUTLASS."""
from __future__ import annotations

import os
import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cutegen import build as build_mod
from cutegen import executor as X

pytest.importorskip("distributed", reason="the cluster extra (dask.distributed) is not installed")
from dask_cluster import Cluster  # noqa: E402

FAKE_NVCC = textwrap.dedent("""\
    #!{python}
    import os, sys, time
    args = sys.argv[1:]
    if args == ["--version"]:
        print("Cuda compilation tools, release 13.0, V13.0.88")
        sys.exit(0)
    src = open(args[-1]).read()
    with open(os.environ["FAKE_NVCC_LOG"], "a") as f:
        f.write(f"{{os.getpid()}} {{src.splitlines()[0]}}\\n")
    time.sleep(2.5)
    if "FAIL_COMPILE" in src:
        sys.stderr.write("kernel.cu(3): error: static assertion failed\\n")
        sys.exit(2)
    open(os.path.join(args[args.index("-keep-dir") + 1], "kernel.ptx"), "w").write("wgmma.mma_async\\n" * 2)
    sys.stderr.write("ptxas info    : Used 90 registers, 0 bytes spill stores, 0 bytes spill loads\\n")
    open(args[args.index("-o") + 1], "wb").write(b"ELF" + src.encode())
    """)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fake-nvcc")
    nvcc = tmp / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{nvcc.parent}{os.pathsep}{os.environ['PATH']}", "FAKE_NVCC_LOG": str(tmp / "nvcc.log"),
           "CUTEGEN_NVCC_LOCK": str(tmp / "nvcc.lock"), "CUTEGEN_CACHE": str(tmp / "worker-cache")}
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        if k != "CUTEGEN_CACHE":
            mp.setenv(k, v)
    c = Cluster(tmp, [{"resources": {"MEM_GB": 4}, "env": env, "nthreads": 2} for _ in range(2)])
    try:
        c.start()
        c.worker_cache = tmp / "worker-cache"
        c.nvcc_log = tmp / "nvcc.log"
        yield c
    finally:
        c.close()
        mp.undo()


def _kernels(root: Path, n: int, extra: str = "") -> list[Path]:
    out = []
    for i in range(n):
        d = root / f"k{i}"
        d.mkdir(parents=True)
        (d / "kernel.cu").write_text(f"// kernel {i}{extra}\nint x{i};\n")
        (d / "manifest.json").write_text('{"problem": {"m": 8}, "config": {"tile_shape": [64, 64, 64]}, '
                                         '"legality": {"legal": true}}')
        out.append(d)
    return out


def _entry(cache: Path, key: str) -> Path:
    return cache / key[:2] / key


def test_build_through_dask_kill_a_worker_then_a_second_client(fake, tmp_path):
    local = build_mod.build(_kernels(tmp_path / "local", 3), jobs=1, cache=tmp_path / "local-cache", progress=None)
    assert local.ok
    seen = len(fake.nvcc_log.read_text().splitlines())  # the local build's compiles
    assert seen == 3
    client_cache = tmp_path / "client-cache"
    dirs = _kernels(tmp_path / "remote", 3)
    with X.dask_executor(fake.address, progress=None) as ex:
        box = {}
        t = threading.Thread(target=lambda: box.update(s=build_mod.build(dirs, cache=client_cache, progress=None,
                                                                         executor=ex)))
        t.start()
        deadline = time.monotonic() + 60
        while len(fake.nvcc_log.read_text().splitlines()) == seen:
            assert time.monotonic() < deadline, fake.tail()
            time.sleep(0.05)
        # The worker running the first compile dies with its nvcc (every compile takes the same lock here,
        # so exactly one is running).
        nvcc_pid = int(fake.nvcc_log.read_text().splitlines()[seen].split()[0])
        import psutil
        worker = next(p for p in psutil.Process(nvcc_pid).parents() if p.pid in fake.worker_pids())
        Cluster.kill_tree(worker.pid)
        t.join(timeout=120)
        summary, text = box["s"], ex.summary.text()
    assert summary.ok and [r.status for r in summary.results] == ["built"] * 3, [r.message for r in summary.results]
    assert "1 worker death(s); then done on" in text and "CPU compile: 3 done, 0 failed" in text
    for lr, rr, d in zip(local.results, summary.results, dirs):
        assert rr.key == lr.key
        # The stand-in compiler is deterministic: the artifacts are the local build's, byte for byte ...
        assert Path(rr.library).read_bytes() == Path(lr.library).read_bytes() == (d / "kernel.so").read_bytes()
        # ... and the client's cache entry is the worker's (library and build record).
        for f in ("kernel.so", "build.json"):
            assert (_entry(client_cache, rr.key) / f).read_bytes() == (_entry(fake.worker_cache, rr.key) / f).read_bytes()
        assert rr.stats == lr.stats == {"ptx_wgmma_mma_async": 2, "max_registers": 90, "spill_bytes": 0}
    assert not list(client_cache.rglob(".incoming-*")) and not list(client_cache.rglob(".*.tmp"))
    compiles = len(fake.nvcc_log.read_text().splitlines())
    assert compiles - seen == 4  # three kernels, one of them twice (the interrupted compile)

    # A second client: with the same cache nothing is sent; with an empty one the workers' cache answers.
    with X.dask_executor(fake.address, progress=None) as again:
        s = build_mod.build(_kernels(tmp_path / "again", 3), cache=client_cache, progress=None, executor=again)
        assert [r.status for r in s.results] == ["cached"] * 3 and again.summary.outcomes == []
        s2 = build_mod.build(_kernels(tmp_path / "fresh", 3), cache=tmp_path / "fresh-cache", progress=None,
                             executor=again)
        assert [r.status for r in s2.results] == ["cached"] * 3
    assert len(fake.nvcc_log.read_text().splitlines()) == compiles  # no compile ran for either
    for r in s2.results:
        assert (_entry(tmp_path / "fresh-cache", r.key) / "kernel.so").read_bytes() == \
            (_entry(client_cache, r.key) / "kernel.so").read_bytes()


def test_compile_failure_and_duplicates_through_dask(fake, tmp_path):
    dirs = _kernels(tmp_path / "a", 2, extra=" FAIL_COMPILE")  # both fail to compile
    dup = tmp_path / "dup"
    dup.mkdir()
    (dup / "kernel.cu").write_text("// kernel 0 FAIL_COMPILE\nint x0;\n")  # same source as dirs[0]
    before = len(fake.nvcc_log.read_text().splitlines()) if fake.nvcc_log.is_file() else 0
    with X.dask_executor(fake.address, progress=None) as ex:
        s = build_mod.build(dirs + [dup], cache=tmp_path / "cache", progress=None, executor=ex)
        assert len(ex.summary.outcomes) == 2  # one task per distinct source
    assert [r.status for r in s.results] == ["failed"] * 3
    assert "LEGALITY BUG" in s.results[0].message and '"tile_shape": [64, 64, 64]' in s.results[0].message
    assert "static assertion failed" in s.results[0].message
    assert not list((tmp_path / "cache").rglob("kernel.so"))  # a failure is never cached
    assert len(fake.nvcc_log.read_text().splitlines()) - before == 2


def test_a_worker_with_another_toolchain_is_refused(fake, tmp_path, monkeypatch):
    # The client believes in another nvcc build: the worker's artifact would not match the key.
    monkeypatch.setattr(build_mod.Builder, "__init__", _with_version(build_mod.Builder.__init__, "V99.9.9"))
    with X.dask_executor(fake.address, progress=None) as ex:
        s = build_mod.build(_kernels(tmp_path / "k", 1), cache=tmp_path / "cache", progress=None, executor=ex)
    assert s.results[0].status == "failed" and "toolchain differs from the client's" in s.results[0].message


def _with_version(init, version):
    def patched(self, *a, **kw):
        init(self, *a, **kw)
        self.nvcc_version = version
    return patched


def test_cutegen_build_command_through_dask(fake, tmp_path, capsys):
    from cutegen.cli import main
    d = _kernels(tmp_path / "cli", 1, extra=" cli")[0]
    argv = ["build", str(d), "--cache", str(tmp_path / "cache"), "--executor", "dask", "--scheduler", fake.address]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert f"built   {d / 'kernel.so'}" in out and "built 1, cached 0, failed 0" in out
    assert "executor dask: 1 task(s)" in err and "CPU compile: 1 done, 0 failed, 0 retried" in err
    assert (d / "kernel.so").read_bytes().startswith(b"ELF// kernel 0 cli")
    assert main(argv) == 0 and "built 0, cached 1, failed 0" in capsys.readouterr().out
