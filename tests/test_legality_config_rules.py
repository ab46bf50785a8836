"""Every configuration rule on both sides of its boundary.

Each test changes one thing from a configuration the rule accepts to one it rejects (or
flags), and checks the rule's own ID -- not just "illegal" -- so a test cannot pass because
some other rule fired. Predicates that CUTLASS's own choices never break (setmaxnreg values,
arrival counts, the epilogue deadlock guard) are driven through a context with the derived
number changed, which is the only way to reach their other side.
"""
import dataclasses
import random

import pytest

from cutegen.collective_builder import complete
from cutegen.config import KernelConfig
from cutegen.legality import CONFIG_RULESETS, ConfigContext, all_rules, check_config, evaluate_config
from cutegen.problem import GemmProblem
from cutegen.smem import EpiloguePlan

BASE_P = dict(m=4096, n=4096, k=4096)
BASE_C = dict(tile_shape=(128, 128, 64))


def ids(problem=None, **config):
    """Broken rule IDs (enforced and warnings) for BASE_P/BASE_C with changes."""
    p = GemmProblem(**{**BASE_P, **(problem or {})})
    r = check_config(p, KernelConfig(**{**BASE_C, **config}))
    return {v.rule_id for v in r.violations} | {v.rule_id for v in r.warnings}


def ctx_ids(ctx):
    return {v.rule_id for v in evaluate_config(ctx)}


def base_ctx(problem=None, **config):
    p = GemmProblem(**{**BASE_P, **(problem or {})})
    c = KernelConfig(**{**BASE_C, **config})
    return ConfigContext(p, complete(p, c), c)


def test_base_is_legal():
    r = check_config(GemmProblem(**BASE_P), KernelConfig(**BASE_C))
    assert r.legal and r.violations == [] and r.warnings == []
    assert r.stages == 6 and r.smem_bytes == 230400


def test_rule_ids_unique_and_documented():
    rules = all_rules()
    assert len({r.id for r in rules}) == len(rules)
    for r in rules:
        assert r.summary and r.source and r.contract
    config_rules = [r for rs in CONFIG_RULESETS for r in rs]
    assert all(r.rulebook for r in config_rules)


# --- wgmma ----------------------------------------------------------------------------------------------

def test_target():
    ctx = base_ctx()
    assert "WGMMA-TARGET-SM90A" not in ctx_ids(ctx)
    object.__setattr__(ctx.problem, "target", "sm90")   # the model refuses it; the predicate must too
    assert "WGMMA-TARGET-SM90A" in ctx_ids(ctx)


def test_input_types():
    assert "WGMMA-INPUT-TYPES" not in ids({"dtype_a": "e4m3", "dtype_b": "e5m2"}, tile_shape=(128, 128, 128))
    assert "WGMMA-INPUT-TYPES" in ids({"dtype_a": "bf16", "dtype_b": "f16"})
    assert "WGMMA-INPUT-TYPES" not in ids({"dtype_a": "f16", "dtype_b": "f16"})


def test_shape_m_k_n():
    assert not {"WGMMA-SHAPE-M", "WGMMA-SHAPE-K"} & ids(mma_instruction=(64, 128, 16))
    assert "WGMMA-SHAPE-M" in ids(mma_instruction=(128, 128, 16))
    assert "WGMMA-SHAPE-K" in ids(mma_instruction=(64, 128, 8))
    assert "WGMMA-SHAPE-K" in ids({"dtype_a": "e4m3", "dtype_b": "e4m3"}, mma_instruction=(64, 128, 16))
    assert "WGMMA-SHAPE-N" not in ids(tile_shape=(128, 256, 64), mma_instruction=(64, 256, 16))
    assert "WGMMA-SHAPE-N" in ids(tile_shape=(128, 264, 64), mma_instruction=(64, 264, 16))
    assert "WGMMA-SHAPE-N" in ids(tile_shape=(128, 264, 64), mma_instruction=(64, 132, 16))


def test_tile_m_n_k():
    assert "WGMMA-TILE-M" not in ids(tile_shape=(64, 128, 64), mainloop_schedule="pingpong",
                                     epilogue_schedule="tma_warp_specialized")
    assert "WGMMA-TILE-M" in ids(tile_shape=(96, 128, 64), mainloop_schedule="pingpong",
                                 epilogue_schedule="tma_warp_specialized", stages=4)
    set_b = dict(smem_layout_b="K_SW128", mma_instruction=(64, 8, 16), epilogue_schedule="no_smem")
    assert "WGMMA-TILE-N" not in ids(tile_shape=(128, 8, 64), **set_b)
    assert "WGMMA-TILE-N" in ids(tile_shape=(128, 12, 64), **set_b)
    assert "WGMMA-TILE-K" not in ids(tile_shape=(128, 128, 16))
    assert "WGMMA-TILE-K" in ids(tile_shape=(128, 128, 24))
    assert "WGMMA-TILE-K" in ids({"dtype_a": "e4m3", "dtype_b": "e4m3"}, tile_shape=(128, 128, 16))


def test_tiled_mma_divides_and_warpgroups():
    assert "WGMMA-TILED-MMA-DIVIDES" not in ids(tile_shape=(256, 128, 64), epilogue_schedule="no_smem")
    assert "WGMMA-TILED-MMA-DIVIDES" in ids(tile_shape=(192, 128, 64), epilogue_schedule="no_smem")
    assert "WGMMA-WARPGROUP-LAYOUT" not in ids(warpgroup_layout=(2, 1, 1))
    assert "WGMMA-WARPGROUP-LAYOUT" in ids(warpgroup_layout=(1, 1, 1))
    assert "WGMMA-WARPGROUP-LAYOUT" in ids(tile_shape=(128, 128, 64), mainloop_schedule="pingpong",
                                           epilogue_schedule="tma_warp_specialized", warpgroup_layout=(2, 1, 1))


def test_smem_atom_majorness():
    tf32 = {"dtype_a": "tf32", "dtype_b": "tf32", "dtype_c": "f32", "dtype_d": "f32"}
    assert "WGMMA-OPERAND-MAJOR" not in ids(tf32, tile_shape=(128, 128, 32))
    assert "WGMMA-OPERAND-MAJOR" in ids(tf32, tile_shape=(128, 128, 32), smem_layout_a="MN_SW128")
    assert "WGMMA-SMEM-ATOM-MAJOR" not in ids(smem_layout_a="K_SW64")
    assert "WGMMA-SMEM-ATOM-MAJOR" in ids(smem_layout_a="MN_SW128")
    assert "WGMMA-SMEM-ATOM-MAJOR" not in ids({"layout_a": "col"}, smem_layout_a="MN_SW64")


def test_smem_atom_divides():
    assert "WGMMA-SMEM-ATOM-DIVIDES" not in ids(tile_shape=(128, 128, 32), smem_layout_a="K_SW64")
    assert "WGMMA-SMEM-ATOM-DIVIDES" in ids(tile_shape=(128, 128, 32), smem_layout_a="K_SW128")
    assert "WGMMA-SMEM-ATOM-DIVIDES" in ids({"layout_b": "row"}, tile_shape=(128, 96, 64), smem_layout_b="MN_SW128")
    assert "WGMMA-SMEM-ATOM-DIVIDES" not in ids({"layout_b": "row"}, tile_shape=(128, 96, 64), smem_layout_b="MN_SW64")


def test_instruction_divides_and_selector():
    assert "WGMMA-INSTRUCTION-DIVIDES-TILE" not in ids(tile_shape=(128, 192, 64), mma_instruction=(64, 64, 16))
    assert "WGMMA-INSTRUCTION-DIVIDES-TILE" in ids(tile_shape=(128, 192, 64), mma_instruction=(64, 128, 16))
    r = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(128, 12, 64), smem_layout_b="K_SW128"))
    assert not r.legal and r.config is None and [v.rule_id for v in r.violations] == ["WGMMA-SS-OP-SELECT"]
    ctx = base_ctx(tile_shape=(128, 8, 64))
    assert "WGMMA-SS-OP-SELECT" not in ctx_ids(ctx)
    ctx.tn = 12
    assert "WGMMA-SS-OP-SELECT" in ctx_ids(ctx)


def rule(rule_id):
    return next(r for r in all_rules() if r.id == rule_id)


def fires(rule_id, ctx) -> bool:
    """Does this one rule fire on ``ctx`` (a real context with a derived number changed)?"""
    return rule(rule_id).evaluate(ctx) is not None


# PTX ISA 8.x, setmaxnreg: "imm-reg-count ... must be in the range 24 to 256 (both inclusive)" and a
# multiple of 8. Each bound: the value on it, and the nearest value of the right granularity past it.
@pytest.mark.parametrize("regs,legal", [
    ((24, 232), True), ((16, 232), False), ((23, 232), False),        # lower bound, producer
    ((40, 24), True), ((40, 16), False),                              # lower bound, consumer
    ((40, 256), True), ((40, 264), False), ((256, 232), True), ((264, 232), False),   # upper bound
    ((40, 232), True), ((40, 236), False), ((44, 232), False),        # multiple of 8
])
def test_setmaxnreg_bounds(regs, legal):
    ctx = base_ctx()
    ctx.__dict__["setmaxnreg"] = regs
    assert fires("WGMMA-SETMAXNREG", ctx) is not legal
    assert ("WGMMA-SETMAXNREG" in ctx_ids(ctx)) is not legal


def test_setmaxnreg_and_register_pool():
    ctx = base_ctx()
    assert ctx.setmaxnreg == (40, 232)
    assert not {"WGMMA-SETMAXNREG", "RES-REGISTER-POOL"} & ctx_ids(ctx)
    ctx.__dict__["setmaxnreg"] = (24, 248)          # 128 x (24 + 2 x 248) = 66,560 > 65,536
    assert "RES-REGISTER-POOL" in ctx_ids(ctx)
    ctx.__dict__["setmaxnreg"] = (24, 240)          # CUTLASS's heavy split: exactly 64,512
    assert "RES-REGISTER-POOL" not in ctx_ids(ctx)
    assert base_ctx(tile_shape=(256, 256, 64)).setmaxnreg == (24, 240)   # 256 regs >= 208: heavy


def test_accumulator_registers_warning():
    pp = dict(mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    assert "WGMMA-ACCUMULATOR-REGISTERS" not in ids(tile_shape=(128, 128, 64), **pp)
    r = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(128, 256, 64), **pp))
    assert "WGMMA-ACCUMULATOR-REGISTERS" in [v.rule_id for v in r.warnings]
    assert "WGMMA-ACCUMULATOR-REGISTERS" not in [v.rule_id for v in r.violations]


# The consumer warpgroups' setmaxnreg is the register budget (CUTLASS sm90 cooperative/pingpong kernels:
# 232, or 240 with the 24-register producer); without setmaxnreg, each thread's share of the 65,536
# registers in steps of 8, at most 255 (256 threads: 255; 384 threads: 168). The rule fires when the
# live f32 accumulators reach the budget.
@pytest.mark.parametrize("budget,threads,live,fires_", [
    ((40, 232), 384, 231, False), ((40, 232), 384, 232, True),
    ((24, 240), 384, 239, False), ((24, 240), 384, 240, True),
    (None, 256, 254, False), (None, 256, 255, True),
    (None, 384, 167, False), (None, 384, 168, True),
])
def test_accumulator_registers_exact_budget(budget, threads, live, fires_):
    ctx = base_ctx()
    ctx.__dict__["setmaxnreg"] = budget
    ctx.__dict__["threads"] = threads
    ctx.__dict__["live_acc_regs_per_thread"] = live
    assert fires("WGMMA-ACCUMULATOR-REGISTERS", ctx) is fires_


def test_accumulator_registers_nearest_real_tiles():
    # bf16 cooperative, 256 MMA threads: 256 x N / 256 = N registers; N >= 208 takes the (24, 240) split.
    acc = "WGMMA-ACCUMULATOR-REGISTERS"
    assert base_ctx(tile_shape=(256, 232, 64)).live_acc_regs_per_thread == 232
    assert acc not in ids(tile_shape=(256, 232, 64))          # 232 < 240
    assert acc in ids(tile_shape=(256, 240, 64))              # 240 = 240
    # FP8 keeps two copies: 128 x N / 256 x 2 = N registers against the (40, 232) split.
    fp8 = {"dtype_a": "e4m3", "dtype_b": "e4m3"}
    assert base_ctx(fp8, tile_shape=(128, 232, 128)).live_acc_regs_per_thread == 232
    assert acc not in ids(fp8, tile_shape=(128, 224, 128))     # 224 < 232
    assert acc in ids(fp8, tile_shape=(128, 232, 128))         # 232 = 232


# --- mbarrier -------------------------------------------------------------------------------------------

def test_tx_count_range():
    assert "MBAR-TX-COUNT-RANGE" not in ids(tile_shape=(256, 248, 1024), stages=2)    # 1,032,192 B
    assert "MBAR-TX-COUNT-RANGE" in ids(tile_shape=(256, 256, 1024), stages=2)        # 1,048,576 B = 2^20


# PTX ISA, mbarrier: the tx-count is in the range [-(2^20-1), 2^20-1]. One stage's bytes on each side
# of 2^20-1 (fp8: one byte per element, so Tile_M + Tile_N = bytes with Tile_K = 1), and the same for
# the epilogue's C subtile.
@pytest.mark.parametrize("stage_bytes,fires_", [(2**20 - 1, False), (2**20, True)])
def test_tx_count_exact_bound(stage_bytes, fires_):
    ctx = base_ctx({"dtype_a": "e4m3", "dtype_b": "e4m3"})
    ctx.tm, ctx.tn, ctx.tk = stage_bytes - 128, 128, 1
    assert (ctx.bits_a * ctx.tm * ctx.tk + ctx.bits_b * ctx.tn * ctx.tk) // 8 == stage_bytes
    assert fires("MBAR-TX-COUNT-RANGE", ctx) is fires_


@pytest.mark.parametrize("epi_tile,fires_", [((2**20 - 1, 1), False), ((2**20, 1), True)])
def test_tx_count_exact_bound_epilogue(epi_tile, fires_):
    ctx = base_ctx()
    ctx.bits_c = 8                            # one byte per C element: the subtile's bytes are its elements
    ctx.epi_plan = dataclasses.replace(ctx.epi_plan, tile=epi_tile)
    assert fires("MBAR-TX-COUNT-RANGE", ctx) is fires_


def test_arrival_count():
    ctx = base_ctx(cluster_shape=(2, 1, 1))
    assert "MBAR-ARRIVAL-COUNT" not in ctx_ids(ctx)
    ctx.mma_threads = 0
    assert "MBAR-ARRIVAL-COUNT" in ctx_ids(ctx)


# PTX ISA, mbarrier.init: the expected arrival count is in [1, 2^20-1]. Single CTA: one arrival per MMA
# thread; a cluster: (cluster_M + cluster_N - 1) per consumer warpgroup (sm90_pipeline.hpp).
@pytest.mark.parametrize("cluster,mma_threads,fires_", [
    ((1, 1, 1), 1, False), ((1, 1, 1), 0, True),                           # lower bound
    ((1, 1, 1), 2**20 - 1, False), ((1, 1, 1), 2**20, True),               # upper bound
    ((2, 1, 1), 128 * (2**19 - 1), False), ((2, 1, 1), 128 * 2**19, True),  # 2 x warpgroups: 2^20-2 | 2^20
])
def test_arrival_count_bounds(cluster, mma_threads, fires_):
    ctx = base_ctx(cluster_shape=cluster)
    ctx.mma_threads = mma_threads
    assert fires("MBAR-ARRIVAL-COUNT", ctx) is fires_


def test_multicast_box_split():
    assert "MBAR-MULTICAST-TX-BYTES" not in ids(cluster_shape=(2, 1, 1))
    assert "MBAR-MULTICAST-TX-BYTES" not in ids(tile_shape=(128, 128, 128), cluster_shape=(1, 4, 1))
    assert "MBAR-MULTICAST-TX-BYTES" in ids(cluster_shape=(3, 1, 1))
    assert "MBAR-MULTICAST-TX-BYTES" in ids(cluster_shape=(1, 3, 1))


# --- resources ------------------------------------------------------------------------------------------

def test_smem_capacity():
    assert "RES-SMEM-CAPACITY" not in ids(stages=6)          # 230,400 B
    assert "RES-SMEM-CAPACITY" in ids(stages=7)              # 263,168 B
    # the pingpong 64x128x64 bf16 kernel: 8 stages fit (214,016 B), 9 do not (238,592 B > 232,448 B)
    pp = dict(tile_shape=(64, 128, 64), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    p = GemmProblem(**BASE_P)
    assert check_config(p, KernelConfig(stages=8, **pp)).smem_bytes == 214016
    assert check_config(p, KernelConfig(stages=9, **pp)).smem_bytes == 238592
    assert "RES-SMEM-CAPACITY" not in ids(stages=8, **pp)
    assert "RES-SMEM-CAPACITY" in ids(stages=9, **pp)


def test_threads_cluster():
    ws = dict(mainloop_schedule="warp_specialized", epilogue_schedule="tma_warp_specialized")
    assert "RES-THREADS-PER-BLOCK" not in ids(warpgroup_layout=(2, 1, 1), **ws)
    # 7 MMA warpgroups + the producer = 1,024 threads (the limit); 8 + 1 = 1,152
    assert "RES-THREADS-PER-BLOCK" not in ids(tile_shape=(448, 128, 64), warpgroup_layout=(7, 1, 1), **ws)
    assert "RES-THREADS-PER-BLOCK" in ids(tile_shape=(512, 128, 64), warpgroup_layout=(8, 1, 1), **ws)
    assert "RES-CLUSTER-SIZE" not in ids(cluster_shape=(4, 4, 1))
    assert "RES-CLUSTER-SIZE" in ids(cluster_shape=(8, 4, 1))
    r = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(128, 128, 64), cluster_shape=(4, 4, 1)))
    assert r.legal and [v.rule_id for v in r.warnings] == ["RES-CLUSTER-PORTABLE"]
    assert "RES-CLUSTER-PORTABLE" not in ids(cluster_shape=(2, 4, 1))


# CUDA C++ Programming Guide, Table "Technical specifications per compute capability": 1024 threads per
# block; the H200 refused a launch of 1025 (EMP:launch th1025).
@pytest.mark.parametrize("threads,fires_", [(1024, False), (1025, True)])
def test_threads_per_block_exact_bound(threads, fires_):
    ctx = base_ctx()
    ctx.__dict__["threads"] = threads
    assert fires("RES-THREADS-PER-BLOCK", ctx) is fires_


# --- cutlass_sm90 ---------------------------------------------------------------------------------------

def test_builder_route():
    fp8 = {"dtype_a": "e4m3", "dtype_b": "e4m3"}
    assert "SM90-RS-ROUTE" not in ids(fp8, tile_shape=(128, 128, 128))
    assert "SM90-RS-ROUTE" in ids({**fp8, "layout_a": "col"}, tile_shape=(128, 128, 128))
    assert "SM90-RS-ROUTE" not in ids({"layout_a": "col", "layout_b": "row"})       # 16-bit: SS, any majorness
    tf32 = {"dtype_a": "tf32", "dtype_b": "tf32", "dtype_c": "f32", "dtype_d": "f32"}
    assert "SM90-RS-ROUTE" not in ids({**tf32, "layout_a": "col", "layout_b": "row"}, tile_shape=(128, 128, 32))
    assert "SM90-RS-ROUTE" in ids({**tf32, "layout_a": "col", "layout_b": "col"}, tile_shape=(128, 128, 32))


def test_rs_transpose_b_k128():
    nt = {"dtype_a": "tf32", "dtype_b": "tf32", "dtype_c": "f32", "dtype_d": "f32", "layout_a": "col", "layout_b": "row"}
    assert "SM90-RS-TRANSPOSE-B-K128" not in ids(nt, tile_shape=(128, 128, 32))
    assert "SM90-RS-TRANSPOSE-B-K128" in ids(nt, tile_shape=(128, 128, 64))
    assert "SM90-RS-TRANSPOSE-B-K128" not in ids({**nt, "layout_a": "row", "layout_b": "col"}, tile_shape=(128, 128, 64))


def test_rs_smem_model_tf32_nt():
    """The RS mainloop aligns its arrays to the SW32 repeat (256 B): 164,096 B, not the SS 163,968
    (config oracle, H200: smem_mainloop 164096, kernel 231424, 5 stages)."""
    from cutegen.collective_builder import shared_storage
    p = GemmProblem(m=2048, n=2048, k=2048, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32",
                    layout_a="col", layout_b="row")
    s = shared_storage(p, KernelConfig(tile_shape=(128, 128, 32)))
    assert (s.mainloop, s.epilogue, s.kernel) == (164096, 67584, 231424)


def test_alignment_rules():
    assert "SM90-TMA-ALIGNMENT" not in ids({"alignment_a": 8})
    assert "SM90-TMA-ALIGNMENT" in ids({"alignment_a": 4})
    assert "SM90-TMA-ALIGNMENT" in ids({"alignment_b": 2})
    assert "SM90-EPILOGUE-ALIGNMENT" not in ids({"alignment_c": 8})
    assert "SM90-EPILOGUE-ALIGNMENT" in ids({"alignment_c": 4})
    assert "SM90-EPILOGUE-ALIGNMENT" not in ids({"alignment_c": 4}, epilogue_schedule="no_smem")


def test_stage_and_schedule_rules():
    assert "SM90-STAGES-MIN" not in ids(stages=2)
    assert "SM90-STAGES-MIN" in ids(stages=1)
    assert "SM90-STAGES-MIN" in ids(tile_shape=(256, 256, 128))      # auto gives 1 (rulebook H #11)
    assert "SM90-COOP-TILE-M" not in ids(tile_shape=(128, 128, 64))
    assert "SM90-COOP-TILE-M" in ids(tile_shape=(64, 128, 64))
    assert "SM90-STREAMK-COOPERATIVE" not in ids(tile_scheduler="stream_k")
    assert "SM90-STREAMK-COOPERATIVE" in ids(tile_scheduler="stream_k", mainloop_schedule="pingpong",
                                             epilogue_schedule="tma_warp_specialized")
    assert "SM90-STREAMK-COOPERATIVE" in ids(tile_scheduler="stream_k", mainloop_schedule="warp_specialized",
                                             epilogue_schedule="tma_warp_specialized")


def test_cluster_rules():
    assert "SM90-CLUSTER-SHAPE" not in ids(cluster_shape=(2, 1, 1))
    assert "SM90-CLUSTER-SHAPE" in ids(cluster_shape=(1, 1, 2))
    assert "SM90-CLUSTER-DIVIDES-TILE" not in ids(cluster_shape=(4, 1, 1))
    assert "SM90-CLUSTER-DIVIDES-TILE" in ids(cluster_shape=(3, 1, 1))
    assert "SM90-CLUSTER-DIVIDES-TILE" in ids(tile_shape=(128, 96, 64), cluster_shape=(1, 5, 1))
    assert "SM90-TMA-MULTICAST-CLUSTER" not in ids(cluster_shape=(1, 2, 1))
    assert "SM90-TMA-MULTICAST-CLUSTER" in ids(cluster_shape=(1, 2, 1), tma_a="tma")
    assert "SM90-TMA-MULTICAST-CLUSTER" in ids(cluster_shape=(2, 1, 1), tma_b="tma")
    assert "SM90-TMA-MULTICAST-CLUSTER" not in ids(cluster_shape=(2, 1, 1), tma_a="tma")


def test_epilogue_rules():
    assert "SM90-EPILOGUE-SCHEDULE-PAIR" not in ids(epilogue_schedule="no_smem")
    assert "SM90-EPILOGUE-SCHEDULE-PAIR" in ids(epilogue_schedule="tma_warp_specialized")
    # 192 rows: the cooperative epilogue's 128-row subtile does not divide them
    r = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(192, 128, 64)))
    assert [v.rule_id for v in r.violations] == ["SM90-EPILOGUE-TILE-DIVIDES"]
    assert "SM90-EPILOGUE-TILE-DIVIDES" in ids(tile_shape=(192, 128, 64), stages=3)
    assert "SM90-EPILOGUE-TILE-DIVIDES" not in ids(tile_shape=(256, 128, 64), stages=3)
    assert "SM90-EPILOGUE-TILE-EXPLICIT" not in ids(epilogue_tile=(128, 64))
    assert "SM90-EPILOGUE-TILE-EXPLICIT" in ids(epilogue_tile=(64, 64))
    assert "SM90-EPILOGUE-TILE-EXPLICIT" in ids(epilogue_tile=(128, 24), tile_shape=(128, 96, 64))
    # equal to what EpilogueTileAuto picks: fine even though N = 8 is not a multiple of 16
    assert "SM90-EPILOGUE-TILE-EXPLICIT" not in ids(tile_shape=(128, 8, 64), epilogue_tile=(128, 8))
    pp = dict(tile_shape=(64, 48, 64), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    assert "SM90-EPILOGUE-SMEM-ATOM" not in ids(epilogue_tile=(64, 16), **pp)
    assert "SM90-EPILOGUE-SMEM-ATOM" in ids(epilogue_tile=(64, 12), **pp)
    assert "SM90-EPILOGUE-SMEM-ATOM" in ids(epilogue_tile=(64, 12), stages=4, **pp)


def test_epilogue_deadlock_guard():
    ctx = base_ctx({"dtype_c": "void"})
    assert "SM90-EPILOGUE-DEADLOCK" not in ctx_ids(ctx)
    p = ctx.epi_plan
    ctx.epi_plan = EpiloguePlan(p.tile, p.epi_tiles, 2, 2, True, p.align_c, p.align_d, p.swizzle_c, p.swizzle_d)
    assert "SM90-EPILOGUE-DEADLOCK" in ctx_ids(ctx)


def test_nosmem_fusion():
    assert "SM90-NOSMEM-FUSION" not in ids({"bias": True, "activation": "relu"})
    assert "SM90-NOSMEM-FUSION" in ids({"bias": True}, epilogue_schedule="no_smem")
    assert "SM90-NOSMEM-FUSION" in ids({"activation": "gelu"}, epilogue_schedule="no_smem")


def test_can_implement_and_descriptors():
    # rulebook H #13: K = 4100 is not a multiple of 8 bf16 elements; 4104 is
    assert not {"SM90-CAN-IMPLEMENT-AB", "SM90-TMA-DESCRIPTOR-A"} & ids({"k": 4104})
    bad = ids({"k": 4100})
    assert {"SM90-CAN-IMPLEMENT-AB", "SM90-TMA-DESCRIPTOR-A", "SM90-TMA-DESCRIPTOR-B"} <= bad
    # M-major A: M is the contiguous extent
    assert "SM90-CAN-IMPLEMENT-AB" in ids({"layout_a": "col", "m": 4100})
    assert "SM90-CAN-IMPLEMENT-AB" not in ids({"layout_a": "row", "m": 4100})
    # C/D: row-major C is N-contiguous; f32 C with N = 4100 is 16,400 B per row (fine), bf16 D 8,200 B (not)
    got = ids({"n": 4100, "dtype_c": "f32", "dtype_d": "bf16"})
    assert "SM90-CAN-IMPLEMENT-CD" in got and "SM90-TMA-DESCRIPTOR-D" in got and "SM90-TMA-DESCRIPTOR-C" not in got
    assert "SM90-CAN-IMPLEMENT-CD" not in ids({"n": 4100, "layout_c": "col"})
    assert "SM90-CAN-IMPLEMENT-CD" not in ids({"n": 4100}, epilogue_schedule="no_smem")
    # a 512-row tile would need a 512-wide TMA box (boxDim <= 256)
    assert "SM90-TMA-DESCRIPTOR-A" in ids(tile_shape=(512, 64, 64), epilogue_schedule="no_smem", stages=2)
    assert "SM90-TMA-DESCRIPTOR-A" not in ids(tile_shape=(256, 64, 64), epilogue_schedule="no_smem", stages=2)


def test_smem_atom_fit():
    r = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(128, 12, 64)))
    assert [v.rule_id for v in r.violations] == ["SM90-SMEM-ATOM-FIT"] and r.config is None
    ctx = base_ctx(tile_shape=(128, 8, 64))
    assert "SM90-SMEM-ATOM-FIT" not in ctx_ids(ctx)
    ctx.tk = 4
    assert "SM90-SMEM-ATOM-FIT" in ctx_ids(ctx)


# --- properties of the whole ----------------------------------------------------------------------------

def test_random_configs_never_crash_and_are_deterministic():
    rng = random.Random(7)
    for _ in range(400):
        p = GemmProblem(m=rng.choice([1, 100, 2048, 4100]), n=rng.choice([8, 2050, 4096]), k=rng.choice([16, 4096, 4100]),
                        dtype_a=(d := rng.choice(["bf16", "f16", "e4m3", "tf32"])), dtype_b=d,
                        dtype_c=rng.choice(["bf16", "f32", "void"]), dtype_d=rng.choice(["bf16", "f32"]),
                        layout_a=rng.choice(["row", "col"]), layout_b=rng.choice(["row", "col"]),
                        layout_c=rng.choice(["row", "col"]))
        c = KernelConfig(tile_shape=(rng.choice([64, 128, 192, 256]), rng.choice([8, 16, 24, 96, 128, 200, 256]),
                                     rng.choice([16, 32, 64, 128])),
                         cluster_shape=(rng.choice([1, 2, 3, 4]), rng.choice([1, 2, 4]), 1),
                         stages=rng.choice(["auto", 1, 2, 4, 8]),
                         mainloop_schedule=rng.choice(["warp_specialized", "cooperative", "pingpong"]),
                         epilogue_schedule=rng.choice(["tma_warp_specialized", "tma_warp_specialized_cooperative", "no_smem"]),
                         tile_scheduler=rng.choice(["persistent", "stream_k"]))
        a, b = check_config(p, c).to_dict(), check_config(p, c).to_dict()
        assert a == b
        assert a["legal"] == (a["rules"] == [])
        if a["legal"]:
            assert a["smem_bytes"] <= 232448 and a["stages"] >= 2


def test_report_dict_shape():
    d = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(128, 128, 64), stages=7)).to_dict()
    assert set(d) == {"legal", "rules", "stages", "smem_bytes", "warnings", "reasons"}
    assert d["legal"] is False and d["rules"] == ["RES-SMEM-CAPACITY"] and d["stages"] == 7
    assert d["smem_bytes"] == 263168 and "263168" in d["reasons"][0]


def test_epilogue_fragment():
    # nvcc 13.0 on full kernels (device code included; build/exp3 in the session log): NT 128x24 coop and
    # NT 64x24 pingpong (FragmentSize 12) fail at sm90_epilogue_tma_warpspecialized.hpp:626;
    # TN 128x8 (4), NT 128x8 (4), NT 128x16 (8), TN pingpong 64x8 (4) compile.
    nt = {"layout_a": "col", "layout_b": "row"}          # MN-major B: no stage-slice failure at N = 24
    assert "SM90-EPILOGUE-FRAGMENT" in ids(nt, tile_shape=(128, 24, 64))        # 128x24 / 256 = 12
    assert "SM90-EPILOGUE-FRAGMENT" not in ids(nt, tile_shape=(128, 16, 64))    # 8
    pp = dict(mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized", tile_shape=(64, 96, 64))
    assert "SM90-EPILOGUE-FRAGMENT" in ids(epilogue_tile=(64, 48), **pp)       # 24
    assert "SM90-EPILOGUE-FRAGMENT" not in ids(epilogue_tile=(64, 32), **pp)   # 16
    assert "SM90-EPILOGUE-FRAGMENT" not in ids(nt, tile_shape=(128, 24, 64), epilogue_schedule="no_smem")


def test_first_violation_agrees_with_full_evaluation():
    from cutegen.legality import first_violation
    for cfg in (dict(), dict(stages=7), dict(cluster_shape=(3, 1, 1)), dict(tile_shape=(64, 128, 64))):
        ctx = base_ctx(**cfg)
        enforced = [v for v in evaluate_config(ctx) if v.enforced]
        first = first_violation(ctx)
        assert (first is None) == (not enforced)
        if first is not None:
            assert first.rule_id == enforced[0].rule_id


def test_descriptor_c_both_sides():
    # f32 C, N = 4098: 16,392-byte rows are not a multiple of 16; N = 4100: 16,400 bytes are
    assert "SM90-TMA-DESCRIPTOR-C" in ids({"n": 4098, "dtype_c": "f32", "dtype_d": "f32"})
    assert "SM90-TMA-DESCRIPTOR-C" not in ids({"n": 4100, "dtype_c": "f32", "dtype_d": "f32"})
    # no C tensor map at all for void C or the no-smem epilogue
    assert "SM90-TMA-DESCRIPTOR-C" not in ids({"n": 4098, "dtype_c": "void", "dtype_d": "f32"})
    assert "SM90-TMA-DESCRIPTOR-C" not in ids({"n": 4098, "dtype_c": "f32", "dtype_d": "f32"}, epilogue_schedule="no_smem")


def test_streamk_tma_epilogue_warning():
    r = check_config(GemmProblem(**BASE_P), KernelConfig(tile_shape=(128, 96, 128), stages=3, tile_scheduler="stream_k"))
    assert r.legal and [v.rule_id for v in r.warnings] == ["SM90-STREAMK-TMA-EPILOGUE-HANG"]
    assert "SM90-STREAMK-TMA-EPILOGUE-HANG" not in ids(tile_scheduler="stream_k", epilogue_schedule="no_smem")
    assert "SM90-STREAMK-TMA-EPILOGUE-HANG" not in ids()


def test_fp8_promotion_doubles_the_live_accumulator():
    from cutegen import GemmProblem, KernelConfig
    from cutegen.legality import check_config
    fp8 = GemmProblem(4096, 4096, 4096, dtype_a="e4m3", dtype_b="e4m3")
    bf16 = GemmProblem(4096, 4096, 4096)
    big = KernelConfig((128, 256, 128), (2, 1, 1))     # 128 f32 regs/thread: 256 live with promotion
    small = KernelConfig((128, 128, 128), (2, 1, 1))   # 64 -> 128 live
    warn = lambda p, c: {w.rule_id for w in check_config(p, c).warnings}  # noqa: E731
    assert "WGMMA-ACCUMULATOR-REGISTERS" in warn(fp8, big)
    assert "WGMMA-ACCUMULATOR-REGISTERS" not in warn(fp8, small)
    assert "WGMMA-ACCUMULATOR-REGISTERS" not in warn(bf16, big.replace(tile_shape=(128, 256, 64)))


def test_fp8_promotion_interval_divides_by_mmas_per_kblock():
    from cutegen import GemmProblem, KernelConfig
    from cutegen.legality import check_config
    fp8 = GemmProblem(4096, 4096, 4096, dtype_a="e4m3", dtype_b="e4m3")
    ids = lambda c: {v.rule_id for v in check_config(fp8, c).violations}  # noqa: E731
    for tk, bad in ((32, False), (64, False), (128, False), (96, True), (256, True)):
        cfg = KernelConfig((128, 64, tk), (1, 1, 1), stages=2)
        assert ("SM90-FP8-PROMOTION-INTERVAL" in ids(cfg)) == bad, tk
    assert "SM90-FP8-PROMOTION-INTERVAL" not in {v.rule_id for v in check_config(
        GemmProblem(4096, 4096, 4096), KernelConfig((128, 64, 256), (1, 1, 1), stages=2)).violations}
