"""Test data for the task/model tests, and tests of the span dataset wrappers.

``glue_folder(task)`` runs ``span-preprocess glue`` on the first rows of real GLUE.
``write_folder(out, rows, ...)`` makes a folder with spans of our choosing, as
RoBERTa's recipe does (GPT-2 BPE with fairseq's own encoder and the local BPE files,
``fairseq-preprocess --only-source --srcdict``) plus span files written with
``SpanIndexWriter`` from a simple segmentation: consecutive groups of GPT-2
pre-tokens ("words"). Folders are built once per session and shared by the modules.
"""

import functools
import tempfile
from pathlib import Path

import numpy as np
import torch

from conftest import GLUE, GPT2_BPE, run_cli, run_main

from span_plugin.data.span_datasets import CropWindowDataset, LayoutSpansDataset
from span_plugin.modules.span_layout import layout_starts
from span_plugin.preprocess.binary.span_files import SpanIndexWriter

# task: (columns of the sentences, label column, header?, regression?)
GLUE_LAYOUT = {
    "SST-2": ((0,), 1, True, False),
    "CoLA": ((3,), 1, False, False),
    "MRPC": ((3, 4), 0, True, False),
    "STS-B": ((7, 8), 9, True, True),
}
ROWS = {"train": 160, "valid": 64}


@functools.lru_cache(maxsize=None)
def gpt2():
    from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

    return get_encoder(str(GPT2_BPE / "encoder.json"), str(GPT2_BPE / "vocab.bpe"))


def encode_with_spans(text, words_per_span=2):
    """BPE ids of ``text`` and spans over them: every ``words_per_span`` GPT-2
    pre-tokens make one span. Returns ``(ids, [(start, end), ...])``."""
    enc = gpt2()
    ids, word_bounds = [], []
    for word in enc.re.findall(enc.pat, text.strip()):
        piece = enc.encode(word)
        word_bounds.append((len(ids), len(ids) + len(piece)))
        ids.extend(piece)
    spans = [
        (word_bounds[i][0], word_bounds[min(i + words_per_span, len(word_bounds)) - 1][1])
        for i in range(0, len(word_bounds), words_per_span)
    ]
    return ids, spans


def read_rows(task, split, n):
    cols, label_col, header, _ = GLUE_LAYOUT[task]
    with open(GLUE / task / split, encoding="utf-8-sig") as h:
        lines = h.read().splitlines()
    if header:
        lines = lines[1:]
    rows = [line.split("\t") for line in lines if line.strip()][:n]
    return [([r[c] for c in cols], r[label_col]) for r in rows]


def write_folder(out, split_rows, regression, words_per_span=2):
    """Write a complete span_classification data folder.

    split_rows: {split: [(sentences, label), ...]}; labels are strings.
    """
    out = Path(out)
    n_inputs = len(next(iter(split_rows.values()))[0][0])
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for k in range(n_inputs):
        (out / f"input{k}").mkdir(exist_ok=True)
        for split, rows in split_rows.items():
            span_file = str(out / f"input{k}" / split) + ".spans"
            with open(raw / f"{split}.input{k}", "w") as h, SpanIndexWriter(span_file) as w:
                for sentences, _ in rows:
                    ids, spans = encode_with_spans(sentences[k], words_per_span)
                    h.write(" ".join(map(str, ids)) + "\n")
                    w.add(spans)
        run_main(
            "fairseq-preprocess", "--only-source", "--srcdict", GPT2_BPE / "dict.txt",
            *[a for split in split_rows for a in (f"--{split}pref", raw / f"{split}.input{k}")],
            "--destdir", out / f"input{k}", "--workers", "1",
        )
    (out / "label").mkdir(exist_ok=True)
    for split, rows in split_rows.items():
        with open(raw / f"{split}.label", "w") as h:
            h.writelines(f"{label}\n" for _, label in rows)
        if regression:
            with open(out / "label" / f"{split}.label", "w") as h:
                h.writelines(f"{float(label)}\n" for _, label in rows)
    if not regression:
        run_main(
            "fairseq-preprocess", "--only-source",
            *[a for split in split_rows for a in (f"--{split}pref", raw / f"{split}.label")],
            "--destdir", out / "label", "--workers", "1",
        )
    return out


_ROOT = None


def _root():
    global _ROOT
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="span_task_data_"))
    return _ROOT


def mini_glue(n_rows=ROWS["train"]):
    """A glue_data folder holding the first ``n_rows`` rows of each real TSV."""
    out = _root() / f"glue{n_rows}"
    if not out.exists():
        for task in GLUE_LAYOUT:
            (out / task).mkdir(parents=True)
            for split in ("train", "dev", "test"):
                lines = (GLUE / task / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
                header = 0 if (task == "CoLA" and split != "test") else 1
                keep = lines[: header + (n_rows if split == "train" else ROWS["valid"])]
                (out / task / f"{split}.tsv").write_text("\n".join(keep) + "\n", encoding="utf-8")
    return out


def spec_args():
    """The encoder arguments of ``span-preprocess`` for the local GPT-2 files."""
    return [
        "--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe",
        "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1",
    ]


@functools.lru_cache(maxsize=None)
def glue_folder(task):
    """A folder prepared by ``span-preprocess glue`` (greedy n-gram segmentation with
    the packaged dictionary) from the first rows of real GLUE: train from train.tsv,
    valid from dev.tsv, test from test.tsv (no labels)."""
    out = _root() / f"{task}-bin"
    run_cli("span-preprocess", "glue", "--task", task, "--glue-dir", mini_glue(), "--out", out, *spec_args())
    return out


# ----------------------------------------------------------------------------------
# Tests of the dataset wrappers.


class _Items(list):
    @property
    def sizes(self):
        return np.array([len(x) for x in self])


def test_layout_starts_pair():
    # input0 sizes include the appended </s>: "a b c </s>" -> 4
    starts = layout_starts([np.array([4, 2]), np.array([3, 5])], init_token=0, separator_token=2)
    assert starts[0].tolist() == [1, 1]
    assert starts[1].tolist() == [1 + 4 + 1, 1 + 2 + 1]  # <s> A </s> </s> | B
    starts = layout_starts([np.array([4])], init_token=None, separator_token=None)
    assert starts[0].tolist() == [0]


def test_spans_shifted_into_pair_layout():
    a = _Items([torch.tensor([0, 2, 2, 3], dtype=torch.int32)])  # A = 3 tokens
    b = _Items([torch.tensor([0, 1, 1, 4], dtype=torch.int32)])  # B = 4 tokens
    starts = layout_starts([np.array([4]), np.array([5])], 0, 2)
    ds = LayoutSpansDataset([a, b], starts)
    # <s> a0 a1 a2 </s> </s> b0 b1 b2 b3 </s>
    assert ds[0].tolist() == [[1, 3], [3, 4], [6, 7], [7, 10]]


def test_truncation_drops_and_clips_spans():
    tokens = _Items([torch.arange(11)])  # the concatenated layout above
    crop = CropWindowDataset(tokens, 8, mode="truncate")
    a = _Items([torch.tensor([0, 2, 2, 3])])
    b = _Items([torch.tensor([0, 1, 1, 4])])
    ds = LayoutSpansDataset([a, b], layout_starts([np.array([4]), np.array([5])], 0, 2), crop=crop)
    assert crop[0].tolist() == list(range(8))
    assert ds[0].tolist() == [[1, 3], [3, 4], [6, 7], [7, 8]]  # last clipped at the cut
    crop5 = CropWindowDataset(tokens, 5, mode="truncate")
    ds5 = LayoutSpansDataset([a, b], layout_starts([np.array([4]), np.array([5])], 0, 2), crop=crop5)
    assert ds5[0].tolist() == [[1, 3], [3, 4]]  # all of B's spans cut away
    crop1 = CropWindowDataset(tokens, 1, mode="truncate")
    ds1 = LayoutSpansDataset([a, b], layout_starts([np.array([4]), np.array([5])], 0, 2), crop=crop1)
    assert ds1[0].shape == (0, 2)  # every span truncated away: no span, documented
    assert ds1.collater([ds1[0]]).tolist() == [[[0, 0]]]


def test_random_crop_moves_spans_with_tokens():
    tokens = _Items([torch.arange(100, 140)])
    spans_flat = torch.tensor([i for k in range(0, 39, 3) for i in (k, k + 3)])
    a = _Items([spans_flat])
    crop = CropWindowDataset(tokens, 10, mode="random_crop", seed=3)
    ds = LayoutSpansDataset([a], [np.zeros(1, dtype=np.int64)], crop=crop)
    for epoch in (1, 2, 3):
        crop.set_epoch(epoch)
        toks = crop[0]
        lo = int(toks[0]) - 100
        expect = [
            [max(s, lo) - lo, min(e, lo + 10) - lo]
            for s, e in spans_flat.view(-1, 2).tolist()
            if e > lo and s < lo + 10
        ]
        assert ds[0].tolist() == expect


def test_max_spans_and_tokens():
    a = _Items([torch.tensor([0, 5, 5, 6, 6, 9])])
    ds = LayoutSpansDataset([a], [np.array([1])], max_spans=2, max_span_tokens=2)
    assert ds[0].tolist() == [[1, 3], [6, 7]]
    for no_limit in (None, 0):  # --max-spans 0 keeps all, as clip_spans says
        ds = LayoutSpansDataset([a], [np.array([1])], max_spans=no_limit, max_span_tokens=no_limit)
        assert ds[0].tolist() == [[1, 6], [6, 7], [7, 10]]


def test_collater_pads_to_longest():
    a = _Items([torch.tensor([0, 1, 1, 2]), torch.tensor([0, 3])])
    ds = LayoutSpansDataset([a], [np.array([1, 1])])
    batch = ds.collater([ds[0], ds[1]])
    assert batch.dtype == torch.long and batch.shape == (2, 2, 2)
    assert batch[1].tolist() == [[1, 4], [0, 0]]


def test_glue_folder_layout():
    folder = glue_folder("MRPC")
    for name in ("input0/train.bin", "input0/test.spans.idx", "input1/valid.spans.bin", "label/dict.txt"):
        assert (folder / name).exists(), name
    rows = {"train": read_rows("MRPC", "train.tsv", 8), "valid": read_rows("MRPC", "dev.tsv", 4)}
    own = write_folder(_root() / "own-MRPC", rows, regression=False)
    assert (own / "input1" / "valid.spans.bin").exists()
