"""The grouped GEMM rules (legality/grouped_gemm.py): each on both sides of its boundary, and the GEMM rules
judged on the per-group GEMM through check_config (not copies of them)."""
from __future__ import annotations

import pytest

from cutegen.core import registry
from cutegen.legality import all_rules, check_config
from cutegen.legality.grouped_gemm import (GROUPED_GEMM_RULES, GroupedContext, LaunchContext,
                                           check_grouped, check_launch, gemm_view, grouped_stages,
                                           tensormap_workspace_bytes)
from cutegen.legality.resources import SMEM_PER_BLOCK
from cutegen.ops.grouped_gemm.config import GroupedGemmConfig as C
from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem as P

INT32_MAX = 2**31 - 1


def rules_of(problem, config) -> list[str]:
    return [v.rule_id for v in check_grouped(problem, config).violations]


def ctx_rules(ctx) -> list[str]:
    return [v.rule_id for v in GROUPED_GEMM_RULES.evaluate(ctx)]


def test_every_grouped_rule_has_an_id_summary_and_source():
    ids = [r.id for r in GROUPED_GEMM_RULES]
    assert len(ids) == len(set(ids)) == 9
    for r in GROUPED_GEMM_RULES:
        assert r.id.startswith("GROUPED-") and r.summary and r.source


def test_gemm_rule_list_is_unchanged_and_grouped_ids_are_global():
    # GEMM's own list holds no grouped rule; the registry's union of every operation refuses duplicate IDs
    assert not [r.id for r in all_rules() if r.id.startswith("GROUPED-")]
    ids = [r.id for r in registry.all_rules()]
    assert len(ids) == len(set(ids))
    assert "GROUPED-LD-ALIGN-K" in ids and "GROUPED-TENSORMAP-SLOT-PER-SM" in ids
    assert [r.id for r in registry.all_rules("gemm")] == [r.id for r in all_rules()]


# --- GROUPED-LD-ALIGN-K: K x bytes % 16 -------------------------------------------------------------------

@pytest.mark.parametrize("dtype,k,ok", [("bf16", 4096, True), ("bf16", 4100, False), ("bf16", 4104, True),
                                        ("e4m3", 4112, True), ("e4m3", 4104, False)])
def test_ld_align_k(dtype, k, ok):
    # bf16: 4100 x 2 = 8200 B (8200 % 16 = 8), 4104 x 2 = 8208 (= 513 x 16); e4m3: 4104 B (% 16 = 8), 4112 B
    p = P(8, 4096, k, 1024, dtype=dtype)
    c = C(128, 128, 64 if dtype == "bf16" else 128)
    assert ("GROUPED-LD-ALIGN-K" in rules_of(p, c)) is not ok


# --- GROUPED-LD-ALIGN-N: N x 2 % 16 (bf16 output rows) ----------------------------------------------------

@pytest.mark.parametrize("n,ok", [(14336, True), (14332, False), (14328, True), (14330, False)])
def test_ld_align_n(n, ok):
    # 14332 x 2 = 28664 (% 16 = 8), 14330 x 2 = 28660 (% 16 = 4), 14328 x 2 = 28656 = 1791 x 16
    assert ("GROUPED-LD-ALIGN-N" in rules_of(P(8, n, 4096, 1024), C())) is not ok


# --- GROUPED-GROUP-COUNT and GROUPED-OFFSETS-INT32: int32 ----------------------------------------------------
# The problem type caps groups at 1024 and extents at 2^31 - 1, so the int32 bounds are probed on the context.

@pytest.mark.parametrize("groups,ok", [(1, True), (0, False), (INT32_MAX, True), (INT32_MAX + 1, False)])
def test_group_count_bounds(groups, ok):
    ctx = GroupedContext(P(8, 4096, 4096, 1024), C())
    ctx.groups = groups
    assert ("GROUPED-GROUP-COUNT" in ctx_rules(ctx)) is not ok


@pytest.mark.parametrize("layout", ["offs", "masked"])
@pytest.mark.parametrize("tokens,ok", [(INT32_MAX, True), (INT32_MAX + 1, False)])
def test_offsets_int32(layout, tokens, ok):
    ctx = GroupedContext(P(8, 4096, 4096, 1024, layout=layout), C())
    ctx.tokens = tokens
    assert ("GROUPED-OFFSETS-INT32" in ctx_rules(ctx)) is not ok
    # a real problem at the bound is within it
    assert "GROUPED-OFFSETS-INT32" not in rules_of(P(8, 4096, 4096, INT32_MAX, layout=layout), C())


# --- GROUPED-CLUSTER-POW2 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("cm,cn,ok", [(2, 1, True), (4, 2, True), (3, 1, False), (1, 6, False)])
def test_cluster_pow2(cm, cn, ok):
    ctx = GroupedContext(P(8, 4096, 4096, 1024), C())
    ctx.cluster_m, ctx.cluster_n = cm, cn
    assert ("GROUPED-CLUSTER-POW2" in ctx_rules(ctx)) is not ok


# --- GROUPED-SMEM-CAPACITY --------------------------------------------------------------------------------------

def test_smem_capacity_real_configs_where_the_ptr_array_extras_decide():
    # e4m3 128x168x128 cooperative: 6 stages fit the plain kernel (231,808 B <= 232,448) but not the ptr-array
    # kernel (tensor maps, the scheduler's pipeline and responses: 232,704 B, nvcc's sizeof in the probe results);
    # 5 stages (194,816 B) fit both and break no rule
    p = P(8, 4096, 4096, 4096, dtype="e4m3")
    six = check_grouped(p, C(128, 168, 128, stages=6))
    five = check_grouped(p, C(128, 168, 128, stages=5))
    assert six.smem_bytes == 232704 and [v.rule_id for v in six.violations] == ["GROUPED-SMEM-CAPACITY"]
    assert five.smem_bytes == 194816 and five.legal
    view, kc = gemm_view(p, C(128, 168, 128))
    plain = check_config(view, kc.replace(stages=6))
    assert plain.smem_bytes == 231808 and plain.legal


@pytest.mark.parametrize("smem,ok", [(SMEM_PER_BLOCK, True), (SMEM_PER_BLOCK + 1, False)])
def test_smem_capacity_exact_bound(smem, ok):
    ctx = GroupedContext(P(8, 4096, 4096, 4096), C())
    ctx.__dict__["smem_bytes"] = smem           # the derived number at the bound
    assert ("GROUPED-SMEM-CAPACITY" in ctx_rules(ctx)) is not ok


def test_auto_stages_leave_the_ptr_array_carveout():
    # the ptr-array builder takes 384 B (A/B maps + the scheduler pipeline) off the capacity and the epilogue's
    # maps go into its carveout: e4m3 128x168x128 gets 5 stages where the plain builder gives 6
    from cutegen import collective_builder as cb
    p = P(8, 4096, 4096, 4096, dtype="e4m3")
    c = C(128, 168, 128)
    view, kc = gemm_view(p, c)
    assert cb.resolve_stages(view, kc) == 6 and grouped_stages(p, c) == 5
    # and the config's own maximum caps it (64x16x64 ping-pong: 22 by the formula, 16 in the config)
    assert grouped_stages(P(8, 4096, 4096, 4096), C(64, 16, 64, schedule="ptr_pingpong")) == 16


# --- GROUPED-TENSORMAP-TOOLKIT ----------------------------------------------------------------------------------

@pytest.mark.parametrize("version,ok", [((12, 3), True), ((12, 2), False), ((13, 0), True), ((11, 8), False)])
def test_tensormap_toolkit(version, ok):
    rules = [v.rule_id for v in check_grouped(P(8, 4096, 4096, 1024), C(), cuda_version=version).violations]
    assert ("GROUPED-TENSORMAP-TOOLKIT" in rules) is not ok


# --- FP8 block scales (example 68) ------------------------------------------------------------------------------

BLOCK = P(32, 4096, 7168, 8184, dtype="e4m3", scale="block128")


@pytest.mark.parametrize("tile_k,ok", [(128, True), (64, False), (256, False)])
def test_block128_tile_k(tile_k, ok):
    assert ("GROUPED-BLOCK128-TILE-K" in rules_of(BLOCK, C(128, 128, tile_k))) is not ok
    # per-tensor scaling has no such bound
    assert "GROUPED-BLOCK128-TILE-K" not in rules_of(BLOCK.replace(scale="tensor"), C(128, 128, tile_k))


@pytest.mark.parametrize("tile_n,ok", [(128, True), (256, True), (192, False), (64, False)])
def test_block128_tile_n(tile_n, ok):
    assert ("GROUPED-BLOCK128-TILE-N" in rules_of(BLOCK, C(128, tile_n, 128))) is not ok


@pytest.mark.parametrize("tile_m,ok", [(128, True), (256, True), (64, False)])
def test_block128_swapped_puts_the_weights_on_tile_m(tile_m, ok):
    sched = "ptr_cooperative" if tile_m >= 128 else "ptr_pingpong"
    cfg = C(tile_m, 16, 128, schedule=sched, swap_ab=True)   # tile_n 16 holds tokens: not a weight extent
    assert ("GROUPED-BLOCK128-TILE-N" in rules_of(BLOCK, cfg)) is not ok


# --- the GEMM rules, judged on the per-group GEMM ---------------------------------------------------------------

def test_gemm_rules_judge_the_per_group_gemm():
    p = P(8, 4096, 4096, 1024)
    assert "SM90-COOP-TILE-M" in rules_of(p, C(64, 128, 64, schedule="ptr_cooperative"))
    assert "SM90-COOP-TILE-M" not in rules_of(p, C(64, 128, 64, schedule="ptr_pingpong"))
    assert "RES-CLUSTER-SIZE" in rules_of(p, C(128, 128, 64, 8, 4))          # 32 CTAs > 16
    assert "RES-CLUSTER-SIZE" not in rules_of(p, C(128, 128, 64, 4, 4))      # 16
    # FP8 per-tensor: the promotion interval 4 must be a multiple of Tile_K / 32
    fp8 = P(8, 4096, 4096, 1024, dtype="e4m3", scale="tensor")
    assert "SM90-FP8-PROMOTION-INTERVAL" in rules_of(fp8, C(128, 128, 256))
    assert "SM90-FP8-PROMOTION-INTERVAL" not in rules_of(fp8, C(128, 128, 128))


def test_a_swapped_config_is_judged_on_the_transposed_gemm():
    # swapped, the kernel's tile is 64 rows of W by 16 tokens: the cooperative Tile_M >= 128 applies to it
    p = P(32, 4096, 7168, 504)
    assert "SM90-COOP-TILE-M" in rules_of(p, C(64, 16, 64, schedule="ptr_cooperative", swap_ab=True))
    assert check_grouped(p, C(128, 16, 64, schedule="ptr_cooperative", swap_ab=True)).legal


def test_legal_report_completes_the_stages():
    rep = check_grouped(P(8, 14336, 4096, 16382), C(128, 256, 64, 2, 1))
    assert rep.legal and rep.config.stages == rep.stages == 4 and rep.smem_bytes <= SMEM_PER_BLOCK


# --- launches: the tensor-map workspace -------------------------------------------------------------------------

def test_workspace_bytes():
    # 132 SMs: epilogue 2 D maps x 128 B x 132 = 33,792 (the renderer declares no C); mainloop A and B: 33,792;
    # both multiples of 64. With a C, 3 epilogue maps per SM
    assert tensormap_workspace_bytes(132) == 2 * 128 * 132 + 2 * 128 * 132 == 67584
    assert tensormap_workspace_bytes(132, has_c=True) == 84480


@pytest.mark.parametrize("address,ok", [(0x7F0000001000, True), (0x7F0000001080, True), (0x7F0000001040, False),
                                        (0x7F0000001010, False)])
def test_workspace_alignment(address, ok):
    rules = [v.rule_id for v in check_launch(LaunchContext(address, 1 << 20, 132, 132))]
    assert ("GROUPED-TENSORMAP-WORKSPACE-ALIGN" in rules) is not ok


@pytest.mark.parametrize("extra,ok", [(0, True), (-1, False)])
def test_workspace_size(extra, ok):
    need = tensormap_workspace_bytes(132)
    rules = [v.rule_id for v in check_launch(LaunchContext(0x1000, need + extra, 132, 132))]
    assert ("GROUPED-TENSORMAP-WORKSPACE-SIZE" in rules) is not ok


@pytest.mark.parametrize("grid,ok", [(132, True), (133, False), (128, True)])
def test_one_tensormap_slot_per_cta(grid, ok):
    rules = [v.rule_id for v in check_launch(LaunchContext(0x1000, 1 << 20, 132, grid))]
    assert ("GROUPED-TENSORMAP-SLOT-PER-SM" in rules) is not ok


def test_operation_parts_are_the_grouped_ones():
    op = registry.get("grouped_gemm")
    p = P(8, 4096, 4100, 1024)
    assert [v.rule_id for v in registry.check(p, C())][:1] == ["GROUPED-LD-ALIGN-K"]
    ids = registry.config_rule_ids("grouped_gemm")
    assert ids[0].startswith("GROUPED-") and "SM90-COOP-TILE-M" in ids and "SWAP-AB-BIAS" in ids
    assert op.cost(P(8, 4096, 4096, 1024), C()) > 0


# --- the shared-storage and stage model against nvcc -------------------------------------------------------------

def _probe_rows():
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "oracles" / "grouped_smem_probe_results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_stage_and_storage_model_matches_nvcc():
    # oracles/grouped_smem_probe.py: sizeof(GemmKernel::SharedStorage) and DispatchPolicy::Stages of the ptr-array
    # kernels as the grouped renderer declares them, compiled by nvcc 13.0 against CUTLASS 4.2
    rows = _probe_rows()
    assert len(rows) >= 15
    for r in rows:
        p = P(8, 4096, 4096, 4096, dtype=r["dtype"], scale=r.get("scale", "none"))
        c = C(**r["config"])
        ctx = GroupedContext(p, c)
        assert ctx.stages == min(r["measured"]["stages"], 16), (c.short_name(), ctx.stages, r["measured"])
        assert ctx.smem_bytes == r["measured"]["kernel_bytes"], (c.short_name(), ctx.smem_bytes, r["measured"])


def test_the_rules_judge_the_kernel_the_renderer_writes():
    # H200 run 1: while the template declared a bf16 C and the rules' per-group GEMM had none, 9 kernels the rules
    # passed failed CUTLASS's initialize (their shared memory was 7-8 KB larger). The two must agree: no C, and the
    # config's stages rendered as they were judged
    p = P(8, 4096, 4096, 1024)
    c = check_grouped(p, C(128, 192, 64, 1, 2)).config
    src = registry.render(p, c).source
    view, _ = gemm_view(p, c)
    assert view.dtype_c == "void" and "void, LayoutD*, AlignmentD," in src
    assert f"StageCount<{c.stages}>" in src
