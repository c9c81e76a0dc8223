"""What ``span-predict --model DIR`` writes for each task of an exported folder: the same
:class:`~span_plugin.inference.outputs.Output` (options, writer, file formats) that the
fairseq hub's adapter of the task registers, listed here without importing the adapters
(they load fairseq; an exported folder is read without it).

Pure Python (tests/test_portable_parity.py checks it against the adapters' registry).
"""

from span_plugin.inference import conll_files, glue_files, pair_files, qa_files

TASK_OUTPUTS = {
    "span_classification": glue_files.OUTPUT,
    "sentence_prediction": glue_files.OUTPUT,
    "span_tagging": conll_files.OUTPUT,
    "span_labeling": conll_files.OUTPUT,
    "span_qa": qa_files.OUTPUT,
    "span_pair_classification": pair_files.OUTPUT,
}


def task_outputs():
    """Every output, each once, in the order of :data:`TASK_OUTPUTS`."""
    return list({id(o): o for o in TASK_OUTPUTS.values()}.values())
