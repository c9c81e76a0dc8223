"""The documentation names only what exists: every relative link and every repository
path in README.md, docs/, experiments/ and benchmarks/RESULTS.md resolves, every
document of docs/ is linked from the README, and the README stays a short guide."""

import re

from conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path from the repository root: a top-level folder and what follows, or a top-level
# file. Placeholders (<TASK>, {split}, *, $VAR, ...) end the match and skip the path.
REPO_PATH = re.compile(
    r"(?<![\w./~-])((?:span_plugin|recipes|docs|experiments|benchmarks|tests|\.ci)/[\w./+-]*[\w/]"
    r"|install\.sh|setup\.py|requirements\.txt|pytest\.ini)")
PLACEHOLDER = tuple("<{*$")


def documents():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "experiments").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]


def named(doc, root=ROOT):
    """(line number, what, target, resolved path) of every relative link and every
    repository path in ``doc``; links resolve from the document's folder, paths from
    ``root``."""
    out = []
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor of this page
            out.append((n, "link", target, doc.parent / target.split("#")[0]))
        prose = LINK.sub("", line)  # link targets are checked above, from the document
        for m in REPO_PATH.finditer(prose):
            if prose[m.end():m.end() + 1] in PLACEHOLDER and m.end() < len(prose) or "..." in m[1]:
                continue
            out.append((n, "path", m[1], root / m[1].rstrip("/")))
    return out


def missing(docs, root=ROOT):
    return [f"{doc.relative_to(root)}:{n}: {what} {target} does not exist"
            for doc in docs for n, what, target, path in named(doc, root) if not path.exists()]


def test_every_link_and_repository_path_exists():
    docs = documents()
    assert len(docs) >= 20 and all(doc.is_file() for doc in docs)
    found = [item for doc in docs for item in named(doc)]
    assert sum(what == "link" for _, what, _, _ in found) > 50  # the scan reads them
    assert sum(what == "path" for _, what, _, _ in found) > 200
    assert missing(docs) == []


def test_the_check_finds_a_missing_link_and_path(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A\n")
    doc = tmp_path / "README.md"
    doc.write_text("[A](docs/A.md) [B](docs/B.md#part) [web](https://example.org)\n"
                   "`docs/A.md`, `recipes/gone.sh`, `recipes/glue/<TASK>.sh`, [top](#a)\n")
    assert missing([doc], tmp_path) == [
        "README.md:1: link docs/B.md#part does not exist",
        "README.md:2: path recipes/gone.sh does not exist"]


def test_every_document_of_docs_is_linked_from_the_readme():
    linked = {(ROOT / t.split("#")[0]).resolve()
              for t in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert unlinked == []


def test_the_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    # The two set-up commands, as .ci/run runs them.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in ("bash install.sh", ".venv/bin/python -m pytest"):
        assert any(line.startswith(command) for line in lines), command
        assert command in ci, command
