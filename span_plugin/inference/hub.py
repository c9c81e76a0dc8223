"""The hub: :class:`SpanHubInterface` (:mod:`span_plugin.inference.base`) with every
task's adapter registered (importing this module imports them).

    from span_plugin.inference.hub import SpanHubInterface
    hub = SpanHubInterface.from_pretrained("checkpoints/checkpoint_best.pt")
"""

from span_plugin.inference.base import (ADAPTERS, CheckpointMismatchError,  # noqa: F401
                                        SpanHubInterface, adapter_outputs, collate_spans,
                                        flat_offsets, is_exported_folder, register_adapter,
                                        weights_mismatch)
from span_plugin.inference import ner, pairs, qa, sentence  # noqa: F401,E402  (register them)
