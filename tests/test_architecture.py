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


# ------------------------------------------------------------------ layering


def room_of(module: str) -> str:
    """The room a RACE module lives in: its top-level subpackage or module under race/."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "race"


def room_docstring(room: str) -> str:
    path = RACE / room / "__init__.py"
    return ast.get_docstring(ast.parse((path if path.is_file()
                                        else RACE / f"{room}.py").read_text())) or ""


def allowed_in_docstring(doc: str) -> set[str] | None:
    """The rooms a docstring's ``May import: a, b, c.`` names (None: it says nothing)."""
    import re

    found = re.search(r"May import: ([^.]*)\.", doc)
    if found is None:
        return None
    text = " ".join(found.group(1).split())
    return set() if text == "nothing of RACE" else {r.strip() for r in text.split(",")}


def room_arrows() -> dict[str, dict[str, set[str]]]:
    """room -> room it imports -> the modules that import it (anywhere in the file)."""
    arrows: dict[str, dict[str, set[str]]] = {}
    for module, deps in import_graph().items():
        for dep in deps:
            if room_of(dep) not in (room_of(module), "race"):
                arrows.setdefault(room_of(module), {}).setdefault(room_of(dep), set()).add(
                    module)
    return arrows


def test_every_room_is_in_the_table_and_the_table_is_layered():
    from race import LAYERS

    rooms = {room_of(m) for m in import_graph()} - {"race"}
    assert rooms == set(LAYERS), (rooms ^ set(LAYERS))
    assert all(set(deps) <= set(LAYERS) for deps in LAYERS.values())
    assert cycles({room: set(deps) for room, deps in LAYERS.items()}) == []


def test_each_room_docstring_says_what_the_table_allows():
    """Each room's docstring ends with ``May import: ...``, the same rooms as LAYERS."""
    from race import LAYERS

    wrong = {room: allowed_in_docstring(room_docstring(room)) for room in LAYERS}
    wrong = {room: said for room, said in wrong.items() if said != set(LAYERS[room])}
    assert not wrong, wrong


def test_no_room_imports_what_the_table_forbids():
    """Every import between rooms (top level or inside a function) is one LAYERS allows:
    e.g. core imports nothing of RACE but its errors, store never imports run, report
    never imports run, config or the pilot."""
    from race import LAYERS

    broken = {f"{room} -> {dep} ({', '.join(sorted(modules))})"
              for room, deps in room_arrows().items() for dep, modules in deps.items()
              if dep not in LAYERS[room]}
    assert not broken, sorted(broken)


def test_the_layering_check_sees_a_forbidden_arrow():
    from race import LAYERS

    assert "run" not in LAYERS["store"] and "run" not in LAYERS["report"]
    assert LAYERS["core"] == ("errors",)
    arrows = room_arrows()
    assert "core" in arrows["pilot"] and "pilot" in arrows["run"]  # it sees real arrows
    assert allowed_in_docstring("x.\n\nMay import: a, b,\nc.") == {"a", "b", "c"}
    assert allowed_in_docstring("May import: nothing of RACE.") == set()


# ------------------------------------------------------------------ bench

BENCH = RACE.parent / "bench"
FIRST_PARTY = {p.name for p in RACE.parent.iterdir()
               if p.is_dir() and ((p / "__init__.py").is_file() or p.name in ("tests",
                                                                                "examples"))}


def top_level_imports(path: Path) -> set[str]:
    """The top-level names ``path`` imports anywhere in the file (``from x.y import z``
    counts as x; a relative import counts as the file's own package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module.split(".")[0] if node.level == 0 and node.module
                      else path.parent.name)
    return found


def edits_sys_path(path: Path) -> bool:
    """Whether ``path`` touches ``sys.path`` (insert, append, assignment, ...)."""
    return any(isinstance(node, ast.Attribute) and node.attr == "path"
               and isinstance(node.value, ast.Name) and node.value.id == "sys"
               for node in ast.walk(ast.parse(path.read_text())))


def test_nothing_under_race_imports_bench():
    importers = sorted(str(p.relative_to(RACE.parent)) for p in RACE.rglob("*.py")
                       if "bench" in top_level_imports(p))
    assert not importers, importers


def test_no_bench_file_edits_sys_path():
    """bench's scripts import their siblings as ``bench.x`` (installed beside race)."""
    editors = sorted(p.name for p in BENCH.rglob("*.py") if edits_sys_path(p))
    assert not editors, editors


def test_bench_imports_only_race_and_itself_among_first_party_code():
    assert {"race", "bench", "tests"} <= FIRST_PARTY
    wrong = {p.name: sorted(found) for p in BENCH.rglob("*.py")
             if (found := top_level_imports(p) & FIRST_PARTY - {"race", "bench"})}
    assert not wrong, wrong


def test_the_bench_checks_see_what_they_look_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, 'x')\nfrom tests.conftest import policy\n")
    assert edits_sys_path(bad) and "tests" in top_level_imports(bad)
    assert not edits_sys_path(BENCH / "common.py")
    assert {"race", "bench"} <= top_level_imports(BENCH / "science" / "interactions.py")
