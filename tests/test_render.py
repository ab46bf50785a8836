"""Rendering: deterministic bytes, refusal before rendering, every dtype/layout, the ABI, the manifest."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pytest

import cutegen.render as render_mod
from cutegen import GemmProblem, IllegalConfig, KernelConfig
from cutegen.errors import CutegenError, FieldError
from cutegen.legality.rule import Violation
from cutegen import manifest as manifest_mod

TOOLCHAIN = {"cutlass": "4.2.0", "nvcc": "13.0"}  # fixed so the tests do not depend on the machine


def problem(dtype="bf16", layout="tn", **kw) -> GemmProblem:
    return GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": dtype, "layout": layout, **kw})


BASE = KernelConfig(tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1), stages=4,
                    mainloop_schedule="cooperative", epilogue_schedule="tma_warp_specialized_cooperative")


def test_rendering_is_deterministic_across_processes():
    k1 = render_mod.render(problem(), BASE, toolchain=TOOLCHAIN)
    k2 = render_mod.render(problem(), BASE, toolchain=TOOLCHAIN)
    assert k1.files == k2.files
    # A fresh interpreter (new hash seed, new import order) gives the same bytes.
    code = ("import sys, cutegen.render as r; from cutegen import *; "
            "from tests.test_render import problem, BASE, TOOLCHAIN\n"
            "k = r.render(problem(), BASE, toolchain=TOOLCHAIN)\n"
            "sys.stdout.write(k.files['kernel.cu'] + '\\0' + k.files['manifest.json'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    cu, man = out.stdout.split("\0")
    assert cu == k1.files["kernel.cu"]
    assert man == k1.files["manifest.json"]


def test_rendered_files_have_no_timestamps_or_absolute_paths():
    k = render_mod.render(problem(), BASE, toolchain=TOOLCHAIN)
    for name, text in k.files.items():
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, name
        assert not re.search(r"20\d\d-\d\d-\d\d", text), name


def test_different_configs_render_different_kernels():
    a = render_mod.render(problem(), BASE, toolchain=TOOLCHAIN)
    b = render_mod.render(problem(), BASE.replace(stages=3), toolchain=TOOLCHAIN)
    assert a.kernel_hash != b.kernel_hash
    assert "constexpr int Stages = 4;" in a.source and "constexpr int Stages = 3;" in b.source


def test_illegal_config_is_refused_before_rendering(monkeypatch):
    called = []
    monkeypatch.setattr(render_mod, "render_source", lambda *a, **k: called.append(1) or "")
    violation = Violation("CUTLASS-COOP-TILE-M", "Tile_M=64 < 128 with the cooperative schedule")

    class Report:
        violations = [violation]

    monkeypatch.setitem(sys.modules, "cutegen.legality", type(sys)("cutegen.legality"))
    sys.modules["cutegen.legality"].check_config = lambda p, c: Report()
    with pytest.raises(IllegalConfig) as e:
        render_mod.render(problem(), BASE.replace(tile_shape=(64, 256, 64)), toolchain=TOOLCHAIN)
    assert "CUTLASS-COOP-TILE-M" in str(e.value) and "Tile_M=64" in str(e.value)
    assert called == []


def test_real_rules_refuse_cooperative_tile_m_64():
    with pytest.raises(IllegalConfig) as e:
        render_mod.render(problem(), BASE.replace(tile_shape=(64, 256, 64), cluster_shape=(1, 1, 1)),
                          toolchain=TOOLCHAIN)
    assert e.value.violations and all(v.rule_id for v in e.value.violations)


def test_real_rules_refuse_smem_overflow():
    # 256x256x128 bf16 needs 131,088 B per stage: 2 stages cannot fit in 227 KiB (rulebook E07/D02).
    with pytest.raises(IllegalConfig):
        render_mod.render(problem(), BASE.replace(tile_shape=(256, 256, 128), stages=2, cluster_shape=(1, 1, 1)),
                          toolchain=TOOLCHAIN)


def test_missing_legality_refuses_rather_than_renders_unchecked(monkeypatch):
    monkeypatch.setitem(sys.modules, "cutegen.legality", type(sys)("cutegen.legality"))  # no check_config
    with pytest.raises(CutegenError, match="legality"):
        render_mod.render(problem(), BASE, toolchain=TOOLCHAIN)


def test_unknown_backend_names_the_field():
    with pytest.raises(FieldError) as e:
        render_mod.render(problem(), BASE, backend="triton")
    assert e.value.field == "backend"


# Every dtype with every layout the rules allow: 16-bit inputs may be MN-major in shared memory,
# tf32 and fp8 have no transposed WGMMA (rulebook B07) and are TN only.
CASES = [(dt, lay) for dt in ("bf16", "f16") for lay in ("tn", "nt", "nn", "tt")] + \
        [("tf32", "tn"), ("e4m3", "tn"), ("e5m2", "tn")]


@pytest.mark.parametrize("dtype,layout", CASES)
def test_every_supported_dtype_and_layout_renders(dtype, layout):
    p = problem(dtype, layout)
    cfg = KernelConfig(tile_shape=(128, 128, 64), cluster_shape=(1, 2, 1), mainloop_schedule="cooperative",
                       epilogue_schedule="tma_warp_specialized_cooperative")
    k = render_mod.render(p, cfg, toolchain=TOOLCHAIN)
    src = k.source
    mma = {"bf16": "BF16BF16", "f16": "F16F16", "tf32": "TF32TF32", "e4m3": "E4M3E4M3", "e5m2": "E5M2E5M2"}[dtype]
    kk = {"bf16": 16, "f16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32}[dtype]
    assert re.search(rf"using MmaAtom = cute::SM90_64x\d+x{kk}_F32{mma}_SS", src)
    major_a = "K" if p.a_k_major else "MN"
    major_b = "K" if p.b_k_major else "MN"
    assert f"Layout_{major_a}_SW" in src.split("SmemLayoutAtomA =")[1].split(";")[0]
    assert f"Layout_{major_b}_SW" in src.split("SmemLayoutAtomB =")[1].split(";")[0]
    if dtype in ("bf16", "f16"):
        assert f"cute::GMMA::Major::{major_a}, cute::GMMA::Major::{major_b}>" in src
    else:
        assert "_SS_TN<>" in src
    # cluster 1x2: A is multicast (along N), B is not (rulebook A27).
    assert "using GmemTiledCopyA = cute::SM90_TMA_LOAD_MULTICAST;" in src
    assert "using GmemTiledCopyB = cute::SM90_TMA_LOAD;" in src
    fp8 = dtype in ("e4m3", "e5m2")
    assert ("MainloopSm90TmaGmmaWarpSpecializedFP8<" in src) == fp8
    if dtype == "tf32":
        assert "using ElementA = float;" in src and "using ElementAMma = cutlass::tfloat32_t;" in src


@pytest.mark.parametrize("dtype,layout", [("tf32", "nt"), ("e4m3", "nn")])
def test_transposed_tf32_and_fp8_are_refused(dtype, layout):
    """No transposed WGMMA for tf32/fp8 (B07): the rules or the completion must refuse, not render."""
    with pytest.raises((IllegalConfig, CutegenError)):
        render_mod.render(problem(dtype, layout), KernelConfig(tile_shape=(128, 128, 64)), toolchain=TOOLCHAIN)


ABI_SYMBOLS = ("cutegen_gemm", "cutegen_workspace_size", "cutegen_describe", "cutegen_last_error")


@pytest.mark.parametrize("backend", ["cutlass", "cutlass_builder"])
def test_abi_symbols_and_describe_json_are_in_the_source(backend):
    k = render_mod.render(problem(), BASE, backend=backend, toolchain=TOOLCHAIN)
    for sym in ABI_SYMBOLS:
        assert re.search(rf"CUTEGEN_EXPORT [\w\s\*]+\b{sym}\(", k.source), sym
    # The describe string is a C literal of the JSON the ABI promises.
    m = re.search(r"constexpr char kDescribe\[\] = (.*?);\n", k.source, re.S)
    literal = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
    desc = json.loads(literal.encode().decode("unicode_escape"))
    assert desc["backend"] == backend and desc["hash"] == k.kernel_hash
    # Sizes are run-time arguments: the kernel describes what it depends on, not one problem's M, N, K.
    assert desc["problem"] == problem().kernel_key()
    assert "m" not in desc["problem"] and "k" not in desc["problem"]
    # The ABI's status codes are all produced by the template.
    for status in ("fail(1,", "fail(2,", "fail(3,", "fail(4,"):
        assert status in k.source


def test_builder_baseline_leaves_the_mainloop_to_cutlass():
    k = render_mod.render(problem(), KernelConfig(tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1)),
                          backend="cutlass_builder", toolchain=TOOLCHAIN)
    src = k.source
    assert "cutlass::gemm::collective::CollectiveBuilder<" in src
    assert "StageCountAutoCarveout<" in src
    assert "using TileShape = Shape<_128, _256, _64>;" in src and "using ClusterShape = Shape<_2, _1, _1>;" in src
    assert "SmemLayoutAtomA" not in src  # the builder picks it
    explicit = render_mod.render(problem(), BASE, toolchain=TOOLCHAIN).source
    assert "using CollectiveMainloop = cutlass::gemm::collective::CollectiveMma<" in explicit


def test_explicit_kernel_asserts_builder_agreement_only_where_the_choices_coincide():
    same = render_mod.render(problem(), BASE, toolchain=TOOLCHAIN).source
    assert "static_assert(cute::is_same_v<BuilderMainloop, CollectiveMainloop>" in same
    # The builder would take WGMMA N = 256 for Tile_N = 256; a config with N = 128 is cutegen's own.
    own = BASE.replace(mma_instruction=(64, 128, 16))
    other = render_mod.render(problem(), own, toolchain=TOOLCHAIN).source
    assert "BuilderMainloop" not in other
    assert "using MmaAtom = cute::SM90_64x128x16_F32BF16BF16_SS" in other


def test_manifest_records_what_and_why():
    k = render_mod.render(problem(), BASE, cost={"seconds": 0.000123456789123, "tflops": 700.5},
                          toolchain=TOOLCHAIN)
    man = json.loads(k.files["manifest.json"])
    assert man["problem"] == problem().to_dict()
    assert KernelConfig.from_dict(man["config"]) == k.config and k.config.is_complete
    assert man["files"]["kernel.cu"]["sha256"] == hashlib.sha256(k.source.encode()).hexdigest()
    assert man["toolchain"] == TOOLCHAIN and man["cutegen"]
    assert man["legality"]["legal"] is True
    assert man["cost"] == {"seconds": 0.000123457, "tflops": 700.5}
    assert man["hash"] == man["kernel_hash"] == k.kernel_hash
    assert k.files["manifest.json"] == manifest_mod.dumps(man)  # sorted keys, stable formatting


def test_render_from_stored_manifest_gives_the_same_bytes(tmp_path):
    k = render_mod.render(problem("f16", "nt", bias=True, activation="relu"),
                          BASE.replace(stages="auto"), cost=1.5, toolchain=TOOLCHAIN)
    k.write(tmp_path)
    again = render_mod.render_manifest(tmp_path)
    assert again.files == k.files
    assert again.differences(tmp_path) == []
    (tmp_path / "kernel.cu").write_text(k.source.replace("Stages", "Stagez", 1))
    assert again.differences(tmp_path) == [tmp_path / "kernel.cu"]


@pytest.mark.parametrize("bias,act,expect", [
    (False, "none", "fusion::LinearCombination<ElementD, ElementCompute, ElementC, ElementCompute>"),
    (False, "relu", "fusion::LinCombEltAct<cutlass::epilogue::thread::ReLu,"),
    (True, "gelu", "fusion::LinCombPerRowBiasEltAct<cutlass::epilogue::thread::GELU,"),
    (True, "none", "fusion::LinCombPerRowBiasEltAct<cutlass::epilogue::thread::Identity,"),
])
def test_epilogue_fusion_follows_the_problem(bias, act, expect):
    k = render_mod.render(problem(bias=bias, activation=act), BASE, toolchain=TOOLCHAIN)
    assert expect in k.source
    assert ("args.epilogue.thread.bias_ptr" in k.source) == bias


def test_void_c_kernel_has_no_c_pointer():
    k = render_mod.render(problem(dtype_c="void"), BASE, toolchain=TOOLCHAIN)
    assert "using ElementC = void;" in k.source
    assert "args.epilogue.ptr_C = nullptr;" in k.source
    assert "beta must be 0" in k.source


def test_epilogue_tile_auto_matches_cutlass_rule():
    p = problem()
    coop = BASE
    assert render_mod.epilogue_tile(p, coop) == (128, 32)
    pp = BASE.replace(tile_shape=(64, 40, 64), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    assert render_mod.epilogue_tile(p, pp) == (64, 8)       # gcd(min(32, 40), 40)
    # StagesC/StagesD (sm90_builder.inl): 128x256 / 128x32 = 8 epilogue tiles; bf16 C and D reuse smem.
    assert render_mod.epilogue_stages(p, coop, (128, 32)) == (4, 2)
    assert render_mod.epilogue_stages(problem(dtype_c="void"), coop, (128, 32)) == (4, 2)
    assert render_mod.epilogue_stages(p, BASE.replace(tile_shape=(128, 32, 64)), (128, 32)) == (2, 1)
    assert render_mod.epilogue_stages(problem(dtype_c="f32", dtype_d="bf16"), BASE.replace(tile_shape=(128, 64, 64)),
                                      (128, 32)) == (2, 2)


def test_extended_wgmma_n_turns_on_the_cute_macro():
    cfg = KernelConfig(tile_shape=(128, 192, 64), cluster_shape=(1, 1, 1), stages=4,
                       mma_instruction=(64, 192, 16))
    assert "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" not in render_mod.render(problem(), cfg, toolchain=TOOLCHAIN).source
    cfg = KernelConfig(tile_shape=(128, 160, 64), cluster_shape=(1, 1, 1), stages=4,
                       mma_instruction=(64, 160, 16))
    k = render_mod.render(problem(), cfg, toolchain=TOOLCHAIN)
    assert "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1" in k.source


def test_render_does_not_import_egglog_or_search(tmp_path):
    """The GPU machine has no egglog: importing build/render and re-rendering a stored manifest
    (completion and legality included) must not need it."""
    render_mod.render(problem(), BASE, toolchain=TOOLCHAIN).write(tmp_path)
    code = ("import sys, cutegen.render, cutegen.build, cutegen.manifest\n"
            f"k = cutegen.render.render_manifest({str(tmp_path)!r})\n"
            "assert k.differences(" + repr(str(tmp_path)) + ") == [], 'drift'\n"
            "bad = [m for m in sys.modules if m.split('.')[0] == 'egglog' or m.startswith('cutegen.search')]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_cstring_escapes_quotes_and_backslashes():
    lit = render_mod._cstring('{"a":"b\\\\c"}')
    assert lit == '"{\\"a\\":\\"b\\\\\\\\c\\"}"'
    # non-ASCII and control characters (a pack entry's name, say) become the octal escapes of their UTF-8 bytes,
    # three digits each, so a following digit cannot join the escape
    assert render_mod._cstring("caf\u00e9") == '"caf\\303\\251"'
    assert render_mod._cstring("a\tb\u00e91") == '"a\\tb\\303\\2511"'


def _sweep():
    tiles = [(64, 128, 64), (128, 128, 64), (128, 256, 64), (256, 128, 64), (128, 192, 64), (64, 64, 128),
             (128, 64, 128), (128, 40, 64), (192, 128, 64), (128, 128, 128), (64, 256, 32)]
    schedules = [("cooperative", "tma_warp_specialized_cooperative", "persistent"),
                 ("cooperative", "tma_warp_specialized_cooperative", "stream_k"),
                 ("cooperative", "no_smem", "persistent"),
                 ("pingpong", "tma_warp_specialized", "persistent"),
                 ("warp_specialized", "no_smem", "persistent")]
    for dtype, layout in CASES:
        for tile in tiles:
            for cluster in ((1, 1, 1), (2, 1, 1), (1, 2, 1)):
                for ml, ep, ts in schedules:
                    yield dtype, layout, KernelConfig(tile_shape=tile, cluster_shape=cluster, mainloop_schedule=ml,
                                                      epilogue_schedule=ep, tile_scheduler=ts)


def test_every_legal_config_of_a_sweep_renders():
    """Whatever the rules accept, the renderer must be able to write (the search may pick any of it)."""
    from cutegen.legality import check_config
    rendered = refused = 0
    for dtype, layout, cfg in _sweep():
        p = problem(dtype, layout)
        report = check_config(p, cfg)
        if report.violations:
            with pytest.raises((IllegalConfig, CutegenError)):
                render_mod.render(p, cfg, toolchain=TOOLCHAIN)
            refused += 1
            continue
        k = render_mod.render(p, cfg, toolchain=TOOLCHAIN)
        t = cfg.tile_shape
        assert f"using TileShape = Shape<_{t[0]}, _{t[1]}, _{t[2]}>;" in k.source
        assert f"constexpr int Stages = {k.config.stages};" in k.source
        rendered += 1
    assert rendered > 50 and refused > 50, (rendered, refused)


def test_explicit_backend_refuses_the_register_a_route_the_builder_takes():
    """tf32 NT goes to CUTLASS's RS mainloop (it compiled and ran through the builder on an H200); the
    explicit-type template spells out SS only, and a kernel rendered that way did not compile."""
    from cutegen.errors import CutegenError
    tf32_nt = GemmProblem(2048, 2048, 2048, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32",
                          layout_a="col", layout_b="row")
    cfg = KernelConfig((128, 128, 32), (1, 1, 1))
    assert render_mod.cutlass_supports(tf32_nt, render_mod.complete_config(tf32_nt, cfg))[0].startswith(
        "CUTLASS-EXPLICIT-RS")
    with pytest.raises(CutegenError, match="CUTLASS-EXPLICIT-RS"):
        render_mod.render(tf32_nt, cfg, toolchain=TOOLCHAIN)
    assert "CollectiveBuilder<" in render_mod.render(tf32_nt, cfg, backend="cutlass_builder", toolchain=TOOLCHAIN).source
    tf32_tn = tf32_nt.replace(layout_a="row", layout_b="col")
    assert render_mod.cutlass_supports(tf32_tn, render_mod.complete_config(tf32_tn, cfg)) == []
