"""Span-index files written without torch or fairseq (span_plugin.preprocess.binary.span_files)
are byte for byte what the writer built on fairseq's MMapIndexedDatasetBuilder wrote."""

import numpy as np
import torch
from fairseq.data import indexed_dataset

from span_plugin.data.span_index import load_spans
from span_plugin.preprocess.binary import span_files

ITEMS = [[(0, 2), (2, 3)], [], [(0, 1)], [(0, 4), (4, 5), (5, 9)], []]


def _old_writer(prefix, items):
    """The writer of span_plugin 0.2 (data/span_index.py), kept as the reference."""
    builder = indexed_dataset.MMapIndexedDatasetBuilder(
        indexed_dataset.data_file_path(prefix), dtype=np.int32)
    for spans in items:
        builder.add_item(torch.tensor([o for pair in spans for o in pair], dtype=torch.int32))
    builder.finalize(indexed_dataset.index_file_path(prefix))


def test_span_files_identical_to_the_fairseq_builder(tmp_path):
    _old_writer(str(tmp_path / "old"), ITEMS)
    with span_files.SpanIndexWriter(str(tmp_path / "part0")) as w:
        for spans in ITEMS[:2]:
            w.add(spans)
    with span_files.SpanIndexWriter(str(tmp_path / "part1")) as w:
        for spans in ITEMS[2:]:
            w.add(spans)
    with span_files.SpanIndexWriter(str(tmp_path / "new")) as w:  # shards merged, as binarize
        w.merge(str(tmp_path / "part0"))
        w.merge(str(tmp_path / "part1"))
    for ext in ("bin", "idx"):
        assert (tmp_path / f"new.{ext}").read_bytes() == (tmp_path / f"old.{ext}").read_bytes()
    lengths = [9, 0, 1, 9, 0]
    mine, fairseqs = span_files.read_spans(str(tmp_path / "new")), load_spans(str(tmp_path / "new"))
    for i, spans in enumerate(ITEMS):
        flat = [o for pair in spans for o in pair]
        assert mine[i].tolist() == flat == fairseqs[i].tolist()
    span_files.check_alignment(str(tmp_path / "new"), mine, lengths)
    span_files.check_alignment(str(tmp_path / "new"), fairseqs, lengths)
