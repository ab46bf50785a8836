"""`cutegen check config`: the JSONL form (one verdict per line, in order, errors naming line and
field) and the single-file form (reasons for people)."""
import io
import json
import subprocess
import sys

from cutegen.cli import main
from cutegen.commands.check_config import check_lines, explain, parse_case

GOOD = {"problem": {"m": 4096, "n": 4096, "k": 4096, "batch": 1, "dtype_a": "bf16", "dtype_b": "bf16",
                    "dtype_c": "bf16", "dtype_d": "bf16", "dtype_acc": "f32", "layout_a": "row",
                    "layout_b": "col", "layout_c": "row"},
        "config": {"tile_shape": [128, 128, 64], "cluster_shape": [2, 1, 1], "stages": "auto",
                   "mainloop_schedule": "cooperative", "epilogue_schedule": "tma_warp_specialized_cooperative",
                   "tile_scheduler": "persistent"}}


def _with(**changes):
    d = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        section, key = path.split("__")
        if value is None:
            d[section].pop(key)
        else:
            d[section][key] = value
    return json.dumps(d)


def _run(lines):
    out = io.StringIO()
    bad = check_lines(lines, out)
    return bad, [json.loads(l) for l in out.getvalue().splitlines()]


def test_jsonl_in_order_with_errors():
    lines = [json.dumps(GOOD),
             _with(problem__k="4096"),                 # a string where a number goes
             "{not json",
             _with(config__stages=7),                  # 263,168 B of shared memory
             _with(problem__m=-5),                     # a negative size
             _with(config__tile_shape=None),           # a missing key
             "",
             _with(config__mainloop_schedule="pingpong", config__tile_scheduler="stream_k",
                   config__epilogue_schedule="tma_warp_specialized")]
    bad, out = _run(lines)
    assert bad == 5 and len(out) == len(lines)
    assert out[0] == {"legal": True, "rules": [], "warnings": [], "stages": 6, "smem_bytes": 230400}
    assert out[1] == {"error": "line 2: problem.k: expected an integer, got '4096'"}
    assert out[2]["error"].startswith("line 3: input: not valid JSON")
    assert out[3] == {"legal": False, "rules": ["RES-SMEM-CAPACITY"], "warnings": [], "stages": 7, "smem_bytes": 263168}
    assert out[4] == {"error": "line 5: problem.m: -5 is below the minimum 1"}
    assert out[5] == {"error": "line 6: config.tile_shape: missing"}
    assert out[6] == {"error": "line 7: input: empty line"}
    assert out[7]["legal"] is False and "SM90-STREAMK-COOPERATIVE" in out[7]["rules"]


def test_jsonl_warnings_field_matches_the_human_output(capsys):
    # Stream-K with a TMA epilogue: legal (nothing enforced is broken) but the relaunch hazard is a
    # warning. The JSON line says so in `warnings`, as `check tensor-map` does, and the human output
    # prints the same rule as a warning.
    streamk = _with(config__tile_scheduler="stream_k")
    _, out = _run([streamk, json.dumps(GOOD)])
    assert out[0]["legal"] is True and out[0]["rules"] == []
    assert out[0]["warnings"] == ["SM90-STREAMK-TMA-EPILOGUE-HANG"]
    assert out[1]["warnings"] == []
    problem, config = parse_case(json.loads(streamk))
    assert "warning SM90-STREAMK-TMA-EPILOGUE-HANG" in explain(problem, config)


def test_jsonl_rejects_unknown_and_missing_sections():
    _, out = _run([json.dumps({"problem": GOOD["problem"]}), json.dumps({**GOOD, "extra": 1}),
                   _with(config__tile_sahpe=[1, 2, 3])])
    assert out[0] == {"error": "line 1: config: missing"}
    assert out[1] == {"error": "line 2: extra: unknown field (expected problem and config)"}
    assert out[2] == {"error": "line 3: config.tile_sahpe: unknown field"}


def test_cli_jsonl_exit_codes(tmp_path, capsys):
    f = tmp_path / "cases.jsonl"
    f.write_text(json.dumps(GOOD) + "\n")
    assert main(["check", "config", "--jsonl", str(f)]) == 0
    assert json.loads(capsys.readouterr().out)["legal"] is True
    f.write_text(json.dumps(GOOD) + "\nnope\n")
    assert main(["check", "config", "--jsonl", str(f)]) == 1
    assert main(["check", "config", "--jsonl", str(tmp_path / "missing.jsonl")]) == 2


def test_cli_single_file_reasons(tmp_path, capsys):
    f = tmp_path / "one.json"
    d = json.loads(_with(problem__k=4100, config__tile_shape=[256, 256, 128]))
    f.write_text(json.dumps(d))
    assert main(["check", "config", str(f)]) == 1
    text = capsys.readouterr().out
    assert text.startswith("ILLEGAL")
    assert "SM90-STAGES-MIN [E06/C07]: stages=1 < 2" in text
    assert "K=4100 is not a multiple of 8" in text
    assert "source: CUTLASS 4.2" in text
    f.write_text(json.dumps(GOOD))
    assert main(["check", "config", str(f)]) == 0
    assert "LEGAL" in capsys.readouterr().out


def test_cli_is_deterministic(tmp_path):
    f = tmp_path / "cases.jsonl"
    f.write_text("\n".join([json.dumps(GOOD), _with(config__stages=2), _with(problem__n=4100)]) + "\n")
    cmd = [sys.executable, "-m", "cutegen", "check", "config", "--jsonl", str(f)]
    a = subprocess.run(cmd, capture_output=True, check=True).stdout
    b = subprocess.run(cmd, capture_output=True, check=True).stdout
    assert a == b and len(a.splitlines()) == 3
