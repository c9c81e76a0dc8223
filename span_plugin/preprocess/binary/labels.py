"""Class-label files as ``fairseq-preprocess --only-source`` writes them, without fairseq:
``label/dict.txt`` from the train labels and ``label/{split}.{bin,idx}`` per split.

The dictionary is fairseq's ``build_dictionary(threshold=-1, nwords=-1,
padding_factor=8)``: every whitespace-separated word of every line counted, plus one
``</s>`` per line; after the four specials (``<s> <pad> </s> <unk>``, not written) the
words by count, most frequent first, ties in code-point order; then ``madeupword0000``,
``madeupword0001``, ... with count 0 until the size (specials included) is a multiple of
8. Each line is binarized to its words' ids (``<unk>`` for unknown labels) and ``</s>``,
in the dtype fairseq picks for the dictionary size. Files are read as fairseq reads
them: UTF-8 text, universal newlines. tests/test_preprocess_labels.py compares the bytes
with a real fairseq-preprocess run.
"""

import os
from collections import Counter

import numpy as np

from span_plugin.formats.lines import bounded_lines, open_text
from span_plugin.preprocess.binary import indexed
from span_plugin.preprocess.binary.vocab import Vocab, tokenize_line

PADDING_FACTOR = 8


def _lines(path):
    with open_text(path, "r") as f:
        yield from bounded_lines(f, path)


def write_label_dict(files, dict_path):
    """Count the words of ``files`` and write the fairseq dictionary ``dict_path``."""
    counts = Counter()
    for path in files:
        for line in _lines(path):
            counts.update(tokenize_line(line))
    specials = (Vocab.BOS, Vocab.PAD, Vocab.EOS, Vocab.UNK)
    for s in specials:  # fairseq adds them to the specials' own counts, never writes them
        counts.pop(s, None)
    # Stable sort of the alphabetical order by count: Dictionary.finalize's order.
    words = sorted(sorted(counts.items()), key=lambda kv: kv[1], reverse=True)
    pad = -(len(specials) + len(words)) % PADDING_FACTOR
    words += [(f"madeupword{i:04d}", 0) for i in range(pad)]
    os.makedirs(os.path.dirname(os.path.abspath(dict_path)), exist_ok=True)
    with open(dict_path, "w", encoding="utf-8") as f:
        f.writelines(f"{w} {c}\n" for w, c in words)
    return dict_path


def binarize_labels(path, prefix, vocab):
    """``path`` (one label line per item) -> ``prefix.{bin,idx}``. Returns the items."""
    dtype = indexed.token_dtype(len(vocab))
    n = 0
    with indexed.IndexedWriter(prefix, dtype) as w:
        for line in _lines(path):
            w.add(np.asarray(vocab.encode_line(line), dtype=dtype))
            n += 1
    return n
