"""A fairseq ``Dictionary``-compatible reader of ``dict.txt``, for encoding only.

Plain Python (no torch, no fairseq). ``Vocab(path)`` gives the same ids, the same
``len()`` and the same unknown handling as ``fairseq.data.Dictionary.load(path)``;
``encode_line`` is ``Dictionary.encode_line(line, add_if_not_exist=False)`` as a list.
tests/test_indexed_format.py checks it against fairseq.

File format (fairseq's ``add_from_file``): one ``<symbol> <count>[ #fairseq:overwrite]``
per line. The line is right-stripped and split at its LAST space, so a symbol may itself
contain spaces; the count is Python ``int()`` of the last field. A symbol already present
(the four specials included) is an error unless the line carries
``#fairseq:overwrite``; then the symbol gets a NEW id at the end (its old id stays taken,
so ``len()`` counts both) and ``index()`` returns the new one. The unknown id stays 3
even if ``<unk>`` is overwritten.
"""

import re

from span_plugin.formats.lines import bounded_lines, open_text

__all__ = ["Vocab", "tokenize_line"]

_SPACE_NORMALIZER = re.compile(r"\s+")
_OVERWRITE = "#fairseq:overwrite"


def tokenize_line(line: str) -> list:
    """fairseq.tokenizer.tokenize_line: collapse whitespace, strip, split."""
    return _SPACE_NORMALIZER.sub(" ", line).strip().split()


class Vocab:
    """Symbols of a fairseq ``dict.txt`` with their ids.

    ``symbols``: list, id -> symbol (``<s>``, ``<pad>``, ``</s>``, ``<unk>`` = 0..3, then
    the file's lines in order); ``counts``: list of the same length (specials 1);
    ``indices``: dict symbol -> id.
    """

    BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
    bos_index, pad_index, eos_index, unk_index = 0, 1, 2, 3
    nspecial = 4

    def __init__(self, path):
        self.path = str(path)
        self.symbols = []
        self.counts = []
        self.indices = {}
        for s in (self.BOS, self.PAD, self.EOS, self.UNK):
            self._add(s, 1)
        try:
            with open_text(self.path, "r") as f:
                lines = list(bounded_lines(f, self.path))
        except UnicodeError as e:
            raise ValueError(f"{self.path}: not valid UTF-8 ({e}); rebuild the dictionary") \
                from None
        for lineno, raw in enumerate(lines, 1):
            line = raw.rstrip()
            parts = line.rsplit(" ", 1)
            overwrite = False
            if len(parts) == 2 and parts[1] == _OVERWRITE:
                overwrite = True
                parts = parts[0].rsplit(" ", 1)
            try:
                if len(parts) != 2:
                    raise ValueError
                word, count = parts[0], int(parts[1])
            except ValueError:
                raise ValueError(
                    f"{self.path}:{lineno}: expected '<symbol> <count> [flags]', got "
                    f"{raw.rstrip(chr(10))!r}") from None
            if word in self.indices and not overwrite:
                raise ValueError(
                    f"{self.path}:{lineno}: duplicate symbol {word!r} (first at id "
                    f"{self.indices[word]}); add '{_OVERWRITE}' at the end of the line to "
                    f"give it a new id")
            self._add(word, count)

    @classmethod
    def load(cls, path) -> "Vocab":
        return cls(path)

    def _add(self, word, count):
        self.indices[word] = len(self.symbols)
        self.symbols.append(word)
        self.counts.append(count)

    def __len__(self):
        """Number of ids, as ``len(Dictionary.load(path))``."""
        return len(self.symbols)

    def __contains__(self, sym):
        return sym in self.indices

    def __getitem__(self, idx: int) -> str:
        """Symbol of an id; ``<unk>`` past the end (as fairseq)."""
        return self.symbols[idx] if idx < len(self.symbols) else self.UNK

    def index(self, sym: str) -> int:
        """Id of a symbol, ``unk_index`` when unknown."""
        if not isinstance(sym, str):
            raise TypeError(f"symbol must be str, got {type(sym).__name__}")
        return self.indices.get(sym, self.unk_index)

    def bos(self):
        return self.bos_index

    def pad(self):
        return self.pad_index

    def eos(self):
        return self.eos_index

    def unk(self):
        return self.unk_index

    def encode(self, symbols, append_eos=True) -> list:
        """Ids ``[len(symbols) (+1)]`` of a sequence of symbols (unknown -> 3), ``</s>``
        (2) appended when ``append_eos``."""
        get, unk = self.indices.get, self.unk_index
        ids = [get(s, unk) for s in symbols]
        if append_eos:
            ids.append(self.eos_index)
        return ids

    def encode_line(self, line: str, append_eos=True) -> list:
        """``Dictionary.encode_line(line, append_eos=..., add_if_not_exist=False)`` as a
        list: whitespace-split ``line``, then :meth:`encode`."""
        return self.encode(tokenize_line(line), append_eos=append_eos)

    def save(self, path):
        """Write the dictionary as ``Dictionary.save`` does: ``<symbol> <count>`` per
        symbol after the specials, counts as ``int`` prints them, no flags."""
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{s} {c}\n" for s, c in zip(self.symbols[self.nspecial:],
                                                        self.counts[self.nspecial:]))

    def __repr__(self):
        return f"Vocab({self.path!r}, {len(self)} symbols)"
