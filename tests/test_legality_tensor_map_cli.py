"""`cutegen check tensor-map`: one answer per input line, in order; error lines; exit codes."""
from __future__ import annotations

import io
import json
import subprocess
import sys

from cutegen.cli import main
from cutegen.commands.check import check_tensor_map_lines

LEGAL = dict(
    data_type="CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", rank=2, global_address=16,
    global_dim=[4096, 4096], global_strides=[8192], box_dim=[64, 128], element_strides=[1, 1],
    interleave="CU_TENSOR_MAP_INTERLEAVE_NONE", swizzle="CU_TENSOR_MAP_SWIZZLE_128B",
    l2_promotion="CU_TENSOR_MAP_L2_PROMOTION_L2_128B", oob_fill="CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
)
WIDE = dict(LEGAL, box_dim=[72, 128])                     # A16: 144 B > 128 B
OVERLAP = dict(LEGAL, global_strides=[4096])              # A10: warning only
INTS = dict(LEGAL, data_type=9, interleave=0, swizzle=3, l2_promotion=2, oob_fill=0)


def run_cli(tmp_path, lines: list[str], capsys):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(line + "\n" for line in lines))
    rc = main(["check", "tensor-map", "--jsonl", str(f)])
    out = capsys.readouterr().out.splitlines()
    return rc, [json.loads(o) for o in out]


def test_answers_in_input_order(tmp_path, capsys):
    rc, out = run_cli(tmp_path, [json.dumps(d) for d in (LEGAL, WIDE, OVERLAP, INTS, WIDE)], capsys)
    assert rc == 0
    assert out == [
        {"legal": True, "rules": [], "warnings": []},
        {"legal": False, "rules": ["TMA-BOX-INNER-SWIZZLE-SPAN"], "warnings": []},
        {"legal": True, "rules": [], "warnings": ["TMA-GLOBAL-STRIDE-OVERLAP"]},
        {"legal": True, "rules": [], "warnings": []},
        {"legal": False, "rules": ["TMA-BOX-INNER-SWIZZLE-SPAN"], "warnings": []},
    ]


def test_malformed_lines_get_error_lines_and_the_rest_is_checked(tmp_path, capsys):
    missing = dict(LEGAL)
    del missing["box_dim"]
    lines = [
        json.dumps(LEGAL),
        "{not json",
        json.dumps(missing),
        json.dumps(dict(LEGAL, rank="2")),
        json.dumps(dict(LEGAL, global_dim=[4096, -8])),
        "",
        json.dumps(WIDE),
        json.dumps([1, 2]),
    ]
    rc, out = run_cli(tmp_path, lines, capsys)
    assert rc == 1
    assert len(out) == len(lines)
    assert out[0]["legal"] is True
    assert out[1]["error"].startswith("line 2: input: not valid JSON")
    assert out[2] == {"error": "line 3: box_dim: missing"}
    assert out[3]["error"].startswith("line 4: rank: ")
    assert out[4] == {"error": "line 5: global_dim[1]: -8 is negative"}
    assert out[5] == {"error": "line 6: input: empty line"}
    assert out[6]["rules"] == ["TMA-BOX-INNER-SWIZZLE-SPAN"]
    assert out[7]["error"].startswith("line 8: input: expected a JSON object")


def test_stdin_and_console_script(tmp_path):
    data = json.dumps(LEGAL) + "\n" + json.dumps(WIDE) + "\n"
    p = subprocess.run([sys.executable, "-m", "cutegen", "check", "tensor-map", "--jsonl", "-"],
                       input=data, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert [json.loads(x)["legal"] for x in p.stdout.splitlines()] == [True, False]


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    rc = main(["check", "tensor-map", "--jsonl", str(tmp_path / "nope.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and "--jsonl" in err and "nope.jsonl" in err


def test_reasons_flag_adds_readable_reasons():
    out = io.StringIO()
    bad = check_tensor_map_lines([json.dumps(WIDE)], out, reasons=True)
    (answer,) = [json.loads(x) for x in out.getvalue().splitlines()]
    assert bad == 0
    assert answer["reasons"] == ["TMA-BOX-INNER-SWIZZLE-SPAN: box_dim[0]=72 x 2 B = 144 B exceeds the 128-B span "
                                 "of CU_TENSOR_MAP_SWIZZLE_128B"]


def test_output_is_deterministic(tmp_path, capsys):
    lines = [json.dumps(d) for d in (LEGAL, WIDE, OVERLAP)] * 3
    first = run_cli(tmp_path, lines, capsys)
    second = run_cli(tmp_path, lines, capsys)
    assert first == second
