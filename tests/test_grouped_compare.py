"""bench/grouped_compare.py on the CPU: the compare plan holds every case's new ranked kernels and its old pick
(read from H200 run 2's results) in bench/grouped_moe.py's plan format, and the table reads old, new, fastest and
torch._grouped_mm per case from a run's results."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("grouped_compare", ROOT / "bench" / "grouped_compare.py")
cmp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cmp)


def test_old_picks_are_run_2s():
    old = cmp.old_picks()
    assert old["qwen3_gate_up_prefill_uniform"] == "128x256x64_c1x2_coop_s4"
    assert old["gptoss_gate_up_prefill_skewed"] == "128x256x64_c1x1_coop_s4_alongm"
    assert set(cmp.CASES) <= set(old)


def test_plan_has_new_and_old_picks_in_the_moe_bench_format(tmp_path):
    out = tmp_path / "cmp"
    assert cmp.main(["plan", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [c["name"] for c in plan["cases"]] == list(cmp.CASES)
    order = (out / "build_order.txt").read_text().split()
    assert len(order) == len(plan["kernels"]) <= cmp.MAX_KERNELS
    for c in plan["cases"]:
        assert c["pick"] == c["ranked"][0]["kernel"] and c["pick"] in c["kernels"]
        assert c["old_pick"] in c["kernels"]
        assert plan["kernels"][c["old_pick"]]["config_name"] == c["old_pick_name"]
        assert (out / plan["kernels"][c["pick"]]["dir"] / "kernel.cu").is_file()


def test_table_marks_a_wrong_kernel_and_takes_the_fastest_validated():
    plan = {"kernels": {"o": {"config_name": "old"}, "n": {"config_name": "new"}, "x": {"config_name": "fastbad"}},
            "cases": [{"name": "c", "pick": "n", "old_pick": "o", "old_pick_name": "old"}]}
    results = {"kernels": {"o": {"validated": True}, "n": {"validated": True}, "x": {"validated": False}},
               "cases": [{"name": "c", "floor_ms": 0.5, "kernels": {
                   "o": {"ms": 1.0, "of_floor": 0.5, "ok": True},
                   "n": {"ms": 0.8, "of_floor": 0.625, "ok": True},
                   "x": {"ms": 0.6, "of_floor": 0.83, "ok": True}},      # fast, but failed validation
                   "peers": {"torch_grouped_mm": {"ms": 0.9, "of_floor": 0.56}}}]}
    md, doc = cmp.compare_table(plan, results)
    assert doc["cases"]["c"]["best"] == 0.8 and abs(doc["geomean_old_over_new"] - 1.25) < 1e-12
    assert "| c | old 1.0000 (0.50) | new 0.8000 (0.62) | new 0.8000 (0.62) | 0.9000 (0.56) |" in md


def test_the_other_classes_plan_fits_one_build_round(tmp_path):
    # FP8 per-tensor (with and without fast accumulation), block128, the masked layout and one bf16 decode case: each
    # case's new pick, its old one, and the new picks of its kind and class only
    out = tmp_path / "other"
    assert cmp.main(["plan", "--cases", "other", "--top-k", "1", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [c["name"] for c in plan["cases"]] == list(cmp.OTHER_CASES)
    assert len(plan["kernels"]) <= cmp.MAX_KERNELS
    for c in plan["cases"]:
        assert {plan["kernels"][h]["class"] for h in c["kernels"]} == {c["class"]}
        assert c["old_pick"] in c["kernels"]
