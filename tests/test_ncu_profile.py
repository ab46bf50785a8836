"""bench/ncu_profile.py and bench/gpu_ncu.sh on the CPU: the plan renders the profiled picks, the metric list
keeps only what this ncu knows, and the summary cuts ncu's kernel list into targets at the marker kernels and
reads each target's main kernel (a CSV in the shape of ``ncu --import R --csv --page raw --print-units base``)."""
from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("ncu_profile", ROOT / "bench" / "ncu_profile.py")
ncu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu)

STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
COLUMNS = ["ID", "Process ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
           "dram__bytes_write.sum", "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__cycles_elapsed.avg.per_second",
           "launch__grid_size", "sm__cycles_active.avg", "gpc__cycles_elapsed.max", STALL.format("long_scoreboard"), STALL.format("barrier"), STALL.format("selected"),
           STALL.format("wait")]


def _csv(kernels: list[tuple]) -> str:
    """ncu's raw page: a header, a units row, one row per kernel (values as ncu prints them)."""
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(COLUMNS)
    w.writerow(["", "", "", "nsecond", "byte", "byte", "%", "%", "hz", "", "cycle", "cycle", "", "", "", ""])
    for i, (name, ns, rd, tensor, dram, stalls) in enumerate(kernels):
        w.writerow([str(i), "42", name, f"{ns:,.0f}", str(rd), "1000000", str(tensor), str(dram), "1755000000", "132",
                    "900", "1,000", *[str(s) for s in stalls]])
    return buf.getvalue()


MARK = "at::cuda::(anonymous namespace)::spin_kernel(long)"
GROUPED = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, X>>(T1::Params)"


def test_summary_cuts_at_markers_and_reads_the_main_kernel(tmp_path):
    rows_csv = _csv([
        ("void warmup_before_the_first_marker()", 5_000, 0, 0, 0, (0, 0, 0, 0)),
        (MARK, 1_000, 0, 0, 0, (0, 0, 0, 0)),
        ("prepare_groups(PrepArgs)", 3_000, 10, 0, 1, (1, 0, 0, 0)),
        (GROUPED, 600_000, 2_000_000_000, 72.5, 60.0, (0.5, 2.5, 1.0, 1.5)),
        (MARK, 1_000, 0, 0, 0, (0, 0, 0, 0)),
        ("cudnn_sdpa_kernel", 250_000, 500_000_000, 85.0, 20.0, (0.2, 0.1, 0.9, 3.0)),
    ])
    path = tmp_path / "r.csv"
    path.write_text('==PROF== a line ncu prints first\n' + rows_csv)
    rows = ncu.read_ncu_csv(path)
    assert len(rows) == 6 and rows[3]["gpu__time_duration.sum"] == 600000.0   # the units row is not a kernel
    groups = ncu.split_by_marker(rows)
    assert [len(g) for g in groups] == [2, 1]
    manifest = {"set": "x", "targets": [
        {"target": "dsv3/cutegen", "family": "grouped", "flops": 4.8e11, "floor_s": 486e-6, "marker": True},
        {"target": "b4/sdpa_cudnn", "family": "attention", "flops": 2e14, "marker": True},
        {"target": "late/one", "family": "grouped", "flops": 1.0, "skipped": "deadline"}]}
    timing = {"targets": [{"target": "dsv3/cutegen", "ms": 0.61, "flops": 4.8e11, "floor_s": 486e-6, "ok": True},
                          {"target": "dsv3/alt 256x128", "ms": 0.5, "flops": 4.8e11, "floor_s": 486e-6, "ok": False},
                          {"target": "dsv3/torch_grouped_mm", "ms": 0.732, "flops": 4.8e11, "floor_s": 486e-6}]}
    doc = ncu.summarize([manifest], [rows], [timing])
    by = {r["target"]: r for r in doc["targets"]}
    g = by["dsv3/cutegen"]
    assert g["kernels_in_range"] == 2 and g["main"]["kernel"].startswith("void cutlass::device_kernel")
    assert g["other_kernels_us"] == 3.0                       # the prep kernel, not the main one
    assert abs(g["of_floor"] - 486 / 600) < 1e-9 and abs(g["tflops"] - 800.0) < 1e-9
    assert g["main"]["top_stalls"] == [["barrier", 2.5], ["wait", 1.5], ["long_scoreboard", 0.5]]  # no "selected"
    assert abs(g["main"]["dram_tb_per_s"] - 2.001e9 / 600_000 / 1e3) < 1e-9
    assert g["main"]["sm_clock_mhz"] == 1755.0 and g["events_ms"] == 0.61
    assert g["main"]["sm_active_pct"] == 90.0                 # 900 of "1,000" cycles (ncu's thousands separator)
    assert g["limiter"] == "latency (barrier)"                 # tensor 72.5 < 80, DRAM 60 < 75
    assert by["b4/sdpa_cudnn"]["limiter"] == "tensor pipe"      # 85 >= 80
    assert by["b4/sdpa_cudnn"]["vs_cudnn"] == 1.0
    assert by["late/one"]["skipped"] == "deadline" and "main" not in by["late/one"]
    ev = {r["target"]: r for r in doc["events"]}
    assert abs(ev["dsv3/cutegen"]["vs_peer"] - 0.732 / 0.61) < 1e-12 and abs(ev["dsv3/alt 256x128"]["of_floor"] - 0.972) < 1e-12
    md = ncu.markdown(doc)
    assert "| dsv3/alt 256x128 | 0.5000 | 960 | 0.97 | 1.46 | WRONG |" in md       # a wrong kernel says so
    assert sum(line.startswith("| ") for line in md.split("CUDA events")[0].splitlines()) == 1 + 3 and "| dsv3/cutegen | 600.0 | 800 | 0.81 |" in md


def test_limiter_bounds():
    base = {"top_stalls": [["long_scoreboard", 3.0]]}
    assert ncu.limiter({**base, "tensor_pipe_pct": 80.0, "dram_throughput_pct": 0.0}) == "tensor pipe"
    assert ncu.limiter({**base, "tensor_pipe_pct": 79.9, "dram_throughput_pct": 75.0}) == "DRAM bandwidth"
    assert ncu.limiter({**base, "tensor_pipe_pct": 79.9, "dram_throughput_pct": 74.9}) == "latency (long_scoreboard)"


def test_fewer_ranges_than_targets_pairs_the_first(capsys):
    """A target whose range ncu did not record (stopped early) is left out, not paired with the next one's."""
    text = _csv([(MARK, 1_000, 0, 0, 0, (0, 0, 0, 0)), ("k", 2_000, 1, 1, 1, (0, 0, 0, 0))])
    buf = list(csv.reader(io.StringIO(text)))
    rows = [dict(zip(buf[0], [ncu._num(v) for v in r])) for r in buf[2:]]
    manifest = {"set": "s", "targets": [{"target": "a", "flops": 1.0, "marker": True},
                                        {"target": "b", "flops": 1.0, "marker": True}]}
    doc = ncu.summarize([manifest], [rows], [])
    assert [r["target"] for r in doc["targets"] if "main" in r] == ["a"]
    assert [r["target"] for r in doc["targets"] if "main" not in r] == ["b"] and "no range" in doc["targets"][1]["error"]
    assert "2 targets but 1 marker ranges" in capsys.readouterr().err


def test_metric_list_keeps_only_known_optional_metrics():
    query = "Device GH100\nsm__pipe_tensor_op_gmma_cycles_active  Counter  cycle  # of cycles\n"
    got = ncu.metric_list(query)
    assert got[:len(ncu.METRICS_SAFE)] == list(ncu.METRICS_SAFE)
    assert "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed" in got
    assert "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed" not in got
    assert ncu.metric_list(None) == list(ncu.METRICS_SAFE)


def test_plan_renders_the_profiled_picks(tmp_path):
    out = tmp_path / "plan"
    assert ncu.main(["plan", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [g["name"] for g in plan["grouped"]] == list(ncu.GROUPED_CASES)
    assert [a["name"] for a in plan["attention"]] == list(ncu.ATTN_SHAPES)
    dirs = (out / "dirs.txt").read_text().split()
    for g in plan["grouped"]:
        assert g["dir"] in dirs and (out / g["dir"] / "kernel.cu").is_file()
        assert 0 < g["predicted"]["fraction_of_floor"] <= 1
    for a in plan["attention"]:
        assert [k["role"] for k in a["kernels"]] == ["cutegen", "example"]
        assert all(k["dir"] in dirs for k in a["kernels"])
    # the CPU half of the device script: the same plan through bench/gpu_ncu.sh --plan
    env = {**os.environ, "PLAN": str(tmp_path / "plan2"), "PYTHON": sys.executable}
    r = subprocess.run(["bash", "bench/gpu_ncu.sh", "--plan"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "plan2" / "dirs.txt").read_text() == (out / "dirs.txt").read_text()


def test_workload_marks_one_range_per_target_and_records_failures(tmp_path, monkeypatch):
    """The workload's order of events, with CUDA stood in by counters: per target a marker and exactly one
    call between profiler start and stop; a target that raises inside its range keeps its marker (its kernels
    are in ncu's list) and says why; one that fails before its range has no marker."""
    import torch
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "stand-in")
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: events.append("marker"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: events.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: events.append("stop"))

    def call(name, fail_on=None):
        count = {"n": 0}

        def fn():
            count["n"] += 1
            events.append(name)
            if fail_on == count["n"]:
                raise RuntimeError(f"{name} failed")
        return fn

    def fake_targets(plan_dir, plan, which, timing=False):
        def broken_make():
            raise RuntimeError("no library")
        return [("a", "dense", {"flops": 1}, lambda: call("a")),
                ("b", "grouped", {"flops": 2}, lambda: call("b", fail_on=3)),    # third call: the profiled one
                ("c", "grouped", {"flops": 3}, broken_make),
                ("d", "attention", {"flops": 4}, lambda: call("d"))]
    monkeypatch.setattr(ncu, "targets", fake_targets)
    (tmp_path / "plan.json").write_text("{}")
    m = tmp_path / "m.json"
    assert ncu.main(["workload", str(tmp_path), "--set", "peers", "--manifest", str(m)]) == 0
    doc = json.loads(m.read_text())
    assert [t["target"] for t in doc["targets"]] == ["a", "b", "c", "d"]
    assert [bool(t.get("marker")) for t in doc["targets"]] == [True, True, False, True]
    assert doc["targets"][1]["error"] == "RuntimeError: b failed" and doc["targets"][2]["error"] == "RuntimeError: no library"
    ranges = [r.split("stop")[0].split() for r in " ".join(events).split("start")[1:]]
    assert ranges == [["marker", "a"], ["marker", "b"], ["marker", "d"]]
    assert events.count("a") == 3 and events.count("d") == 3          # two warm-up calls outside the range


def test_timing_the_cutegen_set_runs_every_grouped_kernel_of_its_orientation(tmp_path):
    """Timed, each prefill case runs its pick, the alternatives and the other prefill picks (not the decode
    case's swap-AB kernel); profiled, its pick alone."""
    out = tmp_path / "plan"
    assert ncu.main(["plan", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    timed = [t[0] for t in ncu.targets(out, plan, "cutegen", timing=True) if t[1] == "grouped"]
    profiled = [t[0] for t in ncu.targets(out, plan, "cutegen", timing=False) if t[1] == "grouped"]
    assert len(profiled) == len(ncu.GROUPED_CASES)
    prefill_kernels = {g["dir"] for g in plan["grouped"] if not g["config"]["swap_ab"]}
    prefill_kernels |= {a["dir"] for a in plan["grouped_alternatives"]}
    dsv3 = [t for t in timed if t.startswith("dsv3_gate_up_prefill_uniform/")]
    assert len(dsv3) == len(prefill_kernels) and sum(t.split("/")[1].startswith("cutegen ") for t in dsv3) == 1
    assert not any("swap" in t for t in dsv3)
    decode_case = next(g for g in plan["grouped"] if g["name"] == "qwen3_down_decode_skewed")
    decode = [t for t in timed if t.startswith("qwen3_down_decode_skewed/")]
    swapped = {g["config_name"] for g in plan["grouped"] if g["config"]["swap_ab"]}
    if decode_case["config"]["swap_ab"]:
        assert decode == [f"qwen3_down_decode_skewed/cutegen {decode_case['config_name']}"]
    else:                   # an unswapped decode pick runs beside the prefill kernels, not a swapped one
        assert len(decode) == len(prefill_kernels | {decode_case["dir"]}) and not any(t.split(" ", 1)[1] in swapped for t in decode)
