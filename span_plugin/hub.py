"""The hub's public import: ``from span_plugin.hub import SpanHubInterface``, then
``SpanHubInterface.from_pretrained(checkpoint)`` returns the adapter of the task the
checkpoint was trained with (:mod:`span_plugin.inference`); given a folder of
``span-export hf``, the predictor of :func:`span_plugin.portable.load_model` (the same
methods and outputs), without importing fairseq: this module imports the fairseq hub
(:mod:`span_plugin.inference.hub`) only when a checkpoint is loaded or the hub class
itself is asked for (an attribute, ``isinstance``). The one name users' scripts need, at
a path that does not move with the package's layers."""

import sys


def _hub():
    """The fairseq hub's class (imports fairseq)."""
    from span_plugin.requires import require_fairseq

    require_fairseq("SpanHubInterface on a fairseq checkpoint")
    from span_plugin.inference.hub import SpanHubInterface as hub

    return hub


class _Deferred(type):
    """What the fairseq hub's class answers, asked of this one when it is needed."""

    def __getattr__(cls, name):
        return getattr(_hub(), name)

    def __instancecheck__(cls, obj):
        # No hub object exists before the fairseq hub is imported.
        return "span_plugin.inference.hub" in sys.modules and isinstance(obj, _hub())

    def __subclasscheck__(cls, sub):
        return "span_plugin.inference.hub" in sys.modules and issubclass(sub, _hub())


class SpanHubInterface(metaclass=_Deferred):
    """:class:`span_plugin.inference.hub.SpanHubInterface`, whose ``from_pretrained``
    reads an exported folder without fairseq."""

    @classmethod
    def from_pretrained(cls, checkpoint, data=None, *args, head="sentence_classification_head",
                        **kwargs):
        """A fine-tuned checkpoint_*.pt: the fairseq hub's adapter of its task
        (:meth:`span_plugin.inference.hub.SpanHubInterface.from_pretrained`, every
        argument as there). A folder of ``span-export hf``: its predictor, loaded without
        fairseq (:func:`span_plugin.portable.exported_predictor`)."""
        from span_plugin.portable import exported_predictor, is_exported_folder

        if is_exported_folder(checkpoint):
            if args:
                raise TypeError("from_pretrained of an exported folder takes data= and head= "
                                "(and no encoder settings: the folder holds its own)")
            return exported_predictor(checkpoint, data, head, **kwargs)
        return _hub().from_pretrained(checkpoint, data, *args, head=head, **kwargs)
