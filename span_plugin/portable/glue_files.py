"""Predictions of a sentence checkpoint written as GLUE submission files
(``index<TAB>prediction`` with a header, one row per input row, in order).

Rows come from the data folder's ``raw/{split}.input*`` text (``valid``, ``test``,
MNLI's ``valid1`` and ``test1``, or any split of a ``span-preprocess table`` folder), or
from a GLUE TSV ``DIR/TASK/{split}.tsv`` read with the column rules of
``span-preprocess glue``.
"""

import itertools
import os
import sys

from span_plugin.files.atomic import atomic_file
from span_plugin.formats.flag_values import finite
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import count_lines, read_file_lines, stream_file_lines
from span_plugin.formats.text_inputs import one_cut_warning
from span_plugin.portable.outputs import CHUNK_ROWS, Batching, Flag, Output, chunks
from span_plugin.preprocess.progress import bar, on_terminal

HEADER = "index\tprediction"
CHUNK_BYTES = 1 << 20  # bytes of the input files read at a time


def read_test_rows(glue_dir, task_name, split):
    """The input columns of a GLUE TSV: list of str (single) or tuples (pairs)."""
    from span_plugin.formats.glue import TASKS, read_split

    if task_name not in TASKS:
        raise ValueError(f"unknown GLUE task {task_name!r}; one of {sorted(TASKS)}")
    path = os.path.join(glue_dir, task_name, split + ".tsv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found")
    rows = read_split(TASKS[task_name], path, split, bad_rows="default")
    columns = rows.inputs
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def read_folder_rows(data, split):
    """The raw text of a split of a prepared folder: list of str or tuples; two input
    files of another number of lines are an error naming the first row without a
    partner."""
    paths = folder_row_paths(data, split)
    columns = [read_file_lines(path) for path in paths]
    if len(columns) == 2 and len(columns[0]) != len(columns[1]):
        raise BadInputError(f"{paths[1]}: {len(columns[1])} lines but {paths[0]} has "
                            f"{len(columns[0])}; line {min(map(len, columns)) + 1} has no "
                            f"partner: rebuild {data}")
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def stream_folder_rows(data, split, block=CHUNK_BYTES):
    """The rows of :func:`read_folder_rows` one at a time (str, or tuples for pairs),
    the files read ``block`` bytes at a time; two input files of another number of
    lines are the same error, raised when the shorter one ends."""
    paths = folder_row_paths(data, split)
    columns = [stream_file_lines(path, block) for path in paths]
    if len(columns) == 1:
        yield from columns[0]
        return
    for n, row in enumerate(itertools.zip_longest(*columns), start=1):
        if None in row:
            counts = [sum(1 for _ in stream_file_lines(path, block)) for path in paths]
            raise BadInputError(f"{paths[1]}: {counts[1]} lines but {paths[0]} has "
                                f"{counts[0]}; line {n} has no partner: rebuild {data}")
        yield row


def folder_row_paths(data, split):
    """The ``raw/{split}.input*`` files of a prepared folder (one, or two for pairs)."""
    paths = [p for p in (os.path.join(data, "raw", f"{split}.input{k}") for k in range(2))
             if os.path.exists(p)]
    if not paths:
        raise FileNotFoundError(
            f"{data}/raw/{split}.input0 not found: the folder has no raw text of split "
            f"{split!r} (give --glue-dir and --task to read a GLUE TSV instead)")
    return paths


def prediction_lines(predictions, first=0, regression_scale=1.0, clip=None):
    """Submission lines (no header) of the dicts of ``SentencePredictor.predict``,
    numbered from ``first``."""
    lines = []
    for i, p in enumerate(predictions, start=first):
        if "score" in p:
            value = p["score"] * regression_scale
            if clip is not None:
                value = min(clip[1], max(clip[0], value))
            lines.append(f"{i}\t{value:.3f}")
        else:
            lines.append(f"{i}\t{p['label']}")
    return lines


def format_predictions(predictions, regression_scale=1.0, clip=None):
    """Submission lines (header first) for the dicts of ``SentencePredictor.predict``."""
    return [HEADER, *prediction_lines(predictions, 0, regression_scale, clip)]


def regression_output(record, task=None, regression_scale=None):
    """``(scale, clip)`` of regression outputs: ``regression_scale`` or the folder's
    label scale (STS-B 5), and its label range (STS-B [0, 5])."""
    labels = (record or {}).get("labels") or {}
    if regression_scale is not None:
        scale = regression_scale
    elif "scale" in labels:
        scale = labels["scale"]
    else:  # a folder without a record: STS-B folders hold score / 5
        scale = 5.0 if task == "STS-B" else 1.0
    clip = labels.get("range") if record else ([0.0, 5.0] if task == "STS-B" else None)
    return scale, clip


def write_predictions(output, predictions, scale=1.0, clip=None):
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with atomic_file(output, text=True) as h:
        h.write("\n".join(format_predictions(predictions, scale, clip)) + "\n")
    print(f"{output}: {len(predictions)} predictions", file=sys.stderr)


def stream_predictions(hub, rows, output, where, regression=(1.0, None), batching=Batching(),
                       total=None, chunk_rows=CHUNK_ROWS):
    """Predict the rows of the iterable ``rows`` (read from ``where``) into the
    submission file ``output``, ``chunk_rows`` at a time: each chunk's rows are batched
    as ``batching`` says and written in input order, so memory does not grow with the
    number of rows. ``regression``: ``(scale, clip)`` of regression values
    (:func:`regression_output`). A progress bar (rows, rows/s; of ``total`` rows when
    known) is shown on a terminal only. The file is written atomically: an error leaves
    nothing. Returns the rows written."""
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    written = 0
    with one_cut_warning(), atomic_file(output, text=True) as h, \
            bar(total, os.path.basename(output), unit="rows") as progress:
        h.write(HEADER + "\n")
        for chunk in chunks(rows, chunk_rows):
            predictions = hub.predict(chunk, batch_size=batching.size, order=batching.order)
            if len(predictions) != len(chunk):
                raise ValueError(f"{len(predictions)} predictions for the {len(chunk)} rows "
                                 f"of {where} from row {written}: nothing written to {output}")
            h.write("".join(line + "\n" for line in
                            prediction_lines(predictions, written, *regression)))
            written += len(chunk)
            progress.update(len(chunk))
    print(f"{output}: {written} predictions", file=sys.stderr)
    return written


def write_submissions(hub, splits, outputs, glue_dir=None, task=None, regression_scale=None,
                      batching=Batching()):
    """Predict each split into its output file (:func:`stream_predictions`: rows batched
    as ``batching`` says, written in input order). Regression values are multiplied
    by ``regression_scale`` (default: the folder's label scale, STS-B 5) and clipped to
    the folder's label range (STS-B [0, 5])."""
    regression = regression_output(hub.record, task, regression_scale)
    for split, output in zip(splits, outputs):
        if glue_dir:
            rows = read_test_rows(glue_dir, task, split)  # a TSV's column rules read it whole
            where, total = os.path.join(glue_dir, task, split + ".tsv"), len(rows)
        else:
            where = folder_row_paths(hub.data, split)[0]  # a missing split named before writing
            rows = stream_folder_rows(hub.data, split)
            total = count_lines(where) if on_terminal() else None  # only the bar reads it
        stream_predictions(hub, rows, output, where, regression, batching, total)


def validation_predictions(state, data=None):
    """The predictions fairseq-train's own validation made of the folder's ``valid``
    split with the weights of this checkpoint (kept in the task state by the
    ``span_classification`` criterion), one dict per row as ``SentencePredictor
    .predict`` gives them (``label``; regression ``score``), and the folder's record.

    Returns ``(predictions, record, None)``, or ``(None, None, why)`` when the
    checkpoint cannot stand in for a forward pass: no stored pass, a save that did not
    follow a validation, a pass over more than the one subset ``valid``, another folder than the one it was trained on, or
    not every row of the split exactly once (a multi-process run keeps its own shard).
    """
    from span_plugin.runtime.data_record import STATE_KEY
    from span_plugin.runtime.checkpoints import VALID_PREDICTIONS

    task_state = state.get("task_state") or {}
    stored = task_state.get(VALID_PREDICTIONS)
    cfg = state.get("cfg") or {}
    task_cfg, dataset_cfg = cfg.get("task") or {}, cfg.get("dataset") or {}
    trained_on = task_cfg.get("data")
    if not stored:
        return None, None, "the checkpoint holds no validation predictions"
    if (state.get("extra_state") or {}).get("val_loss") is None:
        # fairseq records the validation a save follows; a save without one (e.g.
        # --save-interval-updates between validations) holds newer weights
        return None, None, "it was saved without a validation just before"
    if dataset_cfg.get("valid_subset") != "valid":
        return None, None, (f"its validation covered {dataset_cfg.get('valid_subset')!r}, "
                            f"not the one subset 'valid'")
    if data and trained_on and os.path.realpath(data) != os.path.realpath(trained_on):
        return None, None, f"--data {data} is not the folder it was trained on ({trained_on})"
    folder = data or trained_on
    if not folder or not os.path.exists(os.path.join(folder, "raw", "valid.input0")):
        return None, None, f"{folder}/raw/valid.input0 not found"
    rows = len(read_folder_rows(folder, "valid"))
    ids, values = stored["ids"], stored["values"]
    if sorted(ids) != list(range(rows)):
        return None, None, (f"its validation predictions cover {len(set(ids))} distinct "
                            f"of {rows} rows ({len(ids)} in all)")
    by_id = dict(zip(ids, values))
    if task_cfg.get("regression_target"):
        return [{"score": float(by_id[i])} for i in range(rows)], task_state.get(STATE_KEY), None
    names = read_label_names(folder)
    if any(not 0 <= int(v) < len(names) for v in values):
        return None, None, f"a stored class is not one of the {len(names)} of {folder}/label/dict.txt"
    return [{"label": names[int(by_id[i])]} for i in range(rows)], task_state.get(STATE_KEY), None


def read_label_names(folder):
    """Class names in output order, as the hub names them: the symbols of
    ``label/dict.txt`` in file order (fairseq's Dictionary puts its 4 specials first,
    and class ``i`` is symbol ``i + 4``)."""
    path = os.path.join(folder, "label", "dict.txt")
    return [line.split(" ")[0] for line in read_file_lines(path) if line.strip()]


def write_validation_predictions(checkpoint, data, output, task=None, regression_scale=None):
    """Write ``output`` from the checkpoint's stored validation predictions of
    ``valid`` (see :func:`validation_predictions`); returns None, or why it could not."""
    from span_plugin.runtime.checkpoints import load_mapped

    # Allow-listed types only; a file that does not load raises its error (not a
    # checkpoint, damaged, unsafe), naming the file.
    state = load_mapped(checkpoint)
    predictions, record, why = validation_predictions(state, data)
    if predictions is None:
        return why
    write_predictions(output, predictions, *regression_output(record, task, regression_scale))
    return None


def write_output(hub, args):
    """``span-predict`` on a sentence checkpoint: one submission file per split."""
    splits = args.split or ["test"]
    if not args.output or len(args.output) != len(splits):
        raise ValueError(f"{len(splits)} --split but {len(args.output or [])} --output; give "
                         f"one output file per split")
    if args.glue_dir and not args.task:
        raise ValueError("--glue-dir needs --task")
    write_submissions(hub, splits, args.output, args.glue_dir, args.task, args.regression_scale,
                      Batching.of(args, 32))


def validation_first(args):
    """``--from-validation``: write split valid of the folder from the checkpoint's stored
    validation predictions, before any model is loaded. Removes what it wrote from
    ``args.split`` / ``args.output``; returns whether splits remain to predict."""
    if not args.from_validation:
        return True
    splits, outputs = args.split or ["test"], args.output or []
    if args.glue_dir or "valid" not in splits or len(outputs) != len(splits):
        return True  # nothing it can stand in for; the usual checks follow
    k = splits.index("valid")
    why = write_validation_predictions(args.checkpoint, args.data, outputs[k], args.task,
                                       args.regression_scale)
    if why is not None:
        print(f"span-predict: split valid is predicted: {why}", file=sys.stderr)
        return True
    args.split, args.output = splits[:k] + splits[k + 1:], outputs[:k] + outputs[k + 1:]
    return bool(args.split)


OUTPUT = Output(
    title="sentence tasks (GLUE): span_classification, sentence_prediction",
    usage="""\
    span-predict --checkpoint runs/RTE/checkpoints/checkpoint_best.pt \\
        --split valid test --output dev/RTE.tsv submission/RTE.tsv

Rows come from the data folder's raw/{split}.input* text (the folder the checkpoint was
trained on, or --data; default split test): valid, test, MNLI's valid1 and test1, or any
split of a span-preprocess table folder. With --glue-dir DIR --task TASK they come from
DIR/TASK/{split}.tsv instead (MNLI test_matched), read with the column rules of
span-preprocess glue. Classification writes label names as the data spells them;
regression writes the value times the folder's label scale (STS-B: 5,
--regression-scale), clipped to its range; --output: one submission file per --split.""",
    common=("split", "output", "batch_size", "batch_order"),
    flags=(
        Flag("--glue-dir", path="reads",
             help="read the rows from DIR/TASK/SPLIT.tsv (GLUE layout)"),
        Flag("--task", help="GLUE task name, with --glue-dir (CoLA, SST-2, MRPC, ...)"),
        Flag("--regression-scale", type=finite,
             help="multiply regression outputs by this (default: the folder's label "
             "scale: 5 for STS-B, else 1)"),
        Flag("--from-validation", action="store_true",
             help="split valid: write what fairseq-train's own validation predicted "
             "with these weights (the span_classification criterion keeps it in "
             "the checkpoint), without loading the model or a pass over the rows; "
             "when the checkpoint cannot give every row (no stored pass, "
             "several validation subsets, a multi-process run), it says why and "
             "predicts as usual"),
    ),
    write=write_output,
    before_load=validation_first,
)
