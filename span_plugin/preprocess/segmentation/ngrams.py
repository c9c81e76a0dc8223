"""N-gram dictionaries: the text format (``words<TAB>count`` lines under a ``# span_plugin
ngrams v1`` header, most frequent first), loading (:func:`load_ngrams`) and exact
counting at scale in bounded memory (:func:`count_ngrams`). The format and the counting
method: docs/PREPROCESS.md, section "Module notes"."""

import gzip
import logging
import multiprocessing as mp
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import quote

import numpy as np

from span_plugin.formats.lines import (MAX_LINE, bounded_lines, count_lines, open_text, regular_file,
                                       too_long, write_text)
from span_plugin.preprocess import progress
from span_plugin.tokenizers import words as W

logger = logging.getLogger(__name__)

FORMAT_TAG = "span_plugin ngrams v1"
WORD_BITS = 23  # packing limit: frequent words per corpus
MAX_WORDS = 1 << WORD_BITS


class NgramFormatError(ValueError):
    """A malformed dictionary line; the message names the file and the line."""


# ---------------------------------------------------------------------------------
# The dictionary


@dataclass
class NgramDict:
    """A set of n-grams (tuples of matching keys) with their counts.

    ``first_max[w]`` is the longest n among n-grams that start with word ``w``; the
    greedy segmenter uses it to skip positions no n-gram can start at.
    """

    grams: set = field(default_factory=set)
    counts: dict = field(default_factory=dict)
    first_max: dict = field(default_factory=dict)
    path: str = None
    words: str = "gpt2"  # the word scheme its keys are in (words.WORD_SCHEMES)

    @classmethod
    def from_counts(cls, items, path=None):
        """items: iterable of (tuple_of_keys, count), most frequent first."""
        d = cls(path=path)
        for gram, count in items:
            d.add(gram, count)
        return d

    def add(self, gram, count=0):
        gram = tuple(gram)
        if len(gram) < 2:
            raise ValueError(f"an n-gram needs at least 2 words, got {gram!r}")
        self.grams.add(gram)
        self.counts[gram] = count
        if self.first_max.get(gram[0], 0) < len(gram):
            self.first_max[gram[0]] = len(gram)

    @property
    def max_n(self):
        return max(self.first_max.values(), default=0)

    def __contains__(self, gram):
        return tuple(gram) in self.grams

    def __len__(self):
        return len(self.grams)


def read_header(path):
    """The ``key=value`` settings of a dictionary's header line (``{}`` without one);
    a bare word is ``key: True``. What :func:`build_dictionary` wrote: words, n, min_count,
    corpus, corpus_tokens, task_rows_checked, top_k."""
    with open_text(path, "r") as f:
        line = next(bounded_lines(f, path), "").lstrip("\ufeff").rstrip("\r\n")
    if not line.startswith(f"# {FORMAT_TAG}"):
        return {}
    out = {}
    for part in line[len(f"# {FORMAT_TAG}"):].split():
        key, eq, value = part.partition("=")
        out[key] = value if eq else True
    return out


DEFAULT_FILES = {"gpt2": "ngrams.default.txt.gz", "bert": "ngrams.default.bert.txt.gz"}
# The package's resources folder (span_plugin/resources), where they are shipped.
RESOURCES = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "resources"))


def default_ngrams_path(words="gpt2"):
    """Path of the n-gram dictionary shipped in the package for a word scheme (see
    docs/PREPROCESS.md)."""
    if words not in DEFAULT_FILES:
        # A scheme may have no packaged dictionary (spm: words depend on the model's
        # normalizer and language); the user counts one on their own text.
        raise ValueError(
            f"no packaged n-gram dictionary for {words!r} words (packaged: "
            f"{', '.join(DEFAULT_FILES)}): count one with `span-preprocess ngrams --words "
            f"{words} --text CORPUS.txt --out ngrams.{words}.txt` and pass it with --ngrams "
            f"(or use --segmentation none, which needs no dictionary)")
    return os.path.join(RESOURCES, DEFAULT_FILES[words])


_WORDS_TAG = re.compile(r"(?:^|\s)words=(\S+)")


def _header_words(path, line):
    """The word scheme a header line names; dictionaries without one are gpt2."""
    m = _WORDS_TAG.search(line)
    if not m:
        return "gpt2"
    if m.group(1) not in W.WORD_SCHEMES:
        raise NgramFormatError(f"{path}:1: unknown word scheme {m.group(1)!r}; expected "
                               f"one of {W.WORD_SCHEMES}")
    return m.group(1)


def load_ngrams(path=None, top_k=None, min_n=2, max_n=5, words="gpt2"):
    """Load a dictionary file; ``path=None`` loads the packaged default of the word
    scheme ``words`` (a file records its own scheme in its header: ``d.words``).

    top_k: keep only the first (most frequent) ``top_k`` entries of length
    ``min_n..max_n``. A malformed line raises :class:`NgramFormatError` naming the
    file and its 1-based line.
    """
    path = str(path) if path is not None else default_ngrams_path(words)
    d = NgramDict(path=path)
    with open_text(path, "r") as f:
        for lineno, line in enumerate(bounded_lines(f, path), 1):
            line = line.rstrip("\r\n")
            if line.startswith("\ufeff") and lineno == 1:
                line = line[1:]
            if lineno == 1 and line.startswith(f"# {FORMAT_TAG}"):
                d.words = _header_words(path, line)
            if not line or line.startswith("#"):
                continue
            gram, tab, count = line.rpartition("\t")
            keys = gram.split(" ")
            if not tab or not count.isdigit() or len(keys) < 2 or "" in keys:
                raise NgramFormatError(
                    f"{path}:{lineno}: expected '<word> <word> [...]<TAB><count>' "
                    f"(at least 2 words separated by single spaces, an integer count), "
                    f"got {line[:80]!r}"
                )
            if not min_n <= len(keys) <= max_n:
                continue
            d.add(keys, int(count))
            if top_k is not None and len(d) >= top_k:
                break
    return d


def save_ngrams(path, items, comment=""):
    """Write (tuple_of_keys, count) items, sorted by count then text, to ``path``."""
    items = sorted(items, key=lambda gc: (-gc[1], gc[0]))
    with write_text(path) as f:  # whole or absent: a full disk leaves no cut dictionary
        f.write(f"# {FORMAT_TAG} {comment}".rstrip() + "\n")
        for gram, count in items:
            f.write(f"{' '.join(gram)}\t{count}\n")
    return len(items)


# ---------------------------------------------------------------------------------
# Counting


def _line_chunks(path, chunk_bytes):
    """Byte ranges of ``path`` that start at line starts, about chunk_bytes each."""
    size = regular_file(path).st_size
    bounds = [0]
    with open(path, "rb") as f:
        while bounds[-1] < size:
            pos = bounds[-1] + chunk_bytes
            if pos >= size:
                bounds.append(size)
                break
            f.seek(pos)
            if len(f.readline(MAX_LINE + 1)) > MAX_LINE:  # move to the next line start
                raise too_long(path, count_lines(path, pos) + 1)
            bounds.append(min(f.tell(), size))
    return list(zip(bounds[:-1], bounds[1:]))


# WikiText writes "it 's", "didn 't": join the clitic back so GPT-2 splits it as in
# ordinary text ("it", "'s").
_HAS_ALNUM = re.compile(r"[^\W_]")  # a letter or a digit
_WIKI_CLITIC = re.compile(r"(?<=\w) '(s|t|re|ve|m|ll|d)\b")


def corpus_lines(text, wikitext=False):
    """Lines of a decoded corpus piece, cleaned for counting.

    wikitext: drop ``= Heading =`` lines, undo WikiText's ``@-@ @,@ @.@`` splits and
    its detached clitics (``it 's`` -> ``it's``), so "state-of-the-art" and "it's" give
    the same words as in ordinary text, and cut lines at ``<unk>`` (no n-gram may
    contain an unknown word).
    """
    for line in text.split("\n"):
        if wikitext:
            s = line.strip()
            if s.startswith("= ") and s.endswith(" ="):
                continue
            line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
            if " '" in line:
                line = _WIKI_CLITIC.sub(r"'\1", line)
            if "<unk>" in line:
                yield from line.split("<unk>")
                continue
        yield line


def _tokenize_chunk(task):
    """Worker: words of one byte range -> local ids file, local vocabulary, counts."""
    path, start, end, out_path, wikitext, scheme = task
    split = W.splitter(scheme)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if start == 0 and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Corpus text: undecodable bytes become U+FFFD (documented); they can only
    # break n-grams locally.
    text = data.decode("utf-8", errors="replace")
    words = []
    for line in corpus_lines(text, wikitext):
        ws = split(line)
        if ws:
            words.extend(ws)
            words.append("")  # line end: n-grams never cross it
    keys = W.match_keys(words)
    vocab = {}
    ids = np.fromiter((vocab.setdefault(k, len(vocab)) for k in keys), dtype=np.int32,
                      count=len(keys))
    counts = np.bincount(ids, minlength=len(vocab)).astype(np.int64)
    ids.tofile(out_path)
    return out_path, list(vocab), counts


def _count_level(task):
    """Worker: count the level-n keys of one chunk into hash-partition spill files."""
    corpus, prev, start, end, n, parts, spill = task
    w = np.memmap(corpus, dtype=np.int32, mode="r")[start:end]
    p = w if n == 2 else np.memmap(prev, dtype=np.int32, mode="r")[start:end]
    m = len(w) - (n - 1)
    if m <= 0:
        return
    last = w[n - 1:]
    ok = (p[:m] >= 0) & (last >= 0)
    keys = (p[:m][ok].astype(np.int64) << WORD_BITS) | last[ok]
    uniq, cnt = np.unique(keys, return_counts=True)
    part = _partition(uniq, parts)
    for k in range(parts):
        sel = part == k
        np.save(f"{spill}.p{k}.k.npy", uniq[sel])
        np.save(f"{spill}.p{k}.c.npy", cnt[sel].astype(np.int64))


def _partition(keys, parts):
    # Multiplicative hashing spreads the sorted keys evenly over the partitions.
    h = (keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (h % np.uint64(parts)).astype(np.int64)


def _merge_partition(task):
    """Worker: sum one partition's counts over all chunks, keep those >= min_count."""
    files, min_count = task
    keys = [np.load(f + ".k.npy") for f in files]
    cnts = [np.load(f + ".c.npy") for f in files]
    for f in files:
        os.remove(f + ".k.npy")
        os.remove(f + ".c.npy")
    keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    cnts = np.concatenate(cnts) if cnts else np.zeros(0, np.int64)
    if keys.size == 0:
        return keys, cnts
    order = np.argsort(keys, kind="stable")
    keys, cnts = keys[order], cnts[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    keys, cnts = keys[starts], np.add.reduceat(cnts, starts)
    keep = cnts >= min_count
    return keys[keep], cnts[keep]


def _assign_ids(task):
    """Worker: write, for each position of a chunk, the id of the frequent level-n
    n-gram starting there (its index in the sorted key array), or -1."""
    corpus, prev, out, start, end, n, keys_path = task
    sorted_keys = np.load(keys_path, mmap_mode="r")
    w = np.memmap(corpus, dtype=np.int32, mode="r")[start:end]
    p = w if n == 2 else np.memmap(prev, dtype=np.int32, mode="r")[start:end]
    res = np.full(len(w), -1, dtype=np.int32)
    m = len(w) - (n - 1)
    if m > 0 and len(sorted_keys):
        last = w[n - 1:]
        ok = np.flatnonzero((p[:m] >= 0) & (last >= 0))
        keys = (p[ok].astype(np.int64) << WORD_BITS) | last[ok]
        pos = np.searchsorted(sorted_keys, keys)
        pos_c = np.minimum(pos, len(sorted_keys) - 1)
        hit = sorted_keys[pos_c] == keys
        res[ok[hit]] = pos_c[hit]
    out_map = np.memmap(out, dtype=np.int32, mode="r+")
    out_map[start:end] = res
    out_map.flush()


@dataclass
class CountResult:
    items: list  # [(tuple_of_keys, count)], most frequent first
    corpus_tokens: int
    vocab_size: int


@dataclass(frozen=True)
class NgramCounting:
    """What a count keeps (the dictionary's header records it): word n-grams with
    ``min_n <= n <= max_n`` seen at least ``min_count`` times, the ``top_k`` most frequent
    of them (None: all). edge_punct: keep n-grams that begin or end with a word without
    letters or digits (", and", "america ,"); by default they are left out, so spans do
    not swallow neighbouring punctuation (punctuation inside an n-gram, as in "state - of
    - the - art", stays). words: the word scheme (``words.WORD_SCHEMES``) of the encoder
    that will use the dictionary."""

    min_n: int = 2
    max_n: int = 5
    min_count: int = 2
    top_k: Optional[int] = None
    edge_punct: bool = False
    words: str = "gpt2"


def count_ngrams(paths, counting=NgramCounting(), workers=None, wikitext=(),
                 chunk_bytes=8 << 20, partitions=8, tmp_dir=None):
    """Count the word n-grams ``counting`` (:class:`NgramCounting`) keeps in the corpus
    files, exactly. Lines are sentences or paragraphs; n-grams never cross a line end.
    ``wikitext``: True, or the subset of ``paths`` in WikiText format (see
    :func:`corpus_lines`). workers, chunk_bytes, partitions, tmp_dir: processes, bytes a
    worker reads at a time, hash partitions of the spill files and where they go.
    Returns a :class:`CountResult`.
    """
    W.splitter(counting.words)  # refuse an unknown scheme before any work
    if not 2 <= counting.min_n <= counting.max_n:
        raise ValueError(f"need 2 <= min_n <= max_n, got {counting.min_n}..{counting.max_n}")
    if counting.min_count < 1:
        raise ValueError("min_count must be >= 1")
    workers = workers or os.cpu_count() or 1
    tmp = tempfile.mkdtemp(prefix="span_ngrams_", dir=tmp_dir)
    ctx = mp.get_context("fork")
    try:
        # Inputs are checked (and .gz decompressed) before the workers fork: a refusal
        # raised inside the pool ends in its terminate(), which can wait on forked workers.
        paths = [str(p) for p in paths]
        for path in paths:
            regular_file(path)
        wiki = set(paths) if wikitext is True else {str(p) for p in (wikitext or ())}
        plain = [_plain_file(p, tmp) for p in paths]
        wiki = {q for p, q in zip(paths, plain) if p in wiki}
        with ctx.Pool(workers) as pool:
            return _count(pool, plain, wiki, counting, chunk_bytes, partitions, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _plain_file(path, tmp):
    """``path`` itself, or for ``.gz`` its decompressed copy in ``tmp`` (workers read
    byte ranges)."""
    if not path.endswith(".gz"):
        return path
    out = os.path.join(tmp, f"corpus{len(os.listdir(tmp))}.txt")
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    return out


def _count(pool, paths, wikitext, counting, chunk_bytes, parts, tmp):
    """:func:`count_ngrams` over the plain files ``paths`` (``wikitext``: those in
    WikiText format), its workers ``pool``, spilling into ``tmp``."""
    chunk_vocabs, word_counts = _read_words(pool, paths, wikitext, counting.words,
                                            chunk_bytes, tmp)
    corpus_tokens = sum(word_counts.values())
    min_count = counting.min_count
    frequent = sorted((w for w, c in word_counts.items() if c >= min_count),
                      key=lambda w: (-word_counts[w], w))
    if len(frequent) >= MAX_WORDS:
        raise ValueError(f"{len(frequent)} words reach min_count={min_count}; the exact "
                         f"packing allows {MAX_WORDS - 1}: raise min_count")
    word_id = {w: i for i, w in enumerate(frequent)}
    del word_counts
    corpus, bounds = _global_ids(chunk_vocabs, word_id, tmp)
    if not bounds or bounds[-1][1] == 0:
        return CountResult(items=[], corpus_tokens=corpus_tokens, vocab_size=len(frequent))
    levels = _count_levels(pool, corpus, bounds, counting, parts, tmp)
    items = _decoded(levels, frequent, counting)
    return CountResult(items=items, corpus_tokens=corpus_tokens, vocab_size=len(frequent))


def _read_words(pool, paths, wikitext, words, chunk_bytes, tmp):
    """Pass 1: each chunk of ``chunk_bytes`` as local word ids, with its vocabulary.
    Returns ``([(ids path, vocabulary path, vocabulary size)], {word: count})``."""
    tasks = []
    for path in paths:
        for start, end in _line_chunks(path, chunk_bytes):
            tasks.append((path, start, end, os.path.join(tmp, f"c{len(tasks)}.ids"),
                          path in wikitext, words))
    word_counts = {}
    chunk_vocabs = []
    with progress.bar(sum(t[2] - t[1] for t in tasks), "reading words") as shown:
        for task, (out_path, vocab, counts) in zip(tasks, pool.imap(_tokenize_chunk, tasks)):
            get = word_counts.get
            for w, c in zip(vocab, counts.tolist()):
                word_counts[w] = get(w, 0) + c
            vocab_path = out_path + ".vocab"
            with open(vocab_path, "w", encoding="utf-8") as f:
                f.write("\n".join(vocab))
            chunk_vocabs.append((out_path, vocab_path, len(vocab)))
            shown.update(task[2] - task[1])
    word_counts.pop("", None)
    return chunk_vocabs, word_counts


def _global_ids(chunk_vocabs, word_id, tmp):
    """The corpus as global ids (-1: line end or rare word), chunk by chunk, in
    ``tmp/corpus.i32``; the chunks' files are removed. Returns ``(path, [(start,
    end)] of each chunk)``."""
    corpus = os.path.join(tmp, "corpus.i32")
    bounds = []
    with open(corpus, "wb") as out:
        pos = 0
        for ids_path, vocab_path, nv in chunk_vocabs:
            with open(vocab_path, encoding="utf-8") as f:
                vocab = f.read().split("\n") if nv else []
            lut = np.fromiter((word_id.get(w, -1) for w in vocab), dtype=np.int32, count=nv)
            ids = np.fromfile(ids_path, dtype=np.int32)
            os.remove(ids_path)
            os.remove(vocab_path)
            g = lut[ids] if nv else ids
            g.tofile(out)
            bounds.append((pos, pos + len(g)))
            pos += len(g)
    return corpus, bounds


def _count_levels(pool, corpus, bounds, counting, parts, tmp):
    """Levels 2..max_n: ``{n: (sorted keys int64, counts int64)}`` of the n-grams seen
    ``min_count`` times; stops early at a level without any."""
    total = bounds[-1][1]
    levels = {}
    prev = None
    shown = progress.bar(counting.max_n - 1, "counting n-grams", unit="level")
    for n in range(2, counting.max_n + 1):
        shown.update(1)
        spills = [os.path.join(tmp, f"l{n}.c{i}") for i in range(len(bounds))]
        pool.map(_count_level, [(corpus, prev, s, e, n, parts, sp)
                                for (s, e), sp in zip(bounds, spills)])
        merged = pool.map(_merge_partition, [
            ([f"{sp}.p{k}" for sp in spills if os.path.exists(f"{sp}.p{k}.k.npy")],
             counting.min_count) for k in range(parts)])
        keys = np.concatenate([m[0] for m in merged])
        cnts = np.concatenate([m[1] for m in merged])
        order = np.argsort(keys)
        keys, cnts = keys[order], cnts[order]
        levels[n] = (keys, cnts)
        logger.info("level %d: %d n-grams with count >= %d", n, len(keys), counting.min_count)
        if n == counting.max_n or len(keys) == 0:
            break
        keys_path = os.path.join(tmp, f"keys{n}.npy")
        np.save(keys_path, keys)
        cur = os.path.join(tmp, f"ids{n}.i32")
        np.memmap(cur, dtype=np.int32, mode="w+", shape=(max(total, 1),)).flush()
        pool.map(_assign_ids, [(corpus, prev, cur, s, e, n, keys_path) for s, e in bounds])
        if prev:
            os.remove(prev)
        prev = cur
    shown.close()
    return levels


def _decoded(levels, frequent, counting):
    """``[(words, count)]`` of the ``levels``' keys, most frequent first (ties by text),
    as ``counting`` keeps them: n >= min_n, edge punctuation, top_k."""
    items = []
    # Decode keys into word-id matrices, level by level: [num_grams, n].
    mats = {1: np.arange(len(frequent), dtype=np.int64)[:, None]}
    is_punct = np.array([not _HAS_ALNUM.search(w) for w in frequent], dtype=bool)
    top_k = counting.top_k
    for n in sorted(levels):
        keys, cnts = levels[n]
        prefix = keys >> WORD_BITS
        last = keys & (MAX_WORDS - 1)
        mats[n] = np.concatenate([mats[n - 1][prefix], last[:, None]], axis=1)
        if n >= counting.min_n:
            order = np.argsort(-cnts, kind="stable")
            if not counting.edge_punct:
                ok = ~(is_punct[mats[n][order, 0]] | is_punct[mats[n][order, -1]])
                order = order[ok]
            if top_k is not None and len(order) > top_k:
                # keep ties at the cut: the final order breaks them by text
                order = order[cnts[order] >= cnts[order[top_k - 1]]]
            for row, c in zip(mats[n][order].tolist(), cnts[order].tolist()):
                items.append((tuple(frequent[i] for i in row), c))
    items.sort(key=lambda gc: (-gc[1], gc[0]))
    if top_k is not None:
        items = items[:top_k]
    return items


def cut_dictionary(src, dst, top_k):
    """Write the ``top_k`` most frequent entries of the dictionary ``src`` to ``dst``,
    its header kept with ``top_k`` set: the same file a count with ``top_k`` writes."""
    head = read_header(src)
    d = load_ngrams(src, top_k=top_k, words=head.get("words", "gpt2"))
    head["top_k"] = str(top_k)
    comment = " ".join(k if v is True else f"{k}={v}" for k, v in head.items())
    save_ngrams(dst, d.counts.items(), comment)
    return len(d)


class TaskRowsInCorpus(ValueError):
    """The corpus of a dictionary contains rows of a task it is checked against."""


TASK_ROW_POLICIES = ("error", "drop", "count")


def build_dictionary(paths, out_path, counting=NgramCounting(), *, wikitext=(), task_rows=(),
                     on_task_rows="error", **kw):
    """Count the n-grams ``counting`` (:class:`NgramCounting`) keeps in ``paths`` and
    write the dictionary file; returns CountResult. ``kw``: :func:`count_ngrams`'s
    workers, chunk_bytes, partitions, tmp_dir.

    task_rows: task files or folders the dictionary will serve. Corpus lines that are
    their sentences (:mod:`span_plugin.preprocess.segmentation.leakage`) raise
    :class:`TaskRowsInCorpus` before counting (``on_task_rows="error"``), are left out of
    the count (``"drop"``) or counted with a warning (``"count"``). The header records
    the corpus file names, the settings, how many task sentences were checked and how
    many corpus lines were dropped."""
    from span_plugin.preprocess.segmentation.leakage import task_fingerprints, task_row_hits

    if on_task_rows not in TASK_ROW_POLICIES:
        raise ValueError(f"on_task_rows={on_task_rows!r}: expected one of {TASK_ROW_POLICIES}")
    names = [os.path.basename(str(p)) for p in paths]
    checked = dropped = 0
    keep = tempfile.mkdtemp(prefix="span_ngrams_kept_", dir=kw.get("tmp_dir"))
    try:
        if task_rows:
            prints, n_files = task_fingerprints(task_rows)
            checked = len(prints)
            hits, examples, kept = task_row_hits(
                paths, prints, keep_dir=keep if on_task_rows == "drop" else None)
            if hits:
                shown = "; ".join(f"{p}:{n}: {t!r}" for p, n, t in examples)
                msg = (f"{hits} corpus lines are sentences of the task files checked "
                       f"({n_files} files, {checked} sentences), e.g. {shown}")
                if on_task_rows == "error":
                    raise TaskRowsInCorpus(
                        msg + ". A dictionary counted on a task's rows segments them unlike "
                        "unseen text: count a general corpus, or leave those lines out "
                        "(--on-task-rows drop)")
                logger.warning("%s: %s", msg, "left out of the count" if on_task_rows == "drop"
                               else "counted anyway (--on-task-rows count)")
                if on_task_rows == "drop":
                    if wikitext is not True:
                        wiki = {str(p) for p in wikitext}
                        wikitext = [q for p, q in zip(paths, kept) if str(p) in wiki]
                    paths, dropped = kept, hits
        res = _count_and_save(paths, out_path, names, checked if task_rows else None,
                              dropped, counting, wikitext, **kw)
    finally:
        shutil.rmtree(keep, ignore_errors=True)
    return res


def _count_and_save(paths, out_path, names, checked, dropped, counting, wikitext, **kw):
    res = count_ngrams(paths, counting, wikitext=wikitext, **kw)
    c = counting
    corpus = ",".join(quote(name, safe="") for name in names)
    comment = (f"words={c.words} n={c.min_n}..{c.max_n} min_count={c.min_count} "
               f"corpus={corpus} corpus_tokens={res.corpus_tokens}"
               + (f" task_rows_checked={checked}" if checked is not None else "")
               + (f" task_rows_dropped={dropped}" if dropped else "")
               + (f" top_k={c.top_k}" if c.top_k else "") + (" edge_punct" if c.edge_punct else ""))
    save_ngrams(out_path, res.items, comment)
    return res
