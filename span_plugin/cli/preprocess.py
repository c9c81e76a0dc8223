"""``span-preprocess``: thin command line over span_plugin.preprocess (docs/PREPROCESS.md).

Subcommands: ngrams, glue, table, pairs, align-pairs, conll, binarize, pretrain, check, stats,
encode.
"""

import argparse
import logging
import os
import shlex
import sys

from span_plugin.formats.lines import regular_file
from span_plugin.formats.flag_values import (at_least_zero, count, finite, one_character, positive,
                                             whole_number)
from span_plugin.preprocess import SEGMENTATIONS, BPE_KINDS
from span_plugin.preprocess.segmentation.segmentations import segmentation_options
from span_plugin.tokenizers import TOKENIZERS, file_options, tokenizer_kind
from span_plugin.tokenizers.options import add_arguments
from span_plugin.tokenizers.words import WORD_SCHEMES

logger = logging.getLogger("span-preprocess")

# The shortest QA window: 4 special tokens, a question of one token, and two passage
# tokens with --doc-stride 1 (the next window must start past the last one's start).
MIN_WINDOW = 7


def _add_encoder_args(p):
    g = p.add_argument_group("encoder (all paths are local; nothing is downloaded)")
    g.add_argument("--bpe", choices=BPE_KINDS, default="gpt2")
    add_arguments(g, file_options().values())  # each tokenizer's files (--gpt2-encoder-json, ...)
    g.add_argument("--srcdict",
                   help="fairseq dict.txt of the BPE symbols (GPT-2: gpt2_bpe/dict.txt)")
    g.add_argument("--ngrams", help="n-gram dictionary (default: the packaged one)")
    g.add_argument("--ngrams-top-k", type=count, help="use only the K most frequent n-grams")
    g.add_argument("--segmentation", choices=SEGMENTATIONS, default="greedy",
                   help="; ".join(f"{name}: {kind.help}" for name, kind in SEGMENTATIONS.items()))
    g.add_argument("--seed", type=int, default=0, help="seed of --segmentation random")
    add_arguments(g, segmentation_options().values())  # each segmentation's (--nltk-data)
    g.add_argument("--workers", type=positive, default=os.cpu_count() or 1)
    g.add_argument("--bad-utf8", choices=("error", "replace"), default="error",
                   help="invalid UTF-8: stop naming file and line, or use U+FFFD")


def _add_word_scheme(p, what):
    """--words, its help naming the tokenizer kinds of each scheme: ``what`` the encoder
    that will read the file does with it."""
    kinds = {scheme: [] for scheme in WORD_SCHEMES}
    for name, cls in TOKENIZERS.items():
        kinds.setdefault(cls.word_scheme, []).append(name)
    p.add_argument("--words", choices=WORD_SCHEMES, default="gpt2",
                   help=f"word scheme of the encoder that will {what}: "
                   + "; ".join(f"{scheme} (--bpe {' or '.join(names)})"
                               for scheme, names in kinds.items() if names))


def _add_split_files(p, kind="", test="test file (its labels, if any, are not read)",
                     name=None):
    """The task folder to write, its name in the record (default ``name``, else the
    folder's) and the split files (``kind``: their format, said in the help)."""
    p.add_argument("--out", required=True, help="task folder to write")
    p.add_argument("--name", default=name, help="task name in the record (default: "
                   + (name or "the --out folder's name") + ")")
    p.add_argument("--train", help="training file" + kind)
    p.add_argument("--valid", help="validation file (labelled)" + kind)
    p.add_argument("--test", help=test + kind)


def _split_files(args):
    """``{split: file}`` of the --train/--valid/--test given."""
    return {k: getattr(args, k) for k in ("train", "valid", "test") if getattr(args, k)}


def _add_unknown_labels(p):
    p.add_argument("--unknown-labels", choices=("error", "skip"), default="error",
                   help="a valid/test label the training split does not have: stop naming "
                   "file, line and label, or leave the row out (listed in dropped_rows.tsv)")


def _print_dropped(out):
    from span_plugin.preprocess.folders.folder import dropped_summary

    summary = dropped_summary(out)
    if summary:
        print(summary)


def _folder_options(args, spec):
    """The :class:`~span_plugin.preprocess.folders.options.FolderOptions` of the
    arguments, encoding with ``spec`` (:func:`_spec`)."""
    from span_plugin.preprocess.folders.options import FolderOptions

    return FolderOptions(spec=spec, dict_path=args.srcdict, workers=args.workers,
                         bad_utf8=args.bad_utf8,
                         unknown_labels=getattr(args, "unknown_labels", None),
                         name=getattr(args, "name", None), command=_command())


def _spec(args, need_dict=True):
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    options = {**file_options(), **segmentation_options()}
    given = {field: getattr(args, field) for field in options if getattr(args, field) is not None}
    tokenizer = tokenizer_kind(args.bpe)
    for field in sorted(given.keys() & file_options().keys()):
        if options[field] not in tokenizer.options:  # a file it would ignore: say so
            raise SystemExit(f"span-preprocess {args.cmd}: {options[field].flags[0]} is not read "
                             f"by --bpe {args.bpe}, which reads "
                             f"{', '.join(o.flags[0] for o in tokenizer.options) or 'no file'}")
    reads = SEGMENTATIONS[args.segmentation].options
    for field in given.keys() & segmentation_options().keys():
        if options[field] not in reads:
            kinds = [name for name, kind in SEGMENTATIONS.items() if options[field] in kind.options]
            raise SystemExit(f"span-preprocess {args.cmd}: {options[field].flags[0]} is read only "
                             f"by --segmentation {' or '.join(kinds)} (got --segmentation "
                             f"{args.segmentation})")
    if need_dict and not args.srcdict:
        raise ValueError("--srcdict (fairseq dict.txt) is required")  # a user's mistake: exit 2
    spec = EncoderSpec(bpe=args.bpe, ngrams=args.ngrams, ngrams_top_k=args.ngrams_top_k,
                       segmentation=args.segmentation, seed=args.seed, **given)
    from span_plugin.preprocess.binary.binarize import _get_encoder

    _get_encoder(spec)  # fail early on a bad path or dictionary line (built once, kept)
    return spec


def cmd_ngrams(args):
    from span_plugin.preprocess.segmentation.ngrams import (NgramCounting, TaskRowsInCorpus,
                                                            build_dictionary, cut_dictionary)

    if args.glue_dir:
        raise SystemExit(
            "span-preprocess ngrams: --glue-dir was removed: a dictionary counted on a "
            "task's training rows segments those rows unlike unseen text. Count a general "
            "corpus (--text), and pass the task folders to --task-rows to check it")
    paths = list(args.text or []) + list(args.wikitext or [])
    if args.from_dictionary:
        if paths or not args.top_k:
            raise SystemExit("span-preprocess ngrams: --from-dictionary takes --top-k and "
                             "no --text/--wikitext")
        n = cut_dictionary(args.from_dictionary, args.out, args.top_k)
        print(f"{args.out}: the {n} most frequent n-grams of {args.from_dictionary}")
        return
    if not paths:
        raise SystemExit("span-preprocess ngrams: give --text or --wikitext")
    try:
        counting = NgramCounting(min_n=args.min_n, max_n=args.max_n, min_count=args.min_count,
                                 top_k=args.top_k, edge_punct=args.keep_edge_punct,
                                 words=args.words)
        res = build_dictionary(paths, args.out, counting, wikitext=list(args.wikitext or []),
                               task_rows=args.task_rows or (), on_task_rows=args.on_task_rows,
                               workers=args.workers, partitions=args.partitions,
                               tmp_dir=args.tmp_dir)
    except TaskRowsInCorpus as e:
        raise SystemExit(f"span-preprocess ngrams: {e}")
    print(f"{args.out}: {len(res.items)} n-grams over {args.words} words "
          f"(n={args.min_n}..{args.max_n}, count >= "
          f"{args.min_count}) from {res.corpus_tokens} words")


def cmd_glue(args):
    from span_plugin.formats.glue import TASKS
    from span_plugin.preprocess.folders.glue import prepare_task

    if args.task != "ALL" and args.task not in TASKS:
        raise SystemExit(f"span-preprocess glue: unknown task {args.task!r}; expected one of "
                         f"{', '.join(TASKS)} or ALL")
    options = _folder_options(args, _spec(args))
    names = [t for t in TASKS if os.path.isdir(os.path.join(args.glue_dir, t))] \
        if args.task == "ALL" else [args.task]
    for name in names:
        out = os.path.join(args.out, f"{name}-bin") if args.task == "ALL" else args.out
        counts = prepare_task(name, args.glue_dir, out, options, bad_rows=args.bad_rows)
        print(f"{name}: {out}: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
        _print_dropped(out)


def cmd_table(args):
    from span_plugin.formats.table import TableReading
    from span_plugin.preprocess.folders.table import prepare_table

    options = _folder_options(args, _spec(args))
    files = _split_files(args)
    reading = TableReading(fmt=args.format, delimiter=args.delimiter, regression=args.regression,
                           drop_labels=args.drop_labels or (), bad_rows=args.bad_rows)
    counts = prepare_table(args.out, files, args.text_columns, args.label_column, options,
                           reading, positive=args.positive_label)
    print(f"{args.out}: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    _print_dropped(args.out)


def cmd_pairs(args):
    from span_plugin.preprocess.folders.pairs import prepare_pairs

    options = _folder_options(args, _spec(args))
    files = _split_files(args)
    counts, pairs = prepare_pairs(args.out, files, options, text_columns=args.text_columns,
                                  label_column=args.label_column, phrases_key=args.phrases_key,
                                  phrase_labels=args.phrase_labels, positive=args.positive_label)
    print(f"{args.out}: " + ", ".join(f"{s} {n} rows, {pairs[s]} phrase pairs"
                                      for s, n in counts.items()))
    _print_dropped(args.out)


def cmd_align_pairs(args):
    from span_plugin.preprocess.folders.align import AlignSettings, align_file

    if bool(args.holdout_rows) != bool(args.holdout_out):
        raise SystemExit("span-preprocess align-pairs: give --holdout-rows and --holdout-out together")
    settings = AlignSettings(words=args.words, ngrams=args.ngrams,
                             random_ratio=args.random_sentence_ratio, seed=args.seed,
                             require_overlap=args.require_overlap,
                             keep_identical=args.keep_identical)
    stats = align_file(args.input, args.out, settings, source=args.source,
                       min_score=args.min_score, exclude=args.exclude_sentences_of,
                       holdout=args.holdout_rows, holdout_path=args.holdout_out)
    print(stats.report())


def cmd_conll(args):
    from span_plugin.preprocess.folders.conll import prepare_conll

    options = _folder_options(args, _spec(args))
    files = _split_files(args)
    counts, stats = prepare_conll(args.out, files, options, scheme=args.tag_scheme,
                                  bad_tags=args.bad_tags, max_tokens=args.max_tokens)
    for split, s in stats.items():
        unseen = "".join(f", {n} {t} entities not in train" for t, n in s["unseen_types"].items())
        dropped = (f", {s['dropped_sentences']} sentences left out"
                   if s["dropped_sentences"] else "")
        replaced = (f", {s['utf8_replacements']} invalid UTF-8 sequences read as U+FFFD"
                    if s["utf8_replacements"] else "")
        print(f"{split}: {s['items']} items from {s['sentences']} sentences "
              f"({s['split_sentences']} cuts of long sentences), {s['documents']} documents "
              f"({s['empty_documents']} empty, skipped), {s['repaired_tags']} repaired tags"
              f"{unseen}{dropped}{replaced}")
        # The types as read, so that a wrong tag column (NP, VP, ...) shows at once.
        print(f"  entity types ({s['columns']} columns): "
              + (", ".join(f"{t} {n}" for t, n in s["entity_types"].items()) or "none"))
    if any(s["unseen_types"] for s in stats.values()) and args.unknown_labels == "map-to-o":
        print("entity types not in the training split were read as O (provenance.json: "
              "labels.stats.<split>.unseen_types)")
    print(f"{args.out}: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    _print_dropped(args.out)


def cmd_qa(args):
    from span_plugin.preprocess.folders.qa import QASettings, prepare_qa

    files = _split_files(args)
    if not files:
        raise ValueError("give at least one of --train, --valid, --test")
    for split, path in files.items():
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file (--{split})")
        regular_file(path, f"--{split}")
    summaries = prepare_qa(args.out, files, _folder_options(args, _spec(args)),
                           QASettings(max_positions=args.max_positions,
                                      doc_stride=args.doc_stride, on_bad=args.on_bad))
    for split, s in summaries.items():
        print(f"{split}: {s.questions} questions in {s.windows} windows ({s.impossible} "
              f"impossible, {s.dropped} dropped: see dropped_rows.tsv), {s.inexact_answers} "
              f"answers whose tokens cover more characters, longest question "
              f"{s.longest_question} tokens")
        noted = [f"{n} {what}" for n, what in (
            (s.unplaced_answers, "answers that cannot be placed, left out of training"),
            (s.duplicate_ids, "reused question ids"),
            (s.mrqa_text_disagreements, "MRQA answer texts that differ from their span"))
                 if n]
        if noted:
            print(f"{split}: {', '.join(noted)}: each listed by id in "
                  f"{os.path.join(args.out, 'input_notes.tsv')}")


def cmd_qa_split(args):
    from span_plugin.formats.squad import split_squad_articles

    first, rest = split_squad_articles(args.input, args.first, args.out_first, args.out_rest)
    print(f"{args.out_first}: {first} questions; {args.out_rest}: {rest} questions")


def cmd_qa_sample(args):
    from span_plugin.formats.squad import sample_squad

    unit, size = ("articles", args.articles) if args.articles else ("questions", args.questions)
    r = sample_squad(args.input, args.out, size, unit, args.seed)
    print(f"{args.out}: {r['questions']} of {r['of_questions']} questions, {r['articles']} of "
          f"{r['of_articles']} articles of {args.input} ({size} {unit} asked, seed {args.seed})")


def _command():
    """The command line as typed, for the data record."""
    return " ".join(["span-preprocess"] + [shlex.quote(x) for x in sys.argv[1:]])


# The flags whose files the subcommands read, and those they write: an output is never
# one of the inputs, and has one writer at a time (span_plugin.files.outputs).
INPUT_FLAGS = ("train", "valid", "test", "input", "text", "wikitext", "from_dictionary",
               "task_rows", "exclude_sentences_of", "srcdict", "ngrams", "folder")
OUTPUT_FLAGS = ("out", "out_first", "out_rest", "holdout_out", "bpe_text", "plot")


def _flag_paths(args, names, given=bool):
    """``{flag: value}`` of the options ``names`` whose value is ``given``."""
    return {"--" + n.replace("_", "-"): getattr(args, n) for n in names
            if given(getattr(args, n, None))}


def _outputs_and_inputs(args):
    """``({flag: paths written}, {flag: paths read})`` of the subcommand."""
    from span_plugin.formats.glue import TASKS

    inputs = _flag_paths(args, INPUT_FLAGS)
    for field, option in {**file_options(), **segmentation_options()}.items():
        if getattr(args, field, None):
            inputs[option.flags[0]] = getattr(args, field)
    # an output given as '' is one: refused as an empty path, not left out
    outputs = _flag_paths(args, OUTPUT_FLAGS, given=lambda value: value is not None)
    if args.cmd == "glue":
        inputs["--glue-dir"] = [os.path.join(args.glue_dir, t)
                                for t in (TASKS if args.task == "ALL" else [args.task])]
    if args.cmd == "binarize":
        outputs["output_prefix"] = [args.output_prefix + ext
                                    for ext in (".bin", ".idx", ".spans.bin", ".spans.idx")]
    return outputs, inputs


def cmd_binarize(args):
    from span_plugin.preprocess.binary.binarize import binarize_whole

    spec = _spec(args)
    if not os.path.exists(args.input):
        raise FileNotFoundError(f"{args.input}: no such file")
    regular_file(args.input)
    s = binarize_whole(args.input, args.output_prefix, spec, args.srcdict, workers=args.workers,
                       text_out=args.bpe_text, bad_utf8=args.bad_utf8)
    print(f"{args.output_prefix}: {s.lines} lines, {s.tokens} tokens, {s.spans} spans, "
          f"{s.empty} empty, {s.unknown} <unk>")


def cmd_pretrain(args):
    from span_plugin.preprocess.folders.pretrain import prepare_pretrain

    rows = prepare_pretrain(args.out, args.train, _folder_options(args, _spec(args)),
                            valid=args.valid, keep=args.keep)
    if rows is None:
        print(f"{args.out}: kept (made from the same text and settings)")
    else:
        print(f"{args.out}: " + ", ".join(f"{s} {n} lines" for s, n in rows.items()))


def cmd_check(args):
    from span_plugin.preprocess.folders.check import CheckError, check_folder

    built_from = {}
    for item in args.built_from or ():
        split, _, path = item.partition("=")
        if not split or not path:
            raise SystemExit(f"span-preprocess check: --built-from {item!r}: expected SPLIT=FILE")
        built_from[split] = path
    for folder in args.folders:
        try:
            if built_from:
                from span_plugin.preprocess.folders.pairs import check_built_from

                check_built_from(folder, built_from)
            for line in check_folder(folder):  # every folder kind (preprocess/folders/check.py)
                print(line)
        except (CheckError, OSError, ValueError) as err:
            print(f"span-preprocess check: FAILED: {err}", file=sys.stderr)
            return 1
        print(f"{folder}: ok")
    return 0


def cmd_stats(args):
    from span_plugin.preprocess.segmentation.stats import run_stats

    run_stats(texts=args.text, folders=args.folder, ngrams_path=args.ngrams, sizes=args.sizes,
              plot=args.plot, max_lines=args.max_lines)


def cmd_encode(args):
    from span_plugin.preprocess.binary.binarize import _get_encoder

    enc = _get_encoder(_spec(args, need_dict=False))
    for line in (args.sentences or sys.stdin):
        tokens, spans = enc.encode(line)
        print(" | ".join(" ".join(w) for w in enc.encode_words(line)))
        print(" ".join(tokens))
        print(" ".join(f"{s}:{e}" for s, e in spans))


def _add_ngrams_parser(sub):
    q = sub.add_parser("ngrams", help="count n-grams and write a dictionary")
    q.add_argument("--out", required=True, help="output file (.gz: gzip-compressed)")
    q.add_argument("--text", nargs="+",
                   help="plain text files (.gz too), one sentence or paragraph a line")
    q.add_argument("--wikitext", nargs="+", help="WikiText .tokens files")
    q.add_argument("--from-dictionary", metavar="DICT",
                   help="instead of counting: write the --top-k most frequent entries of DICT")
    q.add_argument("--glue-dir", help=argparse.SUPPRESS)  # removed: explains why
    q.add_argument("--task-rows", nargs="+", metavar="PATH",
                   help="task files or folders (GLUE, tables, sentence files) the dictionary "
                   "will serve: refuse a corpus with one of their sentences as a line")
    q.add_argument("--on-task-rows", choices=("error", "drop", "count"), default="error",
                   help="corpus lines that are --task-rows sentences: stop before counting "
                   "(error), leave them out of the count (drop; recorded in the header) or "
                   "count them with a warning (count)")
    q.add_argument("--min-n", type=positive, default=2)
    q.add_argument("--max-n", type=positive, default=5)
    q.add_argument("--min-count", type=positive, default=11,
                   help="keep n-grams seen at least this often (paper: more than 10)")
    q.add_argument("--top-k", type=count, help="keep only the K most frequent")
    _add_word_scheme(q, "use it")
    q.add_argument("--keep-edge-punct", action="store_true",
                   help="keep n-grams that start or end with punctuation (', and')")
    q.add_argument("--workers", type=positive, default=os.cpu_count() or 1)
    q.add_argument("--tmp-dir", help="where the spill files go (default: system temp)")
    q.add_argument("--partitions", type=positive, default=8,
                   help="hash partitions of the spill files: more = less memory per merge")
    q.set_defaults(func=cmd_ngrams)


def _add_glue_parser(sub):
    q = sub.add_parser("glue", help="build a GLUE task's binarized folder")
    q.add_argument("--task", required=True, help="CoLA, SST-2, MRPC, STS-B, QQP, MNLI, "
                   "QNLI, RTE, WNLI, SNLI, or ALL (every task folder present)")
    q.add_argument("--glue-dir", required=True, help="glue_data folder")
    q.add_argument("--out", required=True, help="task folder (ALL: parent of TASK-bin/)")
    q.add_argument("--bad-rows", choices=("default", "error", "skip"), default="default",
                   help="rows with a wrong field count: default = skip for QQP train/dev "
                   "(as fairseq's recipe), error elsewhere")
    _add_unknown_labels(q)
    _add_encoder_args(q)
    q.set_defaults(func=cmd_glue)


def _add_table_parser(sub):
    q = sub.add_parser("table", help="build a task folder from your own TSV, CSV or "
                       "JSON Lines files with named columns")
    _add_split_files(q, "")
    q.add_argument("--text-columns", nargs="+", required=True, metavar="COLUMN",
                   help="one column (single sentences) or two (pairs), by header name "
                   "or JSON key")
    q.add_argument("--label-column", required=True, help="label column name or key")
    q.add_argument("--regression", action="store_true", help="labels are numbers")
    q.add_argument("--positive-label", help="the class F1 counts as positive (two classes)")
    q.add_argument("--drop-labels", nargs="+", metavar="LABEL",
                   help="leave out rows with these labels (SNLI: -, or -1 in Hugging Face "
                   "exports)")
    q.add_argument("--format", choices=("auto", "tsv", "csv", "jsonl"), default="auto",
                   help="auto: from the file name (.tsv .csv .jsonl)")
    q.add_argument("--delimiter", type=one_character, default=",",
                   help="CSV field separator ('\\t' or tab for quoted TSV)")
    q.add_argument("--bad-rows", choices=("error", "skip"), default="error",
                   help="rows that do not fit (wrong field count, bad JSON, missing or "
                   "empty value): stop naming file and line, or leave them out")
    _add_unknown_labels(q)
    _add_encoder_args(q)
    q.set_defaults(func=cmd_table)


def _add_pairs_parser(sub):
    q = sub.add_parser("pairs", help="build a span-pair folder (span_pair_classification) "
                       "from JSON Lines sentence pairs with phrase pairs (docs/SPAN_PAIRS.md)")
    _add_split_files(q, " (.jsonl)")
    q.add_argument("--text-columns", nargs=2, default=["sentence1", "sentence2"],
                   metavar="KEY", help="the two text keys")
    q.add_argument("--label-column", help="sentence label key (default: no sentence labels)")
    q.add_argument("--phrases-key", default="phrases", help="key of the phrase pair list")
    q.add_argument("--phrase-labels", nargs="+", default=["paraphrase", "random", "in-paraphrase"],
                   metavar="LABEL", help="the declared phrase labels (ids in this order)")
    q.add_argument("--positive-label", help="the sentence class F1 counts as positive")
    _add_unknown_labels(q)
    _add_encoder_args(q)
    q.set_defaults(func=cmd_pairs)


def _add_align_pairs_parser(sub):
    q = sub.add_parser("align-pairs", help="weak aligner: phrase pairs from paraphrase "
                       "sentence pairs (MRPC label 1, STS-B score >= 4) -> JSON Lines")
    q.add_argument("--input", required=True, help="GLUE MRPC or STS-B train.tsv")
    q.add_argument("--source", choices=("auto", "mrpc", "stsb"), default="auto")
    q.add_argument("--out", required=True, help="JSON Lines file to write")
    _add_word_scheme(q, "read the pairs (phrases start and end at its word boundaries)")
    q.add_argument("--ngrams", help="n-gram dictionary of that word scheme (default: packaged)")
    q.add_argument("--random-sentence-ratio", type=at_least_zero, default=0.5,
                   help="random partners (sentence label 0; the random phrase pairs) per paraphrase pair")
    q.add_argument("--min-score", type=finite, default=4.0, help="STS-B: lowest score kept")
    q.add_argument("--require-overlap", action="store_true",
                   help="in-paraphrase negatives must share a word with the source phrase")
    q.add_argument("--keep-identical", action="store_true",
                   help="also keep identical segments of the anchors as paraphrase pairs "
                   "(identity positives, for comparison; the identity rule then nearly solves "
                   "the phrasal task)")
    q.add_argument("--holdout-rows", type=count, default=0, metavar="N",
                   help="write the last N paraphrase rows left (with their own random "
                   "partners) to --holdout-out instead: a validation file when the "
                   "source's own dev split is excluded")
    q.add_argument("--holdout-out", help="JSON Lines file of the held-out rows")
    q.add_argument("--exclude-sentences-of", nargs="+", default=[], metavar="TSV",
                   help="drop paraphrase pairs sharing a sentence (case, spaces and "
                   "punctuation ignored) with these files, e.g. the target task's dev.tsv "
                   "and test.tsv, so transfer data cannot leak them")
    q.add_argument("--seed", type=int, default=1)
    q.set_defaults(func=cmd_align_pairs)


def _add_conll_parser(sub):
    q = sub.add_parser("conll", help="build a tagging folder (span_tagging, span_labeling) "
                       "from CoNLL files: word ... tag columns, blank lines between sentences")
    _add_split_files(q, test="test file (labelled: span-predict scores it)")
    q.add_argument("--tag-scheme", choices=("iob1", "iob2", "bioes"), default="iob2",
                   help="scheme of the files' tags; the folder stores IOB2")
    q.add_argument("--bad-tags", choices=("repair", "error"), default="repair",
                   help="an I- (or E-) tag that continues no entity, or (bioes) an entity "
                   "that no E- ends: read it as conlleval does (counted), or stop naming "
                   "file and line")
    q.add_argument("--max-tokens", type=positive, default=510,
                   help="most tokens per item (model positions minus <s> and </s>); longer "
                   "sentences are cut between words into several items")
    q.add_argument("--unknown-labels", choices=("map-to-o", "error", "skip"),
                   default="map-to-o", help="an entity type of valid/test that the training "
                   "split does not have: read its tags as O (a warning, counted in the "
                   "record), stop naming type, file and line, or leave the sentence out "
                   "(listed in dropped_rows.tsv)")
    _add_encoder_args(q)
    q.set_defaults(func=cmd_conll)


def _add_qa_parser(sub):
    q = sub.add_parser("qa", help="build an extractive QA folder (span_qa) from SQuAD 1.1/2.0 "
                       "JSON or MRQA JSON Lines (.jsonl, .jsonl.gz)")
    _add_split_files(q, test="test file (questions without answers are predicted, not "
                     "scored)", name="qa")
    q.add_argument("--max-positions", type=whole_number(MIN_WINDOW), default=384,
                   help="tokens per window: <s> question </s> </s> passage </s>")
    q.add_argument("--doc-stride", type=positive, default=128,
                   help="tokens two consecutive windows of a long passage share")
    q.add_argument("--on-bad", choices=("error", "skip"), default="skip",
                   help="an answer that cannot be placed (its offsets do not read its text, "
                   "it covers no token) or a bad question (empty context, question too "
                   "long for a window, ...): skip (default) leaves it out of training and "
                   "lists it (input_notes.tsv for answers, dropped_rows.tsv for "
                   "questions), error stops naming it. Answers are never shifted")
    _add_encoder_args(q)
    q.set_defaults(func=cmd_qa)


def _add_qa_split_parser(sub):
    q = sub.add_parser("qa-split", help="split a SQuAD JSON file by article (e.g. dev-v1.1: "
                       "the first 38 articles to train, the last 10 to evaluate)")
    q.add_argument("input")
    q.add_argument("--first", type=positive, required=True, help="articles in the first file")
    q.add_argument("--out-first", required=True)
    q.add_argument("--out-rest", required=True)
    q.set_defaults(func=cmd_qa_split)


def _add_qa_sample_parser(sub):
    q = sub.add_parser("qa-sample", help="a part of a SQuAD JSON file fixed by a seed: N "
                       "questions or N articles drawn at random, kept in file order (e.g. a "
                       "validation set small enough for a CPU); the file records what it holds")
    q.add_argument("input")
    q.add_argument("--out", required=True)
    size = q.add_mutually_exclusive_group(required=True)
    size.add_argument("--questions", type=positive, help="questions to take")
    size.add_argument("--articles", type=positive, help="articles to take (all their questions)")
    q.add_argument("--seed", type=int, default=1)
    q.set_defaults(func=cmd_qa_sample)


def _add_binarize_parser(sub):
    q = sub.add_parser("binarize", help="encode + spans + binarize one text file")
    q.add_argument("input")
    q.add_argument("output_prefix", help="e.g. DATA/input0/train")
    q.add_argument("--bpe-text", help="also write the BPE text here")
    _add_encoder_args(q)
    q.set_defaults(func=cmd_binarize)


def _add_pretrain_parser(sub):
    q = sub.add_parser("pretrain", help="build a pre-training folder (spanbert_masked_lm) "
                       "from a text file (.gz too): tokens, spans, dict.txt, the record; "
                       "one per file of a sharded corpus (docs/PRETRAIN.md)")
    q.add_argument("--out", required=True, help="folder to write")
    q.add_argument("--train", required=True, help="training text, one paragraph a line, "
                   "an empty line between documents (.gz: decompressed first)")
    q.add_argument("--valid", help="validation text, same form")
    q.add_argument("--keep", action="store_true",
                   help="keep an existing folder made from the same text and settings "
                   "(its record says so); one made otherwise is an error")
    _add_encoder_args(q)
    q.set_defaults(func=cmd_pretrain)


def _add_check_parser(sub):
    q = sub.add_parser("check", help="validate binarized folders")
    q.add_argument("folders", nargs="+")
    q.add_argument("--built-from", nargs="+", metavar="SPLIT=FILE",
                   help="also refuse a folder whose record names another source file "
                   "(by sha256) for SPLIT, e.g. train=aligned/train.jsonl")
    q.set_defaults(func=cmd_check)


def _add_stats_parser(sub):
    q = sub.add_parser("stats", help="spans per sentence and span lengths by dictionary size")
    q.add_argument("--text", nargs="+", help="text files, one sentence a line")
    q.add_argument("--folder", nargs="+", help="task folders (their raw/*.input* text)")
    q.add_argument("--ngrams", help="dictionary (default: the packaged one)")
    q.add_argument("--sizes", default="1000,5000,20000,all",
                   help="comma-separated dictionary sizes (top-K entries; 'all')")
    q.add_argument("--plot", help="write the figure here (PNG)")
    q.add_argument("--max-lines", type=positive, help="read at most this many lines per file")
    q.set_defaults(func=cmd_stats)


def _add_encode_parser(sub):
    q = sub.add_parser("encode", help="show tokens and spans of sentences")
    q.add_argument("sentences", nargs="*")
    _add_encoder_args(q)
    q.set_defaults(func=cmd_encode)


def build_parser():
    p = argparse.ArgumentParser(prog="span-preprocess", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_add_ngrams_parser, _add_glue_parser, _add_table_parser, _add_pairs_parser,
                _add_align_pairs_parser, _add_conll_parser, _add_qa_parser,
                _add_qa_split_parser, _add_qa_sample_parser, _add_binarize_parser,
                _add_pretrain_parser, _add_check_parser, _add_stats_parser,
                _add_encode_parser):
        add(sub)
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.cmd == "qa" and args.doc_stride > args.max_positions - MIN_WINDOW + 1:
        p.error(f"argument --doc-stride: {args.doc_stride} is too large for --max-positions "
                f"{args.max_positions}; expected from 1 to "
                f"{args.max_positions - MIN_WINDOW + 1} (a window holds <s> question </s> "
                f"</s> passage </s>: a question of one token and more passage tokens than "
                f"the windows share)")
    from span_plugin.files.errors import BadInputError
    from span_plugin.files.outputs import writing
    from span_plugin.files.stops import Stopped, report, stop_on_sigterm
    from span_plugin.preprocess.segmentation.ngrams import NgramFormatError
    from span_plugin.requires import MissingPackageError  # --bpe fastbpe, --plot

    level = os.environ.get("LOGLEVEL", "WARNING").upper()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    for noisy in ("matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))

    try:
        outputs, inputs = _outputs_and_inputs(args)
        with stop_on_sigterm(), writing(outputs, inputs, command=_command()):
            return args.func(args) or 0
    except (BadInputError, NgramFormatError, OSError, ValueError, KeyboardInterrupt,
            Stopped, MissingPackageError) as err:
        # ValueError covers provenance.ProvenanceError (a file that differs from its record);
        # OSError a path that is a folder, unreadable or not writable, a full disk; SIGINT
        # and SIGTERM: one line, exit 2 (130 for SIGINT).
        return report(f"span-preprocess {args.cmd}", err)


if __name__ == "__main__":
    sys.exit(main())
