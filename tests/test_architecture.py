"""The import graph of race/ points one way: no two modules import each other, directly
or around a circle, counting imports inside functions too (read with ast, nothing run)."""

import ast
from pathlib import Path

RACE = Path(__file__).parents[1] / "race"


def module_name(path: Path) -> str:
    parts = path.relative_to(RACE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """RACE modules ``path`` imports anywhere in the file (``from race import x`` counts
    as race.x when x is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(RACE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports_of(p, modules) for p in paths}
    # a package's __init__ importing its own submodules is not a circle back to them
    return {m: {d for d in deps if d != m and not m.startswith(d + ".")}
            for m, deps in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle found by a depth-first search (each reported once)."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_race_has_no_import_circles():
    graph = import_graph()
    assert {"race.run.grid", "race.pilot.loop", "race.report.write",
            "race.report.plots"} <= set(graph)
    assert "race.core.fmt" in graph["race.report.plots"]  # the graph sees real edges
    assert cycles(graph) == []
