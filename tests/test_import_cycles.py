"""No import circles in the package or the benchmarks (docs/architecture.md, "Which way imports run").

The graph is read from the source with ``ast``, without importing anything. Every import counts:
at module level and inside functions (a function-level import that closes a circle is a circle
that happens to work today because of the order modules load in). An edge goes from a module to
the module it names: ``from .x import y`` to ``x.y`` where ``x/y.py`` exists, else to ``x``;
``import a.b`` to ``a.b``. The implicit import of a module's parent packages is not an edge
(otherwise every package whose ``__init__`` imports its submodules would be a circle).
"""

import ast
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("fairseq_langshare", "benchmarks")


def modules_under(root, packages=PACKAGES):
    """{dotted module name: path} of every .py file of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), root)[:-3].split(os.sep)
                    found[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = os.path.join(folder, name)
    return found


def import_graph(root, packages=PACKAGES):
    """{module: {module it imports, among ``packages``' own}}."""
    modules = modules_under(root, packages)
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = name.split(".")
                    base = parts[:len(parts) - node.level + (1 if is_package else 0)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph):
    """Every import circle, once each, as [m1, m2, ..., m1] starting at its smallest name
    (strongly connected components, then one shortest circle through each member)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def strongconnect(v):  # Tarjan's algorithm, recursive: the graphs here are small
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                strongconnect(v)
    finally:
        sys.setrecursionlimit(limit)
    found = set()
    for component in components:
        members = set(component)
        for start in component:
            # shortest path start -> ... -> start inside the component (breadth first)
            paths, seen = [[start]], {start}
            while paths:
                path = paths.pop(0)
                nxt = [w for w in sorted(graph[path[-1]]) if w in members]
                if start in nxt:
                    circle = path + [start]
                    first = circle.index(min(circle[:-1]))
                    found.add(tuple(circle[first:-1] + circle[:first] + [circle[first]]))
                    break
                for w in nxt:
                    if w not in seen:
                        seen.add(w)
                        paths.append(path + [w])
    return sorted(list(c) for c in found)


def describe(circles):
    return "; ".join(" -> ".join(c) for c in circles)


# Circles in files that other changes own and are removing, each named, so that any other circle
# fails the first test below; the second (a strict expected failure) fails as soon as they are
# gone, to empty this list.
KNOWN = {}


def test_no_import_circle_but_the_known_ones():
    found = [c for c in cycles(import_graph(REPO)) if tuple(c) not in KNOWN]
    assert not found, f"import circle(s): {describe(found)}"


@pytest.mark.xfail(bool(KNOWN), strict=True, reason="known circles: " + "; ".join(KNOWN.values()))
def test_the_package_and_the_benchmarks_have_no_import_circle():
    found = cycles(import_graph(REPO))
    assert not found, f"import circle(s): {describe(found)}"


def test_imports_run_one_way():
    """docs/architecture.md: the package never imports the benchmarks; nothing imports ``cli``
    (the top); ``modules/`` (building blocks) imports nothing of the package outside itself."""
    graph = import_graph(REPO)
    wrong = sorted((a, b) for a, targets in graph.items() for b in targets if (
        (a.startswith("fairseq_langshare") and b.startswith("benchmarks"))
        or b == "fairseq_langshare.cli"
        or (a.startswith("fairseq_langshare.modules") and not b.startswith("fairseq_langshare.modules"))))
    assert not wrong, "imports against the direction: " + "; ".join(f"{a} -> {b}" for a, b in wrong)


# ----------------------------------------------------------------------------- the walker itself
def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_the_walker_finds_function_level_and_relative_circles(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from . import a, sub\n",
        "pkg/a.py": "import os\nfrom .sub import b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "def f():\n    from ..a import thing\n",  # function level, two levels up
        "pkg/c.py": "from pkg import d\n",
        "pkg/d.py": "import pkg.c\n",
        "pkg/e.py": "from .sub import b as name\n",  # no circle: e is imported by nobody
    })
    graph = import_graph(root, ("pkg",))
    assert graph["pkg"] == {"pkg.a", "pkg.sub"}  # a package's own submodules, not an edge to itself
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.c", "pkg.d", "pkg.c"]]


def test_the_walker_finds_no_circle_where_there_is_none(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from . import a, b\n",  # parent packages are not edges: no circle here
        "pkg/a.py": "from . import b\nfrom pkg.b import x\n",
        "pkg/b.py": "import json\n",
    })
    assert cycles(import_graph(root, ("pkg",))) == []


if __name__ == "__main__":  # print the circles: python tests/test_import_cycles.py
    print(describe(cycles(import_graph(REPO))) or "no import circle")
