"""Layer promises that an import graph cannot show: what importing a layer loads."""

import subprocess
import sys

PREPROCESSING = ("span_plugin.formats", "span_plugin.formats.glue", "span_plugin.formats.table",
                 "span_plugin.formats.conll", "span_plugin.formats.pairs",
                 "span_plugin.preprocess", "span_plugin.preprocess.binary.binarize",
                 "span_plugin.preprocess.folders.folder", "span_plugin.preprocess.folders.glue",
                 "span_plugin.preprocess.folders.table", "span_plugin.preprocess.folders.conll",
                 "span_plugin.preprocess.folders.pairs", "span_plugin.preprocess.folders.check",
                 "span_plugin.preprocess.binary.span_files", "span_plugin.preprocess.records.provenance",
                 "span_plugin.preprocess.segmentation.ngrams", "span_plugin.cli.preprocess")


def test_preprocessing_loads_neither_torch_nor_fairseq():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in PREPROCESSING)
            + "from span_plugin.preprocess.segmentation.ngrams import count_ngrams\n"
            + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'fairseq')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
