"""A one-kernel pack built with CMake and nvcc on this CPU machine, consumed both ways (add_subdirectory,
then the installed package through find_package), and its dispatcher run by a C++ program: the C++
decisions must be the ones the pack's Python side recorded. Two kernel compiles (the chosen kernel and
the class's cp.async fallback; about 1-2 minutes each, in parallel with -j 2)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cutegen import packs
from cutegen.build import DEFAULT_LOCK, cutlass_include_dirs, find_nvcc

CONSUMER = Path(__file__).resolve().parent.parent / "examples" / "pack" / "consumer"
TINY = '[[shape]]\nname = "proj"\ndtype = "bf16"\nlayout = "tn"\nm = [1, 16, 128]\nn = 4096\nk = 4096\n'

pytestmark = pytest.mark.compile


def _cmake(*args, cwd=None, timeout=1200):
    proc = subprocess.run(["cmake", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"cmake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.skipif(shutil.which("cmake") is None or find_nvcc() is None, reason="needs cmake and nvcc")
def test_pack_builds_with_cmake_and_links_both_ways(tmp_path):
    shapes = tmp_path / "tiny.toml"
    shapes.write_text(TINY)
    pack = tmp_path / "pack"
    packs.write(pack, packs.make_pack(str(shapes), "h100-sxm", max_kernels=1, tolerance=0.03))
    meta = json.loads((pack / "pack.json").read_text())
    kernel = meta["kernels"][0]["name"]
    root = str(Path(cutlass_include_dirs()[0]).parent)
    nvcc = find_nvcc()
    common = [f"-DCUTEGEN_CUTLASS_INCLUDE={root}", f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_BUILD_TYPE=Release",
              # the machine-wide nvcc lock (CONVENTIONS.md): one heavy compile at a time
              f"-DCMAKE_CUDA_COMPILER_LAUNCHER=flock;{DEFAULT_LOCK}"]
    # 1. add_subdirectory: the pack is built as part of the consumer
    b1 = tmp_path / "b1"
    _cmake("-S", str(CONSUMER), "-B", str(b1), f"-DPACK_DIR={pack}", *common)
    _cmake("--build", str(b1), "-j", "2")
    args = ["1", "4096", "4096", "0", "100", "4096", "4096", "0", "100", "5000", "4096", "0",
            "8", "4095", "4096", "0", "8", "4096", "4096", "4097"]
    out = subprocess.run([str(b1 / "pack_consumer"), *args], capture_output=True, text=True, timeout=60).stdout
    lines = out.splitlines()
    fallback = meta["kernels"][1]["name"]
    assert lines[0].startswith("pack cutegen_pack for h100-sxm: 2 kernels, 1 classes")
    assert lines[1].startswith(f"1 4096 4096 -> 0 | {kernel}: exact shape proj m1n4096k4096")
    assert lines[2].startswith(f"100 4096 4096 -> 0 | {kernel}: rule: N=4096 K=4096 are in the pack's set; for M in [64, 127]")
    assert lines[3].startswith(f"100 5000 4096 -> 0 | {kernel}: class default")
    assert lines[4].startswith(f"8 4095 4096 -> 1 | {fallback}: fallback for unaligned operands (N (D's contiguous")
    assert lines[5].startswith(f"8 4096 4096 -> 1 | {fallback}: fallback for unaligned operands (lda = 4097")
    # 2. install the pack from that build, then a second consumer finds it with find_package (links only)
    prefix = tmp_path / "prefix"
    _cmake("--install", str(b1), "--prefix", str(prefix))
    assert (prefix / "include" / "cutegen_pack.h").is_file()
    assert list(prefix.rglob("cutegen_packConfig.cmake")) and list(prefix.rglob("libcutegen_pack.a"))
    b2 = tmp_path / "b2"
    _cmake("-S", str(CONSUMER), "-B", str(b2), f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release")
    _cmake("--build", str(b2), "-j", "2")
    out2 = subprocess.run([str(b2 / "pack_consumer"), *args], capture_output=True, text=True, timeout=60).stdout
    assert out2 == out
