"""The settings every folder builder takes (``prepare_task``, ``prepare_table``,
``prepare_pairs``, ``prepare_conll``, ``prepare_qa``, ``prepare_pretrain``), as one value
that ``span-preprocess`` builds once from its arguments."""

import os
import sys
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class FolderOptions:
    """How a folder is encoded, read and recorded.

    spec: the :class:`~span_plugin.preprocess.segmentation.encoding.EncoderSpec`;
    dict_path: its fairseq ``dict.txt``. workers: binarizing processes. bad_utf8:
    invalid UTF-8 in a source: ``"error"`` or ``"replace"`` (U+FFFD, counted in the
    record). unknown_labels: a valid/test label the training split lacks; None is the
    builder's own default (``"error"``; ``"map-to-o"`` for CoNLL). name: the task name
    in the record; None is the builder's default (the folder's name; ``qa`` for QA).
    command: the command line the record keeps; None is this process's.
    """

    spec: Any
    dict_path: str
    workers: int = 1
    bad_utf8: str = "error"
    unknown_labels: Optional[str] = None
    name: Optional[str] = None
    command: Optional[str] = None

    def record_command(self):
        """``command``, or the command line of this process when none was given."""
        return self.command or " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
