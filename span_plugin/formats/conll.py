"""CoNLL files read into sentences with IOB2 tags.

One word a line, whitespace-separated columns (2 columns ``word tag``, or 4 as
CoNLL-2003 ``word POS chunk tag``: the first column is the word, the last the tag, and
every line of a file has the same count), a blank line after each sentence,
``-DOCSTART-`` lines between documents. Tags in IOB1, IOB2 or BIOES
(:mod:`span_plugin.formats.tags`), returned as IOB2. Every bad line is an error naming
the file and the line.
"""

from dataclasses import dataclass, field

from span_plugin.formats import tags as T
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines

DOCSTART = "-DOCSTART-"


@dataclass
class Sentence:
    words: list
    tags: list  # IOB2
    line: int  # 1-based source line of the first word


@dataclass
class ConllSplit:
    sentences: list = field(default_factory=list)
    documents: int = 0
    empty_documents: int = 0
    repairs: int = 0  # ill-formed tags read as conlleval reads them (formats.tags.to_iob2)
    columns: int = 0  # columns of every word line (the file's first word line decides)
    replacements: int = 0  # invalid UTF-8 sequences read as U+FFFD (bad_utf8="replace")


def read_conll(path, scheme="iob2", bad_tags="repair", bad_utf8="error"):
    """Parse one CoNLL file into sentences with IOB2 tags (see the module docstring)."""
    out = ConllSplit()
    words, raw_tags, first = [], [], None
    in_document = False

    def close_sentence():
        nonlocal words, raw_tags, first
        if words:
            try:
                iob2, repairs = T.to_iob2(raw_tags, scheme, repair=bad_tags == "repair")
            except T.TagError as err:
                raise BadInputError(f"{path}:{first + err.position}: {err}") from None
            out.repairs += repairs
            out.sentences.append(Sentence(words, iob2, first))
        words, raw_tags, first = [], [], None

    def close_document():
        # A -DOCSTART- with no sentence before the next one (or the end): skipped, counted.
        if in_document and doc_start == len(out.sentences):
            out.empty_documents += 1

    doc_start = 0
    lines = read_file_lines(path, bad_utf8)
    out.replacements = lines.replacements
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            close_sentence()
            continue
        if fields[0] == DOCSTART:
            close_sentence()
            close_document()
            in_document, doc_start = True, len(out.sentences)
            out.documents += 1
            continue
        if out.columns == 0:
            if len(fields) < 2:
                raise BadInputError(f"{path}:{number}: {len(fields)} column; expected at least "
                                    f"2 (word ... tag)")
            out.columns = len(fields)
        elif len(fields) != out.columns:
            raise BadInputError(f"{path}:{number}: {len(fields)} columns, but the file's "
                                f"first word line has {out.columns} (word ... tag); every "
                                f"line must have the same columns")
        if first is None:
            first = number
        words.append(fields[0])
        raw_tags.append(fields[-1])
    close_sentence()
    close_document()
    if not out.sentences:
        raise BadInputError(f"{path}: no sentences (an empty file, or only -DOCSTART- lines)")
    return out
