"""What the CuTe DSL's tracing silently gets wrong in a rendered kernel: checked on the source text.

DSL-LOOP-STATE. The DSL turns a Python loop over a dynamic bound into an ``scf`` loop whose carried
values are the names its region analysis finds written in the body (``RegionAnalyzer`` in
``cutlass/base_dsl/ast_preprocessor.py``, nvidia-cutlass-dsl 4.8): names that are assigned, and names
whose own methods are called (``state.advance()``). An object handed as an *argument* to a call that
mutates it is neither, so its update is dropped at the end of every iteration and the next one starts
from the value the loop was entered with. ``PipelineOrder.arrive(state)`` advances the state it is
given: called as a statement inside the tile loop, ping-pong's ordering barrier kept its initial
phase, the first warpgroup's wait passed on every tile, and only the first tile of each CTA was
ordered (H100 2026-11-24: every own-size case hung or faulted; bench/results/2026-11-24-*-dslpp-*).
The fix is to assign the result back (``state = order.arrive(state)``), which makes it a written name.

The check is syntactic and deliberately conservative: any loop, static or dynamic.
"""
from __future__ import annotations

import ast

# method name -> positions of the arguments it mutates (the DSL APIs the templates call)
MUTATES_ARGUMENT = {
    "arrive": (0,),          # cutlass.pipeline.PipelineOrder.arrive(state): state.advance()
}

RULE = "DSL-LOOP-STATE"


def _mutated_names(call: ast.Call) -> list[str]:
    if not isinstance(call.func, ast.Attribute):
        return []
    positions = MUTATES_ARGUMENT.get(call.func.attr, ())
    return [call.args[i].id for i in positions if i < len(call.args) and isinstance(call.args[i], ast.Name)]


def loop_state_violations(source: str) -> list[str]:
    """One line per call inside a loop that mutates an argument it does not assign back."""
    out = []
    for loop in ast.walk(ast.parse(source)):
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        for stmt in ast.walk(loop):
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                names = _mutated_names(stmt.value)
                assigned = set()
            elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                names = _mutated_names(stmt.value)
                assigned = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            else:
                continue
            for name in names:
                if name not in assigned:
                    line = f"{RULE}: line {stmt.lineno}: `{ast.unparse(stmt)}` mutates `{name}` inside a loop " \
                           f"without assigning it back, so the DSL does not carry it to the next iteration " \
                           f"(write `{name} = {ast.unparse(stmt.value)}`)"
                    if line not in out:
                        out.append(line)
    return out
