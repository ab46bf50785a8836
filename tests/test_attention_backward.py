"""Attention backward without a GPU: its config, its rules on both sides of every bound, the shared-memory model
against nvcc's sizeof, the rendering (fresh, deterministic, what the template spells out, refusals naming the rule),
the C ABI's declarations, and the PyTorch op's autograd wiring under fake tensors."""
from __future__ import annotations

import ctypes
import json
import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from cutegen.errors import CutegenError, FieldError
from cutegen.ops.attention import abi
from cutegen.ops.attention.backward import (EXAMPLE_CONFIGS, AttentionBackwardConfig, backend_refusals,
                                            backward_problem, collective_header_text, default_config, kernel_hash,
                                            render, render_source)
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.torch_op import AttentionKernels, attention_bwd  # noqa: F401  (registers the ops)
from cutegen.legality import attention_backward as rules

Cfg = AttentionBackwardConfig


def problem(**kw):
    base = dict(batch=2, heads_q=8, heads_kv=8, seqlen_q=1000, seqlen_kv=1000, head_dim=128, dtype="bf16")
    base.update(kw)
    return AttentionProblem(**base)


def ids(p, c):
    return [v.rule_id for v in rules.check_backward(p, c)]


# --- config ---------------------------------------------------------------------------------------------------
def test_config_round_trips_and_names_its_pass():
    c = Cfg(128, 128)
    assert c.to_dict() == {"pass": "backward", "tile_q": 128, "tile_kv": 128}
    assert Cfg.from_dict(c.to_dict()) == c
    assert c.short_name() == "bwd_128x128"


def test_config_rejects_bad_fields_in_one_line():
    with pytest.raises(FieldError, match="tile_q"):
        Cfg(72, 128)
    with pytest.raises(FieldError, match="config.pass"):
        Cfg.from_dict({"pass": "forward", "tile_q": 64, "tile_kv": 128})
    with pytest.raises(FieldError, match="stages"):
        Cfg.from_dict({"tile_q": 64, "tile_kv": 128, "stages": 3})


def test_a_backward_kernel_never_hashes_like_a_forward_one():
    from cutegen.ops.attention.config import AttentionConfig
    from cutegen.ops.attention.render import kernel_hash as forward_hash
    p = problem()
    assert kernel_hash(p, Cfg(128, 128)) != forward_hash(p, AttentionConfig(128, 128))


# --- rules: both sides of every bound --------------------------------------------------------------------------
def test_every_rule_has_id_summary_and_source():
    assert len(rules.BWD_RULES) == 8
    for r in rules.BWD_RULES:
        assert r.id.startswith("ATTN-BWD-") and r.summary and r.source


def test_dtype_rule():
    assert "ATTN-BWD-DTYPE" not in ids(problem(dtype="bf16"), Cfg(64, 128))
    assert "ATTN-BWD-DTYPE" not in ids(problem(dtype="f16"), Cfg(64, 128))
    assert "ATTN-BWD-DTYPE" in ids(problem(dtype="e4m3"), Cfg(64, 128))


def test_head_dim_rule_takes_the_examples_head_dims_only():
    for d in (32, 64, 128):
        assert "ATTN-BWD-HEAD-DIM" not in ids(problem(head_dim=d), Cfg(64, 128))
    for d in (48, 96, 256):           # multiples of 16 between and past the instantiated ones
        assert "ATTN-BWD-HEAD-DIM" in ids(problem(head_dim=d), Cfg(64, 128))


def test_head_dim_v_rule():
    assert "ATTN-BWD-HEAD-DIM-V" not in ids(problem(head_dim_v=128), Cfg(64, 128))
    assert "ATTN-BWD-HEAD-DIM-V" in ids(problem(head_dim_v=64), Cfg(64, 128))


def test_kv_tile_rule_at_64_keys_per_warpgroup():
    # tile_kv 128: 64 keys per MMA warpgroup (one WGMMA M); 96: 48 (nvcc: "Tile_M must be a multiple of 64" for 64)
    assert "ATTN-BWD-KV-TILE-M" not in ids(problem(head_dim=64), Cfg(64, 128))
    assert "ATTN-BWD-KV-TILE-M" in ids(problem(head_dim=64), Cfg(64, 96))
    assert "ATTN-BWD-KV-TILE-M" in ids(problem(head_dim=64), Cfg(64, 64))
    assert "ATTN-BWD-KV-TILE-M" not in ids(problem(head_dim=32), Cfg(64, 256))
    assert "ATTN-BWD-KV-TILE-M" in ids(problem(head_dim=32), Cfg(64, 192))     # 96 per warpgroup


def test_q_tile_rule_at_64_rows():
    assert "ATTN-BWD-Q-TILE-M" not in ids(problem(head_dim=64), Cfg(64, 128))
    assert "ATTN-BWD-Q-TILE-M" in ids(problem(head_dim=64), Cfg(48, 128))
    assert "ATTN-BWD-Q-TILE-M" in ids(problem(head_dim=64), Cfg(80, 128))
    assert "ATTN-BWD-Q-TILE-M" not in ids(problem(head_dim=64), Cfg(128, 128))


# nvcc 13.0's sizeof(Kernel::SharedStorage) (oracles/attention_backward_smem_probe.cu, 2026-11-26): (q, kv, d) -> bytes
SMEM_PROBE = {(64, 128, 64): 116224, (128, 128, 64): 199168, (64, 128, 128): 214528, (128, 128, 128): 363008,
              (64, 128, 32): 67072, (128, 128, 32): 117248, (64, 256, 64): 165376, (64, 128, 96): 165376}


@pytest.mark.parametrize("key", sorted(SMEM_PROBE))
def test_shared_memory_model_is_nvccs_sizeof(key):
    q, kv, d = key
    assert rules.shared_memory_bytes(problem(head_dim=d), Cfg(q, kv)) == SMEM_PROBE[key]


def test_shared_memory_rule_at_the_227_kb_bound():
    # 64x128 at head 128: 214,528 B fits; 128x128 at head 128: 363,008 B does not
    assert "ATTN-BWD-SMEM-CAPACITY" not in ids(problem(head_dim=128), Cfg(64, 128))
    assert "ATTN-BWD-SMEM-CAPACITY" in ids(problem(head_dim=128), Cfg(128, 128))
    # the exact bound: a context whose model lands on 232,448 and 232,449 bytes
    ctx = rules._Context(problem(head_dim=128), Cfg(64, 128))
    check = next(r for r in rules.BWD_RULES if r.id == "ATTN-BWD-SMEM-CAPACITY")
    base = rules.shared_memory_bytes(ctx.problem, ctx.config)
    old = rules.EPILOGUE_AND_BARRIERS
    try:
        rules.EPILOGUE_AND_BARRIERS = old + (rules.SMEM_PER_BLOCK - base)
        assert check.evaluate(ctx) is None
        rules.EPILOGUE_AND_BARRIERS += 1
        v = check.evaluate(ctx)
        assert v is not None and "232449 bytes" in v.reason
    finally:
        rules.EPILOGUE_AND_BARRIERS = old


def test_register_rule_at_192():
    # 64x128 at head 128: dK + dV 128 + S + dP 64 = 192 (the example's kernel): legal; 64x128 at head 144 would be
    # 208; 64x256 at head 64: 128 + 128 = 256; 128x128 at head 64: 64 + 128 = 192 (the example's)
    assert rules.accumulator_registers(problem(head_dim=128), Cfg(64, 128)) == 192
    assert "ATTN-BWD-REGISTERS" not in ids(problem(head_dim=128), Cfg(64, 128))
    assert rules.accumulator_registers(problem(head_dim=64), Cfg(128, 128)) == 192
    assert "ATTN-BWD-REGISTERS" not in ids(problem(head_dim=64), Cfg(128, 128))
    assert rules.accumulator_registers(problem(head_dim=64), Cfg(64, 256)) == 256
    assert "ATTN-BWD-REGISTERS" in ids(problem(head_dim=64), Cfg(64, 256))
    # 128x128 at head 32: 32 + 128 = 160; 192x128 at head 32: 32 + 192 = 224 -- the first tile past 192
    assert "ATTN-BWD-REGISTERS" not in ids(problem(head_dim=32), Cfg(128, 128))
    assert "ATTN-BWD-REGISTERS" in ids(problem(head_dim=32), Cfg(192, 128))


def test_example_tile_note_is_not_enforced():
    assert not rules.notes_backward(problem(head_dim=64), Cfg(128, 128))
    notes = rules.notes_backward(problem(head_dim=32), Cfg(64, 256))
    assert [n.rule_id for n in notes] == ["ATTN-BWD-EXAMPLE-TILE"] and not notes[0].enforced
    assert "ATTN-BWD-EXAMPLE-TILE" not in ids(problem(head_dim=32), Cfg(64, 256))


def test_every_example_tile_is_legal():
    for d, configs in EXAMPLE_CONFIGS.items():
        for c in configs:
            assert ids(problem(head_dim=d), c) == [], (d, c)
            assert ids(problem(head_dim=d, causal=True, dtype="f16"), c) == [], (d, c)


def test_rulebook_has_a_row_per_rule():
    from pathlib import Path
    text = (Path(rules.__file__).parent / "RULEBOOK-attention.md").read_text()
    for r in rules.BWD_RULES:
        assert f"`{r.id}`" in text, r.id


# --- rendering -------------------------------------------------------------------------------------------------
def test_render_is_deterministic_and_names_the_example_pieces():
    p, c = problem(causal=True), Cfg(64, 128)
    a, b = render(p, c, toolchain={}), render(p, c, toolchain={})
    assert a.files == b.files
    src = a.source
    for needle in ("cutegen_bwd::FmhaBwdMainloopTmaWarpSpecialized<", "FmhaBwdEpilogueKV<",
                   "TileSchedulerBwdAdapter<cutlass::fmha::kernel::IndividualTileScheduler>",
                   "using TileShape = Shape<Int<64>, Int<128>, Int<kHeadDim>>;", "constexpr int kHeadDim = 128;",
                   "using Element = cutlass::bfloat16_t;", "sum_odo_kernel", "dq_convert_kernel",
                   "cudaMemsetAsync(dq_acc", "cudaMemcpy2DAsync(lse", 'CUTEGEN_EXPORT int cutegen_attention_backward(',
                   "params.mainloop.scale_softmax = scale;", "ATTN-BWD-MHA", "SMEM-CAPACITY"):
        assert needle in src, needle
    # the collective is cutegen's copy, inlined: the example's header is not included
    assert collective_header_text() in src
    assert '#include "collective/fmha_collective_bwd_tma_warpspecialized.hpp"' not in src
    assert "acc_DS(i) = Element(acc_P(i) * params.scale_softmax * (acc_DP(i) - reg_ODO(i)));" in src
    man = json.loads(a.files["manifest.json"])
    assert man["abi"] == "cutegen_attention_backward" and man["pass"] == "backward"
    assert man["include_dirs"] == ["examples/88_hopper_fmha"]


def test_collective_copy_differs_from_the_example_only_where_it_says():
    import difflib
    from pathlib import Path
    from cutegen.toolchain import cutlass_include_dirs, example_include_dirs
    folder = next(Path(d) for d in example_include_dirs(cutlass_include_dirs()[0]) if d.endswith("88_hopper_fmha"))
    original = (folder / "collective/fmha_collective_bwd_tma_warpspecialized.hpp").read_text().splitlines()
    copy = collective_header_text().splitlines()
    body = copy[copy.index(original[0]):]            # past cutegen's comment block, from the example's notice
    assert len(body) > 850
    diff = [l for l in difflib.unified_diff(original, body, lineterm="", n=0) if not l.startswith(("---", "+++", "@@"))]
    removed = sorted(l[1:].strip() for l in diff if l.startswith("-") and l[1:].strip())
    added = sorted(l[1:].strip() for l in diff if l.startswith("+") and l[1:].strip())
    assert removed == sorted([
        "#pragma once", '#include "../collective/fmha_common.hpp"', '#include "../collective/fmha_collective_load.hpp"',
        '#include "../collective/fmha_collective_softmax.hpp"', '#include "../kernel/fmha_options.hpp"',
        "namespace cutlass::fmha::collective {", "}  // namespace cutlass::fmha::collective",
        "acc_DS(i) = acc_P(i) * params.scale_softmax * (acc_DP(i) - reg_ODO(i));",
        "pipeline_reducer.consumer_release(smem_pipe_release_reducer);", "++smem_pipe_release_reducer;"])
    assert added == sorted([
        "#ifndef CUTEGEN_FMHA_BWD_COLLECTIVE_SM90_HPP", "#define CUTEGEN_FMHA_BWD_COLLECTIVE_SM90_HPP",
        '#include "collective/fmha_common.hpp"', '#include "collective/fmha_collective_load.hpp"',
        '#include "collective/fmha_collective_softmax.hpp"', '#include "kernel/fmha_options.hpp"',
        "namespace cutegen_bwd {", "using namespace cute;", "using namespace cutlass::fmha::collective;",
        "}  // namespace cutegen_bwd", "#endif  // CUTEGEN_FMHA_BWD_COLLECTIVE_SM90_HPP",
        "acc_DS(i) = Element(acc_P(i) * params.scale_softmax * (acc_DP(i) - reg_ODO(i)));",
        "if (! first) {  // cutegen: release only a stage this warp consumed (a KV block no Q tile reaches consumes none)",
        "pipeline_reducer.consumer_release(smem_pipe_release_reducer);", "++smem_pipe_release_reducer;", "}"])


def test_causal_mask_counts_ceil_q_tiles_and_masks_later_keys():
    src = render_source(problem(causal=True), Cfg(64, 128))
    assert "return ceil_div(int(get<2>(problem_size)), int(get<0>(TileShape{})));" in src
    assert "if (get<1>(pos) < get<0>(pos)) {" in src          # (key, query): key > query is masked
    plain = render_source(problem(causal=False), Cfg(64, 128))
    assert "using Mask = cutlass::fmha::collective::FusionBwdAdapter<cutlass::fmha::collective::DefaultFusion>;" in plain
    assert "ceil_div(int(get<2>(problem_size))" not in plain


def test_gqa_problem_renders_the_mha_kernel():
    mha, gqa = problem(heads_q=32, heads_kv=32), problem(heads_q=32, heads_kv=8)
    assert backward_problem(gqa).heads_kv == 32
    assert render(gqa, Cfg(64, 128), toolchain={}).files == render(mha, Cfg(64, 128), toolchain={}).files


def test_head_64_and_dtype_reach_the_source():
    src = render_source(problem(head_dim=64, dtype="f16"), Cfg(128, 128))
    assert "constexpr int kHeadDim = 64;" in src and "using Element = cutlass::half_t;" in src
    assert "Shape<Int<128>, Int<128>, Int<kHeadDim>>" in src


def test_render_refusals_name_every_rule():
    with pytest.raises(CutegenError, match=r"ATTN-BWD-SMEM-CAPACITY: .*ATTN-BWD-REGISTERS"):
        render(problem(head_dim=128), Cfg(128, 128), toolchain={})
    with pytest.raises(CutegenError, match="ATTN-BWD-DTYPE"):
        render(problem(dtype="e4m3"), Cfg(64, 128), toolchain={})
    with pytest.raises(CutegenError, match="ATTN-BWD-RENDER-VARLEN"):
        render(problem(varlen=True, layout="bshd"), Cfg(64, 128), toolchain={})
    assert backend_refusals(problem(), Cfg(64, 128)) == []
    assert backend_refusals(problem(), Cfg(64, 128), "dsl")[0].startswith("ATTN-RENDER-BACKEND")


def test_default_config_is_the_examples_first_legal_tile():
    assert default_config(problem(head_dim=64)) == Cfg(64, 128)
    assert default_config(problem(head_dim=128)) == Cfg(64, 128)
    with pytest.raises(CutegenError, match="ATTN-BWD-HEAD-DIM"):
        default_config(problem(head_dim=256))


# --- the C ABI ---------------------------------------------------------------------------------------------------
def _exported_signature(text: str, name: str) -> list[str]:
    m = re.search(rf"CUTEGEN_EXPORT \w+\*? ?{name}\((.*?)\)\s*{{", text, re.S)
    assert m, name
    return [" ".join(a.split()) for a in m.group(1).split(",")]


def test_abi_declarations_match_the_rendered_exports():
    src = render_source(problem(), Cfg(64, 128))
    exported = _exported_signature(src, "cutegen_attention_backward")
    declared = re.search(r"cutegen_attention_backward\((.*?)\);", abi.BACKWARD_C_DECLARATIONS, re.S).group(1)
    assert exported == [" ".join(a.split()) for a in declared.split(",")]
    assert len(exported) == len(abi.BACKWARD_ARGTYPES) == 43
    assert [a.split()[0] for a in exported[9:39]] == ["int64_t"] * 30
    assert abi.BACKWARD_ARGTYPES[39] is ctypes.c_float


# --- the PyTorch op: registration and autograd wiring (fake tensors: nothing runs) -----------------------------
def test_backward_op_is_registered_with_its_schema():
    schema = str(torch.ops.cutegen.attention_bwd.default._schema)
    assert schema.startswith("cutegen::attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, "
                             "Tensor lse, str library, float scale) -> (Tensor, Tensor, Tensor)")
    schema = str(torch.ops.cutegen.attention_fwd_train.default._schema)
    assert schema.startswith("cutegen::attention_fwd_train(Tensor q, Tensor k, Tensor v, str library, "
                             "str backward_library, float scale)")


def test_autograd_runs_the_backward_op_with_gqa_shapes():
    # fake CPU tensors: the autograd engine would start CUDA for fake CUDA ones (this machine has none); nothing runs
    with FakeTensorMode():
        q = torch.empty(2, 8, 100, 64, dtype=torch.bfloat16, device="cpu", requires_grad=True)
        k = torch.empty(2, 2, 300, 64, dtype=torch.bfloat16, device="cpu", requires_grad=True)
        v = torch.empty(2, 2, 300, 64, dtype=torch.bfloat16, device="cpu", requires_grad=True)
        out, lse = torch.ops.cutegen.attention_fwd_train(q, k, v, "/no/fwd.so", "/no/bwd.so", 0.125)
        assert out.requires_grad
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert tuple(dq.shape) == (2, 8, 100, 64) and tuple(dk.shape) == (2, 2, 300, 64) and tuple(dv.shape) == (2, 2, 300, 64)


def test_forward_without_a_backward_kernel_refuses_backward_by_rule():
    with FakeTensorMode():
        q = torch.empty(1, 2, 16, 64, dtype=torch.bfloat16, device="cpu", requires_grad=True)
        out, _ = torch.ops.cutegen.attention_fwd(q, q, q, "/no/fwd.so", 0.125)
        with pytest.raises(RuntimeError, match="ATTN-OP-NO-BACKWARD"):
            out.sum().backward()


def test_kernels_pick_backward_by_dtype_head_dim_and_mask():
    from cutegen.ops.attention.torch_op import AttentionKernels
    k = object.__new__(AttentionKernels)
    key = {"dtype": "bf16", "head_dim": 64, "causal": True, "varlen": False, "grouped": False}
    k.entries = []
    k.backward_entries = [("/b0.so", {"pass": "backward", "problem": {**key, "causal": False}}),
                          ("/b1.so", {"pass": "backward", "problem": key})]
    assert k.pick_backward("bf16", 64, True) == "/b1.so"
    assert k.pick_backward("bf16", 64, False) == "/b0.so"
    assert k.pick_backward("bf16", 128, True) is None
    assert k.pick_backward("f16", 64, True) is None


# --- the command ---------------------------------------------------------------------------------------------------
def test_generate_backward_renders_the_example_tile(tmp_path, capsys):
    from cutegen.cli import main
    out = tmp_path / "k"
    assert main(["attention", "generate", "--backward", "--head-dim", "64", "--causal", "--no-build", "-o", str(out)]) == 0
    man = json.loads((out / "manifest.json").read_text())
    assert man["config"] == {"pass": "backward", "tile_q": 64, "tile_kv": 128} and man["problem"]["causal"] is True
    assert (out / "kernel.cu").read_text() == render_source(AttentionProblem(**{
        k: v for k, v in man["problem"].items() if k != "op"}), Cfg(64, 128))
    assert "backward bwd_64x128" in capsys.readouterr().out


def test_generate_backward_refuses_in_one_line_naming_the_rule(tmp_path, capsys):
    from cutegen.cli import main
    code = main(["attention", "generate", "--backward", "--head-dim", "128", "--config",
                 '{"tile_q": 128, "tile_kv": 128}', "--no-build", "-o", str(tmp_path / "k")])
    err = capsys.readouterr().err
    assert code == 2 and "ATTN-BWD-SMEM-CAPACITY" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "k").exists()


def test_backward_inputs_are_copied_only_when_the_kernel_cannot_read_them():
    from cutegen.ops.attention.torch_op import _fit_backward
    bshd = torch.zeros(2, 40, 3, 64, dtype=torch.bfloat16).transpose(1, 2)        # (B, H, S, D) view of BSHD
    assert _fit_backward(bshd) is bshd
    bhsd = torch.zeros(2, 3, 40, 64, dtype=torch.bfloat16)
    assert _fit_backward(bhsd) is bhsd
    expanded = torch.ones((), dtype=torch.bfloat16).expand(2, 3, 40, 64)          # the gradient of out.sum()
    fitted = _fit_backward(expanded)
    assert fitted is not expanded and fitted.is_contiguous() and fitted.stride()[:3] == (3 * 40 * 64, 40 * 64, 64)
    sliced = torch.zeros(2, 3, 40, 72, dtype=torch.bfloat16)[..., :64]            # a head-dim slice: not dense
    assert _fit_backward(sliced) is not sliced and _fit_backward(sliced).is_contiguous()
    shifted = torch.zeros(2 * 3 * 40 * 64 + 1, dtype=torch.bfloat16)[1:].view(2, 3, 40, 64)   # base 2 bytes off
    assert shifted.data_ptr() % 16 == 2
    assert _fit_backward(shifted) is not shifted and _fit_backward(shifted).data_ptr() % 16 == 0


# --- the kernel's arithmetic on padded tiles, in float64 (what the template relies on for ragged lengths) ---------
def _tiled_backward(q, k, v, do, causal, scale, tile_q, tile_kv, q_tiles=None):
    """dQ, dK, dV as the backward kernel computes them: Q, dO, K, V zero-filled to whole tiles (TMA's out-of-bounds
    fill), the forward's LSE and sum_OdO read as 0 past seqlen_q, no mask on keys past seqlen_kv, the causal mask on
    (key, query) only, and ``q_tiles`` Q tiles visited (the kernel's trip count); results cropped (the stores clip)."""
    Sq, Skv, D = q.shape[0], k.shape[0], q.shape[1]
    nq = -(-Sq // tile_q) if q_tiles is None else q_tiles
    pq, pk = max(nq * tile_q, Sq), -(-Skv // tile_kv) * tile_kv
    pad = lambda t, n: torch.cat([t, t.new_zeros(n - t.shape[0], D)])      # noqa: E731
    Q, dO, K, V = pad(q, pq), pad(do, pq), pad(k, pk), pad(v, pk)
    s = (q @ k.t()) * scale
    if causal:
        s = s.masked_fill(~torch.ones(Sq, Skv, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(s, -1) @ v
    lse = torch.cat([torch.logsumexp(s, -1), q.new_zeros(pq - Sq)])
    sum_odo = torch.cat([(o * do).sum(-1), q.new_zeros(pq - Sq)])
    S = (K @ Q.t()) * scale                                                    # (key, query)
    if causal:
        kk, qq = torch.arange(pk)[:, None], torch.arange(pq)[None, :]
        S = S.masked_fill(qq < kk, float("-inf"))
    P = torch.exp(S - lse[None, :])
    P[:, nq * tile_q:] = 0                                                     # Q tiles the trip count never visits
    dS = P * ((V @ dO.t()) - sum_odo[None, :]) * scale
    dV, dK, dQ = P @ dO, dS @ Q, dS.t() @ K
    return dQ[:Sq], dK[:Skv], dV[:Skv]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Sq,Skv", [(13, 200), (200, 333), (333, 200), (1, 3), (130, 130)])
def test_padded_tiles_give_the_exact_gradients(causal, Sq, Skv):
    g = torch.Generator().manual_seed(Sq * 1000 + Skv)
    D, scale = 32, 0.3
    q, k, v, do = (torch.randn(n, D, generator=g, dtype=torch.float64) for n in (Sq, Skv, Skv, Sq))
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    s = (qr @ kr.t()) * scale
    if causal:
        s = s.masked_fill(~torch.ones(Sq, Skv, dtype=torch.bool).tril(), float("-inf"))
    (torch.softmax(s, -1) @ vr).backward(do)
    got = _tiled_backward(q, k, v, do, causal, scale, 64, 128)
    for a, b in zip(got, (qr.grad, kr.grad, vr.grad)):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9)


def test_the_examples_floor_trip_count_loses_a_ragged_causal_q_tile():
    # FusionBwdAdapter<CausalFusion>: floor(seqlen_q / tile_q) Q tiles; 200 rows with tile 64 -> 3 tiles (192 rows):
    # rows 192-199 never reach dK and dV. The template's ceil (4 tiles) is exact (test above).
    g = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(n, 32, generator=g, dtype=torch.float64) for n in (200, 200, 200, 200))
    exact = _tiled_backward(q, k, v, do, True, 0.3, 64, 128)
    floor = _tiled_backward(q, k, v, do, True, 0.3, 64, 128, q_tiles=200 // 64)
    assert not torch.allclose(floor[1], exact[1]) and not torch.allclose(floor[2], exact[2])
    assert torch.equal(_tiled_backward(q, k, v, do, True, 0.3, 64, 128, q_tiles=-(-200 // 64))[1], exact[1])
