"""`cutegen check config`: is a GEMM configuration legal on sm_90a with CUTLASS 4.2?

    cutegen check config --jsonl FILE|-     one {"problem": {...}, "config": {...}} per line;
                                            prints {"legal", "rules", "warnings", "stages", "smem_bytes"}
                                            per line (warnings: the rules broken that the driver or
                                            compiler does not enforce, as in `check tensor-map`)
    cutegen check config FILE.json          one object; prints the verdict and the reasons for people
"""
from __future__ import annotations

import json
import sys
from typing import IO, Any, Iterable

from .._fields import loads_json
from ..config import KernelConfig
from ..errors import CutegenError, FieldError
from ..problem import GemmProblem

HELP = "are these GEMM configurations legal on sm_90a with CUTLASS 4.2? (resolved stages, smem bytes)"


def add_arguments(p) -> None:
    p.add_argument("file", nargs="?", metavar="FILE.json",
                   help="one JSON object {\"problem\": {...}, \"config\": {...}}; prints the reasons")
    p.add_argument("--jsonl", metavar="FILE",
                   help="JSONL input ('-' for stdin), one object per line; prints one JSON verdict per line")
    p.add_argument("--reasons", action="store_true", help="with --jsonl: add warnings and reasons to each line")


def parse_case(data: Any) -> tuple[GemmProblem, KernelConfig]:
    """One input object -> (problem, config); FieldError names the offending field."""
    if not isinstance(data, dict):
        raise FieldError("input", f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"problem", "config"})
    if unknown:
        raise FieldError(unknown[0], "unknown field (expected problem and config)")
    for key in ("problem", "config"):
        if key not in data:
            raise FieldError(key, "missing")
    return GemmProblem.from_dict(data["problem"]), KernelConfig.from_dict(data["config"])


def verdict(problem: GemmProblem, config: KernelConfig, reasons: bool = False) -> dict:
    from ..legality import check_config
    report = check_config(problem, config).to_dict()
    if reasons:
        return report
    return {k: report[k] for k in ("legal", "rules", "warnings", "stages", "smem_bytes")}


def check_lines(lines: Iterable[str], out: IO[str], reasons: bool = False) -> int:
    """Answer each input line with one output line, in order; returns how many lines were malformed."""
    bad = 0
    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        try:
            if not line:
                raise FieldError("input", "empty line")
            try:
                data = loads_json(line)
            except json.JSONDecodeError as e:
                raise FieldError("input", f"not valid JSON ({e.msg}; column {e.colno})") from None
            if _is_attention(data):
                problem, config = _attention_case(data)
            else:
                problem, config = parse_case(data)
        except FieldError as e:
            bad += 1
            out.write(json.dumps({"error": f"line {n}: {e.field}: {e.message}"}) + "\n")
            continue
        if _is_attention(data):
            out.write(json.dumps(_attention_verdict(problem, config, reasons)) + "\n")
            continue
        out.write(json.dumps(verdict(problem, config, reasons)) + "\n")
    return bad


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CutegenError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise CutegenError(f"{'standard input' if path == '-' else path}: not UTF-8 text "
                           f"(byte 0x{e.object[e.start]:02x} at offset {e.start})") from None


def explain(problem: GemmProblem, config: KernelConfig) -> str:
    """The verdict for people: completed config, stages, shared memory, each broken rule with its source."""
    from ..legality import all_rules, check_config
    report = check_config(problem, config)
    by_id = {r.id: r for r in all_rules()}
    lines = [f"{'LEGAL' if report.legal else 'ILLEGAL'}: {problem.name} {config.short_name()}"]
    if report.config is not None:
        c = report.config
        lines.append(f"  completed: smem A {c.smem_layout_a}, B {c.smem_layout_b}; {c.tma_a}/{c.tma_b}; "
                     f"wgmma 64x{c.mma_instruction[1]}x{c.mma_instruction[2]}; warpgroups "
                     f"{'x'.join(map(str, c.warpgroup_layout))}; epilogue tile "
                     f"{'x'.join(map(str, c.epilogue_tile)) if c.epilogue_tile else '-'}")
    lines.append(f"  stages: {report.stages}   shared memory: "
                 f"{report.smem_bytes if report.smem_bytes is not None else '-'} of 232448 bytes")
    for kind, vs in (("violates", report.violations), ("warning", report.warnings)):
        for v in vs:
            rule = by_id.get(v.rule_id)
            lines.append(f"  {kind} {v.rule_id}{f' [{rule.rulebook}]' if rule and rule.rulebook else ''}: {v.reason}")
            if rule is not None:
                lines.append(f"      source: {rule.source}")
    return "\n".join(lines)


def run(args) -> int:
    if args.jsonl is not None:
        if args.file is not None:
            raise CutegenError("give either FILE.json or --jsonl FILE, not both")
        lines = _read(args.jsonl).splitlines()
        bad = check_lines(lines, sys.stdout, reasons=args.reasons)
        sys.stdout.flush()
        return 1 if bad else 0
    if args.file is None:
        raise CutegenError("give FILE.json or --jsonl FILE")
    try:
        data = loads_json(_read(args.file))
    except json.JSONDecodeError as e:
        raise FieldError("input", f"{args.file} is not valid JSON ({e.msg}; line {e.lineno})") from None
    if _is_attention(data):
        problem, config = _attention_case(data)
        text, legal = _attention_explain(problem, config)
        print(text)
        return 0 if legal else 1
    problem, config = parse_case(data)
    print(explain(problem, config))
    from ..legality import check_config
    return 0 if check_config(problem, config).legal else 1


# --- attention problems ("problem": {"op": "attention", ...}): legality/attention.py ----------------------
def _is_attention(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("problem"), dict) and data["problem"].get("op") == "attention"


def _attention_case(data: dict):
    from ..core.registry import config_from_dict, problem_from_dict
    unknown = sorted(set(data) - {"problem", "config"})
    if unknown:
        raise FieldError(unknown[0], "unknown field (expected problem and config)")
    if "config" not in data:
        raise FieldError("config", "missing")
    return problem_from_dict(data["problem"], "problem"), config_from_dict("attention", data["config"], "config")


def _attention_verdict(problem, config, reasons: bool = False) -> dict:
    from ..legality.attention import check_attention
    report = check_attention(problem, config).to_dict()
    keys = ("legal", "rules", "warnings", "smem_bytes", "registers") + (("reasons",) if reasons else ())
    return {k: report[k] for k in keys}


def _attention_explain(problem, config) -> tuple[str, bool]:
    from ..legality.attention import all_attention_rules, check_attention
    report = check_attention(problem, config)
    by_id = {r.id: r for r in all_attention_rules()}
    lines = [f"{'LEGAL' if report.legal else 'ILLEGAL'}: {problem.name} {config.short_name()}",
             f"  shared memory: {report.smem_bytes if report.smem_bytes is not None else '-'} of 232448 bytes; "
             f"registers per consumer thread: {report.registers.get('total')}"]
    for kind, vs in (("violates", report.violations), ("warning", report.warnings)):
        for v in vs:
            lines.append(f"  {kind} {v}")
            if v.rule_id in by_id:
                lines.append(f"      source: {by_id[v.rule_id].source}")
    return "\n".join(lines), report.legal
