"""The layers stay layers: imports only go down, the core and the render tier load no torch,
and no two modules import each other, directly or around a loop."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "advisor", "reports", "workloads")
# engine's layers and what each may import (besides itself); engine/*.py at the top may use all
ENGINE_LAYERS = {
    "core": set(),
    "model": {"core"},
    "kv": {"core", "model"},
    "render": {"core"},
    "serve": {"core", "model", "kv", "render"},
}
# NOTE: the planner, the advice and the CLI's start too: `advisor plan` and every bad-flag
# message answer in a fraction of a second without loading torch (~1 s here)
TORCH_FREE = ("engine.core", "engine.render", "engine.serve.render_server", "engine.serve.proxy",
              "advisor.plan", "advisor.decide", "advisor.cli")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The nodes under `if TYPE_CHECKING:` (never run)."""
    return {n for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
            for stmt in node.body for n in ast.walk(stmt)}


def _imports(name: str, at_run_time: bool = False) -> set[str]:
    """Every module (of ours, or a third party's) that `name` imports anywhere in its file:
    at the top, in functions, or (unless `at_run_time`) for type checking only."""
    tree = ast.parse(MODULES[name].read_text())
    skip = _type_checking_only(tree) if at_run_time else set()
    found = set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:  # `from pkg import mod` imports the module pkg.mod
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


GRAPH = {m: {i for i in _imports(m) if i in MODULES and i != m} for m in MODULES}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "engine" and len(parts) > 2 else None


def test_the_engine_never_imports_the_advisor_reports_or_workloads():
    bad = [(m, i) for m in MODULES if m.startswith("engine") for i in _imports(m)
           if i.split(".")[0] in ("advisor", "reports", "workloads")]
    assert not bad


@pytest.mark.parametrize("layer", sorted(ENGINE_LAYERS))
def test_engine_layers_import_only_downward(layer):
    allowed = ENGINE_LAYERS[layer] | {layer}
    bad = [(m, i) for m in GRAPH if _layer(m) == layer for i in GRAPH[m]
           if i.startswith("engine.") and (_layer(i) not in allowed)]
    assert not bad, f"{layer} may import only {sorted(allowed)}: {bad}"


def test_the_core_the_render_tier_and_the_planner_import_no_torch_at_all():
    named = [m for m in MODULES if m.startswith(TORCH_FREE)]
    assert not [(m, i) for m in named for i in _imports(m, at_run_time=True)
                if i.split(".")[0] == "torch"]
    # and nothing they import pulls torch in either (a __main__ runs its command: not here)
    loaded = [m for m in named if not m.endswith(".__main__")]
    code = ("import importlib, sys\n"
            f"for m in {loaded!r}: importlib.import_module(m)\n"
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_reports_read_run_data_and_never_the_cli_or_the_measuring():
    bad = [(m, i) for m in GRAPH if m.startswith("reports") for i in GRAPH[m]
           if i.startswith("advisor") and not i.startswith(("advisor.rundata", "advisor.decide"))]
    assert not bad


def test_no_import_cycles_between_modules():
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
