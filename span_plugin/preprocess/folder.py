"""A task folder from rows already read (GLUE TSVs or a user's table), laid out as
fairseq's RoBERTa GLUE recipe lays it out, with span files and the data record::

    out/raw/{split}.input0|input1|label   the fields, one row per line
    out/input{k}/{split}.{bin,idx}        tokens (fairseq-preprocess --srcdict output)
    out/input{k}/{split}.spans.{bin,idx}  span index, item i = line i
    out/input{k}/dict.txt                 the encoder's fairseq dictionary
    out/label/{split}.{bin,idx}, dict.txt  class labels, as fairseq-preprocess --only-source
                                          writes them (span_plugin.preprocess.labels)
    out/label/{split}.label               regression: one value per line
    out/dropped_rows.tsv                  rows left out, with file, line and reason
    out/provenance.json                   how all of it was made (span_plugin.preprocess.provenance)

Splits are written in the order given; labels for every split whose rows carry them.
The label dictionary is built from the train labels (from the labelled splits present,
with a warning, when there is no train split).
"""

import logging
import os
import shutil
import sys

from span_plugin.formats.lines import BadInputError
from span_plugin.preprocess import provenance
from span_plugin.preprocess.binarize import binarize_file, write_dict
from span_plugin.preprocess.labels import binarize_labels, write_label_dict
from span_plugin.preprocess.vocab import Vocab

logger = logging.getLogger(__name__)


def _write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def given_splits(files):
    """``(split, path)`` of ``files`` = {"train": path, "valid": path, "test": path} (any
    subset) in train, valid, test order; a missing file is an error naming its flag."""
    for split in ("train", "valid", "test"):
        path = files.get(split)
        if path is None:
            continue
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such file (--{split})")
        yield split, path


def label_names(dict_path):
    """Class names of a label dict.txt in index order (fairseq's padding left out)."""
    with open(dict_path, encoding="utf-8") as f:
        names = [line.rsplit(" ", 1)[0] for line in f if line.strip()]
    return [n for n in names if not n.startswith("madeupword")]


def write_task_folder(out_dir, splits, spec, dict_path, *, task, regression=False,
                      workers=1, positive=None, label_scale=1.0, label_range=None,
                      command=None):
    """Write the folder of rows already read.

    splits: list of ``(split, source_path, SplitRows)``, in order (train first).
    positive: the class F1 counts as positive (two classes only), or None.
    label_scale, label_range: regression only; values are stored divided by the scale
    (STS-B: 5) and predictions are clipped to the range (STS-B: [0, 5]).
    Returns ``{split: rows written}``.
    """
    raw_dir = os.path.join(out_dir, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    counts, dropped, present = {}, [], []
    for split, path, rows in splits:
        for k, col in enumerate(rows.inputs):
            _write_lines(os.path.join(raw_dir, f"{split}.input{k}"), col)
        if rows.labels is not None:
            _write_lines(os.path.join(raw_dir, f"{split}.label"), rows.labels)
        dropped += [(split, path, ln, why) for ln, why in rows.dropped]
        present.append((split, rows.labels is not None, len(rows.inputs)))
        counts[split] = rows.rows
    n_inputs = {n for _, _, n in present}
    if len(n_inputs) != 1:
        raise BadInputError(f"{task}: splits have different numbers of inputs "
                            f"({ {s: n for s, _, n in present} })")
    with open(os.path.join(out_dir, "dropped_rows.tsv"), "w", encoding="utf-8") as f:
        f.write("split\tfile\tline\treason\n")
        for split, path, ln, why in dropped:
            f.write(f"{split}\t{path}\t{ln}\t{why}\n")

    for split, _, n in present:
        for k in range(n):
            binarize_file(os.path.join(raw_dir, f"{split}.input{k}"),
                          os.path.join(out_dir, f"input{k}", split), spec, dict_path,
                          workers=workers, bad_utf8="error")
    for k in range(n_inputs.pop()):
        write_dict(dict_path, os.path.join(out_dir, f"input{k}"))

    labelled = [s for s, has_label, _ in present if has_label]
    label_dir = os.path.join(out_dir, "label")
    # Start the label folder afresh on a re-run: no stale split of an earlier run.
    shutil.rmtree(label_dir, ignore_errors=True)
    os.makedirs(label_dir, exist_ok=True)
    if regression:
        for split in labelled:
            os.replace(os.path.join(raw_dir, f"{split}.label"),
                       os.path.join(label_dir, f"{split}.label"))
        labels = {"kind": "regression", "scale": label_scale, "range": label_range}
    elif labelled:
        _binarize_labels(task, raw_dir, label_dir, labelled)
        names = label_names(os.path.join(label_dir, "dict.txt"))
        if positive is not None and positive not in names:
            raise BadInputError(
                f"{task}: positive label {positive!r} is not a label of the labelled "
                f"splits (labels: {names})")
        labels = {"kind": "classes", "names": names, "positive": positive}
    else:
        labels = {"kind": "none"}
    provenance.write_record(
        out_dir, task=task, inputs=len(splits[0][2].inputs),
        encoder=provenance.encoder_record(spec, dict_path), labels=labels, rows=counts,
        source={split: provenance.file_entry(path) for split, path, _ in splits},
        command=command or " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]))
    return counts


def _binarize_labels(task, raw_dir, label_dir, labelled):
    """label/dict.txt from the train labels (from every labelled split, with a warning,
    when there is no train split) and label/{split}.{bin,idx} for each labelled split."""
    files = {s: os.path.join(raw_dir, f"{s}.label") for s in labelled}
    if "train" in files:
        dict_from = [files["train"]]
    else:
        logger.warning("%s: no train split; label dictionary built from %s", task, labelled)
        dict_from = list(files.values())
    vocab = Vocab(write_label_dict(dict_from, os.path.join(label_dir, "dict.txt")))
    for split, path in files.items():
        binarize_labels(path, os.path.join(label_dir, split), vocab)
