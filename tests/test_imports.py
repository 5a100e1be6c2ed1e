"""The package's import graph: no cycles, and nothing imports upward. "Upward" is read from docs/methods.md's
"Layout of the code", which lists every module in the order they build on one another: a module may import only
modules listed above it (imports made on first use included: a lazy import is still an arrow). The package never
imports the clone's benchmarks/ (a wheel has none)."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mmspec"
# modules whose imports are not arrows of the graph: the public face loads the pipelines on first use (by name, for
# `import mmspec` to stay light)
FACE = {"mmspec"}


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules `module` imports anywhere in its file (module level, in functions, under TYPE_CHECKING);
    "benchmarks" for the clone's benchmarks/."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = module.split(".")
            keep = len(parts) - node.level + (path.name == "__init__.py")
            base = ".".join(parts[:keep] + [node.module or ""]).strip(".") if node.level else node.module or ""
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "benchmarks":
                found.add("benchmarks")
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _through_packages(graph: dict[str, set[str]], listed: set[str]) -> dict[str, set[str]]:
    """The graph with an import of a package whose __init__ only re-exports (not in the layout) replaced by the
    modules it re-exports."""
    def expand(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name in listed or name not in graph or name in seen:
            return {name}
        return set().union(*(expand(n, seen | {name}) for n in graph[name]), set())

    return {m: set().union(*(expand(n) for n in imports), set()) for m, imports in graph.items() if m in listed}


def _listed_order() -> list[str]:
    """The modules of docs/methods.md's "Layout of the code", in its order."""
    text = (ROOT / "docs" / "methods.md").read_text().split("## Layout of the code", 1)[1]
    block = text.split("```", 2)[1]
    paths = re.findall(r"^(\S+\.py)\s", block, re.M)
    return ["mmspec." + p.removesuffix(".py").replace("/", ".").removesuffix(".__init__") if p != "__init__.py"
            else "mmspec" for p in paths]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_layout_lists_every_module_once():
    order = _listed_order()
    assert len(order) == len(set(order))
    modules = {m for m, p in _modules().items() if p.name != "__init__.py"}  # (a package's __init__ may be left out)
    assert set(order) >= modules, f"docs/methods.md's Layout of the code lacks {sorted(modules - set(order))}"
    assert set(order) <= set(_modules()), f"it lists {sorted(set(order) - set(_modules()))}, not in the package"


def test_nothing_imports_upward():
    order = {m: i for i, m in enumerate(_listed_order())}
    graph = _through_packages(_graph(), set(order))
    upward = [f"{m} -> {n}" for m, imports in sorted(graph.items()) if m not in FACE
              for n in sorted(imports) if order.get(n, -1) > order[m]]
    assert upward == []


def test_the_package_never_imports_the_clones_benchmarks():
    assert [m for m, imports in _graph().items() if "benchmarks" in imports] == []


def test_the_checks_see_a_cycle_and_an_upward_arrow():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    modules = {"mmspec.x": PACKAGE / "x.py", "mmspec.y": PACKAGE / "y.py"}
    source = "def f():\n    from mmspec.y import g\n"
    tree_path = ROOT / "tests" / "_imports_probe.py"
    try:
        tree_path.write_text(source)
        assert _imports("mmspec.x", tree_path, modules) == {"mmspec.y"}
    finally:
        tree_path.unlink()
