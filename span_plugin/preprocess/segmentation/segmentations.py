"""Every segmentation kind: importing this module registers them all.

A new kind is a :class:`~span_plugin.preprocess.segmentation.segment.Segmentation` subclass with
``@register_segmentation("name")`` in its own module, and one import line here; this
order is the order of ``--segmentation`` choices.
"""

from span_plugin.preprocess.segmentation import segment  # noqa: F401  greedy, random, none
from span_plugin.preprocess.segmentation import chunker  # noqa: F401
from span_plugin.preprocess.segmentation.segment import (SEGMENTATIONS, Segmentation, Segmenter,
                                            register_segmentation, segmentation_kind,
                                            segmentation_options)

__all__ = ["SEGMENTATIONS", "Segmentation", "Segmenter", "register_segmentation",
           "segmentation_kind", "segmentation_options"]
