"""Grouped GEMM rendering on the CPU: the explicit CUTLASS ptr-array types per config, the prep kernel per
layout, swap-AB's operand roles, scaled FP8, determinism, the renderer's refusal and the ABI's rule list."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cutegen.core import registry
from cutegen.errors import CutegenError
from cutegen.ops.grouped_gemm import abi
from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem

ROOT = Path(__file__).resolve().parent.parent
P = GroupedGemmProblem(8, 4096, 2048, 1024)
C = GroupedGemmConfig(128, 128, 64, 2, 1, "ptr_cooperative")


def _src(p=P, c=C) -> str:
    return registry.render(p, c).source


def test_explicit_ptr_array_types_from_the_config():
    s = _src()
    assert "using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;" in s
    assert "using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;" in s
    assert "using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;" in s
    assert "using TileShape = Shape<_128, _128, _64>;" in s and "using ClusterShape = Shape<_2, _1, _1>;" in s
    assert "StageCountAutoCarveout" in s and "RasterOrderOptions::Heuristic" in s
    pp = _src(c=GroupedGemmConfig(64, 256, 64, 1, 1, "ptr_pingpong", stages=5, raster="along_n"))
    assert "KernelPtrArrayTmaWarpSpecializedPingpong;" in pp and "PtrArrayTmaWarpSpecializedPingpong;" in pp
    assert "cutlass::gemm::collective::StageCount<5>" in pp and "RasterOrderOptions::AlongN" in pp
    # no host copy of the group shapes: the launch never synchronizes
    assert "{int(groups), shapes, nullptr}" in s


def test_swap_ab_swaps_the_operands_roles_and_d_layout():
    plain, swapped = _src(), _src(c=C.replace(swap_ab=True))
    assert "using LayoutD = cutlass::layout::RowMajor;" in plain and "a.ptr_a[i] = x;" in plain
    assert "using LayoutD = cutlass::layout::ColumnMajor;" in swapped and "a.ptr_a[i] = w;" in swapped
    assert "Shape3{int(a.N), int(m), int(a.K)}" in swapped and "Shape3{int(m), int(a.N), int(a.K)}" in plain


def test_the_prep_kernel_reads_offsets_or_counts_by_layout():
    offs, masked = _src(), _src(p=P.replace(layout="masked", tokens=64))
    assert "int64_t start = i == 0 ? 0 : a.sizes[i - 1];" in offs and "x_group_stride" in masked
    assert "a.sizes[i - 1]" not in masked and "const int64_t count = a.sizes[i];" in masked


def test_fp8_tensor_scale_is_a_per_group_alpha_from_the_device():
    s = _src(p=P.replace(dtype="e4m3", scale="tensor"), c=C.replace(tile_k=128))
    assert "using ElementInput = cutlass::float_e4m3_t;" in s
    assert "a.alpha[i] = a.scale_x[0] * a.scale_w[a.scale_w_count == 1 ? 0 : i];" in s
    assert "fusion.dAlpha = {cute::_0{}, cute::_0{}, 1};" in s
    assert "a.alpha[i]" not in _src()


def test_rendering_is_deterministic_and_the_hash_names_the_kernel_class_and_config():
    a, b = registry.render(P, C), registry.render(P, C)
    assert a.files == b.files
    # another size of the same class is the same kernel; another layout or config is another
    assert registry.render(P.replace(tokens=77, n=512), C).kernel_hash == a.kernel_hash
    assert registry.render(P.replace(layout="masked"), C).kernel_hash != a.kernel_hash
    assert registry.render(P, C.replace(swap_ab=True)).kernel_hash != a.kernel_hash
    man = json.loads(a.files["manifest.json"])
    assert man["problem"]["op"] == "grouped_gemm" and man["abi"] == "grouped_gemm" and man["legality"]["legal"]
    described = json.loads(re.search(r'kDescribe\[\] = ((?:"(?:[^"\\]|\\.)*"\s*)+);', a.source).group(1)
                           .replace('"\n    "', "").strip('"').replace('\\"', '"'))
    assert described["hash"] == a.kernel_hash and described["abi"] == "grouped_gemm"


def test_block128_renders_the_blockwise_mainloop_with_k_major_scales():
    p = P.replace(dtype="e4m3", scale="block128")
    c = C.replace(tile_k=128)        # GROUPED-BLOCK128-TILE-K wants tile_k 128, -TILE-N tile_n % 128 == 0
    assert registry.backend_refusals(p, c, "cutlass_builder") == []
    s = registry.render(p, c).source
    assert "KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;" in s
    assert "Sm90BlockwiseScaleConfig<1, 128, 128," in s and "cute::GMMA::Major::K, cute::GMMA::Major::K>" in s
    assert "cute::tuple<LayoutA*, LayoutSFA*>" in s and "a.ptr_sfa[i] = sx;" in s
    assert "const float* sx = a.scale_x + start * kblocks;" in s and "fusion.alpha = 1.0f;" in s
    # swapped: the weights are A, so their 128 x 128 blocks are the kernel's SFA
    sw = registry.render(p, c.replace(swap_ab=True, tile_m=128, tile_n=16, schedule="ptr_pingpong")).source
    assert "Sm90BlockwiseScaleConfig<128, 1, 128," in sw and "a.ptr_sfa[i] = sw;" in sw
    # swapped with 256-row tiles: CUTLASS's scale/accumulator shapes differ (nvcc 13.0); 128 renders
    refused = registry.backend_refusals(p, c.replace(swap_ab=True, tile_m=256, tile_n=16, schedule="ptr_pingpong"),
                                        "cutlass_builder")
    assert refused and refused[0].startswith("GROUPED-RENDER-BLOCK128-SWAP-TILE-M: block128 swapped with tile_m=256")
    assert registry.backend_refusals(p, c.replace(swap_ab=True, tile_m=128, tile_n=16), "cutlass_builder") == []
    assert registry.backend_refusals(p.replace(scale="tensor"), c.replace(swap_ab=True, tile_m=256, tile_n=16),
                                     "cutlass_builder") == []
    masked = registry.render(p.replace(layout="masked", tokens=64), c).source
    assert "const float* sx = a.scale_x + i * a.tokens * kblocks;" in masked
    assert "FP8Blockwise" not in _src() and "LayoutSFA" not in _src()


def test_manifest_reads_back_through_the_registry(tmp_path):
    from cutegen import manifest
    registry.render(P, C).write(tmp_path / "k")
    m = manifest.load(tmp_path / "k")
    assert m.problem == P and m.config == C and m.backend == "cutlass_builder"


def test_every_abi_rule_id_is_declared_and_every_declared_one_is_in_the_template():
    tpl = (ROOT / "templates" / "grouped_gemm" / "abi.inc.j2").read_text()
    assert set(re.findall(r"GROUPED-ABI-[A-Z-]+[A-Z]", tpl)) == set(abi.ABI_RULES)
    assert set(abi.EXPORTED_SYMBOLS) == {"cutegen_grouped_gemm", "cutegen_grouped_workspace_size",
                                         "cutegen_grouped_smem_bytes", "cutegen_describe", "cutegen_last_error"}
    kernel = (ROOT / "templates" / "grouped_gemm" / "kernel.cu.j2").read_text()
    for sym in abi.EXPORTED_SYMBOLS:
        assert f"CUTEGEN_EXPORT" in kernel and f" {sym}(" in kernel


def test_generate_op_renders_the_searchs_pick_and_refuses_gemm_flags(tmp_path, capsys):
    from cutegen.cli import main
    out = tmp_path / "k"
    problem = '{"groups": 8, "tokens": 256, "n": 512, "k": 1024}'
    assert main(["generate", "--op", "grouped_gemm", "--no-build", "-o", str(out), "--problem", problem]) == 0
    man = json.loads((out / "manifest.json").read_text())
    assert man["problem"]["op"] == "grouped_gemm" and (out / "kernel.cu").is_file()
    assert f"kernel {man['kernel_hash']} -> {out}" in capsys.readouterr().out
    assert main(["generate", "--op", "grouped_gemm", "--m", "4", "--problem", problem]) == 2
    assert "--problem: --op grouped_gemm takes its problem as --problem JSON (--m are GEMM flags)" in capsys.readouterr().err
    assert main(["generate", "--op", "grouped_gemm", "--problem", '{"groups": 0, "tokens": 1, "n": 8, "k": 8}']) == 2
    assert "--problem.groups: 0 is below the minimum 1" in capsys.readouterr().err
    cfg = '{"tile_m": 64, "tile_n": 128, "tile_k": 64, "schedule": "ptr_pingpong"}'
    assert main(["generate", "--op", "grouped_gemm", "--no-build", "-o", str(out), "--problem", problem,
                 "--config", cfg]) == 0
    assert json.loads((out / "manifest.json").read_text())["config"]["schedule"] == "ptr_pingpong"
