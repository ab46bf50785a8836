"""FP8 (e4m3) attention: the problem's fields, the FP8 rules on both sides, the search's FP8 picks and cost, the
rendering (a template of its own: V^T, descale factors, a 16-bit O) and the op's host-side checks. The nvcc build
of one FP8 kernel is tests/test_attention_fp8_compile.py (marked compile)."""
from __future__ import annotations

import json

import pytest
import torch

from cutegen.errors import FieldError
from cutegen.legality.attention import check_attention
from cutegen.ops.attention.config import EXAMPLE_CONFIGS_FP8, AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.render import backend_refusals, render, render_source


def P(**kw):
    base = dict(batch=2, heads_q=8, heads_kv=8, seqlen_q=4096, seqlen_kv=4096, head_dim=128, dtype="e4m3")
    base.update(kw)
    return AttentionProblem(**base)


def C(**kw):
    return AttentionConfig(**kw)


def found(p, c) -> set[str]:
    r = check_attention(p, c)
    return {v.rule_id for v in r.violations + r.warnings}


TOOLCHAIN = {"cutlass": "4.2.0", "nvcc": "13.0"}


# --- the problem ----------------------------------------------------------------------------------------------
def test_fp8_problem_defaults_and_one_spelling():
    p = P()
    assert p.output_dtype == "bf16" and p.v_is_transposed and not p.allow_f16_qk_acc
    # the defaults are left unset: one spelling per problem, and the JSON of a 16-bit problem keeps its bytes
    assert P(dtype_out="bf16", v_transposed=True) == p
    assert "dtype_out" not in p.to_dict() and "v_transposed" not in p.to_dict() and "allow_f16_qk_acc" not in p.to_dict()
    bf16 = P(dtype="bf16")
    assert not bf16.v_is_transposed and bf16.output_dtype == "bf16"
    assert set(bf16.to_dict()) == {"op", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_kv", "head_dim", "dtype",
                                   "causal", "layout", "varlen", "return_lse"}
    assert "dtype_out" not in bf16.kernel_key() and "v_transposed" not in bf16.kernel_key()


def test_fp8_problem_output_type_and_round_trip():
    p = P(dtype_out="f16", allow_f16_qk_acc=True, causal=True)
    assert p.output_dtype == "f16" and p.kernel_key()["dtype_out"] == "f16"
    assert p.name == "attn_b2_hq8_hkv8_sq4096_skv4096_d128_e4m3_of16_f16accok_causal"
    assert AttentionProblem.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    # O: 2 bytes per element whatever the input type
    assert p.bytes_min == 2 * 8 * 4096 * 128 * (1 + 2) + 2 * 8 * 4096 * 128 * 2
    # v_transposed false for e4m3 is a real (illegal) problem, kept and named
    assert P(v_transposed=False).name.endswith("_e4m3_vsd")


@pytest.mark.parametrize("fields,field", [
    (dict(dtype_out="e4m3"), "dtype_out"),                 # an 8-bit O loses too much
    (dict(dtype_out="f32"), "dtype_out"),
    (dict(dtype="bf16", dtype_out="f16"), "dtype_out"),    # 16-bit kernels write their input type
    (dict(v_transposed="yes"), "v_transposed"),
    (dict(allow_f16_qk_acc=1), "allow_f16_qk_acc"),
])
def test_fp8_problem_field_errors(fields, field):
    with pytest.raises(FieldError) as e:
        P(**fields)
    assert e.value.field == field


def test_fp8_problem_from_dict_names_the_field():
    data = P().to_dict()
    data["dtype_out"] = "e4m3"
    with pytest.raises(FieldError) as e:
        AttentionProblem.from_dict(data, where="attn.json")
    assert e.value.field == "attn.json.dtype_out"


# --- the FP8 rules, each on both sides of its boundary --------------------------------------------------------
CASES = [
    # 8-bit WGMMA reads V K-major only: V^T (the default for e4m3) in, V head-dim contiguous out; bf16 unaffected
    ("ATTN-FP8-V-K-MAJOR", {}, {}, ({"v_transposed": False}, {})),
    ("ATTN-FP8-V-K-MAJOR", {"dtype": "bf16"}, {}, ({"dtype": "e4m3", "v_transposed": False}, {})),
    # an f16 Q K^T accumulator only with the caller's consent (e4m3 and f16 inputs alike)
    ("ATTN-ACC-QK-F16-CONSENT", {"allow_f16_qk_acc": True}, dict(tile_kv=256, acc_qk="f16"),
     ({"allow_f16_qk_acc": False}, dict(tile_kv=256, acc_qk="f16"))),
    ("ATTN-ACC-QK-F16-CONSENT", {}, dict(acc_qk="f32"), ({}, dict(acc_qk="f16"))),
    ("ATTN-ACC-QK-F16-CONSENT", {"dtype": "f16", "allow_f16_qk_acc": True}, dict(acc_qk="f16"),
     ({"dtype": "f16", "allow_f16_qk_acc": False}, dict(acc_qk="f16"))),
    # e4m3 on the warp-specialized schedules only (the tma mainloop cannot read V^T); bf16 tma is fine
    ("ATTN-FP8-SCHEDULE", {"head_dim": 64}, dict(tile_q=128, tile_kv=128),
     ({"head_dim": 64}, dict(tile_q=64, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=4))),
    ("ATTN-FP8-SCHEDULE", {"head_dim": 64, "dtype": "bf16"}, dict(tile_q=64, schedule="tma", mma_warpgroups=1,
                                                                   stages_q=1, stages_kv=4),
     ({"head_dim": 64, "dtype": "e4m3"}, {})),
    # FP8 head dims are multiples of the e4m3 WGMMA K 32 (the shared rule): 64, 96, 160, 192 in; 80, 144 out
    ("ATTN-QK-WGMMA-K", {"head_dim": 64}, {}, ({"head_dim": 80}, {})),
    ("ATTN-QK-WGMMA-K", {"head_dim": 160}, {}, ({"head_dim": 144}, {})),
    # tile_kv (P V's K) a multiple of 32 for e4m3: 96 in, 80 out
    ("ATTN-PV-WGMMA-K", {}, dict(tile_kv=96), ({}, dict(tile_kv=80))),
    # shared memory at 1-byte elements: head 256, 128x128, 5 K/V stages fit (163,840 B of K/V), 128x256 x 4 do not
    ("ATTN-SMEM-CAPACITY", {"head_dim": 256}, dict(tile_kv=128, stages_kv=5),
     ({"head_dim": 256}, dict(tile_kv=256, stages_kv=4))),
    # registers at 1-byte elements (P in a quarter of S's registers): head 128, 128x256: 128 + 32 + 64 + 4 = 228 < 240;
    # head 256, 128x256: 128 + 32 + 128 + 4 = 292
    ("ATTN-REGISTERS", {}, dict(tile_kv=256, stages_kv=4), ({"head_dim": 256}, dict(tile_kv=256, stages_kv=2))),
    # ptxas serializes from 228 registers at 1-byte elements too (nvcc 13.0 here: head 128 128x256 f32 = 228
    # serialized, 128x128 = 164 clean): 128x192 = 96 + 24 + 64 + 4 = 188 in; with an f16 S, 128x256 = 164 in
    ("ATTN-WGMMA-SERIALIZED", {}, dict(tile_kv=192), ({}, dict(tile_kv=256, stages_kv=4))),
    ("ATTN-WGMMA-SERIALIZED", {"allow_f16_qk_acc": True}, dict(tile_kv=256, stages_kv=4, acc_qk="f16"),
     ({}, dict(tile_kv=256, stages_kv=4, acc_qk="f32"))),
]


@pytest.mark.parametrize("rule,p_in,c_in,outside", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_fp8_rule_two_sided(rule, p_in, c_in, outside):
    p_out, c_out = outside
    inside = found(P(**p_in), C(**c_in))
    assert rule not in inside, inside
    out = found(P(**{**p_in, **p_out}), C(**(c_out or c_in)))
    assert rule in out, out


def test_fp8_register_count_at_one_byte():
    from cutegen.legality.attention import AttentionContext
    r = AttentionContext(P(), C(tile_kv=256)).registers
    assert r == {"s": 128, "p": 32, "o": 64, "softmax": 4, "total": 228}
    r16 = AttentionContext(P(allow_f16_qk_acc=True), C(tile_kv=256, acc_qk="f16")).registers
    assert r16["s"] == 64 and r16["total"] == 164


def test_fp8_smem_probe_rows_are_modelled():
    """The smem probe oracle's e4m3 rows (nvcc's sizeof) hold under the FP8 rules: the model and the oracle agree
    (test_attention_legality checks every row) and the rows are legal or refused only by smem/registers."""
    from pathlib import Path
    rows = [json.loads(x) for x in (Path(__file__).resolve().parents[1] /
                                    "oracles/attention_smem_probe_results.jsonl").read_text().splitlines()]
    fp8 = [r for r in rows if r["dtype"] == "e4m3"]
    assert fp8
    from cutegen.legality.attention import AttentionContext
    for r in fp8:
        ctx = AttentionContext(P(head_dim=r["head_dim"]), AttentionConfig.from_dict(r["config"]))
        assert ctx.smem_bytes == r["smem"], r


def test_example_fp8_kernels_are_legal_where_allowed():
    for d, configs in EXAMPLE_CONFIGS_FP8.items():
        for c in configs:
            r = check_attention(P(head_dim=d, allow_f16_qk_acc=c.acc_qk == "f16"), c)
            if (d, c.tile_kv, c.acc_qk) == (128, 256, "f32"):      # serialized by nvcc 13.0 (228 registers)
                assert not r.legal and "ATTN-WGMMA-SERIALIZED" in {v.rule_id for v in r.violations}
                continue
            assert r.legal and r.search_legal, (d, c.short_name(), [str(v) for v in r.violations + r.warnings])
            if c.acc_qk == "f16":
                assert not check_attention(P(head_dim=d), c).legal


# --- the search -----------------------------------------------------------------------------------------------
def test_fp8_search_picks_f32_unless_allowed():
    from cutegen.ops.attention import search
    p = P(batch=4, heads_q=32, heads_kv=32)
    found_ = search(p, 5)
    assert found_.ranked and all(r.config.acc_qk == "f32" for r in found_.ranked)
    assert all(r.config.schedule != "tma" for r in found_.ranked)
    assert found_.pruned_by_rule.get("ATTN-ACC-QK-F16-CONSENT", 0) > 0
    allowed = search(p.replace(allow_f16_qk_acc=True), 5)
    assert allowed.ranked[0].config.acc_qk == "f16"
    assert allowed.ranked[0].cost < found_.ranked[0].cost           # the model prices the trade
    for r in found_.ranked + allowed.ranked:
        assert not backend_refusals(allowed.problem if hasattr(allowed, "problem") else p, r.config)
    # bf16 and f16 problems: no f16 accumulator offered unless allowed (f16), never for bf16
    f16 = search(P(dtype="f16", batch=4, heads_q=32, heads_kv=32), 3)
    assert all(r.config.acc_qk == "f32" for r in f16.ranked)


def test_fp8_cost_model_against_the_issue_figures():
    """One constant (FP8_CONVERT_OPS_PER_SCORE) fitted to the issue's 88 FP8 figure, 128x256 f32 accumulation, 732
    TFLOP/s on an H100 (B4 H32 S4096 D128); held out: the f16-accumulator kernel (861) within 5 %."""
    from search.attention.cost import config_cost, tflops
    p = P(batch=4, heads_q=32, heads_kv=32, allow_f16_qk_acc=True)
    f32 = tflops(p, config_cost(p, C(tile_kv=256))[0])
    f16 = tflops(p, config_cost(p, C(tile_kv=256, acc_qk="f16"))[0])
    assert abs(f32 / 732 - 1) < 0.03, f32
    assert abs(f16 / 861 - 1) < 0.05, f16
    bf16 = tflops(P(dtype="bf16", batch=4, heads_q=32, heads_kv=32), config_cost(
        P(dtype="bf16", batch=4, heads_q=32, heads_kv=32), C())[0])
    assert f32 > bf16                                       # FP8 is priced faster than 16-bit, not 2x (softmax-bound)
    assert f32 < 1.5 * bf16


# --- rendering ------------------------------------------------------------------------------------------------
def test_fp8_renders_its_own_template():
    p, c = P(causal=True, heads_kv=2, layout="bhsd"), C(tile_kv=256)
    assert not backend_refusals(p, c)
    src = render_source(p, c)
    assert "using Element = cutlass::float_e4m3_t;" in src
    assert "using ElementOut = cutlass::bfloat16_t;" in src
    assert "using StrideV = cute::tuple<_1, int, cute::tuple<int, _0>>;" in src        # V^T, grouped
    assert 'CUTEGEN_EXPORT int cutegen_attention_fp8(' in src and "CUTEGEN_EXPORT int cutegen_attention(" not in src
    assert "args_tma{ {args.descale_v}" in src                                            # O = descale_v x acc
    assert "scale_qk = float(double(scale) * double(descale_q) * double(descale_k))" in src
    for rule in ("ATTN-ABI-DESCALE", "ATTN-ABI-VT-ROW", "TMA-GMEM-STRIDE-16B", "ATTN-ABI-GQA-STRIDES"):
        assert rule in src
    assert "FmhaMainloopTma<" not in src
    mha = render_source(P(dtype_out="f16"), C())
    assert "using StrideV = cute::tuple<_1, int, cute::tuple<int, int>>;" in mha
    assert "using ElementOut = cutlass::half_t;" in mha
    assert "Option<Tag::kStagesKV, Int<5>>" in mha


def test_fp8_abi_declarations_match_the_rendered_exports():
    import re
    from cutegen.ops.attention import abi
    src = render_source(P(), C())
    exported = re.findall(r"CUTEGEN_EXPORT [\w\s*]*?\b(cutegen_\w+)\(", src)
    declared = re.findall(r'extern "C" [\w\s*]*?\b(cutegen_\w+)\(', abi.C_DECLARATIONS + abi.FP8_C_DECLARATIONS)
    assert sorted(exported) == sorted(set(declared) - {"cutegen_attention"})
    signature = re.search(r"CUTEGEN_EXPORT int cutegen_attention_fp8\((.*?)\)\s*\{", src, re.S).group(1)
    assert len([a for a in signature.split(",") if a.strip()]) == len(abi.ATTENTION_FP8_ARGTYPES) == 30


def test_fp8_render_is_deterministic_and_keyed():
    a = render(P(), C(), toolchain=TOOLCHAIN)
    b = render(P(batch=7, seqlen_q=100, seqlen_kv=300), C(), toolchain=TOOLCHAIN)    # sizes are run-time
    assert a.files["kernel.cu"] == b.files["kernel.cu"] and a.kernel_hash == b.kernel_hash   # the manifest names sizes
    assert render(P(), C(), toolchain=TOOLCHAIN).files == a.files
    assert render(P(dtype_out="f16"), C(), toolchain=TOOLCHAIN).kernel_hash != a.kernel_hash
    man = json.loads(a.files["manifest.json"])
    assert man["abi"] == "cutegen_attention_fp8" and man["problem"]["dtype"] == "e4m3"


def test_fp8_renderer_refusals_two_sided():
    # e4m3 on the tma schedule: refused; the same config in bf16 is rendered
    tma = C(tile_q=64, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=4)
    assert any(r.startswith("ATTN-RENDER-FP8-SCHEDULE") for r in backend_refusals(P(head_dim=64), tma))
    assert not backend_refusals(P(head_dim=64, dtype="bf16"), tma)
    # a 16-bit V^T is e4m3's layout, not rendered for bf16
    assert any(r.startswith("ATTN-RENDER-V-LAYOUT") for r in backend_refusals(P(dtype="bf16", v_transposed=True), C()))
    assert not backend_refusals(P(dtype="bf16"), C())
    # split-KV (decode) kernels are 16-bit only
    assert any(r.startswith("ATTN-RENDER-FP8-SPLIT-KV") for r in backend_refusals(P(seqlen_q=1), C(kv_splits=4)))
    assert not any(r.startswith("ATTN-RENDER-FP8-SPLIT-KV") for r in backend_refusals(P(seqlen_q=1), C()))
    with pytest.raises(Exception, match="ATTN-RENDER-FP8-SCHEDULE"):
        render(P(head_dim=64), tma, toolchain=TOOLCHAIN)


def test_sixteen_bit_kernels_are_unchanged():
    """The 16-bit template and kernel keys do not see the FP8 fields (regen --check covers the committed kernels)."""
    src = render_source(P(dtype="bf16"), C())
    assert "cutegen_attention_fp8" not in src and "descale" not in src
    assert "using StrideV = cute::tuple<int, _1, cute::tuple<int, int>>;" in src


# --- the op's host side (no GPU: argument checks before any kernel runs) ------------------------------------------
def test_op_refuses_fp8_arguments_on_16bit_inputs_and_bad_descales():
    from cutegen.ops.attention import torch_op
    op = torch_op.AttentionKernels.__new__(torch_op.AttentionKernels)
    op.entries = []
    q = torch.zeros(1, 2, 16, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="ATTN-OP-FP8-ARGS"):
        op(q, q, q, descale_q=2.0)
    q8 = torch.zeros(1, 2, 16, 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="ATTN-OP-DESCALE"):
        op(q8, q8, q8, descale_v=0.0)
    with pytest.raises(ValueError, match="ATTN-OP-DESCALE"):
        op(q8, q8, q8, descale_k=torch.ones(2))
    with pytest.raises(ValueError, match="ATTN-OP-SHAPE"):
        op(q8, q8, q8, v_transposed=True, descale_q=1.0)        # V^T must be (B, Hkv, D, Skv)
    with pytest.raises(ValueError, match="ATTN-OP-NO-KERNEL"):
        op(q8, q8, q8.transpose(2, 3), v_transposed=True)         # the right shapes: no kernel loaded
    with pytest.raises(ValueError, match="ATTN-OP-DTYPE"):
        op(q8, q8, q)


def test_transpose_v_pads_rows_to_16():
    from cutegen.ops.attention.torch_op import transpose_v
    v = torch.randn(2, 3, 333, 64).to(torch.float8_e4m3fn)
    vt = transpose_v(v)
    assert vt.shape == (2, 3, 64, 333) and vt.stride() == (3 * 64 * 336, 64 * 336, 336, 1)
    assert torch.equal(vt.float(), v.float().transpose(2, 3))


def test_cli_search_fp8_and_the_accumulator_consent(capsys):
    from cutegen.cli import main
    base = ["attention", "search", "--dtype", "e4m3", "--top-k", "2", "--batch", "2", "--heads-q", "8"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "_e4m3:" in out and "accf16" not in out
    assert main(base + ["--allow-f16-qk-acc", "--dtype-out", "f16"]) == 0
    out = capsys.readouterr().out
    assert "_e4m3_of16_f16accok:" in out and "_accf16" in out
    # a 16-bit problem with an f16 output type it does not write: one line naming the field
    assert main(["attention", "search", "--dtype", "bf16", "--dtype-out", "f16"]) != 0
    captured = capsys.readouterr()
    assert "dtype_out" in captured.err + captured.out


def test_fp8_ops_schemas_and_fake_implementations(monkeypatch):
    """What torch.compile traces with: the FP8 op's schema, its fake (O in the kernel's 16-bit type, contiguous;
    float32 LSE) and the transpose op's fake (the padded V^T strides)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from cutegen.ops.attention import torch_op
    schema = str(torch.ops.cutegen.attention_fwd_fp8.default._schema)
    assert schema.startswith("cutegen::attention_fwd_fp8(Tensor q, Tensor k, Tensor vt, str library, float scale, "
                             "float descale_q, float descale_k, float descale_v)")
    desc = {"hash": "h", "problem": {"dtype": "e4m3", "dtype_out": "f16", "grouped": True}}
    monkeypatch.setattr(torch_op, "load_library", lambda path: (None, desc))
    with FakeTensorMode():
        q = torch.empty(2, 8, 100, 128, dtype=torch.float8_e4m3fn)
        k = torch.empty(2, 2, 300, 128, dtype=torch.float8_e4m3fn)
        vt = torch.ops.cutegen.attention_transpose_v(k)
        assert vt.shape == (2, 2, 128, 300) and vt.stride() == (2 * 128 * 304, 128 * 304, 304, 1)
        o, lse = torch.ops.cutegen.attention_fwd_fp8(q, k, vt, "/k/kernel.so", 0.1, 1.0, 1.0, 1.0)
        assert o.shape == (2, 8, 100, 128) and o.dtype == torch.float16 and o.is_contiguous()
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32
