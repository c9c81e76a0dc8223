"""What ``span-predict`` writes for a task. Each task's row of the task table
(:mod:`span_plugin.portable.tasks`) names its :class:`Output`: the command's options it
reads, its own options and the function that writes its files. ``span-predict`` builds its
parser and refuses another task's options from these declarations alone.

Pure Python: the writers import what they need when they run.
"""

import itertools
from dataclasses import dataclass

from span_plugin.formats.flag_values import positive


class Flag:
    """One ``span-predict`` option: its flag and argparse's keywords. It defaults to None,
    so that an option given is told from one left out. ``path``: ``"writes"`` or
    ``"reads"`` for an option naming files (:func:`paths_given`)."""

    def __init__(self, flag, path=None, **argparse_kwargs):
        self.flag, self.path, self.kwargs = flag, path, argparse_kwargs

    @property
    def dest(self):
        return self.flag[2:].replace("-", "_")

    def add_to(self, group):
        group.add_argument(self.flag, default=None, **self.kwargs)


# Options every task's output may read; each output says which of them it takes.
COMMON = (
    Flag("--split", nargs="+", help="splits of the data folder to predict (valid, test, "
         "MNLI's valid1 and test1, ...); the task's default below"),
    Flag("--output", path="writes", nargs="+",
         help="where the predictions go (the task's format below)"),
    Flag("--input", path="reads", help="a file of examples to predict instead of a split "
         "(the task's format below)"),
    Flag("--results", path="writes",
         help="write the scores against the gold labels here (JSON)"),
    Flag("--batch-size", type=positive, help="examples per forward pass (default 32; QA 16)"),
    Flag("--batch-order", choices=("length", "file"),
         help="length (default): rows sorted by length into batches, a few thousand rows "
         "at a time (the least padding), results written in the input's order; file: "
         "batches in the input's order (the same results, slower)"),
)


# Rows read, sorted by length and predicted together: a bounded look-ahead, so memory is
# flat in a file's rows while batches still gather rows of like length.
CHUNK_ROWS = 4096


@dataclass(frozen=True)
class Batching:
    """How a writer batches its rows: ``size`` examples a batch (QA: questions, each
    with all its windows), ``order`` "length" (like lengths together, written in input
    order) or "file"."""

    size: int = 32
    order: str = "length"

    @classmethod
    def of(cls, args, size):
        """From span-predict's ``--batch-size`` / ``--batch-order`` (``size`` when not given)."""
        return cls(args.batch_size or size, args.batch_order or "length")


def chunks(rows, size=CHUNK_ROWS):
    """Lists of up to ``size`` consecutive items of the iterable ``rows``."""
    rows = iter(rows)
    while True:
        chunk = list(itertools.islice(rows, size))
        if not chunk:
            return
        yield chunk


@dataclass(frozen=True, eq=False)
class Output:
    """``title`` and ``usage``: its section of ``span-predict --help``. ``common``: the
    dests of :data:`COMMON` it reads; ``flags``: its own :class:`Flag` s. ``write(hub,
    args)`` writes the predictions of the loaded hub (a user's mistake: ValueError).
    ``before_load(args)``, when set, runs before the checkpoint's model is loaded and
    returns whether predictions are still to be made."""

    title: str
    usage: str
    common: tuple
    write: object
    flags: tuple = ()
    before_load: object = None

    @property
    def takes(self):
        """The dests of every option it reads, common ones first."""
        return (*self.common, *(f.dest for f in self.flags))



def paths_given(args, outputs, read=None):
    """``({flag: paths written}, {flag: paths read})`` among the options given: the
    :class:`Flag` s of :data:`COMMON` and of every output in ``outputs`` that declare a
    ``path``, and ``read`` (``{flag: path}``, the command's other files read). An
    output given as ``''`` is one (refused as an empty path), not one left out."""
    written, read = {}, dict(read or {})
    for flag in (*COMMON, *(f for output in outputs for f in output.flags)):
        value = getattr(args, flag.dest, None)
        if flag.path and (value or flag.path == "writes" and value is not None):
            (written if flag.path == "writes" else read)[flag.flag] = value
    return written, read
