"""Replacing a function (or property) of fairseq in place, once per process.

The plugin is imported again in every worker fairseq starts, and a second import must
not wrap the wrapper: each replacement is marked, and a marked one is left alone.
"""

import functools


class _PatchedProperty(property):
    """A property that, unlike ``property`` itself, takes the marks below."""


def replace(owner, name, wrap):
    """``owner.name = wrap(original)`` unless it was already replaced. ``wrap`` returns
    a function, or a property for a property; ``__wrapped__`` keeps the original."""
    original = getattr(owner, name)
    if getattr(original, "_span_plugin_wrapped", False):
        return
    replacement = wrap(original)
    if isinstance(replacement, property):
        replacement = _PatchedProperty(replacement.fget, replacement.fset, replacement.fdel,
                                       original.__doc__)
        replacement.__wrapped__ = original
    else:
        replacement = functools.wraps(original)(replacement)
    replacement._span_plugin_wrapped = True
    setattr(owner, name, replacement)
