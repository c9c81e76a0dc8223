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


# What a command of the lean install may reach for and lack: why, and how to install it.
NEEDED_FOR = {
    "fairseq": ("loading a fairseq checkpoint", FAIRSEQ_HOW),
    "fairseq_cli": ("loading a fairseq checkpoint", FAIRSEQ_HOW),
    "transformers": ("writing a Hugging Face folder's tokenizer files",
                     "pip install 'span_plugin[transformers]' (or pip install transformers)"),
}


def absent(err):
    """The MissingPackageError to raise instead of ``err`` (an ImportError) when what
    could not be imported is a package of :data:`NEEDED_FOR`; else None. An ImportError
    without a module name counts as fairseq's when fairseq is not installed (a finder that
    refuses it)."""
    name = (getattr(err, "name", None) or "").split(".")[0]
    if not name and not installed("fairseq"):
        name = "fairseq"
    if name not in NEEDED_FOR:
        return None
    why, how = NEEDED_FOR[name]
    return MissingPackageError(f"{why} needs {name}, which is not installed: {how}")
