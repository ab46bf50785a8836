"""bench/grouped_moe.py on the CPU: the MoE suite parses into grouped problems, the plan stays inside the
GPU run's kernel budget, and the GPU validator catches a kernel that writes outside its groups' rows or
computes a group with another group's weights (a stand-in launch does the arithmetic on CPU tensors)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("grouped_moe", ROOT / "bench" / "grouped_moe.py")
moe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(moe)

from cutegen.ops.grouped_gemm import runner as gg_runner, torch_op  # noqa: E402
from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem  # noqa: E402


def test_the_suite_is_the_issues_moe_suite():
    cases = moe.load_suite()
    names = {c["name"] for c in cases}
    for model in ("mixtral", "dsv3", "qwen3", "gptoss"):
        assert any(n.startswith(model) and "prefill" in n for n in names)
        assert any(n.startswith(model) and "decode" in n for n in names)
    problems = [moe.problem_of(c) for c in cases]
    assert {p.distribution for p in problems} >= {"uniform", "skewed"}
    assert {p.layout for p in problems} == {"offs", "masked"} and {p.dtype for p in problems} == {"bf16", "e4m3"}
    decode = [p for c, p in zip(cases, problems) if "decode" in c["name"] and p.layout == "offs"]
    assert all(1 <= p.tokens / p.groups <= 64 for p in decode)


def test_a_bad_case_is_one_line(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text('[[case]]\nname = "x"\ngroups = 8\ntokens = 64\nn = 64\nk = 64\nfill = 3\n')
    with pytest.raises(SystemExit):
        moe.load_suite(bad)


def test_plan_renders_every_pick_inside_the_budget(tmp_path):
    out = tmp_path / "plan"
    assert moe.main(["plan", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["kernels"]) <= moe.MAX_KERNELS
    order = (out / "build_order.txt").read_text().split()
    assert order[0] == plan["kernels"][plan["sanitize_kernel"]]["dir"] and len(order) == len(plan["kernels"])
    for pc in plan["cases"]:
        assert pc["pick"] in pc["kernels"]
        assert (out / plan["kernels"][pc["pick"]]["dir"] / "kernel.cu").is_file()
    assert plan["kernels"][plan["sanitize_kernel"]]["config"]["swap_ab"]


def _stand_in(bug: str | None):
    """A Python launch with the kernel's semantics on CPU tensors; ``bug`` breaks it on purpose."""
    def launch(k, a, b, out, sizes, scale_a=None, scale_b=None, *, workspace_shortfall=0):
        s = sizes.tolist()
        if k.layout == "offs":
            start = 0
            for i, end in enumerate(s):
                wi = b[(i + 1) % len(s)] if bug == "wrong_weights" and i == 1 else b[i]
                if end > start:
                    out[start:end] = (a[start:end].float() @ wi.float()).to(out.dtype)
                start = end
            if bug == "write_past_end":
                out[-1] = 0
        else:
            for i, m in enumerate(s):
                out[i, :m] = (a[i, :m].float() @ b[i].float()).to(out.dtype)
            if bug == "write_past_end":
                out[0, -1] = 0
        return 0, ""
    return launch


@pytest.mark.parametrize("layout,bug", [("offs", None), ("offs", "write_past_end"), ("offs", "wrong_weights"),
                                        ("masked", None), ("masked", "write_past_end")])
def test_the_validator_catches_wrong_rows_and_writes_outside(monkeypatch, layout, bug):
    monkeypatch.setattr(torch_op, "launch", _stand_in(bug))
    monkeypatch.setattr(gg_runner, "DEVICE", "cpu")    # the GPU half lives in the operation
    h = torch_op.register_stand_in("bf16", layout)
    p = moe.validation_problem(GroupedGemmProblem(8, 64, 64, 64, layout=layout), {})
    cases = moe.validate_kernel(torch_op, h, p, {"tile_m": 128, "tile_n": 128, "swap_ab": False}, 1e-2, seed=1)
    assert set(cases) == {"empty_groups", "one_token", "ragged_tile", "all_in_one", "very_uneven"}
    ok = all(c["ok"] for c in cases.values())
    assert ok == (bug is None), json.dumps(cases)[:500]


def test_floor_counts_used_experts_only():
    p = GroupedGemmProblem(4, 128, 256, 100)
    full = moe.floor_seconds(p, [25, 25, 25, 25])
    one = moe.floor_seconds(p, [100, 0, 0, 0])
    assert one < full     # three experts' weights are not read
    assert full == pytest.approx((4 * 128 * 256 * 2 + 100 * 256 * 2 + 100 * 128 * 2) / 4.8e12)


def test_the_plot_and_table_read_a_run(tmp_path):
    spec2 = importlib.util.spec_from_file_location("plot_grouped", ROOT / "bench" / "plot_grouped.py")
    plot = importlib.util.module_from_spec(spec2)
    spec2.loader.exec_module(plot)
    k = {"ms": 1.0, "tflops": 100.0, "of_floor": 0.5, "ok": True, "config_name": "128x256x64", "ms_graph": 0.9}
    case = {"name": "c1", "floor_ms": 0.5, "rows": 100, "empty_groups": 0, "pick": "h1", "best": "h1",
            "kernels": {"h1": k}, "peers": {"torch_grouped_mm": {"ms": 1.5, "of_floor": 0.33},
                                            "matmul_loop": {"error": "x"}, "padded_bmm": {"ms": 2.0, "of_floor": 0.25}}}
    res = tmp_path / "r.json"
    res.write_text(json.dumps({"device": "H200", "cases": [case, {"name": "c2", "error": "boom"}]}))
    assert plot.main([str(res), "--png", str(tmp_path / "p.png"), "--md", str(tmp_path / "t.md")]) == 0
    table = (tmp_path / "t.md").read_text()
    assert "| c1 | 100 (0) | 0.500 | 128x256x64 | 1.000 (0.900) | 0.50 |" in table and "1.50x" in table
    assert (tmp_path / "p.png").stat().st_size > 1000
