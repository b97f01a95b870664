"""The package layout: no import circles in ``sim``, lower layers never import higher ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[1] / "sim"

# Layers from the bottom up: a module may import its own layer and the ones below, never above.
# Front ends and tools (poptorch, popxl, popdist, onnx, cli, validation) sit on top of it all.
LAYERS = [
    {"sim.errors", "sim.virtual_clock"},
    {"sim.graph", "sim.hardware", "sim.program"},
    {"sim.strategy", "sim.options", "sim.cost"},
    {"sim.schedule"},
    {"sim.compiler", "sim.engine"},
    {"sim.results"},
    {"sim"},  # the package's own API (simulate, compile, ...)
    {"sim.poptorch", "sim.popxl", "sim.popxl_addons", "sim.popdist", "sim.popart", "sim.onnx", "sim.cli",
     "sim.validation", "sim.planner", "sim.poplibs_benchmarks", "sim.__main__"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in SIM.rglob("*.py"):
        parts = list(path.relative_to(SIM.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The sim modules ``name`` imports (at any depth of its code), resolved to modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text())
    type_only = {id(n) for guard in ast.walk(tree) if isinstance(guard, ast.If)
                 and ast.unparse(guard.test).endswith("TYPE_CHECKING") for n in ast.walk(guard)}
    for node in ast.walk(tree):
        if id(node) in type_only:  # annotations only: never imported at run time
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    best = None
    for i, layer in enumerate(LAYERS):
        for top in layer:
            if module == top or module.startswith(top + "."):
                if best is None or len(top) > len(best[1]):
                    best = (i, top)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def test_no_import_cycles():
    """Depth-first search over the import graph of sim/: any back edge is a circle."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_lower_layers_never_import_higher_ones(module):
    above = sorted(n for n in GRAPH[module] if _layer(n) > _layer(module))
    assert not above, f"{module} (layer {_layer(module)}) imports {above} from a higher layer"
