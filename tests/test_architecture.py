"""The package's layering (docs/ARCHITECTURE.md) as checked rules: no import circle inside
span_plugin, and the import-linter contracts of .importlinter kept."""

import os
import subprocess
import sys

import grimp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_circles(graph, package="span_plugin"):
    """Strongly connected groups of more than one module (Tarjan), imports inside
    functions included. Imports of the root package itself are left out: it only holds
    ``register()``, the entry point that fairseq and the hub call."""
    modules = sorted(m for m in graph.modules if m.startswith(package + ".") or m == package)
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m)
                       if n.startswith(package + ".")) for m in modules}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(m):
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for n in edges.get(m, ()):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on_stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = []
            while True:
                n = stack.pop()
                on_stack.discard(n)
                group.append(n)
                if n == m:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for m in modules:
        if m not in index:
            visit(m)
    return circles


def test_no_import_circle_inside_span_plugin():
    graph = grimp.build_graph("span_plugin", include_external_packages=False)
    circles = import_circles(graph)
    assert not circles, "import circles inside span_plugin:\n" + "\n".join(
        " <-> ".join(c) for c in circles)


def test_circle_finder_finds_a_circle():
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert import_circles(graph, "p") == [["p.a", "p.b"]]


def test_import_linter_contracts_are_kept():
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    run = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
