"""The nvcc driver without nvcc: a stand-in compiler exercises the cache, the locks and the failure reports."""
from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cutegen import build as build_mod
from cutegen.errors import CutegenError

FAKE_NVCC = textwrap.dedent("""\
    #!{python}
    # Stand-in for nvcc: logs each call, writes -o, and misbehaves on request through the source text.
    import os, sys
    args = sys.argv[1:]
    if args == ["--version"]:
        print("Cuda compilation tools, release 13.0, V13.0.88")
        sys.exit(0)
    with open(os.environ["FAKE_NVCC_LOG"], "a") as f:
        f.write(" ".join(args) + "\\n")
    src = open(args[-1]).read()
    if "FAIL_COMPILE" in src:
        sys.stderr.write('kernel.cu(12): error: static assertion failed with "Cooperative kernel requires Tile Size"\\n')
        sys.exit(2)
    if "SERIALINFO" in src:
        sys.stderr.write("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
                         "serialized due to non wgmma instructions defining accumulator registers\\n")
    elif "SERIALIZE" in src:
        sys.stderr.write("ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are "
                         "serialized due to insufficient register resources for the wgmma pipeline\\n")
    if "keep" in args:
        with open(os.path.join(args[args.index("-keep-dir") + 1], "kernel.ptx"), "w") as p:
            p.write("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16\\n" * 3)
    sys.stderr.write("ptxas info    : Used 168 registers, 0 bytes spill stores, 0 bytes spill loads\\n")
    open(args[args.index("-o") + 1], "wb").write(b"ELF" + src.encode()[:64])
    """)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "nvcc.log"
    monkeypatch.setenv("FAKE_NVCC_LOG", str(log))
    monkeypatch.setenv("CUTEGEN_NVCC_LOCK", str(tmp_path / "nvcc.lock"))
    monkeypatch.setenv("CUTEGEN_CACHE", str(tmp_path / "cache"))
    build_mod_manifest = __import__("cutegen.manifest", fromlist=["x"])
    build_mod_manifest.nvcc_version.cache_clear()

    class Fake:
        path = str(nvcc)
        cache = tmp_path / "cache"

        @staticmethod
        def calls() -> int:
            return len(log.read_text().splitlines()) if log.exists() else 0

        @staticmethod
        def kernel(name: str, source: str, legal: bool | None = True) -> Path:
            d = tmp_path / "kernels" / name
            d.mkdir(parents=True)
            (d / "kernel.cu").write_text(source)
            if legal is not None:
                (d / "manifest.json").write_text(json.dumps({
                    "problem": {"m": 8, "n": 8, "k": 8}, "config": {"tile_shape": [128, 256, 64]},
                    "legality": {"legal": legal}}))
            return d

        @staticmethod
        def builder(**kw) -> build_mod.Builder:
            return build_mod.Builder(nvcc=str(nvcc), progress=None, **kw)

    return Fake


def test_second_build_is_a_cache_hit_without_nvcc(fake):
    d = fake.kernel("a", "int x;\n")
    first = fake.builder(jobs=1).build([build_mod._job_for(d)])
    assert [r.status for r in first.results] == ["built"] and fake.calls() == 1
    lib = d / "kernel.so"
    assert lib.read_bytes().startswith(b"ELF")
    assert first.results[0].stats == {"ptx_wgmma_mma_async": 3, "max_registers": 168, "spill_bytes": 0}
    lib.unlink()
    second = fake.builder(jobs=1).build([build_mod._job_for(d)])
    assert [r.status for r in second.results] == ["cached"] and fake.calls() == 1
    assert lib.is_file()  # installed again from the cache
    assert second.results[0].stats["ptx_wgmma_mma_async"] == 3
    assert second.line().startswith("built 0, cached 1, failed 0")


def test_changed_source_misses_the_cache(fake):
    d = fake.kernel("a", "int x;\n")
    fake.builder(jobs=1).build([build_mod._job_for(d)])
    (d / "kernel.cu").write_text("int y;\n")
    again = fake.builder(jobs=1).build([build_mod._job_for(d)])
    assert again.results[0].status == "built" and fake.calls() == 2


def test_cache_key_covers_source_flags_nvcc_and_cutlass():
    base = dict(nvcc_version="13.0.88", cutlass_version="4.2.0")
    k = build_mod.cache_key("src", **base)
    assert k == build_mod.cache_key("src", **base)
    assert k != build_mod.cache_key("src2", **base)
    assert k != build_mod.cache_key("src", nvcc_version="13.0.89", cutlass_version="4.2.0")
    assert k != build_mod.cache_key("src", nvcc_version="13.0.88", cutlass_version="4.2.1")
    assert k != build_mod.cache_key("src", flags=build_mod.NVCC_FLAGS + ("-G",), **base)


def test_compile_uses_the_sm90a_flags_and_cutlass_includes(fake):
    fake.builder(jobs=1).build([build_mod._job_for(fake.kernel("a", "int x;\n"))])
    line = Path(os.environ["FAKE_NVCC_LOG"]).read_text()
    for flag in ("-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-DNDEBUG",
                 "--expt-relaxed-constexpr", "-shared", "-Xcompiler -fPIC"):
        assert flag in line
    inc = build_mod.cutlass_include_dirs()
    assert f"-I {inc[0]}" in line and inc[0].endswith("include")


@pytest.mark.parametrize("marker,code", [("SERIALIZE", "C7510"), ("SERIALINFO", "C7515")])
def test_serialized_wgmma_warning_fails_the_build_and_is_not_cached(fake, marker, code):
    d = fake.kernel("slow", f"// {marker}\n")
    result = fake.builder(jobs=1).build([build_mod._job_for(d)]).results[0]
    assert result.status == "failed"
    assert code in result.message and "serialized" in result.message
    assert not (d / "kernel.so").exists()
    assert not any(fake.cache.rglob("kernel.so"))


def test_compile_failure_of_a_legal_config_is_reported_as_a_legality_bug(fake):
    d = fake.kernel("bad", "// FAIL_COMPILE\n", legal=True)
    result = fake.builder(jobs=1).build([build_mod._job_for(d)]).results[0]
    assert result.status == "failed"
    assert result.message.startswith("LEGALITY BUG")
    assert '"tile_shape": [128, 256, 64]' in result.message
    assert "static assertion failed" in result.message and "Cooperative kernel requires" in result.message


def test_compile_failure_without_a_legality_verdict_is_not_called_a_legality_bug(fake):
    d = fake.kernel("bad", "// FAIL_COMPILE\n", legal=None)
    result = fake.builder(jobs=1).build([build_mod._job_for(d)]).results[0]
    assert result.status == "failed" and "LEGALITY BUG" not in result.message
    assert "nvcc exited with 2" in result.message


def test_interrupted_store_leaves_no_cache_entry(fake, monkeypatch):
    d = fake.kernel("a", "int x;\n")
    real_copy = build_mod.shutil.copyfile

    def dying_copy(src, dst, *a, **k):
        if str(dst).startswith(str(fake.cache)):  # dies while filling the staging entry
            raise KeyboardInterrupt
        return real_copy(src, dst, *a, **k)

    monkeypatch.setattr(build_mod.shutil, "copyfile", dying_copy)
    with pytest.raises(KeyboardInterrupt):
        fake.builder(jobs=1).build([build_mod._job_for(d)])
    leftovers = [p for p in fake.cache.rglob("*") if p.is_file() or p.name.startswith(".")]
    assert leftovers == []
    monkeypatch.setattr(build_mod.shutil, "copyfile", real_copy)
    assert fake.builder(jobs=1).build([build_mod._job_for(d)]).results[0].status == "built"


def test_compiles_wait_for_the_shared_nvcc_lock(fake):
    d = fake.kernel("a", "int x;\n")
    fd = os.open(os.environ["CUTEGEN_NVCC_LOCK"], os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    done = []
    t = threading.Thread(target=lambda: done.append(fake.builder(jobs=1).build([build_mod._job_for(d)])))
    t.start()
    time.sleep(1.0)
    assert not done and fake.calls() == 0  # blocked on the lock another nvcc user holds
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    t.join(30)
    assert done and done[0].ok


def test_parallel_build_of_several_kernels(fake):
    dirs = [fake.kernel(f"k{i}", f"int x{i};\n") for i in range(4)]
    summary = fake.builder(jobs=2).build([build_mod._job_for(d) for d in dirs])
    assert summary.count("built") == 4 and all((d / "kernel.so").is_file() for d in dirs)
    assert fake.calls() == 4


def test_default_jobs_is_bounded_by_memory_and_cores(monkeypatch):
    monkeypatch.setattr(build_mod.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(build_mod, "mem_available", lambda: 8 * build_mod.GB)
    assert build_mod.default_jobs() == 2          # 8 GB / 3.5 GB
    monkeypatch.setattr(build_mod, "mem_available", lambda: 128 * build_mod.GB)
    assert build_mod.default_jobs() == 8          # half of 16 cores
    monkeypatch.setattr(build_mod.os, "sched_getaffinity", lambda pid: {0, 1})
    assert build_mod.default_jobs() == 1          # this machine: one nvcc at a time
    monkeypatch.setattr(build_mod, "mem_available", lambda: 1 * build_mod.GB)
    monkeypatch.setattr(build_mod.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert build_mod.default_jobs() == 1          # never zero


def test_cutlass_include_override(tmp_path, monkeypatch):
    root = tmp_path / "cutlass"
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cutlass" / "version.h").write_text("#define CUTLASS_MAJOR 4\n")
    (root / "tools" / "util" / "include").mkdir(parents=True)
    monkeypatch.setenv("CUTEGEN_CUTLASS_INCLUDE", str(root))
    assert build_mod.cutlass_include_dirs() == [str(root / "include"), str(root / "tools/util/include")]
    monkeypatch.setenv("CUTEGEN_CUTLASS_INCLUDE", str(root / "include"))
    assert build_mod.cutlass_include_dirs() == [str(root / "include"), str(root / "tools/util/include")]
    monkeypatch.setenv("CUTEGEN_CUTLASS_INCLUDE", str(tmp_path / "nowhere"))
    with pytest.raises(CutegenError, match="CUTEGEN_CUTLASS_INCLUDE"):
        build_mod.cutlass_include_dirs()


def test_wheel_headers_are_found_and_versioned(monkeypatch):
    monkeypatch.delenv("CUTEGEN_CUTLASS_INCLUDE", raising=False)
    inc = build_mod.cutlass_include_dirs()
    assert Path(inc[0], "cute", "tensor.hpp").is_file()
    assert Path(inc[1], "cutlass", "util", "packed_stride.hpp").is_file()
    from cutegen.manifest import cutlass_version
    assert cutlass_version(inc[0]) == "4.2.0"


def test_not_a_kernel_is_a_clear_error(tmp_path):
    with pytest.raises(CutegenError, match="no kernel.cu"):
        build_mod._job_for(tmp_path)
    with pytest.raises(CutegenError, match="not a kernel directory"):
        build_mod._job_for(tmp_path / "missing")


def test_cli_build_expands_a_folder_of_kernels(fake, monkeypatch, capsys):
    for i in range(2):
        fake.kernel(f"k{i}", f"int x{i};\n")
    monkeypatch.setenv("PATH", str(Path(fake.path).parent) + os.pathsep + os.environ["PATH"])
    from cutegen.cli import main
    assert main(["build", "--jobs", "1", str(Path(fake.path).parents[1] / "kernels")]) == 0
    out = capsys.readouterr().out
    assert "built 2, cached 0, failed 0" in out
    assert main(["build", "--jobs", "1", str(Path(fake.path).parents[1] / "kernels")]) == 0
    assert "built 0, cached 2, failed 0" in capsys.readouterr().out


def test_timeout_kills_the_whole_compiler_process_group(fake, tmp_path):
    d = fake.kernel("slow", "int x;\n")
    # A compiler that starts a long-running child (as nvcc starts cicc) and waits for it.
    hang = tmp_path / "bin" / "hang-nvcc"
    pidfile = tmp_path / "child.pid"
    hang.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'release 13.0, V13.0.88'; exit 0; }}\n"
                    f"sleep 300 & echo $! > {pidfile}\nwait\n")
    hang.chmod(0o755)
    b = build_mod.Builder(nvcc=str(hang), progress=None, jobs=1, timeout=1.0)
    result = b.build([build_mod._job_for(d)]).results[0]
    assert result.status == "failed" and "timed out" in result.message
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
