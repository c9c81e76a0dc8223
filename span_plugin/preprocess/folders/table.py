"""Users' own data: TSV, CSV or JSON Lines with named columns -> a task folder.

``prepare_table(out, {"train": F, "valid": F, "test": F}, ["premise", "hypothesis"],
"label", FolderOptions(spec, dict_txt))`` reads the files with
:mod:`span_plugin.formats.table` (formats, columns, bad rows) and writes the same folder as
``span-preprocess glue`` (:mod:`span_plugin.preprocess.folders.folder`), so the recipes and
the task take it unchanged.
The label set is the train file's: a valid label outside it is an error naming the file,
line and label, or (``unknown_labels="skip"``) its row is left out; a train file without
rows is an error. Rows left out are listed in ``dropped_rows.tsv``. The folder is
written whole or not at all (:func:`span_plugin.preprocess.folders.folder.whole_folder`).
"""

from span_plugin.formats.table import TableReading, read_table
from span_plugin.preprocess.folders.folder import folder_name, given_splits, whole_folder, write_task_folder


def prepare_table(out_dir, files, text_columns, label_column, options, reading=TableReading(),
                  positive=None):
    """Build a task folder from ``files`` = {"train": path, "valid": path, "test": path}
    (any subset; test is read without labels), each read as ``reading`` says
    (:class:`~span_plugin.formats.table.TableReading`), with ``options``
    (:class:`~span_plugin.preprocess.folders.options.FolderOptions`). Returns {split:
    rows written}."""
    if not 1 <= len(text_columns) <= 2:
        raise ValueError(f"give one or two text columns, got {list(text_columns)}")
    if not files:
        raise ValueError("give at least one of --train, --valid, --test")
    if positive is not None and reading.regression:
        raise ValueError("--positive-label is for class labels, not --regression")
    splits = []
    for split, path in given_splits(files):
        rows = read_table(path, text_columns, None if split == "test" else label_column,
                          reading, options.bad_utf8)
        splits.append((split, str(path), rows))
    with whole_folder(out_dir) as tmp:
        return write_task_folder(tmp, splits, options, task=options.name or folder_name(out_dir),
                                 regression=reading.regression, positive=positive)
