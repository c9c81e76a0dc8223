"""The rows of one split of a user's file, as the readers return them."""

from dataclasses import dataclass, field


@dataclass
class SplitRows:
    """The fields of one split: ``inputs[k][i]`` is input k of row i."""

    inputs: list  # [num_inputs][num_rows] strings
    labels: list = None  # [num_rows] strings, or None (unlabelled split)
    dropped: list = field(default_factory=list)  # (line, reason)
    rows: int = 0
