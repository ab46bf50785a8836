"""`cutegen check`: ask the legality rules about one contract at a time.

    cutegen check tensor-map --jsonl FILE|-    one cuTensorMapEncodeTiled argument set per line
    cutegen check config ...                   GEMM configurations (cutegen/commands/check_config.py)
    cutegen check pipeline FILE.json           the kernel's TMA/mbarrier pipeline (cutegen/commands/check_pipeline.py)
"""
from __future__ import annotations

import importlib
import json
import sys
from typing import IO, Iterator

from .._fields import loads_json
from ..errors import CutegenError, FieldError

HELP = "check tensor maps or GEMM configurations against the legality rules"


# --------------------------------------------------------------------------- tensor-map

TENSOR_MAP_HELP = "will cuTensorMapEncodeTiled accept these maps on sm_90? (one JSON object per line)"


def add_tensor_map_arguments(p) -> None:
    p.add_argument("--jsonl", required=True, metavar="FILE",
                   help="JSONL input, '-' for stdin; keys: data_type, rank, global_address, global_dim, "
                        "global_strides (bytes, rank-1 entries), box_dim, element_strides, interleave, "
                        "swizzle, l2_promotion, oob_fill (enums as CU_TENSOR_MAP_* names or integers)")
    p.add_argument("--reasons", action="store_true",
                   help="add a 'reasons' list (one line per broken rule, with the offending values)")


def _lines(path: str) -> Iterator[str]:
    """The input's lines as they come (a stream, for long inputs); a byte that is not UTF-8 ends it
    with a one-line error naming the input and the byte's offset."""
    import io
    try:
        f = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8") if path == "-" else open(path, encoding="utf-8")
    except OSError as e:
        raise CutegenError(f"--jsonl: cannot read {path}: {e.strerror}") from None
    try:
        yield from f
    except UnicodeDecodeError as e:
        raise CutegenError(f"--jsonl: {'standard input' if path == '-' else path}: not UTF-8 text "
                           f"(byte 0x{e.object[e.start]:02x} in a block read at offset {e.start})") from None
    except OSError as e:
        raise CutegenError(f"--jsonl: cannot read {path}: {e.strerror}") from None
    finally:
        if path != "-":
            f.close()


def check_tensor_map_lines(lines, out: IO[str], reasons: bool = False) -> int:
    """Answer each input line with one output line, in order. Returns the number of lines that
    did not parse (each answered with an error line naming the line and the field)."""
    from ..legality.tensor_map import TensorMap, check_tensor_map

    bad = 0
    for n, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        try:
            if not line.strip():
                raise FieldError("input", "empty line")
            try:
                d = loads_json(line)
            except json.JSONDecodeError as e:
                raise FieldError("input", f"not valid JSON ({e.msg}; column {e.colno})") from None
            tm = TensorMap.from_dict(d)
        except FieldError as e:
            bad += 1
            out.write(json.dumps({"error": f"line {n}: {e.field}: {e.message}"}) + "\n")
            continue
        vs = check_tensor_map(tm)
        enforced = [v for v in vs if v.enforced]
        answer = {"legal": not enforced, "rules": [v.rule_id for v in enforced],
                  "warnings": [v.rule_id for v in vs if not v.enforced]}
        if reasons:
            answer["reasons"] = [str(v) for v in vs]
        out.write(json.dumps(answer) + "\n")
    return bad


def run_tensor_map(args) -> int:
    bad = check_tensor_map_lines(_lines(args.jsonl), sys.stdout, reasons=args.reasons)
    sys.stdout.flush()
    return 1 if bad else 0


# --------------------------------------------------------------------------- config (another module)
# check_config.py is written separately; load it only when `check config` is used so that
# `check tensor-map` works without it.

CONFIG_HELP = "are these GEMM configurations legal on sm_90a with CUTLASS 4.2? (resolved stages, smem bytes)"


def _check_config():
    try:
        return importlib.import_module("cutegen.commands.check_config")
    except ModuleNotFoundError as e:
        if e.name == "cutegen.commands.check_config":
            return None
        raise


def add_config_arguments(p) -> None:
    mod = _check_config()
    if mod is None:
        p.add_argument("rest", nargs="*", help="(cutegen check config is not built yet)")
        p.add_argument("--jsonl", metavar="FILE")
        return
    mod.add_arguments(p)


def run_config(args) -> int:
    mod = _check_config()
    if mod is None:
        raise CutegenError("cutegen check config is not available in this build")
    return mod.run(args)


def add_pipeline_arguments(p) -> None:
    importlib.import_module("cutegen.commands.check_pipeline").add_arguments(p)


def run_pipeline(args) -> int:
    return importlib.import_module("cutegen.commands.check_pipeline").run(args)


SUBCOMMANDS = {
    "tensor-map": (TENSOR_MAP_HELP, add_tensor_map_arguments, run_tensor_map),
    "config": (CONFIG_HELP, add_config_arguments, run_config),
    "pipeline": ("is this kernel's TMA/mbarrier pipeline free of deadlocks, races and miscounts? "
                 "(every interleaving, bounded)", add_pipeline_arguments, run_pipeline),
}


# --------------------------------------------------------------------------- rules (any operation)

RULES_HELP = "list the legality rules of one operation or all (ID, contract, rulebook ID, summary, source)"


def add_rules_arguments(p) -> None:
    p.add_argument("--op", metavar="NAME", help="only this operation's rule sets (default: every operation's)")
    p.add_argument("--json", action="store_true", help="one JSON object per rule instead of a table")


def run_rules(args) -> int:
    """Every rule set comes from the operation registry (cutegen.core.registry), so an operation's own
    rules appear here once its package registers them; a set two operations share is listed once."""
    from ..core import registry

    try:
        rules = registry.all_rules(args.op)
    except FieldError as e:
        raise FieldError("--op", e.message) from None
    for rule in rules:
        if args.json:
            sys.stdout.write(json.dumps({"id": rule.id, "contract": rule.contract, "rulebook": rule.rulebook,
                                         "enforced": rule.enforced, "summary": rule.summary,
                                         "source": rule.source}) + "\n")
        else:
            book = f" [{rule.rulebook}]" if rule.rulebook else ""
            flag = "" if rule.enforced else " (not enforced)"
            sys.stdout.write(f"{rule.id}{book} {rule.contract}{flag}: {rule.summary}\n")
    sys.stdout.flush()
    return 0


SUBCOMMANDS["rules"] = (RULES_HELP, add_rules_arguments, run_rules)
