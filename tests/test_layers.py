"""The package's layers: each module imports only from its own layer or the ones below it, and the
imports made when a module loads form no circle.

Read from the bottom up: plain helpers; the store and the timing primitives; device peaks; what is
computed (cases); how fusebench computes it (kernels) and how Inductor's output is read (fusion);
the implementations that run a case; the metrics; the environment record; the runner; then what
reads results (audit, report, merge); the Python API; the fusion checks built on it; the commands and
the CLI on top.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "fusebench"

LAYERS: list[set[str]] = [
    {"util", "settings", "version", "catalog"},
    {"store", "measure"},
    {"device_peaks"},
    {"cases"},
    {"kernels", "fusion"},
    {"impls"},
    {"metrics"},
    {"env"},
    {"runner"},
    {"audit"},
    {"report", "summary"},
    {"store_merge"},
    {"api"},
    {"check"},
    {"commands", "cli", "pytest_plugin", "__main__", "fusebench"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _group(module: str) -> str:
    """The layer group of a module: its subpackage or top-level module under fusebench."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fusebench"


def _imports(path: pathlib.Path, at_load: bool) -> list[tuple[str, int]]:
    """(imported fusebench module, line) of every import in the file; `at_load`: only those run
    when the module loads (not inside a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if at_load else list(ast.walk(tree))
    if at_load:  # module level, including under if/try at module level
        nodes = [n for top in tree.body for n in ast.walk(top)
                 if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fusebench") \
                and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.append((full if full in MODULES else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("fusebench")]
    return out


def test_every_module_has_a_layer():
    assert {_group(m) for m in MODULES} <= set(LEVEL), {_group(m) for m in MODULES} - set(LEVEL)


def test_no_module_imports_from_a_higher_layer():
    upward = []
    for module, path in sorted(MODULES.items()):
        for target, line in _imports(path, at_load=False):
            if LEVEL[_group(target)] > LEVEL[_group(module)]:
                upward.append(f"{module}:{line} imports {target}")
    assert not upward, "\n".join(upward)


def test_the_imports_made_at_load_form_no_circle():
    graph = {m: {t for t, _ in _imports(p, at_load=True) if t in MODULES and t != m} for m, p in MODULES.items()}
    # a package's __init__ importing its own members is the package being assembled, not a circle
    for m in graph:
        graph[m] = {t for t in graph[m] if not (MODULES[m].name == "__init__" and t.startswith(m + "."))}
    state: dict[str, int] = {}
    circles = []

    def visit(m, stack):
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                circles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, "\n".join(circles)


@pytest.mark.parametrize("bad", ["fusebench.runner.cell"])
def test_the_check_sees_an_upward_import(tmp_path, bad):
    """The layer check is not vacuous: a measure module importing the runner is caught."""
    path = tmp_path / "x.py"
    path.write_text(f"def f():\n    from {bad} import CellState\n", encoding="utf-8")
    targets = [t for t, _ in _imports(path, at_load=False)]
    assert targets and LEVEL[_group(targets[0])] > LEVEL["measure"]
