"""Task rows inside a dictionary corpus: find them before counting.

An n-gram dictionary counted on a task's own rows segments those rows differently from
any unseen text (their rare n-grams pass the count threshold only because the rows were
counted), so a dictionary must come from general text. :func:`task_row_hits` checks a
corpus against the files of the tasks it will serve.

A task sentence is any field (tab-separated) of any line of the task files with at least
``MIN_WORDS`` words; GLUE TSVs, users' tables and plain sentence files all read this way.
A corpus line is a hit when the line, or one of its tab-separated fields, equals a task
sentence after case folding and whitespace collapsing. That catches what happens in
practice (task files, or their sentence columns, appended to the corpus), and
one-sentence paragraphs of a corpus a task was drawn from (QNLI's sentences are
Wikipedia's); a task sentence inside a longer paragraph is not detected.
"""

import glob
import hashlib
import os

from span_plugin.formats.lines import bounded_lines, open_text, regular_file

MIN_WORDS = 4  # shorter fields ("1", "gj04", "not_entailment") are not sentences
TASK_SUFFIXES = (".tsv", ".txt", ".csv", ".jsonl", ".tsv.gz", ".txt.gz")


def _normal(text):
    return " ".join(text.split()).lower()


def _fingerprint(normal_text):
    return int.from_bytes(hashlib.blake2b(normal_text.encode("utf-8"), digest_size=8).digest(),
                          "little")


def task_files(paths):
    """The files named, and the task files under the folders named (recursively)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(f for f in glob.glob(os.path.join(p, "**", "*"), recursive=True)
                           if f.endswith(TASK_SUFFIXES) and os.path.isfile(f))
            if not found:
                raise FileNotFoundError(f"{p}: no task files ({', '.join(TASK_SUFFIXES)}) "
                                        f"under this folder")
            out += found
        elif os.path.exists(p):
            regular_file(p, "task rows to check")
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder (task rows to check)")
    return out


def task_fingerprints(paths):
    """The fingerprints (a frozenset of 64-bit ints) of the task sentences in ``paths``
    (files or folders), and the number of files read."""
    files = task_files(paths)
    prints = set()
    for path in files:
        with open_text(path, "r", errors="replace") as f:
            for line in bounded_lines(f, path):
                for field in line.rstrip("\r\n").split("\t"):
                    text = _normal(field)
                    if text.count(" ") + 1 >= MIN_WORDS:
                        prints.add(_fingerprint(text))
    return frozenset(prints), len(files)


def is_task_row(line, fingerprints):
    """Whether a corpus line, or one of its tab-separated fields, is a task sentence."""
    fields = (_normal(x) for x in line.rstrip("\r\n").split("\t"))
    return any(x.count(" ") + 1 >= MIN_WORDS and _fingerprint(x) in fingerprints
               for x in fields)


def task_row_hits(corpus_paths, fingerprints, max_examples=3, keep_dir=None):
    """Corpus lines that are task sentences. Returns ``(hits, examples, kept)``; each
    example is ``(path, line number, text)``. With ``keep_dir``, every corpus file with
    a hit is rewritten there without those lines and ``kept`` lists the paths to count
    instead of ``corpus_paths`` (else ``kept`` is ``corpus_paths``)."""
    hits, examples, kept = 0, [], []
    for i, path in enumerate(corpus_paths):
        if not fingerprints:
            kept.append(path)
            continue
        out_path = os.path.join(keep_dir, f"kept{i}.txt") if keep_dir else None
        out = open(out_path, "w", encoding="utf-8") if out_path else None
        before = hits
        with open_text(path, "r", errors="replace") as f:
            for lineno, line in enumerate(bounded_lines(f, path), 1):
                if is_task_row(line, fingerprints):
                    hits += 1
                    if len(examples) < max_examples:
                        examples.append((path, lineno, line.strip()[:100]))
                elif out:
                    out.write(line)
        if out:
            out.close()
        if out and hits > before:
            kept.append(out_path)
        else:
            if out_path:
                os.remove(out_path)
            kept.append(path)
    return hits, examples, kept
