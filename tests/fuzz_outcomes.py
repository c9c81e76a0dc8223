"""What the fuzz modules of writers and outputs share: the case counter, the outcome
table (the module's last test) and the folder snapshots that show what a case changed."""

import hashlib
import os
from collections import Counter, defaultdict

import pytest

TRACEBACK = "Traceback (most recent call last)"


def head(path, n):
    """The first ``n`` lines of a text file."""
    with open(path, encoding="utf-8") as f:
        return "".join(line for _, line in zip(range(n), f))


def snapshot(folder, skip=()):
    """Every path under ``folder`` (links not followed) with its content's hash, its
    link target or "folder"; ``skip``: top-level names left out."""
    out = {}
    for root, dirs, files in os.walk(folder):
        if root == str(folder):
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in dirs + files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[rel] = "folder"
    return out


class Outcomes:
    """Cases counted by class and outcome; ``lost`` names what a case that exits 0
    while changing files lost ("files", "inputs")."""

    def __init__(self, lost="files"):
        self.counts = defaultdict(Counter)  # class -> Counter of outcomes
        self.lost = lost

    def record(self, cls, failures, case, ok, good, code, output, changed=False):
        """Count a case under ``good`` or the kind of problem it shows; keep its story."""
        if ok:
            kind = good
        elif TRACEBACK in output:
            kind = "problem: traceback"
        elif code == 0:
            kind = "problem: exit 0" + (f", {self.lost} lost or changed" if changed else "")
        else:
            kind = f"problem: exit {code}" + (", files changed" if changed else ", another message")
        self.counts[cls][kind] += 1
        if not ok:
            failures.append(f"[{cls}] {case}: exit {code}\n{output[-2000:]}")

    def check_table(self):
        """The module's last test: print the table (and append it to FUZZ_TABLE=PATH);
        fail on any problem counted."""
        if not self.counts:
            pytest.skip("the table counts the other tests of the module: run them with it")
        lines = ["| class | outcome | cases |", "|---|---|---|"]
        lines += [f"| {cls} | {outcome} | {n} |" for cls, counts in self.counts.items()
                  for outcome, n in sorted(counts.items())]
        print("\n".join(lines))
        if os.environ.get("FUZZ_TABLE"):
            with open(os.environ["FUZZ_TABLE"], "a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        assert not [k for counts in self.counts.values() for k in counts if k.startswith("problem")]
