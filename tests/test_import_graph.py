"""The modules of cutegen import one another without circles, and each imports on its own.

The graph is read from the source (``ast``), function-local imports included: a lazy import inside a
function still ties two modules together (it only postpones the failure to the first call), so
``runner``/``_runner_worker``, ``build``/``manifest`` and ``render``/``dsl``, which imported each
other that way, count as circles here. An edge from a module to one of its own ancestor packages is
not a circle (the package is initialised before any of its modules runs).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# pyproject's package-dir: these root folders are subpackages of cutegen
MAPPED = {"cutegen.legality": "legality", "cutegen.search": "search", "cutegen.templates": "templates"}


def module_files(root: Path) -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package __init__)"""
    out: dict[str, tuple[Path, bool]] = {}
    folders = {"cutegen": root / "cutegen", **{pkg: root / sub for pkg, sub in MAPPED.items()}}
    for pkg, folder in folders.items():
        for f in sorted(folder.rglob("*.py")):
            parts = list(f.relative_to(folder).with_suffix("").parts)
            if pkg == "cutegen" and parts[0] in {sub for sub in MAPPED.values()}:
                continue
            is_pkg = parts[-1] == "__init__"
            name = ".".join([pkg] + (parts[:-1] if is_pkg else parts))
            out[name] = (f, is_pkg)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Every cutegen module -> the cutegen modules it imports anywhere in its source."""
    mods = module_files(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rsplit(".", 1)[0]
        ancestors = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rsplit(".", 1)[0]
                    base = f"{anchor}.{base}" if base else anchor
                # `from pkg import sub` imports pkg.sub when that is a module, else a name of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:      # `import cutegen.x.y` of a name: nearest module
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != name and target not in ancestors:
                    graph[name].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(cycles)


def test_no_module_imports_itself_through_others():
    cycles = import_cycles(import_graph(ROOT))
    assert cycles == [], "import circles among cutegen modules: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_lazy_circle(tmp_path):
    # the other side: two modules that import each other only inside functions are a circle
    pkg = tmp_path / "cutegen"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n    return g\n")
    (pkg / "b.py").write_text("from . import c\n\ndef g():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from cutegen import __name__ as _n\n")   # an edge to an ancestor only
    for sub in MAPPED.values():
        (tmp_path / sub).mkdir()
    graph = import_graph(tmp_path)
    assert graph["cutegen.b"] == {"cutegen.a", "cutegen.c"} and graph["cutegen.c"] == set()
    assert import_cycles(graph) == [["cutegen.a", "cutegen.b"]]
    (pkg / "b.py").write_text("from . import c\n\ndef g():\n    return None\n")
    assert import_cycles(import_graph(tmp_path)) == []


# Modules split or added to break the circles, and the seam: each must import in a fresh interpreter
# by itself (an import that only works after another module was loaded first is a hidden circle).
ISOLATED = ["cutegen.runner", "cutegen.run", "cutegen.run.tolerance", "cutegen.run.geometry", "cutegen.run.launch",
            "cutegen.run.cases", "cutegen.run.library", "cutegen.run.watchdog", "cutegen.run.stats",
            "cutegen._runner_worker", "cutegen._runner_host", "cutegen.build", "cutegen.manifest", "cutegen.toolchain",
            "cutegen.render", "cutegen.render_common", "cutegen.dsl", "cutegen.core", "cutegen.core.op",
            "cutegen.core.registry", "cutegen.ops", "cutegen.ops.gemm"]


@pytest.mark.parametrize("module", ISOLATED)
def test_module_imports_alone(module):
    code = f"import importlib, sys; importlib.import_module({module!r}); print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_runner_facade_keeps_every_name():
    # the facade re-exports what runner.py defined before the split (the names callers use)
    from cutegen import runner
    for name in ("Case", "validation_cases", "refusal_probes", "plan_cases", "preflight", "checked_gemm",
                 "LAUNCH_RULES", "KERNEL_REFUSES", "LaunchRefused", "KernelInfo", "load_kernel_info",
                 "discover_kernels", "Worker", "Reply", "tolerance", "TOLERANCE", "geometries", "LaunchArgs",
                 "Operand", "geometric_mean", "tflops", "median", "json_default", "parse_shape",
                 "H100_SXM_DENSE_BF16_PEAK_TFLOPS", "refusal_agrees", "_child_main", "_read_json"):
        assert hasattr(runner, name), name
    from cutegen.run import cases
    assert runner.validation_cases is cases.validation_cases


def test_layers_point_one_way():
    # legality/ knows nothing of search/; the core knows no operation (it reaches cutegen.ops by name only)
    graph = import_graph(ROOT)
    against = [(a, b) for a, deps in graph.items() for b in deps
               if (a.startswith("cutegen.legality") and b.startswith("cutegen.search"))
               or (a.startswith("cutegen.core") and b.startswith("cutegen.ops"))]
    assert against == []


def test_the_layer_check_sees_a_reversed_import(tmp_path):
    for sub in ("cutegen", "cutegen/core", "legality", "search", "templates"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "__init__.py").write_text("")
    (tmp_path / "legality" / "rules.py").write_text("def f():\n    from cutegen.search import engine\n")
    (tmp_path / "search" / "engine.py").write_text("")
    assert "cutegen.search.engine" in import_graph(tmp_path)["cutegen.legality.rules"]
