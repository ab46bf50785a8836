"""One real nvcc build (1-2 minutes) of a grouped GEMM kernel rendered fresh: CUTLASS 4.2's ptr-array grouped
kernel with the prep kernel and the grouped C ABI compiles, exports the ABI, describes itself, and refuses
what the ABI's rules refuse before it touches the GPU (no GPU is needed for what is asserted here)."""
from __future__ import annotations

import ctypes
import json

import pytest

from cutegen import build as build_mod
from cutegen.core import registry
from cutegen.ops.grouped_gemm import abi
from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)

# decode-sized groups: the swap-AB kernel (tokens on the 32-wide N mode of the tile), the trivial search's
# pick for 32 experts x 16 tokens (bench/grouped_moe.py plan, 2026-11-26)
PROBLEM = GroupedGemmProblem(32, 4096, 7168, 512)
CONFIG = GroupedGemmConfig(128, 32, 64, 1, 1, "ptr_cooperative", swap_ab=True)
A = 0x10000          # a 16-byte aligned stand-in address: every call below is refused before any access


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("grouped")
    rendered = registry.render(PROBLEM, CONFIG)
    rendered.write(work / "kernel")
    summary = build_mod.build([work / "kernel"], jobs=1, progress=None)
    result = summary.results[0]
    assert result.ok, result.message
    return rendered, result.library, abi.bind(ctypes.CDLL(str(result.library)))


def _call(lib, *, x=A, w=A, d=A, sizes=A, groups=32, tokens=512, n=4096, k=7168, ldx=None, ldw=None, ldd=None,
          wgs=None, sx=None, sw=None, count=0):
    ldx = k if ldx is None else ldx
    ldw = k if ldw is None else ldw
    ldd = n if ldd is None else ldd
    wgs = n * ldw if wgs is None else wgs
    status = lib.cutegen_grouped_gemm(x, w, d, sizes, groups, tokens, n, k, ldx, ldw, ldd, 0, wgs, 0,
                                      sx, sw, count, None, 0, None)
    return status, lib.cutegen_last_error().decode()


def test_the_library_exports_the_grouped_abi_and_describes_itself(built):
    rendered, library, lib = built
    assert abi.is_grouped(lib)
    described = abi.describe(lib)
    assert described["abi"] == "grouped_gemm" and described["hash"] == rendered.kernel_hash
    assert described["problem"] == {"op": "grouped_gemm", "dtype": "bf16", "scale": "none", "layout": "offs",
                                    "target": "sm90a"}
    assert described["config"]["swap_ab"] is True
    data = library.read_bytes()
    assert b"prepare_groups" in data and b"device_kernel" in data   # the prep kernel and CUTLASS's kernel
    hgmma = build_mod.sass_instruction_count(library, "HGMMA")
    assert hgmma is None or hgmma > 0


@pytest.mark.parametrize("kw,status,rule", [
    (dict(groups=0), 1, "GROUPED-ABI-GROUPS"),
    (dict(groups=1025), 1, "GROUPED-ABI-GROUPS"),
    (dict(n=2**31), 1, "GROUPED-ABI-EXTENT"),
    (dict(tokens=2**31), 1, "GROUPED-ABI-EXTENT"),
    (dict(wgs=4096 * 7168 - 8), 1, "GROUPED-ABI-GROUP-STRIDE"),   # one row short of a whole expert: overlap
    (dict(wgs=4096 * 7168 + 4), 1, "GROUPED-ABI-GROUP-STRIDE"),   # 8 bytes past: not 16-byte aligned
    (dict(sizes=None), 1, "GROUPED-ABI-NULL"),
    (dict(sx=A, sw=A, count=1), 1, "GROUPED-ABI-SCALE"),
    (dict(x=A + 8), 1, "GROUPED-ABI-PTR-ALIGN"),
    (dict(k=7167), 1, "GROUPED-ABI-ROW-ALIGN"),          # 7167 x 2 bytes: rows not 16-byte multiples
    (dict(n=4100), 1, "GROUPED-ABI-ROW-ALIGN"),          # D rows of 8200 bytes
    (dict(ldx=7172), 1, "GROUPED-ABI-LD"),               # 7172 x 2 = 14344 bytes: not a multiple of 16
    (dict(ldd=4088), 1, "GROUPED-ABI-LD"),               # below the row
])
def test_the_library_refuses_with_the_rule(built, kw, status, rule):
    _, _, lib = built
    got, message = _call(lib, **kw)
    assert (got, message.split(":", 1)[0]) == (status, rule), message


def test_just_inside_the_bounds_is_not_refused_by_those_rules(built):
    # groups 1024 and 16-byte rows pass every host-side rule; without a GPU the call then stops at the
    # device query (status 3) or the workspace (2), never at a rule (1)
    _, _, lib = built
    for kw in (dict(groups=1024, k=7168 - 8, ldx=7168, ldw=7168), dict(groups=1), dict(tokens=2**31 - 1),
               dict(wgs=4096 * 7168 + 8)):
        got, message = _call(lib, **kw)
        assert got in (2, 3), (kw, message)
