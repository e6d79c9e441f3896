"""The layers stay layers: imports only go down, in the engine and in the advisor; the
advisor reaches the engine through its facade alone; the core and the render tier load no
torch; and no two modules, and no two folders, import each other, directly or around a
loop."""

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
    "processes": {"core", "model"},  # launching and supervising children; no HTTP of ours
    "serve": {"core", "model", "kv", "render"},  # one engine instance's server, HTTP basics
    "fronts": {"core", "render", "serve", "processes"},  # proxy, round-robin, render tier
}
# advisor's sub-packages (and top-level modules), lowest first: each may import only those
# of the layers below its own; two of one layer are siblings and import neither the other
ADVISOR_LAYERS = (
    {"errors", "flags"},
    {"rundata"},
    {"flag_groups"},  # option groups every verb declares alike: engine, model, SLO
    {"output"},  # the console, the reports built from run data
    {"measure"},
    {"probe"},
    {"deploy"},  # the advice as commands and manifests
    {"engines"},  # what starts what is measured: the bundled engine, vLLM, a given deployment
    {"decide", "goodput"},  # the advice; what runs say of each placement's goodput
    {"conclude"},  # evidence to a written recommendation: every way to advice ends there
    {"sweep", "plan", "imports"},  # measured, simulated and imported, side by side
    {"verbs", "proxy", "testing"},  # bench, probe and serve on a URL or an engine started here
    {"cli"},
)
# NOTE: the planner, the advice and the CLI's start too: `advisor plan` and every bad-flag
# message answer in a fraction of a second without loading torch (~1 s here)
TORCH_FREE = ("engine.core", "engine.render", "engine.fronts.render_server", "engine.fronts.proxy",
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


def _folder(module: str) -> str:
    """The layer folder a module sits in (engine.kv for engine.kv.connectors.shm); a module at
    a package's top (engine.api, advisor.errors, advisor.conclude) is a layer of its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


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


def _advisor_level(module: str) -> tuple[int, str]:
    part = module.split(".")[1]
    return next(i for i, layer in enumerate(ADVISOR_LAYERS) if part in layer), part


def test_every_advisor_part_has_a_layer():
    parts = {m.split(".")[1] for m in MODULES if m.startswith("advisor.")}
    assert parts <= set().union(*ADVISOR_LAYERS), "give each a place in ADVISOR_LAYERS"


def test_advisor_layers_import_only_downward_and_siblings_never_each_other():
    bad = []
    for m in (m for m in GRAPH if m.startswith("advisor.")):
        level, part = _advisor_level(m)
        for i in GRAPH[m]:
            if i.startswith("advisor.") and i != "advisor":
                their, other = _advisor_level(i)
                if other != part and their >= level:
                    bad.append((m, i))
    assert not bad


def test_the_advisor_reaches_the_engine_only_through_its_facade():
    bad = [(m, i) for m in MODULES if m.startswith("advisor") for i in _imports(m)
           if i.split(".")[0] == "engine" and i not in ("engine", "engine.api")]
    assert not bad


def test_no_folder_imports_another_that_imports_it_back():
    """Top-level packages, and the layer folders within them, form no loop."""
    for level in (lambda m: m.split(".")[0], _folder):
        graph: dict[str, set[str]] = {}
        for m, deps in GRAPH.items():
            graph.setdefault(level(m), set()).update(level(d) for d in deps if level(d) != level(m))
        assert not _cycles(graph)


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


def test_reports_render_their_own_model_and_import_no_other_package_of_ours():
    bad = [(m, i) for m in GRAPH if m.startswith("reports") for i in GRAPH[m]
           if not i.startswith("reports")]
    assert not bad


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                cycles.append([*stack[stack.index(n):], n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def test_no_import_cycles_between_modules():
    cycles = _cycles(GRAPH)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_engines_are_started_in_one_room():
    """Only advisor.engines launches the bundled engine, runs a deployment's command or
    builds vLLM's instances here; every verb goes through it."""
    starts = {"engine.api": {"launch"}, "advisor.engines.processes": {"started"},
              "advisor.engines.vllm.placements": {"placements"}}
    bad = []
    for m in (m for m in MODULES if m.startswith("advisor.") and
              not m.startswith("advisor.engines")):
        for node in ast.walk(ast.parse(MODULES[m].read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in starts:
                bad += [(m, a.name) for a in node.names if a.name in starts[node.module]]
    assert not bad
