"""What an install lacks, said in one line.

``pip install span_plugin`` is the lean install: prediction from exported folders
(``span-predict --model DIR``, :mod:`span_plugin.portable`), preprocessing and conversion.
fairseq and the rest of the training stack come with ``bash install.sh`` (docs/INSTALL.md).
Code that needs a package outside the lean install calls :func:`require` first, so that
its absence is one line naming what to install, not a traceback. This module imports
nothing beyond the standard library: it must load where those packages do not.
"""

import importlib.util

TRAINING_INSTALL = ("run `bash install.sh` in the span_plugin checkout (the training "
                    "install, docs/INSTALL.md)")


class MissingPackageError(ImportError):
    """A package outside the lean install is needed and not importable; the message is
    one line naming what needs it and what to install."""


def installed(module):
    """Whether ``module`` (a top-level name) can be imported, without importing it. A
    finder that refuses it (tests that block fairseq) counts as not installed."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module, what, how):
    """Raise MissingPackageError when ``module`` cannot be imported: ``what`` needs it
    (a command or option), ``how`` says how to install it."""
    if not installed(module):
        raise MissingPackageError(f"{what} needs {module}, which is not installed: {how}")


FAIRSEQ_HOW = (f"{TRAINING_INSTALL}; pip install span_plugin alone predicts from exported "
               f"folders (span-predict --model DIR), preprocesses and converts")


def require_fairseq(what):
    """Raise MissingPackageError, naming the training install, when fairseq is absent
    (the lean install); ``what`` is the command or call that needs it."""
    require("fairseq", what, FAIRSEQ_HOW)


def fairseq_absent(err, what):
    """The MissingPackageError to raise instead of ``err`` (an ImportError met while
    running ``what``) when fairseq is what could not be imported; else None."""
    name = (getattr(err, "name", None) or "").split(".")[0]
    if name in ("fairseq", "fairseq_cli") or (not name and not installed("fairseq")):
        return MissingPackageError(f"{what} needs fairseq, which is not installed: {FAIRSEQ_HOW}")
    return None
