"""Variable-length attention (issue 25, varlen): the masks' tile model against every (query, key) pair, the bench's
float32 reference against torch's SDPA per sequence, the renderer's varlen template and its C ABI declarations,
the pipeline read-back of a varlen kernel, and the PyTorch entry point's one-line refusals. No GPU: the kernel
itself is validated by bench/gpu_varlen.sh (bench/varlen_bench.py validate).
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from cutegen.ops.attention import abi
from cutegen.ops.attention.config import AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.render import REFUSALS, backend_refusals, render
from cutegen.ops.attention.varlen import causal_pairs_bottom_right, pairs, tile_trips, visible_keys

REPO = Path(__file__).resolve().parent.parent
VARLEN = AttentionProblem(batch=8, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096, head_dim=128, causal=True,
                          varlen=True)
LENGTHS = [0, 1, 2, 7, 63, 64, 65, 127, 128, 129, 191, 192, 193, 300, 513]


def _bench():
    spec = importlib.util.spec_from_file_location("varlen_bench", REPO / "bench" / "varlen_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the masks' tile counts (a Python mirror of fmha_varlen_sm90.hpp) against every pair ---------------------------
def _tile_ok(trips_fn, m, tq, tkv, lq, lk, causal):
    """Every key a valid row of Q tile m sees lies in the visited KV tiles, no tile is visited for nothing, and every
    unmasked (not before_softmax-masked) tile is whole for every valid row."""
    rows = range(m * tq, min((m + 1) * tq, lq))
    seen = [visible_keys(i, lq, lk, causal) for i in rows]
    trips, masked = trips_fn(m, tq, tkv, lq, lk, causal)
    if trips != -(-max(seen) // tkv):
        return False
    return all((t + 1) * tkv <= min(seen) for t in range(trips - masked))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq, tkv", [(128, 128), (128, 64), (64, 128), (128, 192), (128, 176)])
def test_tile_trips_cover_every_visible_key_and_mask_every_partial_tile(causal, tq, tkv):
    for lq in LENGTHS:
        for lk in LENGTHS:
            for m in range(-(-lq // tq)):
                assert _tile_ok(tile_trips, m, tq, tkv, lq, lk, causal), (m, tq, tkv, lq, lk, causal)


def test_one_masked_tile_fewer_would_be_wrong():
    # the other side: a mask deciding one masked tile fewer leaves a partial tile unmasked somewhere
    def fewer(m, tq, tkv, lq, lk, causal):
        trips, masked = tile_trips(m, tq, tkv, lq, lk, causal)
        return trips, max(0, masked - 1)
    bad = [(lq, lk) for lq in LENGTHS for lk in LENGTHS for m in range(-(-lq // 128))
           if not _tile_ok(fewer, m, 128, 128, lq, lk, True)]
    assert bad


def test_empty_tiles_are_the_ones_with_no_visible_key():
    # a tile with no KV trip (O = 0, LSE = +inf, no mainloop) is exactly one whose valid rows see no key
    for lq in LENGTHS:
        for lk in LENGTHS:
            for m in range(-(-lq // 128)):
                rows = range(m * 128, min((m + 1) * 128, lq))
                empty = all(visible_keys(i, lq, lk, True) == 0 for i in rows)
                assert (tile_trips(m, 128, 128, lq, lk, True)[0] == 0) == empty


def test_bottom_right_pairs():
    for lq in LENGTHS:
        for lk in LENGTHS:
            assert causal_pairs_bottom_right(lq, lk) == sum(visible_keys(i, lq, lk, True) for i in range(lq))
    assert pairs([3, 5], [5, 3], True) == (1 + 2 + 3 + 3 * 2) + (0 + 0 + 1 + 2 + 3)
    assert VARLEN.flops_of_lengths([3, 5], [5, 3]) == 2 * 32 * pairs([3, 5], [5, 3], True) * 256


# --- the bench's float32 reference (what the GPU validation trusts) against SDPA with an explicit mask ---------------
def test_reference_matches_sdpa_per_sequence():
    torch = pytest.importorskip("torch")
    bench = _bench()
    g = torch.Generator().manual_seed(0)
    lens_q, lens_k = [1, 0, 5, 40, 17, 9], [1, 3, 0, 33, 17, 30]
    Hq, Hkv, D = 4, 2, 16
    q = torch.randn(sum(lens_q), Hq, D, generator=g)
    k = torch.randn(sum(lens_k), Hkv, D, generator=g)
    v = torch.randn(sum(lens_k), Hkv, D, generator=g)
    for causal in (False, True):
        ref_o, ref_l = bench.reference(q, k, v, lens_q, lens_k, causal, 0.3)
        sq = sk = 0
        for lq, lk in zip(lens_q, lens_k):
            qs, ks, vs = (t.transpose(0, 1) for t in (q[sq:sq + lq], k[sk:sk + lk], v[sk:sk + lk]))
            ks, vs = ks.repeat_interleave(Hq // Hkv, 0), vs.repeat_interleave(Hq // Hkv, 0)
            keep = torch.tensor([[j < visible_keys(i, lq, lk, causal) for j in range(lk)] for i in range(lq)],
                                dtype=torch.bool).reshape(lq, lk)
            rows = keep.any(-1) if lk else torch.zeros(lq, dtype=torch.bool)
            if bool(rows.any()):
                want = torch.nn.functional.scaled_dot_product_attention(qs[:, rows], ks, vs, attn_mask=keep[rows],
                                                                        scale=0.3)
                got = ref_o[sq:sq + lq].transpose(0, 1)[:, rows]
                assert torch.allclose(got, want, atol=1e-5)
                s = (qs[:, rows] @ ks.transpose(1, 2) * 0.3).masked_fill(~keep[rows], float("-inf"))
                assert torch.allclose(ref_l[:, sq:sq + lq][:, rows], torch.logsumexp(s, -1), atol=1e-5)
            # rows with no visible key: O = 0 and LSE = +inf
            assert bool((ref_o[sq:sq + lq][~rows] == 0).all())
            assert bool(torch.isposinf(ref_l[:, sq:sq + lq][:, ~rows]).all())
            sq, sk = sq + lq, sk + lk
        res = bench.compare(ref_o.to(torch.bfloat16), ref_l, ref_o, ref_l, sum(lens_q))
        assert res["ok"]
        broken = ref_l.clone()
        empty = torch.isposinf(broken).nonzero()[0]
        broken[empty[0], empty[1]] = 0.0        # a row with no visible key written finite
        assert not bench.compare(ref_o, broken, ref_o, ref_l, sum(lens_q))["ok"]
        worse = ref_o.clone()
        worse[2, 1, 3] += 0.5
        assert not bench.compare(worse, ref_l, ref_o, ref_l, sum(lens_q))["ok"]


def test_bench_pairs_agree_with_the_package():
    bench = _bench()
    for lq in LENGTHS[:8]:
        for lk in LENGTHS[:8]:
            assert bench.pairs_of([lq], [lk], True) == causal_pairs_bottom_right(lq, lk)


# --- rendering ----------------------------------------------------------------------------------------------------
def test_varlen_renders_its_own_template_deterministically():
    config = AttentionConfig()
    a, b = render(VARLEN, config), render(VARLEN, config)
    assert a.source == b.source and a.kernel_hash == b.kernel_hash
    src = a.source
    assert "cutegen_varlen::VarlenFmhaKernel<" in src and "BottomRightCausalMask" in src
    header = (REPO / "templates" / "attention" / "varlen" / "fmha_varlen_sm90.hpp").read_text()
    assert header in src                        # inlined verbatim: the kernel's bytes carry it
    assert a.manifest["abi"] == "cutegen_attention_varlen"
    dense = render(VARLEN.replace(varlen=False), config).source
    assert "cutegen_varlen" not in dense and "cutegen_attention_varlen" not in dense
    no_mask = render(VARLEN.replace(causal=False), config).source
    assert "using Mask = cutegen_varlen::ResidualMask;" in no_mask


def test_varlen_exports_match_the_abi_declarations():
    src = render(VARLEN, AttentionConfig()).source
    exported = re.findall(r"CUTEGEN_EXPORT [\w\s*]*?\b(cutegen_\w+)\(", src)
    declared = re.findall(r'extern "C" [\w\s*]*?\b(cutegen_\w+)\(', abi.VARLEN_C_DECLARATIONS)
    assert sorted(exported) == sorted(declared + ["cutegen_describe", "cutegen_last_error"])
    signature = re.search(r"CUTEGEN_EXPORT int cutegen_attention_varlen\((.*?)\)\s*\{", src, re.S).group(1)
    assert len([a for a in signature.split(",") if a.strip()]) == len(abi.VARLEN_ARGTYPES) == 27


def test_varlen_refusal_names_the_rule():
    assert "ATTN-RENDER-VARLEN-TMA" in REFUSALS and "ATTN-RENDER-VARLEN" not in REFUSALS
    tma = AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2)
    mha = VARLEN.replace(heads_kv=32)
    assert any(r.startswith("ATTN-RENDER-VARLEN-TMA:") for r in backend_refusals(mha, tma))
    assert not any(r.startswith("ATTN-RENDER-VARLEN-TMA:") for r in backend_refusals(mha.replace(varlen=False), tma))
    for config in (AttentionConfig(), AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)):
        assert backend_refusals(VARLEN, config) == []
    # the varlen template is 16-bit and unsplit: e4m3 and kv_splits > 1 are refused for varlen, not for dense
    ids = lambda p, c: [r.split(":", 1)[0] for r in backend_refusals(p, c)]  # noqa: E731
    assert "ATTN-RENDER-VARLEN-FP8" in ids(VARLEN.replace(dtype="e4m3"), AttentionConfig())
    assert "ATTN-RENDER-VARLEN-FP8" not in ids(VARLEN.replace(dtype="e4m3", varlen=False), AttentionConfig())
    assert "ATTN-RENDER-VARLEN-SPLIT-KV" in ids(VARLEN, AttentionConfig(kv_splits=2))
    assert "ATTN-RENDER-VARLEN-SPLIT-KV" not in ids(VARLEN.replace(varlen=False), AttentionConfig(kv_splits=2))
    assert "ATTN-RENDER-VARLEN-SPLIT-KV" not in ids(VARLEN, AttentionConfig(kv_splits=1))


def test_the_search_finds_a_varlen_kernel_priced_at_the_maxima():
    pytest.importorskip("egglog")
    from cutegen.core.search import search
    found = search(VARLEN, 3)
    assert found.ranked and found.ranked[0].config.schedule != "tma"
    dense = search(VARLEN.replace(varlen=False), 3)
    # the cost prices a varlen problem as the dense batch at its maximum lengths, a persistent kernel 8% dearer
    # (ragged lengths on its static round robin; search/attention/cost.py VARLEN_PERSISTENT_IMBALANCE)
    from cutegen.search.attention.cost import config_cost
    for r in dense.ranked:
        varlen_cost = config_cost(VARLEN, r.config)[0]
        dense_cost = config_cost(VARLEN.replace(varlen=False), r.config)[0]
        if r.config.persistent:
            assert varlen_cost > dense_cost
        else:
            assert varlen_cost == dense_cost
    # head 64: where the dense pick is persistent by less than the imbalance, the varlen pick is not (the shape
    # moved from B16 S4096 when the H200 terms made longer head-64 problems pick a non-persistent 256-row tile)
    flips = 0
    for b, s in ((32, 1024), (16, 4096), (64, 512)):
        d64 = AttentionProblem(batch=b, heads_q=16, heads_kv=16, seqlen_q=s, seqlen_kv=s, head_dim=64)
        dense_pers = search(d64, 1).ranked[0].config.persistent
        varlen_pers = search(d64.replace(varlen=True), 1).ranked[0].config.persistent
        assert dense_pers or not varlen_pers               # ragged lengths never make persistence more attractive
        flips += dense_pers and not varlen_pers
    assert flips >= 1
    # ATTN-RENDER-VARLEN-TMA prunes the tma kernels the dense search ranks (head 64, causal)
    d64 = AttentionProblem(batch=8, heads_q=16, heads_kv=16, seqlen_q=2048, seqlen_kv=2048, head_dim=64, causal=True)
    assert any(r.config.schedule == "tma" for r in search(d64, 100).ranked)
    varlen = search(d64.replace(varlen=True), 100)
    assert all(r.config.schedule != "tma" for r in varlen.ranked)
    assert varlen.pruned_by_rule.get("ATTN-RENDER-VARLEN-TMA", 0) > 0


# --- the pipeline read-back --------------------------------------------------------------------------------------------
def test_varlen_kernel_protocol_is_the_checked_term():
    from cutegen.ops.attention.pipeline_readback import mismatches
    for config in (AttentionConfig(), AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)):
        src = render(VARLEN, config).source
        assert mismatches(VARLEN, config, src) == []
        mutated = src.replace(f"Option<Tag::kStagesKV, Int<{config.stages_kv}>>",
                              f"Option<Tag::kStagesKV, Int<{config.stages_kv + 1}>>")
        assert mutated != src and mismatches(VARLEN, config, mutated)


# --- the PyTorch entry point's refusals (CPU tensors; no kernel runs) ------------------------------------------------
def test_offsets_checks_are_one_line_errors():
    torch = pytest.importorskip("torch")
    from cutegen.ops.attention.torch_op import check_varlen_offsets
    cu = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    check_varlen_offsets(cu([0, 3, 3, 10]), cu([0, 5, 6, 6]), 7, 5, 10, 6)
    for args, rule, text in [
        ((cu([1, 3]), cu([0, 3]), 3, 3, 3, 3), "ATTN-OP-VARLEN-OFFSETS", "not 0"),
        ((cu([0, 3, 2]), cu([0, 3, 3]), 3, 3, 3, 3), "ATTN-OP-VARLEN-OFFSETS", "decreases at sequence 1"),
        ((cu([0, 3]), cu([0, 4]), 3, 4, 3, 3), "ATTN-OP-VARLEN-OFFSETS", "past the 3 packed rows"),
        ((cu([0, 3, 10]), cu([0, 3, 4]), 6, 3, 10, 4), "ATTN-OP-VARLEN-MAX", "length 7 > max_seqlen q 6"),
    ]:
        with pytest.raises(ValueError, match=rule) as e:
            check_varlen_offsets(*args)
        assert text in str(e.value) and "\n" not in str(e.value)


def test_entry_point_refuses_bad_arguments_in_one_line():
    torch = pytest.importorskip("torch")
    from cutegen.ops.attention.torch_op import AttentionKernels
    op = object.__new__(AttentionKernels)
    op.entries = [("dense.so", {"problem": {"dtype": "bf16", "head_dim": 64, "causal": False, "grouped": False,
                                            "varlen": False}})]
    q = torch.zeros(10, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    cases = [
        (dict(q=q[None]), "ATTN-OP-SHAPE"),
        (dict(cu_seqlens_q=cu.long()), "ATTN-OP-VARLEN-OFFSETS"),
        (dict(cu_seqlens_k=cu[:2]), "ATTN-OP-VARLEN-OFFSETS"),
        (dict(max_seqlen_q=-1), "ATTN-OP-VARLEN-MAX"),
        (dict(k=torch.zeros(10, 3, 64, dtype=torch.bfloat16), v=torch.zeros(10, 3, 64, dtype=torch.bfloat16)),
         "ATTN-OP-GQA"),
        (dict(q=q.half()), "ATTN-OP-DTYPE"),
        (dict(max_seqlen_q=5), "ATTN-OP-VARLEN-MAX"),          # CPU offsets are checked: a length 6 > 5
        ({}, "ATTN-OP-NO-KERNEL"),                              # a dense kernel does not serve varlen calls
    ]
    for change, rule in cases:
        args = dict(q=q, k=q, v=q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=6, max_seqlen_k=6)
        args.update(change)
        with pytest.raises(ValueError, match=rule) as e:
            op.flash_attn_varlen_func(**args)
        assert "\n" not in str(e.value)
