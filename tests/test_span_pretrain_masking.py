"""Span masking (task spanbert_masked_lm) on real WikiText-2 with the real GPT-2 BPE:
statistics, whole words, 80/10/10, determinism, n-gram spans, word starts against the
encoders, and bad input."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import GPT2_BPE, minilm_dir
from span_pretrain_fixtures import wikitext_folder, wikitext_lines
from span_plugin.data.span_masking import truncated_geometric, words_from_starts
from span_plugin.data.word_boundaries import build_word_boundaries
from span_plugin.tasks.spanbert_masked_lm import SpanBertMaskedLMConfig, SpanBertMaskedLMTask


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    return wikitext_folder(tmp_path_factory.mktemp("wiki"))


def make_task(data, **overrides):
    cfg = OmegaConf.structured(SpanBertMaskedLMConfig(data=str(data), seed=1, **overrides))
    return SpanBertMaskedLMTask.setup_task(cfg)


def masked_view(task, split):
    """The SpanMaskedDataset inside the task's dataset (blocks, masker, rules)."""
    task.load_dataset(split)
    return task.datasets[split].dataset.defn["net_input.src_tokens"].dataset.dataset


def test_truncated_geometric_is_spanbert_s():
    p = truncated_geometric(0.2, 10)
    assert p.sum() == pytest.approx(1.0)
    assert (np.arange(1, 11) * p).sum() == pytest.approx(3.797, abs=1e-3)  # "mean 3.8"


def test_masking_statistics_on_wikitext2(wiki):
    """Stated tolerances (about 700 lines, 46k tokens, ~1,900 spans over 2 epochs):
    fraction chosen 15% +- 0.5 points; mean span 3.80 words +- 0.2 and every length's
    share within 0.03 of Geo(0.2) truncated at 10; 80/10/10 within 3 points; spans of
    whole words, never touching; specials never chosen."""
    task = make_task(wiki, tokens_per_sample=512, sample_break_mode="none")  # full blocks of 512
    ds = masked_view(task, "train")
    masker, rule = ds.masker, task.word_boundaries()
    special = masker.special
    lengths, kinds, chosen, maskable = [], np.zeros(3), 0, 0
    for epoch in (1, 2):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            tokens = ds.dataset[i].numpy()
            item = ds[i]
            source, target = item["source"].numpy(), item["target"].numpy()
            rng = np.random.default_rng((1, epoch, i))
            src2, tgt2, spans = masker(rng, tokens, word_start=rule(tokens))
            assert (src2 == source).all() and (tgt2 == target).all()  # (seed, epoch, index)
            ok = ~special[tokens]
            starts, word_len = words_from_starts(rule(tokens), ok)
            word_begin = np.zeros(len(tokens), dtype=bool)
            word_begin[starts] = True
            is_chosen = target != task.dictionary.pad()
            assert (target[is_chosen] == tokens[is_chosen]).all()
            assert not is_chosen[special[tokens]].any()
            assert (source[~is_chosen] == tokens[~is_chosen]).all()
            chosen += is_chosen.sum()
            maskable += ok.sum()
            for k, (s, e) in enumerate(spans):
                assert word_begin[s] and (e == len(tokens) or word_begin[e] or not ok[e])
                if k:  # at least one unmasked word between spans
                    assert word_begin[spans[k - 1][1]:s].any()
                lengths.append(int((word_begin & ok)[s:e].sum()))
                inside = np.arange(s, e)[ok[s:e]]
                if (source[inside] == task.mask_idx).all():
                    kinds[0] += 1
                elif (source[inside] == tokens[inside]).all():
                    kinds[2] += 1
                else:
                    kinds[1] += 1
    lengths = np.array(lengths)
    assert len(lengths) > 1500
    assert chosen / maskable == pytest.approx(0.15, abs=0.005)
    assert lengths.mean() == pytest.approx(3.80, abs=0.2)
    share = np.bincount(lengths, minlength=11)[1:] / len(lengths)
    assert np.abs(share - truncated_geometric(0.2, 10)).max() < 0.03
    assert np.allclose(kinds / kinds.sum(), [0.8, 0.1, 0.1], atol=0.03)
    # Another epoch masks differently.
    ds.set_epoch(3)
    assert not torch.equal(ds[0]["source"], ds._masked(1, 1, 0)["source"])


@pytest.mark.smoke  # fairseq's eos blocks read np.compat, which numpy 2 removed
def test_ngram_masking_takes_whole_segments(wiki):
    task = make_task(wiki, span_masking="ngram", sample_break_mode="eos", tokens_per_sample=512)
    ds = masked_view(task, "train")
    ds.set_epoch(1)
    spans = ds.segments.spans  # the span file: one item per line
    chosen = maskable = 0
    for i in range(len(ds)):
        tokens = ds.dataset[i].numpy()
        segs = ds.segments[i]
        # eos mode: block i is <s> + line i; its segments are the line's, moved by 1.
        assert (segs == spans[i].numpy().reshape(-1, 2) + 1).all()
        target = ds[i]["target"].numpy()
        is_chosen = target != task.dictionary.pad()
        for s, e in segs:  # a segment is chosen whole or not at all
            assert is_chosen[s:e].all() or not is_chosen[s:e].any()
        chosen += is_chosen.sum()
        maskable += (~ds.masker.special[tokens]).sum()
    assert 0.15 <= chosen / maskable <= 0.22  # whole n-grams overshoot the budget a little


def test_gpt2_word_starts_match_the_encoder():
    """The rule read from dict.txt + encoder.json gives the GPT-2 pre-token words the
    encoders use (:mod:`span_plugin.tokenizers.words`), on real WikiText lines."""
    from fairseq.data import Dictionary

    from span_plugin.preprocess.segmentation.encoding import make_encoder

    d = Dictionary.load(str(GPT2_BPE / "dict.txt"))
    rule = build_word_boundaries("auto", d.symbols, d.nspecial, GPT2_BPE / "encoder.json")
    enc = make_encoder(bpe="gpt2", encoder_json=GPT2_BPE / "encoder.json",
                       vocab_bpe=GPT2_BPE / "vocab.bpe", segmentation="none")
    lines = wikitext_lines("wiki.valid.tokens", 400) + ["Hello   world!! it's 3.5km, naïve café — “q”"]
    checked = 0
    for line in lines:
        tokens, starts, _ = enc.tokenizer.pieces(line.strip())
        if tokens:
            ids = np.array([d.index(t) for t in tokens])
            assert np.flatnonzero(rule(ids)).tolist() == starts, line
            checked += 1
    assert checked > 200


def test_wordpiece_word_starts_match_the_encoder():
    from span_plugin.preprocess.segmentation.encoding import make_encoder

    enc = make_encoder(bpe="wordpiece", wordpiece=minilm_dir(), segmentation="none")
    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    symbols = [enc.tokenizer.SPECIALS.get(t, t) for t in vocab]
    index = {t: i for i, t in enumerate(symbols)}
    rule = build_word_boundaries("auto", symbols, 0)
    for line in wikitext_lines("wiki.valid.tokens", 200):
        tokens, starts, _ = enc.tokenizer.pieces(line.strip())
        if tokens:
            assert np.flatnonzero(rule(np.array([index[t] for t in tokens]))).tolist() == starts


# ---- bad input ------------------------------------------------------------------------


def test_text_shorter_than_one_span_is_refused(wiki, tmp_path):
    from span_plugin.preprocess.binary.binarize import binarize_file, write_dict
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    (tmp_path / "t.txt").write_text("Too short .\n")
    spec = EncoderSpec(encoder_json=str(GPT2_BPE / "encoder.json"), vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    binarize_file(tmp_path / "t.txt", tmp_path / "d" / "train", spec, GPT2_BPE / "dict.txt")
    write_dict(GPT2_BPE / "dict.txt", tmp_path / "d")
    task = make_task(tmp_path / "d", encoder_json=str(GPT2_BPE / "encoder.json"))
    with pytest.raises(ValueError, match=r"d/train.bin holds 3 tokens of text, shorter than one span"):
        task.load_dataset("train")


def test_dictionary_without_word_marks_or_encoder_json_is_refused(tmp_path):
    (tmp_path / "dict.txt").write_text("hello 5\nworld 3\n")
    with pytest.raises(ValueError, match=r"dict.txt: cannot tell where words begin.*--word-boundaries token"):
        make_task(tmp_path).word_boundaries()
    assert make_task(tmp_path, word_boundaries="token").word_boundaries()(np.array([4, 5])).all()
    (tmp_path / "dict.txt").write_text("262 5\n13 3\n")
    with pytest.raises(ValueError, match=r"GPT-2 BPE ids: word boundaries need its encoder.json"):
        make_task(tmp_path).word_boundaries()


def test_missing_span_files_for_ngram_masking_are_named(wiki, tmp_path):
    import shutil

    for f in ("dict.txt", "train.bin", "train.idx"):
        shutil.copy(wiki / f, tmp_path / f)
    with pytest.raises(FileNotFoundError, match=r"train.spans.\{bin,idx\} not found.*span-preprocess binarize"):
        make_task(tmp_path, span_masking="ngram").load_dataset("train")
