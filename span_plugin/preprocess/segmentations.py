"""Every segmentation kind: importing this module registers them all.

A new kind is a :class:`~span_plugin.preprocess.segment.Segmentation` subclass with
``@register_segmentation("name")`` in its own module, and one import line here; this
order is the order of ``--segmentation`` choices.
"""

from span_plugin.preprocess import segment  # noqa: F401  greedy, random, none
from span_plugin.preprocess import chunker  # noqa: F401
from span_plugin.preprocess.segment import (SEGMENTATIONS, Segmentation, Segmenter,
                                            register_segmentation, segmentation_kind,
                                            segmentation_options)

__all__ = ["SEGMENTATIONS", "Segmentation", "Segmenter", "register_segmentation",
           "segmentation_kind", "segmentation_options"]
