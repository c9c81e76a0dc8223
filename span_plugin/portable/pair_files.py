"""Predictions of a ``span_pair_classification`` checkpoint on a JSON Lines file of
sentence pairs with phrase pairs (the format of docs/SPAN_PAIRS.md; phrase and
sentence labels, when present, are not read), one JSON object a line::

    {"line": 1, "sentence": {"label": "1", "scores": {"0": 0.2, "1": 0.8}},
     "phrases": [{"source": [7, 14], "target": [7, 13], "label": "paraphrase",
                  "scores": {"paraphrase": 0.7, "random": 0.1, "in-paraphrase": 0.2}}]}

``sentence`` is null for a checkpoint without a sentential head.
"""

import json
import os
import sys

from span_plugin.files.atomic import atomic_file
from span_plugin.formats.lines import regular_file, stream_file_lines
from span_plugin.formats.table import _BadRow, _jsonl_rows
from span_plugin.portable.outputs import Output
from span_plugin.preprocess.progress import bar


def write_pair_predictions(hub, input_path, output_path, text_columns=("sentence1", "sentence2"),
                           phrases_key="phrases"):
    """Predict every row of ``input_path`` into ``output_path``, read and written a row at
    a time (memory flat in the rows; a progress bar on a terminal); returns the row count.
    A bad row is an error ``FILE:LINE: why``, and nothing is written."""
    regular_file(input_path)
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    written = 0
    with atomic_file(output_path, text=True) as out, \
            bar(None, os.path.basename(output_path), unit="rows") as progress:
        for lineno, row in _jsonl_rows(input_path, stream_file_lines(input_path)):
            if lineno == 0:
                break  # the reader's last item: the keys it saw, not a row
            try:
                if isinstance(row, _BadRow):
                    raise ValueError(str(row))
                missing = [k for k in (*text_columns, phrases_key) if k not in row]
                if missing:
                    raise ValueError(f"no {missing[0]!r} (keys: {sorted(row)})")
                texts = [row[k] for k in text_columns]
                if not all(isinstance(t, str) for t in texts):
                    raise ValueError(f"{' and '.join(text_columns)} must be strings")
                phrases = row[phrases_key]
                got = hub.predict_pairs(*texts, phrases)
                if len(got["phrases"]) != len(phrases):
                    raise ValueError(f"{len(got['phrases'])} predictions for its "
                                     f"{len(phrases)} phrase pairs; nothing written to "
                                     f"{output_path}")
            except ValueError as bad:
                raise ValueError(f"{input_path}:{lineno}: {bad}") from None
            ranges = [(p["source"], p["target"]) if isinstance(p, dict) else tuple(p) for p in phrases]
            got["phrases"] = [{"source": s, "target": t, **p} for (s, t), p in zip(ranges, got["phrases"])]
            out.write(json.dumps({"line": lineno, **got}) + "\n")
            written += 1
            progress.update(1)
    return written


def write_output(hub, args):
    """``span-predict`` on a span-pair checkpoint: the predictions of ``--input``."""
    if not args.input or not args.output or len(args.output) != 1:
        raise ValueError("give --input PAIRS.jsonl and one --output file")
    rows = write_pair_predictions(hub, args.input, args.output[0])
    print(f"{args.output[0]}: {rows} predictions", file=sys.stderr)


OUTPUT = Output(
    title="span pairs: span_pair_classification",
    usage="""\
    span-predict --checkpoint runs/transfer-MRPC/checkpoints/checkpoint_best.pt \\
        --input pairs.jsonl --output predictions.jsonl

--input: sentence pairs with phrase pairs, JSON Lines in the format of
docs/SPAN_PAIRS.md; --output: one JSON object a line, the phrase-pair (and sentence-pair)
labels and scores.""",
    common=("input", "output"),
    write=write_output,
)
