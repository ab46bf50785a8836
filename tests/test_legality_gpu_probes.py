"""Rules from the H200 probes of 2026-11-26 (bench/probe_forms.py, bench/results/diagnose/2026-11-26-nvidia-h200-probes.json):
each tested on both sides of its boundary with the configurations that ran there."""
from cutegen.config import KernelConfig
from cutegen.legality import check_config
from cutegen.legality.wgmma import ACC_SERIALIZE_REGS
from cutegen.problem import GemmProblem

SQ = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})


def _cfg(tm, tn, sched, **kw):
    epi = "tma_warp_specialized_cooperative" if sched == "cooperative" else "tma_warp_specialized"
    return KernelConfig.from_dict({"tile_shape": [tm, tn, 64], "cluster_shape": [1, 1, 1], "stages": "auto",
                                   "mainloop_schedule": sched, "epilogue_schedule": epi,
                                   "tile_scheduler": "persistent", **kw})


def _rules(problem, cfg):
    """Enforced rules and warnings alike: the search treats both as broken (search/legality_analysis.py)."""
    rep = check_config(problem, cfg)
    return [v.rule_id for v in rep.violations + rep.warnings]


def test_accumulator_serialized_bound():
    assert ACC_SERIALIZE_REGS == 216
    # a warning, not a violation: the kernel computes correctly, slowly (the config oracle's ping-pong 128x256)
    rep = check_config(SQ, _cfg(192, 144, "pingpong"))
    assert rep.legal and "WGMMA-ACCUMULATOR-SERIALIZED" in [w.rule_id for w in rep.warnings]
    # 208 registers per MMA thread built on the H200 (ping-pong: one warpgroup of 128 threads holds 128x208)
    assert "WGMMA-ACCUMULATOR-SERIALIZED" not in _rules(SQ, _cfg(128, 208, "pingpong"))
    # cooperative: two warpgroups (256 threads) share 256x208 -> 208 each; built
    assert "WGMMA-ACCUMULATOR-SERIALIZED" not in _rules(SQ, _cfg(256, 208, "cooperative"))
    # 192x144 over 128 threads = 216: serialized (ptxas C7512), twice
    assert "WGMMA-ACCUMULATOR-SERIALIZED" in _rules(SQ, _cfg(192, 144, "pingpong"))
    # 256x224 over 256 threads = 224: serialized
    assert "WGMMA-ACCUMULATOR-SERIALIZED" in _rules(SQ, _cfg(256, 224, "cooperative"))
    # the swap-AB kernel mapped from cuBLAS's 192x144 tile is judged on its transposed problem: still refused
    p = GemmProblem.from_dict({"m": 257, "n": 37888, "k": 4096, "dtype": "bf16", "layout": "tn"})
    cfg = _cfg(192, 144, "pingpong", swap_ab=True, cluster_shape=[1, 2, 1], stages=5)
    assert "WGMMA-ACCUMULATOR-SERIALIZED" in _rules(p, cfg)


def test_interleaved_atom_needs_a_1x1_cluster():
    p = GemmProblem.from_dict({"m": 1000, "n": 2000, "k": 1024, "dtype": "bf16", "layout": "tn"})
    inter = {"smem_layout_a": "K_INTER", "smem_layout_b": "K_INTER"}
    # validated on the H200: 1x1, 64x136 ping-pong and 128x200 cooperative
    assert "SM90-SMEM-INTERLEAVE-FAULT" not in _rules(p, _cfg(64, 136, "pingpong", **inter))
    assert "SM90-SMEM-INTERLEAVE-FAULT" not in _rules(p, _cfg(128, 200, "cooperative", **inter))
    # faulted: a 2x1 and a 4x1 cluster
    assert "SM90-SMEM-INTERLEAVE-FAULT" in _rules(p, _cfg(64, 136, "pingpong", cluster_shape=[2, 1, 1], **inter))
    assert "SM90-SMEM-INTERLEAVE-FAULT" in _rules(p, _cfg(128, 200, "cooperative", cluster_shape=[4, 1, 1], **inter))
    # a swizzled atom with the same cluster is not this rule's business
    assert "SM90-SMEM-INTERLEAVE-FAULT" not in _rules(p, _cfg(128, 128, "cooperative", cluster_shape=[2, 1, 1]))
