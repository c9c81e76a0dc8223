"""Binarized WikiText-2 for the span pre-training tests: the first lines of the real
wiki.valid / wiki.test, encoded with the real GPT-2 BPE and the n-gram segmenter in one
pass (span_plugin.preprocess.binary.binarize, as `span-preprocess binarize` does), once per
session."""

import shutil

from conftest import DATA, GPT2_BPE

WIKI = DATA / "wikitext-2"
_CACHE = {}


def wikitext_lines(name, n):
    with open(WIKI / name, encoding="utf-8") as f:
        return [line for _, line in zip(range(n), f)]


def wikitext_folder(root, train_lines=700, valid_lines=100):
    """DATA/{dict.txt, encoder.json, train.*, valid.*} with span files."""
    if "wiki" not in _CACHE:
        from span_plugin.preprocess.binary.binarize import binarize_file, write_dict
        from span_plugin.preprocess.segmentation.encoding import EncoderSpec

        spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                           vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
        data = root / "wiki-bin"
        for split, name, n in (("train", "wiki.valid.tokens", train_lines),
                               ("valid", "wiki.test.tokens", valid_lines)):
            text = root / f"{split}.txt"
            text.write_text("".join(wikitext_lines(name, n)), encoding="utf-8")
            binarize_file(text, data / split, spec, GPT2_BPE / "dict.txt", workers=1)
        write_dict(GPT2_BPE / "dict.txt", data)
        shutil.copy(GPT2_BPE / "encoder.json", data / "encoder.json")
        _CACHE["wiki"] = data
    return _CACHE["wiki"]
