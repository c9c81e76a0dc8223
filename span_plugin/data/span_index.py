"""Span-index files (:mod:`span_plugin.preprocess.binary.span_files`: layout, writer, checks)
opened as fairseq datasets for training; the tasks' one import for span files."""

from fairseq.data import indexed_dataset

from span_plugin.preprocess.binary.span_files import (
    SPAN_DTYPE, SpanAlignmentError, check_alignment, exists, require, span_prefix)

__all__ = ["SPAN_DTYPE", "SpanAlignmentError", "check_alignment", "exists", "load_spans",
           "span_prefix"]


def load_spans(prefix: str) -> indexed_dataset.MMapIndexedDataset:
    """Open a span file set; each item is a flat int tensor ``[2 * n_spans]``."""
    require(prefix)
    return indexed_dataset.MMapIndexedDataset(prefix)
