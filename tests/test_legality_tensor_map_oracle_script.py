"""The oracle sweep's inputs and the GPU script's plumbing, without a GPU.

The script is run against a stand-in libcuda (a few lines of C) and a stand-in
cuda.bindings.driver, which is enough to show that it writes one record per case in order,
survives a case that kills the process, records what the binding refuses, and reads/writes gzip.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "data" / "tensor_map_cases.jsonl.gz"

sys.path.insert(0, str(ROOT / "oracles"))
import tensor_map_cases  # noqa: E402


def test_committed_cases_are_what_the_generator_writes(tmp_path):
    out = tmp_path / "cases.jsonl.gz"
    subprocess.run([sys.executable, str(ROOT / "oracles" / "tensor_map_cases.py"), str(out)], check=True,
                   capture_output=True)
    assert out.read_bytes() == CASES.read_bytes()


def test_sweep_covers_the_boundaries():
    cases = [json.loads(x) for x in gzip.open(CASES, "rt")]
    assert len(cases) >= 20000

    from cutegen.legality.tensor_map import enum_value

    def ints(field):
        return {enum_value(field, c[field]) for c in cases}

    assert set(range(16)) <= ints("data_type")
    assert set(range(0, 9)) <= ints("swizzle")
    assert set(range(0, 4)) <= ints("interleave")
    assert set(range(0, 5)) <= ints("l2_promotion")
    assert set(range(0, 3)) <= ints("oob_fill")
    assert set(range(0, 7)) <= {c["rank"] for c in cases}
    dims = {d for c in cases for d in c["global_dim"]}
    assert {0, 1, 2**32, 2**32 + 1} <= dims
    boxes = {b for c in cases for b in c["box_dim"]}
    assert {0, 1, 255, 256, 257} <= boxes
    for pos in range(5):
        assert set(range(10)) <= {c["element_strides"][pos] for c in cases if c["rank"] > pos}
    strides = {s for c in cases for s in c["global_strides"]}
    assert {2**40 - 16, 2**40, 2**40 + 16} <= strides
    assert {c["global_address"] % 32 for c in cases} >= {0, 8, 16, 24}
    assert 0 in {c["global_address"] for c in cases}


def test_sweep_has_a_dense_large_box_family():
    import math
    from cutegen.legality.tensor_map import TensorMap
    big = []
    for x in gzip.open(CASES, "rt"):
        t = TensorMap.from_dict(json.loads(x))
        if t.element_bits is None or not 1 <= t.rank <= 5:
            continue
        b = math.prod(t.box_dim) * t.element_bits // 8
        if 65536 <= b <= 2**21 and all(1 <= x <= 256 for x in t.box_dim):
            big.append((b, t.rank, t.interleave, max(t.element_strides), t.data_type))
    assert len(big) >= 5000
    assert {r for _, r, *_ in big} >= {2, 3, 4, 5}
    assert {i for _, _, i, *_ in big} >= {0, 1, 2}
    assert sum(1 for *_, e, _ in big if e > 1) >= 2000
    assert len({d for *_, d in big}) >= 8


FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <stdlib.h>
int cuTensorMapEncodeTiled(void* map, uint32_t dt, uint32_t rank, void* addr, const uint64_t* gdim,
                           const uint64_t* gstr, const uint32_t* box, const uint32_t* estr,
                           uint32_t il, uint32_t sw, uint32_t l2, uint32_t oob) {
  if (((uintptr_t)map) % 64) return 999;
  if (rank == 0 || rank > 5) return 1;
  if (rank == 4 && box[0] == 7) abort();
  if (gstr == 0) return 1;
  if (((uintptr_t)addr) % 16) return 1;
  for (uint32_t i = 0; i < rank; i++) if (box[i] == 0 || box[i] > 256) return 1;
  return 0;
}
"""

FAKE_DRIVER = r'''
import ctypes, enum, os
class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
class _U:
    BITS = 64
    def __init__(self, v):
        if not 0 <= v < 2**self.BITS: raise OverflowError("value too large")
        self.v = v
class cuuint64_t(_U): BITS = 64
class cuuint32_t(_U): BITS = 32
_lib = ctypes.CDLL(os.environ["FAKE_LIBCUDA"])
def cuInit(f): return (CUresult(0),)
def cuDeviceGet(i): return (CUresult(0), 0)
def cuDevicePrimaryCtxRetain(d): return (CUresult(0), 1)
def cuCtxSetCurrent(c): return (CUresult(0),)
def cuMemAlloc(n): return (CUresult(0), 0x7f0000000000)
def cuDeviceGetName(n, d): return (CUresult(0), b"Fake Hopper\0\0")
def cuDriverGetVersion(): return (CUresult(0), 13000)
def cuDeviceGetAttribute(a, d): return (CUresult(0), 9 if a == 75 else 0)
def cuTensorMapEncodeTiled(dt, rank, addr, gdim, gstr, box, estr, il, sw, l2, oob):
    if not 0 <= sw < 2**32: raise OverflowError("value too large to convert to CUtensorMapSwizzle_enum")
    buf = ctypes.create_string_buffer(256); p = (ctypes.addressof(buf) + 63) // 64 * 64
    mk = lambda T, xs: (T * len(xs))(*[x.v for x in xs]) if xs else None
    code = _lib.cuTensorMapEncodeTiled(ctypes.c_void_p(p), ctypes.c_uint32(dt), ctypes.c_uint32(rank),
        ctypes.c_void_p(addr), mk(ctypes.c_uint64, gdim), mk(ctypes.c_uint64, gstr), mk(ctypes.c_uint32, box),
        mk(ctypes.c_uint32, estr), ctypes.c_uint32(il), ctypes.c_uint32(sw), ctypes.c_uint32(l2), ctypes.c_uint32(oob))
    return (CUresult(code))
'''


@pytest.fixture
def fake_cuda(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler for the stand-in libcuda")
    (tmp_path / "fake.c").write_text(FAKE_LIBCUDA)
    lib = tmp_path / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fake.c")], check=True)
    pkg = tmp_path / "py" / "cuda" / "bindings"
    pkg.mkdir(parents=True)
    (tmp_path / "py" / "cuda" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("__version__ = 'fake'\n")
    (pkg / "driver.py").write_text(FAKE_DRIVER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "py"), LD_LIBRARY_PATH=str(tmp_path),
               FAKE_LIBCUDA=str(lib))
    return env


def test_oracle_script_records_every_case_and_survives_crashes(tmp_path, fake_cuda):
    legal = dict(data_type="CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", rank=2, global_address=16,
                 global_dim=[4096, 4096], global_strides=[8192], box_dim=[64, 128], element_strides=[1, 1],
                 interleave=0, swizzle=3, l2_promotion=2, oob_fill=0)
    crash = dict(legal, rank=4, global_dim=[64, 2, 2, 2], global_strides=[128, 256, 512], box_dim=[7, 1, 1, 1],
                 element_strides=[1, 1, 1, 1])
    rank1 = dict(legal, rank=1, global_dim=[4096], global_strides=[], box_dim=[64], element_strides=[1])
    lines = [json.dumps(legal), json.dumps(crash), json.dumps(dict(legal, swizzle=2**40)), "{oops",
             json.dumps(crash), json.dumps(rank1), json.dumps(dict(legal, global_address=8))]
    inp = tmp_path / "in.jsonl.gz"
    with gzip.open(inp, "wt") as f:
        f.write("".join(x + "\n" for x in lines))
    out = tmp_path / "out.jsonl.gz"
    p = subprocess.run([sys.executable, str(ROOT / "oracles" / "tensor_map_oracle.py"), str(inp), str(out)],
                       env=fake_cuda, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(x) for x in gzip.open(out, "rt")]
    assert recs[0]["meta"]["device"] == "Fake Hopper"
    body = recs[1:]
    assert [r["case"] for r in body] == list(range(len(lines)))
    assert body[0]["c_api"] == body[0]["binding"] == "CUDA_SUCCESS"
    assert body[1]["c_api"].startswith("CRASHED") and body[4]["c_api"].startswith("CRASHED")
    assert body[2]["binding"].startswith("RAISED OverflowError")
    assert body[2]["c_api"].startswith("SKIPPED swizzle")
    assert body[3]["c_api"].startswith("SKIPPED bad JSON")
    # Rank 1: the binding hands the driver a NULL globalStrides; the C call and the dummy stride do not.
    assert body[5]["binding"] == "CUDA_ERROR_INVALID_VALUE"
    assert body[5]["c_api"] == body[5]["binding_dummy_stride"] == "CUDA_SUCCESS"
    assert body[6]["c_api"] == "CUDA_ERROR_INVALID_VALUE"
    assert body[6]["c_api_alloc"] == "CUDA_ERROR_INVALID_VALUE"  # offset 8 kept inside the allocation


def test_committed_sweep_3_is_what_its_generator_writes(tmp_path):
    # (Sweep 2's generator takes minutes on a shared 2-core machine; it was checked by hand.)
    out = tmp_path / "cases3.jsonl.gz"
    subprocess.run([sys.executable, str(ROOT / "oracles" / "tensor_map_cases_3.py"), str(out)], check=True,
                   capture_output=True)
    assert out.read_bytes() == (ROOT / "tests" / "data" / "tensor_map_cases_3.jsonl.gz").read_bytes()
