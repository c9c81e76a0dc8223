"""An in-memory dataset of tensors, for inputs that do not come from disk (the hub
encodes raw text) but go through the same dataset wrappers as a task's files."""

import numpy as np


class TensorListDataset(list):
    """A list of 1-D tensors (token ids, or flat span offsets ``[s0, e0, s1, e1, ...]``)
    with the ``sizes`` / ``size(i)`` of a fairseq dataset.

    ``sizes`` -> int64 array ``[N]``, the length of each item.
    """

    @property
    def sizes(self):
        return np.array([len(x) for x in self], dtype=np.int64)

    def size(self, index):
        return len(self[index])
