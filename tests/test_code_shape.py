"""The counts docs/ARCHITECTURE.md gives for the package's shape ("The redesign of
prediction, counted"), counted on the package's source: no function over 80 lines or 8
parameters, no module docstring of 20 lines or more, one task table, no module kept only
to re-export names for old import paths."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "span_plugin"
MAX_LINES, MAX_PARAMETERS, MAX_DOCSTRING = 80, 8, 20
# Modules whose unused imports register something (tasks, segmentations), not re-exports.
REGISTERING = {"span_plugin/preprocess/segmentation/segmentations.py"}


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def functions():
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield name, node


def parameters(node):
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return names + ["*"] * bool(a.vararg) + ["**"] * bool(a.kwarg)


def test_no_function_over_80_lines_or_8_parameters():
    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, node in functions() if node.end_lineno - node.lineno + 1 > MAX_LINES]
    many = [f"{name}:{node.lineno} {node.name} ({len(parameters(node))} parameters)"
            for name, node in functions() if len(parameters(node)) > MAX_PARAMETERS]
    assert not long and not many, long + many


def test_module_docstrings_are_short():
    """Design notes live in docs/ ("Module notes" of each page), not in docstrings."""
    long = [name for name, tree in modules()
            if len((ast.get_docstring(tree, clean=False) or "").splitlines()) >= MAX_DOCSTRING]
    assert not long, long


def test_one_task_table():
    """Only ``portable/tasks.py`` maps the fairseq task names to how they are served."""
    tables = []
    for name, tree in modules():
        for node in ast.walk(tree):
            keys = node.keys if isinstance(node, ast.Dict) else []
            if any(isinstance(k, ast.Constant) and k.value == "span_pair_classification"
                   for k in keys):
                tables.append(f"{name}:{node.lineno}")
    assert [t.split(":")[0] for t in tables] == ["span_plugin/portable/tasks.py"], tables


def test_no_re_export_shims():
    """An import nothing in its module uses (``noqa: F401``) is a re-export for an old
    path; only packages' ``__init__`` and registering modules may have one."""
    shims = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" or name in REGISTERING:
            continue
        shims += [f"{name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if "noqa: F401" in line]
    assert not shims, shims


def test_the_counts_can_fail():
    """The counting itself: a function over the limits and a second task table are found."""
    src = ("def f(a, b, c, d, e, f, g, h, i):\n" + "    x = 1\n" * 80
           + "T = {'span_pair_classification': 1}\n")
    tree = ast.parse(src)
    node = tree.body[0]
    assert len(parameters(node)) == 9 and node.end_lineno - node.lineno + 1 == 81
    assert any(isinstance(k, ast.Constant) and k.value == "span_pair_classification"
               for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys)
