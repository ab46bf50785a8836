"""The CuTe DSL backend without a GPU: rendering, refusals, AOT compile to an object, the linked library."""
from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import time

import pytest

from cutegen import GemmProblem, KernelConfig, SmemAtom
from cutegen import abi, dsl
from cutegen.errors import CutegenError
from cutegen.render import complete_config

BF16 = GemmProblem(m=4096, n=4096, k=4096)


def full(problem=BF16, **kw):
    base = dict(tile_shape=(128, 256, 64), cluster_shape=(1, 2, 1))
    base.update(kw)
    return complete_config(problem, KernelConfig(**base))


def has_dsl() -> bool:
    # find_spec, not import: importing the DSL here would fix its target arch for the whole session.
    import importlib.util
    try:
        dsl.dsl_runtime_archive()
    except CutegenError:
        return False
    return importlib.util.find_spec("cutlass") is not None


needs_dsl = pytest.mark.skipif(not has_dsl(), reason="nvidia-cutlass-dsl (the dsl extra) is not installed")


# --- rendering -------------------------------------------------------------------------------------
def test_render_is_deterministic_and_spells_out_the_config():
    cfg = full()
    a, b = dsl.render_dsl(BF16, cfg), dsl.render_dsl(BF16, cfg)
    assert a == b
    assert "TILE_MNK = (128, 256, 64)" in a
    assert "CLUSTER_MN = (1, 2)" in a
    assert f"AB_STAGES = {cfg.stages}" in a
    assert "MMA_INST_MNK = (64, 256, 16)" in a
    assert "WARPGROUP_LAYOUT = (2, 1, 1)" in a
    assert "SMEM_ATOM_A = SmemLayoutAtomKind.K_SW128" in a
    assert "A_MULTICAST = True" in a and "B_MULTICAST = False" in a
    assert "cutlass.BFloat16" in a
    assert "EPI_TILE = (128, 32)" in a
    compile(a, "kernel.py", "exec")  # the rendered module is valid Python


def test_each_choice_changes_the_rendering():
    cfg = full()
    base = dsl.render_dsl(BF16, cfg)
    s3 = dsl.render_dsl(BF16, cfg.replace(stages=3))
    assert "AB_STAGES = 3" in s3 and s3 != base
    sw64 = dsl.render_dsl(BF16, cfg.replace(smem_layout_a=SmemAtom("K", "SW64")))
    assert "SMEM_ATOM_A = SmemLayoutAtomKind.K_SW64" in sw64
    ws = dsl.render_dsl(BF16, full(tile_shape=(128, 128, 64), mainloop_schedule="warp_specialized",
                                   epilogue_schedule="tma_warp_specialized"))
    assert "PERSISTENT = False" in ws and "EPI_TILE = (64, 32)" in ws
    assert "PERSISTENT = True" in base
    # Ping-pong: alternate tiles per warpgroup, the mainloop ordered by PipelineOrder whose state is
    # assigned back on every arrive (DSL-LOOP-STATE; the H100 hang and fault of 2026-11-23/24).
    pp_cfg = full(tile_shape=(128, 128, 64), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    assert not [r for r in rule_ids(BF16, pp_cfg) if r.startswith("DSL-PINGPONG")]
    pp = dsl.render_dsl(BF16, pp_cfg)
    assert "PINGPONG = True" in pp and "advance_count=2" in pp and "PipelineOrder.create(" in pp
    assert pp.count("order_state = wg_order.arrive(order_state)") == 1 and "depth=1," in pp
    assert "PINGPONG = False" in base and "advance_count=2" not in base and "PipelineOrder" not in base
    nosmem = dsl.render_dsl(BF16, cfg.replace(epilogue_schedule="no_smem", epilogue_tile=None))
    assert "EPI_TMA_STORE = False" in nosmem and "tma_d" not in nosmem


def test_epilogue_variants_are_rendered():
    p = GemmProblem(m=1000, n=512, k=256, dtype_c="void", dtype_d="f32", layout_c="col", bias=True,
                    activation="gelu")
    src = dsl.render_dsl(p, full(p, tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1)))
    assert "HAS_C = False" in src and "mC" not in src
    assert "HAS_BIAS = True" in src and "mBias" in src
    assert "cute.math.erf" in src and "D_N_MAJOR = False" in src
    shim = dsl.render_dsl_abi(p, full(p, tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1)))
    assert "beta must be 0" in shim and "tBias" in shim


def test_abi_shim_matches_the_c_abi():
    cfg = full()
    shim = dsl.render_dsl_abi(BF16, cfg)
    assert shim == dsl.render_dsl_abi(BF16, cfg)
    for name in ("cutegen_gemm", "cutegen_workspace_size", "cutegen_describe", "cutegen_last_error"):
        assert f"CUTEGEN_EXPORT" in shim and f" {name}(" in shim
    # the same argument list as cutegen/abi.py declares
    sig = re.search(r"CUTEGEN_EXPORT int cutegen_gemm\((.*?)\)\s*\{", shim, re.S).group(1)
    decl = re.search(r"int cutegen_gemm\((.*?)\);", abi.C_DECLARATIONS, re.S).group(1)
    norm = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731
    assert norm(sig) == norm(decl)
    describe = json.loads(dsl.describe_json(BF16, cfg))
    assert describe["backend"] == "dsl" and describe["hash"] == dsl.kernel_hash(BF16, cfg)
    assert describe["config"] == cfg.to_dict() and "kDescribe[] =" in shim


def test_swizzle_is_cut_for_small_grids_like_cutlass():
    cfg = full(tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1), raster_swizzle=8)
    big = GemmProblem(m=768, n=8192, k=64)      # 6 x 64 CTA tiles: the full 8
    five = GemmProblem(m=640, n=8192, k=64)     # 5 x 64: 4 (get_log_swizzle_size needs 6 for 8)
    two = GemmProblem(m=256, n=8192, k=64)      # 2 x 64: 2
    one = GemmProblem(m=128, n=8192, k=64)      # 1 x 64: none
    for p, swz in ((big, 8), (five, 4), (two, 2), (one, 1)):
        assert f"RASTER_SWIZZLE = {swz} " in dsl.render_dsl(p, cfg)


def test_heuristic_raster_is_resolved_like_cutlass():
    tall = GemmProblem(m=8192, n=1024, k=1024)
    wide = GemmProblem(m=1024, n=8192, k=1024)
    cfg = full(tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1))
    assert "RASTER_ALONG_M = False" in dsl.render_dsl(tall, cfg)    # more M tiles: along N
    assert "RASTER_ALONG_M = True" in dsl.render_dsl(wide, cfg)     # more N tiles: along M
    assert "RASTER_ALONG_M = False" in dsl.render_dsl(wide, cfg.replace(raster_order="along_n"))


# --- refusals ----------------------------------------------------------------------------------------
def rule_ids(problem, cfg):
    return {r.split(":")[0] for r in dsl.dsl_supports(problem, cfg)}


def test_supported_configs_have_no_reasons():
    assert dsl.dsl_supports(BF16, full()) == []
    nt = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "layout": "nt"})
    assert dsl.dsl_supports(nt, full(nt, tile_shape=(128, 128, 64), cluster_shape=(2, 1, 1))) == []
    fp8 = GemmProblem.from_dict({"m": 1024, "n": 1024, "k": 1024, "dtype": "e4m3", "fp8_fast_accum": True})
    assert dsl.dsl_supports(fp8, full(fp8, tile_shape=(128, 128, 128), cluster_shape=(1, 1, 1))) == []


def test_fp8_needs_fast_accumulation_in_the_dsl():
    # the template has one accumulator: the numerics of fast accumulation, so it must be asked for
    slow = GemmProblem.from_dict({"m": 1024, "n": 1024, "k": 1024, "dtype": "e4m3"})
    fast = GemmProblem.from_dict({"m": 1024, "n": 1024, "k": 1024, "dtype": "e4m3", "fp8_fast_accum": True})
    cfg = dict(tile_shape=(128, 128, 128), cluster_shape=(1, 1, 1))
    assert "DSL-FP8-ACCUM" in rule_ids(slow, full(slow, **cfg))
    assert "DSL-FP8-ACCUM" not in rule_ids(fast, full(fast, **cfg))
    assert "DSL-FP8-ACCUM" not in rule_ids(BF16, full())


def test_refuses_what_the_template_cannot_express():
    tf32 = GemmProblem.from_dict({"m": 1024, "n": 1024, "k": 1024, "dtype": "tf32"})
    assert "DSL-TF32" in rule_ids(tf32, full(tf32, tile_shape=(128, 128, 32), cluster_shape=(1, 1, 1)))
    pp = full(mainloop_schedule="pingpong", tile_shape=(64, 128, 64), epilogue_schedule="tma_warp_specialized")
    assert "DSL-PINGPONG-WG" not in rule_ids(BF16, pp)
    assert "DSL-PINGPONG-WG" in rule_ids(BF16, pp.replace(warpgroup_layout=(2, 1, 1), tile_shape=(128, 128, 64)))
    assert "DSL-STREAMK" in rule_ids(BF16, full(tile_scheduler="stream_k"))
    assert "DSL-WG-COUNT" in rule_ids(BF16, full().replace(warpgroup_layout=(2, 2, 1)))
    assert "DSL-WG-K" in rule_ids(BF16, full().replace(warpgroup_layout=(2, 1, 2)))
    assert "DSL-CLUSTER-K" in rule_ids(BF16, full().replace(cluster_shape=(1, 2, 2)))
    reasons = dsl.dsl_supports(BF16, full().replace(stages="auto"))
    assert len(reasons) == 1 and reasons[0].startswith("DSL-COMPLETE") and "stages" in reasons[0]


def test_multicast_must_follow_the_cluster_both_ways():
    cfg = full()  # cluster (1, 2): A multicast, B not
    assert "DSL-MULTICAST" in rule_ids(BF16, cfg.replace(tma_a="tma"))
    assert "DSL-MULTICAST" in rule_ids(BF16, cfg.replace(tma_b="tma_multicast"))
    assert "DSL-MULTICAST" not in rule_ids(BF16, cfg)
    why = [r for r in dsl.dsl_supports(BF16, cfg.replace(tma_a="tma")) if r.startswith("DSL-MULTICAST")][0]
    assert "tma_a=tma" in why and "extent 2" in why


def test_epilogue_tile_must_cover_whole_warpgroup_rows():
    cfg = full()  # 2 warpgroups along M: 128 rows
    assert "DSL-EPI-TILE" in rule_ids(BF16, cfg.replace(epilogue_tile=(64, 32)))
    assert "DSL-EPI-TILE" not in rule_ids(BF16, cfg.replace(epilogue_tile=(128, 64)))
    assert "DSL-EPI-TILE" in rule_ids(BF16, cfg.replace(epilogue_tile=(128, 96)))  # 96 does not divide 256


def test_mma_tile_must_divide_the_cta_tile():
    cfg = full()
    assert "DSL-MMA-TILE" in rule_ids(BF16, cfg.replace(mma_instruction=(64, 96, 16)))
    assert "DSL-MMA-TILE" not in rule_ids(BF16, cfg.replace(mma_instruction=(64, 128, 16)))


def test_pingpong_doubles_the_epilogue_buffers():
    ws = full(tile_shape=(128, 128, 64), mainloop_schedule="warp_specialized", epilogue_schedule="tma_warp_specialized")
    pp = ws.replace(mainloop_schedule="pingpong")
    epi_bytes = 64 * 32 * 2 * 2   # (64, 32) bf16 subtiles, 2 stages
    assert dsl.dsl_smem_bytes(BF16, pp) - dsl.dsl_smem_bytes(BF16, ws) == epi_bytes
    assert dsl.dsl_consumer_warpgroups(pp) == 2 and dsl.dsl_consumer_warpgroups(ws) == 1
    assert "kThreads = 256" in dsl.render_dsl_abi(BF16, ws)
    assert "kThreads = 384" in dsl.render_dsl_abi(BF16, pp)     # producer + two math warpgroups


def test_smem_budget_boundary():
    cfg = full()
    per_stage = (128 * 64 + 256 * 64) * 2
    fits = max(s for s in range(1, 12) if dsl.dsl_smem_bytes(BF16, cfg.replace(stages=s)) <= dsl.SMEM_CAPACITY)
    assert "DSL-SMEM" not in rule_ids(BF16, cfg.replace(stages=fits))
    assert "DSL-SMEM" in rule_ids(BF16, cfg.replace(stages=fits + 1))
    # the estimate is the template's SharedStorage: barriers, A, B, then 2 D subtiles of 128x32 bf16
    assert dsl.dsl_smem_bytes(BF16, cfg.replace(stages=4)) == 1024 + 4 * per_stage + 2 * 128 * 32 * 2
    why = [r for r in dsl.dsl_supports(BF16, cfg.replace(stages=fits + 1)) if r.startswith("DSL-SMEM")][0]
    assert str(dsl.dsl_smem_bytes(BF16, cfg.replace(stages=fits + 1))) in why


def test_render_refuses_with_the_reason():
    with pytest.raises(CutegenError, match="DSL-STREAMK"):
        dsl.render_dsl(BF16, full(tile_scheduler="stream_k"))
    with pytest.raises(CutegenError, match="DSL-MULTICAST"):
        dsl.render_dsl_abi(BF16, full().replace(tma_a="tma"))


# --- ahead-of-time compile (no GPU) -------------------------------------------------------------------
@needs_dsl
def test_aot_compile_to_object(tmp_path):
    cfg = full()
    (tmp_path / "kernel.py").write_text(dsl.render_dsl(BF16, cfg))
    start = time.monotonic()
    timings = dsl.compile_object(tmp_path / "kernel.py", tmp_path, "k")
    wall = time.monotonic() - start
    header = (tmp_path / "k.h").read_text()
    obj = (tmp_path / "k.o").read_bytes()
    assert "cute_dsl_k_wrapper(k_Kernel_Module_t *module, k_Tensor_mA_t *mA, k_Tensor_mB_t *mB, " \
           "k_Tensor_mC_t *mC, k_Tensor_mD_t *mD, float alpha, float beta, int32_t max_active_clusters, " \
           "cudaStream_t stream)" in header
    assert "int32_t dynamic_shapes[3];" in header and "int64_t dynamic_strides[2];" in header
    assert obj[:4] == b"\x7fELF" and obj.find(b"\x7fELF", 4) > 0   # host object embedding a cubin
    assert b"-arch sm_90a" in obj
    print(f"\nDSL AOT compile: cute.compile {timings['compile_s']} s, export {timings['export_s']} s, "
          f"process wall {wall:.1f} s")
    assert timings["compile_s"] < 120


@needs_dsl
@pytest.mark.compile
def test_linked_library_exports_only_the_abi_and_checks_arguments_on_the_cpu(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    p = GemmProblem(m=512, n=384, k=256)
    cfg = full(p, tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1))
    so = dsl.build_dsl(p, cfg, tmp_path / "k", cache=tmp_path / "cache", check_legality=False)
    assert so.is_file()
    names = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    exported = sorted(line.split()[-1] for line in names.splitlines() if line.strip())
    assert exported == ["cutegen_describe", "cutegen_gemm", "cutegen_last_error", "cutegen_workspace_size"]
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    assert "libcuda" not in needed and "libcudart" not in needed and "cute_dsl" not in needed
    build = json.loads((tmp_path / "k" / "build.json").read_text())
    assert build["timings"]["compile_s"] > 0 and build["library_bytes"] < 60 << 20

    lib = abi.bind(ctypes.CDLL(str(so)))
    desc = json.loads(lib.cutegen_describe())
    assert desc["backend"] == "dsl" and desc["hash"] == dsl.kernel_hash(p, cfg)
    assert lib.cutegen_workspace_size(512, 384, 256, 1) == 0
    buf = 0x100000  # never dereferenced: these calls fail their checks before touching CUDA

    def call(**kw):
        a = dict(A=buf, B=buf, C=None, D=buf, M=512, N=384, K=256, batch=1, lda=256, ldb=256, ldc=384, ldd=384,
                 bsa=0, bsb=0, bsc=0, bsd=0, alpha=1.0, beta=0.0, bias=None, ws=None, wsb=0, stream=None)
        a.update(kw)
        return lib.cutegen_gemm(*a.values()), lib.cutegen_last_error().decode()

    status, msg = call(A=None)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("ABI-NULL")
    status, msg = call(lda=260)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("E15") and "260" in msg
    status, msg = call(lda=248)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("A10")
    status, msg = call(K=250, lda=256, ldb=256)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("E15") and "250" in msg
    status, msg = call(A=buf + 8)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("E18")
    status, msg = call(beta=1.0)
    assert status == abi.CANNOT_IMPLEMENT and "C is NULL" in msg
    status, msg = call(M=0)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("ABI-EXTENT")
    # A well-formed call on a machine without a GPU: the module cannot load; a status, not a crash.
    has_gpu = shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0
    if not has_gpu:
        status, msg = call()
        assert status == abi.INIT_FAILED and msg

    # the cache: a second build is a copy, byte for byte
    again = dsl.build_dsl(p, cfg, tmp_path / "k2", cache=tmp_path / "cache", check_legality=False)
    assert again.read_bytes() == so.read_bytes()
