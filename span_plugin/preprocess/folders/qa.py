"""Extractive QA examples -> question + passage windows, binarized (``span-preprocess qa``):
each question and context tokenized once, the context cut into overlapping windows of
``<s> Q </s> </s> P </s>`` that fit ``max_positions``, answers mapped from character
offsets to tokens (never shifted). The folder's files and how unplaced answers are
counted: docs/QA.md, section "Module notes"."""

import json
import multiprocessing as mp
import os
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from span_plugin.files.atomic import atomic_file
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.formats.text_inputs import check_text
from span_plugin.formats.squad import QAExample, QANote, read_qa
from span_plugin.preprocess.binary import indexed, span_files
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.binary.binarize import _get_dict, _get_encoder, write_dict
from span_plugin.preprocess.folders.folder import builds_whole_folder

QA_DIR = "qa"
INDEX_DTYPE = np.int32
SPECIALS = 4  # <s> Q </s> </s> P </s>: besides question and passage tokens
NOTES_FILE = "input_notes.tsv"  # answers left out of training, reused ids, MRQA texts


@dataclass
class EncodedQuestion:
    """One question encoded for the model.

    question: symbols ``[Q]``; question_spans: n-gram spans over them.
    context: symbols ``[C]``; context_spans: n-gram spans; offsets ``[C]`` of
    ``(char start, char end)`` in the context.
    answers: ``[(first token, last token + 1)]`` of each placed gold answer.
    inexact: answers whose tokens cover characters outside the answer.
    unplaced: ``[(text, char start, why)]`` answers that cover no token (``strict=False``).
    """

    question: list
    question_spans: list
    context: list
    context_spans: list
    offsets: list
    answers: list = field(default_factory=list)
    inexact: int = 0
    unplaced: list = field(default_factory=list)


def encode_context(encoder, context):
    """``(tokens, n-gram spans, character offsets)`` of a context.

    encoder: a :class:`~span_plugin.preprocess.segmentation.encoding.SpanTokenizer`.
    """
    lead = len(context) - len(context.lstrip())  # the encoder strips the line
    tokens, spans = encoder.encode(context)
    same, offsets = encoder.tokenizer.tokens_with_offsets(context.strip())
    if same != tokens:
        raise ValueError(f"{type(encoder.tokenizer).__name__}: offsets and tokens disagree "
                         f"on the context {context[:60]!r}")
    return tokens, spans, [(s + lead, e + lead) for s, e in offsets]


def encode_question(encoder, question, context, answers=(), encoded_context=None,
                    strict=True):
    """Tokens, spans and offsets of a (question, context) pair.

    answers: ``[(text, char start)]``; encoded_context: :func:`encode_context` of the
    context when already made. An answer that covers no token raises ValueError, or
    with ``strict=False`` is listed in ``unplaced`` (never moved to a token near it).
    """
    q_tokens, q_spans = encoder.encode(question)
    c_tokens, c_spans, offsets = encoded_context or encode_context(encoder, context)
    out = EncodedQuestion(q_tokens, q_spans, c_tokens, c_spans, offsets)
    ends = np.array([e for _, e in offsets], dtype=np.int64)
    starts = np.array([s for s, _ in offsets], dtype=np.int64)
    for text, start in answers:
        end = start + len(text)
        first = int(np.searchsorted(ends, start, side="right"))  # first token ending after start
        last = int(np.searchsorted(starts, end, side="left"))     # tokens starting before end
        if first >= last:
            why = f"answer {text!r} at character {start} covers no token of the context"
            if strict:
                raise ValueError(why)
            out.unplaced.append((text, start, why))
            continue
        out.answers.append((first, last))
        out.inexact += offsets[first][0] != start or offsets[last - 1][1] != end
    return out


def passage_windows(context_tokens, question_tokens, max_positions, doc_stride):
    """``[(a, b)]``: the context token ranges of the windows of one question.

    Each window holds at most ``max_positions - question_tokens - 4`` tokens; the next
    one starts ``doc_stride`` tokens before the previous one ends. An empty context
    gives one empty window. Raises ValueError when the question leaves no room.
    """
    budget = max_positions - question_tokens - SPECIALS
    if budget <= doc_stride:
        raise ValueError(
            f"the question has {question_tokens} tokens: with --max-positions "
            f"{max_positions} and --doc-stride {doc_stride} a window has room for "
            f"{max(budget, 0)} passage tokens, not more than the {doc_stride} it overlaps; "
            f"questions may have at most {max_positions - SPECIALS - doc_stride - 1} tokens")
    windows, a = [], 0
    while True:
        b = min(a + budget, context_tokens)
        windows.append((a, b))
        if b >= context_tokens:
            return windows
        a = b - doc_stride


def spans_in_window(spans, a, b):
    """Spans ``[(s, e)]`` over the context -> those inside window ``[a, b)``, clipped to
    it and counted from its start (they still tile the window when they tiled the
    context)."""
    return [(max(s, a) - a, min(e, b) - a) for s, e in spans if s < b and e > a]


def window_answer(answer, a, b):
    """The gold ``(start, end)`` in window ``[a, b)``'s own tokens, or None when the
    answer is not wholly inside it."""
    if answer is None or answer[0] < a or answer[1] > b:
        return None
    return answer[0] - a, answer[1] - a


@dataclass
class QASummary:
    questions: int = 0
    windows: int = 0
    answerable: int = 0
    impossible: int = 0
    answers_outside_windows: int = 0  # windows of answerable questions without the answer
    inexact_answers: int = 0
    unknown_tokens: int = 0
    dropped: int = 0
    longest_question: int = 0
    unplaced_answers: int = 0  # answers left out of training (listed in input_notes.tsv)
    duplicate_ids: int = 0  # reuses of a question id (every occurrence kept)
    mrqa_text_disagreements: int = 0  # MRQA texts that differ from what their span reads

    def as_dict(self):
        return dict(self.__dict__)


class _SplitWriter:
    """The indexed files of one split, written window by window."""

    def __init__(self, out_dir, split, dict_path):
        self.vocab = _get_dict(str(dict_path))
        dtype = indexed.token_dtype(len(self.vocab))
        self.writers = []

        def writer(*parts, dtype=INDEX_DTYPE, spans=False):
            prefix = os.path.join(out_dir, *parts)
            os.makedirs(os.path.dirname(prefix), exist_ok=True)
            w = span_files.SpanIndexWriter(prefix) if spans else indexed.IndexedWriter(prefix, dtype)
            self.writers.append(w)
            return w

        self.q_tokens = writer("input0", split, dtype=dtype)
        self.q_spans = writer("input0", split + ".spans", spans=True)
        self.p_tokens = writer("input1", split, dtype=dtype)
        self.p_spans = writer("input1", split + ".spans", spans=True)
        self.window = writer(QA_DIR, split + ".window")
        self.offsets = writer(QA_DIR, split + ".offsets")
        self.answer = writer(QA_DIR, split + ".answer")

    def ids(self, symbols):
        ids = self.vocab.encode(symbols, append_eos=True)
        return np.asarray(ids, dtype=self.q_tokens.dtype), ids.count(self.vocab.unk())

    def close(self, ok=True):
        for w in self.writers:
            if not ok:
                w.abort()
            elif isinstance(w, span_files.SpanIndexWriter):
                w.close()
            else:
                w.finalize()


CHUNK_QUESTIONS = 64  # questions a worker encodes at a time


def _encode_examples(encoder, examples, strict):
    """``[EncodedQuestion or the ValueError's message]`` of ``examples``, in order (each
    context is encoded once for its consecutive questions)."""
    out, last = [], (None, None)
    for ex in examples:
        try:
            if last[0] != ex.context:
                last = (ex.context, encode_context(encoder, ex.context))
            out.append(encode_question(encoder, ex.question, ex.context, ex.answers, last[1],
                                       strict=strict))
        except ValueError as err:
            out.append(str(err))
    return out


def _encode_chunk(task):
    """Worker: :func:`_encode_examples` with the encoder of ``spec`` (built by the parent
    before the fork, :func:`~span_plugin.preprocess.binary.binarize._get_encoder`)."""
    spec, examples, strict = task
    return _encode_examples(_get_encoder(spec), examples, strict)


def encoded_questions(encoder, examples, strict, spec=None, workers=1):
    """:func:`_encode_examples` of ``examples``, yielded one at a time in order; with
    ``workers > 1`` (and the encoder's ``spec``) by that many forked processes, in chunks
    of :data:`CHUNK_QUESTIONS` questions: the same results, since each question is
    encoded on its own."""
    chunks = [examples[k:k + CHUNK_QUESTIONS] for k in range(0, len(examples), CHUNK_QUESTIONS)]
    if workers <= 1 or spec is None or len(chunks) <= 1:
        for chunk in chunks:
            yield from _encode_examples(encoder, chunk, strict)
        return
    with mp.get_context("fork").Pool(min(workers, len(chunks))) as pool:
        for done in pool.imap(_encode_chunk, [(spec, chunk, strict) for chunk in chunks]):
            yield from done


@dataclass(frozen=True)
class QASettings:
    """How questions become windows: tokens per window (``max_positions``), tokens two
    consecutive windows share (``doc_stride``), and what a question or answer that
    cannot be placed does (``on_bad``: "error" or "skip")."""

    max_positions: int = 384
    doc_stride: int = 128
    on_bad: str = "error"


def write_split(out_dir, split, examples, encoder, options, settings, dropped=None,
                notes=None):
    """Encode and write one split's windows; returns ``(QASummary, kept examples)``.

    examples: :class:`~span_plugin.formats.squad.QAExample` list; options:
    :class:`~span_plugin.preprocess.folders.options.FolderOptions` (its spec, dict_path
    and workers); settings: :class:`QASettings`. dropped: a list the skipped questions
    are appended to as ``(where, id, reason)`` under ``on_bad="skip"``; notes: a list the
    answers left out of training (they cover no token) are appended to as
    :class:`~span_plugin.formats.squad.QANote`. Such an answer moves to the example's
    ``unplaced`` (scored, not trained on); a question left without answers is skipped.
    With ``options.workers > 1`` questions are tokenized in that many processes
    (:func:`encoded_questions`); the folder is the same.
    """
    summary, kept = QASummary(), []
    notes = [] if notes is None else notes
    on_bad = settings.on_bad
    out = _SplitWriter(out_dir, split, options.dict_path)
    ok = False
    try:
        for ex, enc in zip(examples, encoded_questions(encoder, examples, on_bad != "skip",
                                                       options.spec, options.workers)):
            try:
                if isinstance(enc, str):
                    raise ValueError(enc)
                if enc.unplaced:
                    ex = _without_unplaced(ex, enc.unplaced, notes)
                windows = passage_windows(len(enc.context), len(enc.question),
                                          settings.max_positions, settings.doc_stride)
            except ValueError as err:
                if on_bad != "skip":
                    raise BadInputError(f"{ex.where}: question {ex.id!r}: {err}") from None
                dropped.append((ex.where, ex.id, str(err)))
                summary.dropped += 1
                continue
            q_ids, unk = out.ids(enc.question)
            summary.unknown_tokens += unk
            gold = enc.answers[0] if enc.answers else None
            for a, b in windows:
                p_ids, unk = out.ids(enc.context[a:b])
                summary.unknown_tokens += unk
                out.q_tokens.add(q_ids)
                out.q_spans.add(enc.question_spans)
                out.p_tokens.add(p_ids)
                out.p_spans.add(spans_in_window(enc.context_spans, a, b))
                out.window.add(np.array([len(kept), a], dtype=INDEX_DTYPE))
                out.offsets.add(np.asarray(enc.offsets[a:b], dtype=INDEX_DTYPE).reshape(-1))
                answer = window_answer(gold, a, b)
                out.answer.add(np.asarray(answer or (), dtype=INDEX_DTYPE))
                summary.answers_outside_windows += gold is not None and answer is None
            summary.windows += len(windows)
            summary.questions += 1
            summary.answerable += not ex.impossible
            summary.impossible += ex.impossible
            summary.inexact_answers += enc.inexact
            summary.unplaced_answers += len(enc.unplaced)
            summary.longest_question = max(summary.longest_question, len(enc.question))
            kept.append(ex)
        ok = True
    finally:
        out.close(ok)
    return summary, kept


def _without_unplaced(ex, unplaced, notes):
    """``ex`` with the answers that cover no token moved to its ``unplaced``, each
    noted; ValueError when no answer of an answerable question is left."""
    gone = {(text, start) for text, start, _ in unplaced}
    kept = [a for a in ex.answers if a not in gone]
    if not kept and not ex.impossible:
        raise ValueError(f"no answer can be placed ({unplaced[0][2]})")
    for text, start, why in unplaced:
        notes.append(QANote("unplaced answer", ex.where, ex.id,
                            f"{why}; left out of training, kept for scoring"))
    return replace(ex, answers=kept, unplaced=ex.unplaced + [(t, s) for t, s, _ in unplaced])


def write_records(path, examples):
    """``raw/{split}.jsonl``: the examples the windows point at, in order."""
    with atomic_file(path, text=True) as f:
        for ex in examples:
            f.write(json.dumps({"id": ex.id, "question": ex.question, "context": ex.context,
                                "answers": [list(a) for a in ex.answers],
                                "impossible": ex.impossible, "title": ex.title,
                                "accepted": list(ex.accepted),
                                "unplaced": [list(a) for a in ex.unplaced]},
                               ensure_ascii=False) + "\n")


def read_records(path):
    """The questions of ``raw/{split}.jsonl`` as :class:`QAExample`, in order."""
    out = []
    for n, line in enumerate(read_file_lines(path), 1):
        r = json.loads(line)
        for key in ("question", "context"):  # a folder made before NULs were refused
            check_text(r[key], f"{path}:{n}: the {key}")
        out.append(QAExample(id=r["id"], question=r["question"], context=r["context"],
                             answers=[tuple(a) for a in r["answers"]],
                             impossible=r["impossible"], where=f"{path}:{n}",
                             title=r.get("title", ""), accepted=r.get("accepted", []),
                             unplaced=[tuple(a) for a in r.get("unplaced", [])]))
    return out


@builds_whole_folder  # written whole or not at all (preprocess/folders/folder.py)
def prepare_qa(out_dir, files, options, settings=QASettings()):
    """Write the QA folder of ``files`` ({split: SQuAD JSON or MRQA JSON Lines path},
    train first) with ``options``
    (:class:`~span_plugin.preprocess.folders.options.FolderOptions`: tokenizing in its
    ``workers`` processes; task name None: ``qa``) and ``settings``
    (:class:`QASettings`). Returns ``{split: QASummary}``."""
    on_bad, spec, dict_path = settings.on_bad, options.spec, options.dict_path
    max_positions, doc_stride = settings.max_positions, settings.doc_stride
    if on_bad not in ("error", "skip"):
        raise ValueError(f"on_bad must be 'error' or 'skip', got {on_bad!r}")
    encoder = _get_encoder(spec)
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)
    summaries, versions, dropped, noted = {}, {}, [], []
    for split, path in files.items():
        data = read_qa(path, on_bad=on_bad)
        dropped += [(split, path, where, qid, why) for where, qid, why in data.dropped]
        versions[split] = data.version
        if not data.examples:
            raise BadInputError(f"{path}: no question left to write for split {split}")
        skipped, notes = [], list(data.notes)
        summary, kept = write_split(out_dir, split, data.examples, encoder, options,
                                    settings, skipped, notes)
        dropped += [(split, path, where, qid, why) for where, qid, why in skipped]
        if not kept and skipped:  # 0 windows would pass `check` and train on nothing
            why = Counter(why for _, _, why in skipped).most_common(1)[0][0]
            raise BadInputError(
                f"{path}: no question of split {split} fits a window of --max-positions "
                f"{max_positions} (--doc-stride {doc_stride}): all {len(skipped)} were left "
                f"out, e.g. {why}")
        noted += [(split, path, n.kind, n.where, n.id, n.message) for n in notes]
        summary.dropped += len(data.dropped)
        counts = data.note_counts()
        summary.unplaced_answers += counts["unplaced answer"]
        summary.duplicate_ids = counts["duplicate id"]
        summary.mrqa_text_disagreements = counts["mrqa text"]
        write_records(os.path.join(out_dir, "raw", f"{split}.jsonl"), kept)
        summaries[split] = summary
    _write_tsv(os.path.join(out_dir, "dropped_rows.tsv"),
               ("split", "file", "where", "id", "reason"), dropped)
    _write_tsv(os.path.join(out_dir, NOTES_FILE),
               ("split", "file", "kind", "where", "id", "message"), noted)
    for k in (0, 1):
        write_dict(dict_path, os.path.join(out_dir, f"input{k}"))
    labels = {"kind": "qa", "max_positions": max_positions, "doc_stride": doc_stride,
              "versions": versions, "stats": {s: v.as_dict() for s, v in summaries.items()}}
    provenance.write_record(out_dir, provenance.RecordFields(
        command=options.record_command(), task=options.name or "qa", inputs=2,
        encoder=provenance.encoder_record(spec, dict_path), labels=labels,
        source={split: provenance.file_entry(path) for split, path in files.items()},
        rows={s: v.questions for s, v in summaries.items()}))
    return summaries


def _write_tsv(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in [header, *rows]:
            f.write("\t".join(str(x).replace("\t", " ").replace("\n", " ") for x in row) + "\n")

