"""CoNLL files -> a binarized tagging folder (``span-preprocess conll``,
:func:`prepare_conll`): words, IOB2 tags (one per word, on its first sub-token), word
boundaries and n-gram spans, written whole or not at all. The folder's files, unseen
entity types and long sentences: docs/NER.md, section "Module notes"."""

import glob
import logging
import os
from dataclasses import dataclass, replace

import numpy as np

from span_plugin.formats import tags as T
from span_plugin.formats.conll import read_conll
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.preprocess.binary import indexed, span_files
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.binary.binarize import _get_encoder, binarize_file, write_dict
from span_plugin.preprocess.folders.folder import folder_name, whole_folder

logger = logging.getLogger(__name__)

WORDS_DIR, LABEL_DIR = "words", "label"
TAGS_FILE = "tags.txt"
LABEL_DTYPE = np.int32
UNKNOWN_TYPES = ("map-to-o", "error", "skip")


def word_token_counts(encoder, words, path, first_line=None):
    """Tokens of each word as the encoder cuts the sentence ``" ".join(words)``.

    Words are encoded one at a time (GPT-2 with the leading space it has inside the
    sentence); every encoder here cuts a space-joined line into the concatenation of
    its words' pieces, which :func:`prepare_conll` checks against the binarized line.
    path, first_line: the file and the line of ``words[0]``; a CoNLL file holds one word
    a line, so word k is on line ``first_line + k``, the line an error names (None:
    words not read from a file, e.g. the hub's input; the error names ``path``).
    """
    counts = []
    for i, word in enumerate(words):
        tokens, _, _ = encoder.tokenizer.pieces(word if i == 0 else " " + word)
        if not tokens:
            where = path if first_line is None else f"{path}:{first_line + i}"
            raise BadInputError(f"{where}: word {i + 1} of the sentence "
                                f"({word!r}) gives no tokens with the "
                                f"{type(encoder.tokenizer).__name__}; remove or replace it")
        counts.append(len(tokens))
    return counts


def split_points(counts, tags, max_tokens, first_count=None):
    """Word indices where a sentence is cut so that every part has at most
    ``max_tokens`` tokens: each part as long as fits, cut before a word that does not
    continue an entity when the part has one. Returns ``[0, ..., len(counts)]``.

    counts: tokens of each word inside the sentence; first_count(k): tokens of word k
    when it begins a part (GPT-2 cuts a word without its leading space differently).
    """
    bounds, start = [0], 0
    n = len(counts)
    while start < n:
        size = counts[start] if start == 0 or first_count is None else first_count(start)
        if size > max_tokens:
            err = BadInputError(f"word {start + 1} alone has {size} tokens, more than "
                                f"--max-tokens {max_tokens}")
            err.word = start  # for the caller's line number
            raise err
        total, end = size, start + 1
        while end < n and total + counts[end] <= max_tokens:
            total += counts[end]
            end += 1
        if end < n:
            clean = [k for k in range(start + 1, end + 1) if not tags[k].startswith("I-")]
            end = clean[-1] if clean else end
        bounds.append(end)
        start = end
    return bounds


def _item_lengths(prefix):
    """Own token count of each item of a token file (its appended </s> removed); a
    copy, since the dataset's sizes live in a mapping closed with it."""
    return _sizes(prefix) - 1


def _sizes(prefix):
    dataset = indexed.IndexedReader(prefix)  # alive while its sizes are copied
    return np.array(dataset.sizes, dtype=np.int64)


def _write_items(prefix, items):
    with indexed.IndexedWriter(prefix, LABEL_DTYPE) as w:
        for item in items:
            w.add(np.asarray(item, dtype=LABEL_DTYPE))


def _types_of(split):
    return {t[2:] for x in split.sentences for t in x.tags if t != T.OUTSIDE}


def restrict_to_train_types(read, files, unknown_labels="map-to-o"):
    """The entity types of ``read`` ({split: ConllSplit}) that train has, sorted; the
    other splits' entities of any other type handled by ``unknown_labels`` (module
    docstring), in place. Returns ``(types, {split: {type: entities}},
    {split: [(line, reason)] of sentences left out})``."""
    if unknown_labels not in UNKNOWN_TYPES:
        raise ValueError(f"unknown_labels {unknown_labels!r}: expected one of {UNKNOWN_TYPES}")
    if "train" not in read:
        types = sorted(set().union(*map(_types_of, read.values())))
        logger.warning("no train split: entity types taken from %s: %s", list(read), types)
        return types, {split: {} for split in read}, {split: [] for split in read}
    types = sorted(_types_of(read["train"]))
    known = set(types)
    unseen, dropped = {"train": {}}, {"train": []}
    for split, parsed in read.items():
        if split == "train":
            continue
        path, counts, kept, left = files[split], {}, [], []
        for s in parsed.sentences:
            other = [e for e in T.entities(s.tags) if e[2] not in known]
            for _, _, kind in other:
                counts[kind] = counts.get(kind, 0) + 1
            if not other:
                kept.append(s)
            elif unknown_labels == "error":
                start, _, kind = other[0]
                # one word a line: word k of the sentence is on line s.line + k
                raise BadInputError(
                    f"{path}:{s.line + start}: entity type {kind!r} ({s.tags[start]} "
                    f"{s.words[start]!r}) is not a type of the training split ({files['train']} "
                    f"has {types}); pass --unknown-labels map-to-o to read its tags as O, "
                    f"or skip to leave such sentences out")
            elif unknown_labels == "skip":
                kinds = sorted({k for _, _, k in other})
                left.append((s.line, f"entity type(s) {kinds} not in the training split's "
                                     f"types {types}"))
            else:
                s.tags = [t if t == T.OUTSIDE or t[2:] in known else T.OUTSIDE for t in s.tags]
                kept.append(s)
        parsed.sentences = kept
        unseen[split] = dict(sorted(counts.items()))
        dropped[split] = left
        if counts:
            what = {"map-to-o": "their tags read as O",
                    "skip": f"{len(left)} sentences with them left out (dropped_rows.tsv)"}
            logger.warning("%s: entity types the training split does not have: %s; %s", path,
                           ", ".join(f"{k} ({n} entities)" for k, n in unseen[split].items()),
                           what[unknown_labels])
    return types, unseen, dropped


def same_columns(read, files):
    """Every file has the training file's number of columns (the first file's without
    train). The tag is the last column, so a file without the tag column would give
    another column's values as tags (CoNLL-2003's chunk tags: NP, VP, ...)."""
    ref = "train" if "train" in read else next(iter(read))
    want = read[ref].columns
    for split, parsed in read.items():
        if parsed.columns != want:
            raise BadInputError(
                f"{files[split]}: {parsed.columns} columns on every word line, but the "
                f"{ref} file {files[ref]} has {want}: the tag is the last column, so one of "
                f"them would read another column as tags; give files of the same layout "
                f"(word ... tag)")


def entity_counts(parsed):
    """``{entity type: entities}`` of a :class:`~span_plugin.formats.conll.ConllSplit`,
    as read (before types train lacks are handled), sorted by type."""
    counts = {}
    for s in parsed.sentences:
        for _, _, kind in T.entities(s.tags):
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


# Phrase types of CoNLL-2000 chunking (CoNLL-2003's third column): entity types that
# are all of these say that the file has no entity tag column.
CHUNK_TYPES = {"NP", "VP", "PP", "ADJP", "ADVP", "SBAR", "PRT", "CONJP", "INTJ", "LST", "UCP"}


def warn_chunk_types(found, files):
    for split, counts in found.items():
        if counts and set(counts) <= CHUNK_TYPES:
            logger.warning("%s: the entity types found (%s) are chunk types: is the tag "
                           "column missing, so that the chunk column is read as tags?",
                           files[split], ", ".join(counts))


def prepare_conll(out_dir, files, options, *, scheme="iob2", bad_tags="repair",
                  max_tokens=510):
    """Write the tagging folder of ``files`` ({split: path}, train first).

    options: :class:`~span_plugin.preprocess.folders.options.FolderOptions`; its
    unknown_labels (None: "map-to-o") handles entity types train does not have (module
    docstring). max_tokens: most tokens per item, without the specials the task adds (a
    model with 512 positions and ``<s> ... </s>``: 510). Returns ``({split: items
    written}, {split: stats})``.
    """
    encoder = _get_encoder(options.spec)  # built once per process, shared with binarize_file
    read = {split: read_conll(path, scheme, bad_tags, options.bad_utf8)
            for split, path in files.items()}
    same_columns(read, files)
    n_sentences = {split: len(parsed.sentences) for split, parsed in read.items()}
    found = {split: entity_counts(parsed) for split, parsed in read.items()}
    warn_chunk_types(found, files)
    unknown_labels = options.unknown_labels or "map-to-o"
    types, unseen, dropped = restrict_to_train_types(read, files, unknown_labels)
    conll = _ConllSplits(files, read, types, unseen, dropped, found, n_sentences)
    options = replace(options, name=options.name or folder_name(out_dir))
    with whole_folder(out_dir) as tmp:  # whole or absent
        return _write_conll_folder(tmp, conll, options, encoder, scheme=scheme,
                                   bad_tags=bad_tags, max_tokens=max_tokens,
                                   unknown_labels=unknown_labels)


@dataclass
class _ConllSplits:
    """The splits :func:`prepare_conll` read and checked, with what the record says of
    them (each a dict by split)."""

    files: dict  # the source paths
    read: dict  # ConllSplit, entity types train lacks already handled
    types: list  # the entity types kept, sorted
    unseen: dict  # {type: entities} of the types train lacks
    dropped: dict  # [(line, reason)] of the sentences left out
    found: dict  # {type: entities} as read
    n_sentences: dict  # sentences read


def _write_conll_folder(out_dir, conll, options, encoder, *, scheme, bad_tags, max_tokens,
                        unknown_labels):
    """The files of :func:`prepare_conll`, written into ``out_dir`` (a temporary folder
    that takes the folder's place at the end)."""
    names = T.tag_names(conll.types)
    tag_id = {t: i for i, t in enumerate(names)}
    for d in ("raw", WORDS_DIR, LABEL_DIR):
        os.makedirs(os.path.join(out_dir, d), exist_ok=True)
    counts, stats = {}, {}
    for split, parsed in conll.read.items():
        items, splits_made = _items(encoder, parsed.sentences, conll.files[split], max_tokens)
        _write_split(out_dir, split, items, conll.files[split], options, tag_id)
        counts[split] = len(items)
        stats[split] = {"sentences": conll.n_sentences[split], "items": len(items),
                        "split_sentences": splits_made, "documents": parsed.documents,
                        "empty_documents": parsed.empty_documents,
                        "repaired_tags": parsed.repairs, "columns": parsed.columns,
                        "entity_types": conll.found[split], "unseen_types": conll.unseen[split],
                        "dropped_sentences": len(conll.dropped[split]),
                        "utf8_replacements": parsed.replacements}
    with open(os.path.join(out_dir, "dropped_rows.tsv"), "w", encoding="utf-8") as f:
        f.write("split\tfile\tline\treason\n")
        for split, left in conll.dropped.items():
            f.writelines(f"{split}\t{conll.files[split]}\t{line}\t{why}\n" for line, why in left)
    write_dict(options.dict_path, os.path.join(out_dir, "input0"))
    with open(os.path.join(out_dir, LABEL_DIR, TAGS_FILE), "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in names)
    labels = {"kind": "tags", "scheme": "iob2", "input_scheme": scheme, "bad_tags": bad_tags,
              "names": names, "types": conll.types, "positive": None, "max_tokens": max_tokens,
              "unknown_labels": unknown_labels, "stats": stats}
    provenance.write_record(out_dir, provenance.RecordFields(
        command=options.record_command(), task=options.name, inputs=1,
        encoder=provenance.encoder_record(options.spec, options.dict_path), labels=labels,
        source={split: provenance.file_entry(path) for split, path in conll.files.items()},
        rows=counts,
        bad_utf8=provenance.utf8_entry(options.bad_utf8, {split: parsed.replacements
                                                          for split, parsed in conll.read.items()})))
    return counts, stats


def _items(encoder, sentences, path, max_tokens):
    """``([(words, tags, token counts, source line)], sentences cut)``: the items of
    one split's sentences, those longer than ``max_tokens`` cut between words."""
    items = []
    splits_made = 0
    for s in sentences:
        tok = word_token_counts(encoder, s.words, path, s.line)
        if sum(tok) <= max_tokens:
            items.append((s.words, s.tags, tok, s.line))
            continue

        def first_count(k, words=s.words, line=s.line):
            return word_token_counts(encoder, [words[k]], path, line + k)[0]

        try:
            bounds = split_points(tok, s.tags, max_tokens, first_count)
        except BadInputError as err:
            # one word a line: word k of the sentence is on line s.line + k
            raise BadInputError(f"{path}:{s.line + getattr(err, 'word', 0)}: "
                                f"{err}") from None
        splits_made += len(bounds) - 2
        for a, b in zip(bounds[:-1], bounds[1:]):
            part_tags, part_tok = list(s.tags[a:b]), list(tok[a:b])
            if part_tags[0].startswith("I-"):  # a cut inside an entity
                part_tags[0] = "B-" + part_tags[0][2:]
            if a > 0:
                part_tok[0] = first_count(a)
            # one word a line in CoNLL files: word a is on line s.line + a
            items.append((s.words[a:b], part_tags, part_tok, s.line + a))
    return items, splits_made


def _write_split(out_dir, split, items, path, options, tag_id):
    """One split's raw text, tokens, word boundaries and tag ids; ``path``: its source,
    named when its words and its tokens disagree."""
    raw_dir = os.path.join(out_dir, "raw")
    with open(os.path.join(raw_dir, f"{split}.input0"), "w", encoding="utf-8") as f:
        f.writelines(" ".join(w) + "\n" for w, _, _, _ in items)
    with open(os.path.join(raw_dir, f"{split}.label"), "w", encoding="utf-8") as f:
        f.writelines(" ".join(t) + "\n" for _, t, _, _ in items)
    with open(os.path.join(raw_dir, f"{split}.source"), "w", encoding="utf-8") as f:
        f.writelines(f"{line} {len(w)}\n" for w, _, _, line in items)
    prefix = os.path.join(out_dir, "input0", split)
    binarize_file(os.path.join(raw_dir, f"{split}.input0"), prefix, options.spec,
                  options.dict_path, workers=options.workers, bad_utf8="error")
    lengths = _item_lengths(prefix)
    with span_files.SpanIndexWriter(os.path.join(out_dir, WORDS_DIR, split)) as w:
        for i, (_, _, tok, line) in enumerate(items):
            if sum(tok) != lengths[i]:
                raise BadInputError(
                    f"{path}:{line}: the words give {sum(tok)} tokens one by one but "
                    f"{lengths[i]} as a sentence (item {i + 1} of {split}); "
                    f"this encoder does not cut space-joined words apart")
            ends = np.cumsum(tok)
            w.add(zip((ends - tok).tolist(), ends.tolist()))
    _write_items(os.path.join(out_dir, LABEL_DIR, split),
                 ([tag_id[t] for t in tags] for _, tags, _, _ in items))


def read_tag_names(folder):
    """The tag inventory of a tagging folder (``label/tags.txt``), id order."""
    return [line.strip() for line in read_file_lines(os.path.join(folder, LABEL_DIR, TAGS_FILE))
            if line.strip()]


def is_tagging_folder(folder):
    return os.path.exists(os.path.join(folder, LABEL_DIR, TAGS_FILE))


def check_tagging_folder(folder):
    """The checks a tagging folder adds to ``span-preprocess check``: word boundaries
    tile each item's tokens, one tag id per word, every id in ``label/tags.txt``.
    Returns report lines; raises BadInputError naming the file and 1-based line.
    """
    names = read_tag_names(folder)
    report = []
    for idx in sorted(glob.glob(os.path.join(folder, "input0", "*.idx"))):
        split = os.path.basename(idx)[:-len(".idx")]
        if "." in split:
            continue  # span files
        lengths = _item_lengths(os.path.join(folder, "input0", split))
        wprefix = os.path.join(folder, WORDS_DIR, split)
        words = span_files.read_spans(wprefix)
        try:
            span_files.check_alignment(wprefix, words, lengths)
        except span_files.SpanAlignmentError as err:
            raise BadInputError(str(err)) from None
        wsizes = np.asarray(words.sizes) // 2
        flat = np.fromfile(indexed.data_file_path(wprefix), dtype=span_files.SPAN_DTYPE)
        # Sorted, non-overlapping and inside the item (checked above): they tile the
        # item's tokens iff their widths add up to its length.
        owner = np.repeat(np.arange(len(wsizes)), wsizes)
        covered = np.bincount(owner, weights=flat[1::2] - flat[0::2], minlength=len(wsizes))
        bad = np.flatnonzero(covered != lengths)
        if bad.size:
            i = int(bad[0])
            raise BadInputError(f"{indexed.data_file_path(wprefix)}: line {i + 1}: its "
                                f"words cover {int(covered[i])} of {lengths[i]} tokens; "
                                f"rebuild the folder")
        lprefix = os.path.join(folder, LABEL_DIR, split)
        lsizes = _sizes(lprefix)
        bad = np.flatnonzero(lsizes != wsizes)
        if bad.size:
            i = int(bad[0])
            raise BadInputError(f"{indexed.data_file_path(lprefix)}: line {i + 1} has "
                                f"{lsizes[i]} tags for {wsizes[i]} words")
        ids = np.fromfile(indexed.data_file_path(lprefix), dtype=LABEL_DTYPE)
        if ids.size and (ids.min() < 0 or ids.max() >= len(names)):
            raise BadInputError(f"{indexed.data_file_path(lprefix)}: tag ids outside "
                                f"label/{TAGS_FILE} ({len(names)} tags)")
        report.append(f"{wprefix}: {int(wsizes.sum())} words, tags ok")
    return report
