"""Tasks span_tagging / span_labeling in-process on real CoNLL rows: the batch layout
(words, spans and tags after <s>), gold candidate targets, negative sampling, and the
refusal of items longer than the model."""

import pytest
import torch
from omegaconf import OmegaConf

from conftest import DATA, GPT2_BPE
from span_plugin.modules import entities as ner
from span_plugin.formats import tags as T
from span_plugin.criterions.ner import SpanLabelingCriterion
from span_plugin.preprocess.folders.conll import prepare_conll
from span_plugin.preprocess.folders.options import FolderOptions
from span_plugin.preprocess.segmentation.encoding import EncoderSpec
from span_plugin.tasks.span_tagging import SpanLabelingTask


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("conll_task")
    lines = open(DATA / "conll2003" / "train.txt", encoding="utf-8").readlines()[:200]
    (root / "train.txt").write_text("".join(lines))
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    prepare_conll(root / "bin", {"train": str(root / "train.txt")},
                  FolderOptions(spec, str(GPT2_BPE / "dict.txt")))
    return root / "bin"


def task_of(folder, **extra):
    cfg = OmegaConf.create({"_name": "span_labeling", "data": str(folder), "init_token": 0,
                            "max_positions": 512, "tagging_head": "sf",
                            "classification_head_name": "tagging_head", "no_shuffle": True,
                            "seed": 1, "max_span_words": 3, "negative_sampling": 0.0, **extra})
    return SpanLabelingTask.setup_task(cfg)


def test_batch_layout_and_targets(folder):
    task = task_of(folder)
    dataset = task.load_dataset("train")
    batch = dataset.collater([dataset[i] for i in range(8)])
    net = batch["net_input"]
    tokens, words, spans, target = net["src_tokens"], net["words"], net["spans"], batch["target"]
    assert (tokens[:, 0] == 0).all()
    raw = (folder / "raw" / "train.label").read_text().splitlines()
    names = task.tag_names
    for b in range(8):
        n = int(ner.word_counts(words[b:b + 1]))
        assert [names[i] for i in target[b, :n].tolist()] == raw[b].split(" ")
        assert (target[b, n:] == -100).all()
        assert words[b, 0, 0] == 1  # the first word starts right after <s>
        length = int((tokens[b] != task.dictionary.pad()).sum())
        assert words[b, n - 1, 1] == length - 1  # ... and the last ends before </s>
        real = spans[b][spans[b, :, 0] < spans[b, :, 1]]
        assert real[0, 0] == 1 and real[-1, 1] == length - 1
    # Candidate targets: every gold entity of at most L = 3 words, at (first, width - 1).
    _, valid = torch.zeros(0), torch.ones(8, words.size(1), 3, dtype=torch.bool)
    grid, unreachable = ner.labeling_targets(batch["entities"], valid)
    gold = ner.gold_entities(target, names)
    types = T.types_of(names)
    found = [sorted((i, i + w + 1, types[k - 1]) for i, w, k in
                    [(i, w, int(grid[b, i, w])) for i, w in grid[b].nonzero().tolist()])
             for b in range(8)]
    assert found == [sorted(e for e in g if e[1] - e[0] <= 3) for g in gold]
    assert unreachable == sum(e[1] - e[0] > 3 for g in gold for e in g)


def test_negative_sampling_keeps_a_quota_per_sentence():
    torch.manual_seed(0)
    negative = torch.ones(2, 10, 4, dtype=torch.bool)
    negative[1, 5:] = False
    words = torch.tensor([[[i, i + 1] for i in range(10)], [[i, i + 1] for i in range(5)] + [[0, 0]] * 5])
    kept = SpanLabelingCriterion._sample_negatives(negative, words, 0.5)
    assert kept.sum((1, 2)).tolist() == [5, 2]  # round(0.5 * 10), round(0.5 * 5) (banker's)
    assert not (kept & ~negative).any()


def test_items_longer_than_the_model_are_refused(folder):
    task = task_of(folder, max_positions=20)
    with pytest.raises(ValueError, match=r"train.bin: line \d+ has \d+ tokens, more than "
                                         r"--max-positions 20 .* --max-tokens 18"):
        task.load_dataset("train")
