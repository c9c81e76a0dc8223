"""Layer promises that an import graph cannot show: what importing a layer loads."""

import subprocess
import sys

PREPROCESSING = ("span_plugin.formats", "span_plugin.formats.glue", "span_plugin.formats.table",
                 "span_plugin.formats.conll", "span_plugin.formats.pairs",
                 "span_plugin.preprocess", "span_plugin.preprocess.binarize",
                 "span_plugin.preprocess.folder", "span_plugin.preprocess.glue",
                 "span_plugin.preprocess.table", "span_plugin.preprocess.conll",
                 "span_plugin.preprocess.pairs", "span_plugin.preprocess.check",
                 "span_plugin.preprocess.span_files", "span_plugin.preprocess.provenance",
                 "span_plugin.preprocess.ngrams", "span_plugin.cli.preprocess")


def test_preprocessing_loads_neither_torch_nor_fairseq():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in PREPROCESSING)
            + "from span_plugin.preprocess.ngrams import count_ngrams\n"
            + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'fairseq')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
