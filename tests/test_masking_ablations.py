"""SpanBERT's masking ablations (task spanbert_masked_lm, ``--masking span|whole-word|
token``) on real Wikipedia paragraphs binarized with the real MiniLM WordPiece: the
fraction chosen, words respected or ignored, specials, 80/10/10, determinism, the span
masking unchanged from before the option existed, the span boundary objective's runs,
``--sample-break-mode complete_doc`` on empty lines (the default), and one fairseq-train
run per scheme."""

import gzip
import hashlib

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import DATA, TINY_ROBERTA, USER_DIR, minilm_dir, run_main
from span_plugin.data.masked_blocks import LinePiecesDataset
from span_plugin.data.span_masking import SpanMasker, words_from_starts
from span_plugin.tasks.spanbert_masked_lm import SpanBertMaskedLMConfig, SpanBertMaskedLMTask

WIKI = DATA / "wikipedia" / "wiki.AA.txt.gz"
SCHEMES = ("span", "whole-word", "token")


def wiki_lines(start, stop):
    """Lines start..stop of the real Wikipedia dump (paragraphs, empty lines between
    articles), newlines kept."""
    with gzip.open(WIKI, "rt", encoding="utf-8") as f:
        return [line for i, line in zip(range(stop), f) if i >= start]


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    """DATA/{dict.txt, train.*, valid.*}: the first 300 lines of wiki.AA (4 empty lines,
    so 5 articles) for train, the next 100 for valid; MiniLM's WordPiece, one word a span
    (segmentation none), as `span-preprocess binarize` writes them."""
    from span_plugin.preprocess.binary.binarize import binarize_file, write_dict
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    root = tmp_path_factory.mktemp("wiki")
    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    (root / "dict.txt").write_text("".join(f"{t} 1\n" for t in vocab if t not in specials))
    spec = EncoderSpec(bpe="wordpiece", wordpiece=str(minilm_dir()), segmentation="none")
    for split, (a, b) in (("train", (0, 300)), ("valid", (300, 400))):
        (root / f"{split}.txt").write_text("".join(wiki_lines(a, b)), encoding="utf-8")
        binarize_file(root / f"{split}.txt", root / "bin" / split, spec, root / "dict.txt")
    write_dict(root / "dict.txt", root / "bin")
    return root / "bin"


def make_task(data, **overrides):
    cfg = OmegaConf.structured(SpanBertMaskedLMConfig(data=str(data), **{"seed": 1, **overrides}))
    return SpanBertMaskedLMTask.setup_task(cfg)


def masked_view(task, split="train"):
    """The SpanMaskedDataset inside the task's dataset (blocks, masker, rules)."""
    task.load_dataset(split)
    return task.datasets[split].dataset.defn["net_input.src_tokens"].dataset.dataset


def text_lines(data, task, split="train"):
    from fairseq.data import data_utils

    return data_utils.load_indexed_dataset(str(data / split), task.dictionary)


# ---- span masking as it was --------------------------------------------------------------

# sha256 (first 16 hex digits) of source and target of blocks 0..39 in epochs 1 and 2,
# computed with the code before --masking existed (its default break mode was none).
BEFORE = [
    (dict(span_masking="geometric", sample_break_mode="none", tokens_per_sample=128, seed=1), 220, "dc10c965de37a515"),
    (dict(span_masking="geometric", sample_break_mode="none", tokens_per_sample=512, seed=7), 55, "9b17d182701c6064"),
    (dict(span_masking="geometric", sample_break_mode="eos", tokens_per_sample=512, seed=3), 300, "f464cb9e87b19f41"),
    (dict(span_masking="ngram", sample_break_mode="none", tokens_per_sample=128, seed=1), 220, "6e503df573a1884d"),
]


@pytest.mark.parametrize("settings, blocks, digest", BEFORE)
def test_span_masking_is_unchanged(wiki, settings, blocks, digest):
    ds = masked_view(make_task(wiki, masking="span", **settings))
    h = hashlib.sha256()
    for epoch in (1, 2):
        ds.set_epoch(epoch)
        for i in range(40):
            item = ds[i]
            h.update(item["source"].numpy().astype(np.int64).tobytes())
            h.update(item["target"].numpy().astype(np.int64).tobytes())
    assert (len(ds), h.hexdigest()[:16]) == (blocks, digest)


# ---- the three schemes -------------------------------------------------------------------


def scheme_stats(wiki, scheme, epochs=(1, 2), tokens_per_sample=128):
    """Per block of the default complete_doc blocks: tokens, source, target, the word
    starts, and the scheme's chosen ranges, checked against the dataset's own item."""
    task = make_task(wiki, masking=scheme, tokens_per_sample=tokens_per_sample)
    ds = masked_view(task)
    rule = task.word_boundaries()
    out = []
    for epoch in epochs:
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            tokens = ds.dataset[i].numpy()
            item = ds[i]
            rng = np.random.default_rng((1, epoch, i))
            src, tgt, ranges = ds.masker(rng, tokens, word_start=rule(tokens))
            assert (src == item["source"].numpy()).all() and (tgt == item["target"].numpy()).all()
            out.append((tokens, item["source"].numpy(), item["target"].numpy(), rule(tokens), ranges))
    return task, ds, out


@pytest.fixture(scope="module")
def stats(wiki):
    return {s: scheme_stats(wiki, s) for s in SCHEMES}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fifteen_percent_of_maskable_tokens_no_special(stats, scheme):
    """284 blocks of <= 128 tokens x 2 epochs per scheme (about 8,000 tokens chosen):
    chosen / maskable within 0.5 points of
    15 %; token masking chooses exactly round(0.15 n) of the n maskable tokens of a block
    (its first and last position excepted), whole-word masking never more; specials are
    never chosen; the source differs from the text only at chosen positions."""
    task, ds, blocks = stats[scheme]
    pad, special = task.dictionary.pad(), ds.masker.special
    chosen = maskable = 0
    for tokens, source, target, _, _ in blocks:
        is_chosen = target != pad
        ok = ~special[tokens]
        assert not is_chosen[special[tokens]].any()
        assert (target[is_chosen] == tokens[is_chosen]).all()
        assert (source[~is_chosen] == tokens[~is_chosen]).all()
        assert not is_chosen[0] and not is_chosen[-1]
        budget = max(1, round(0.15 * ok[1:-1].sum()))
        if scheme == "token":
            assert is_chosen.sum() == budget
        elif scheme == "whole-word":
            assert is_chosen.sum() <= budget
        chosen += is_chosen.sum()
        maskable += ok.sum()
    assert chosen / maskable == pytest.approx(0.15, abs=0.005), chosen / maskable


def test_token_masking_ignores_words(stats):
    """Chosen tokens fall inside words as often as tokens do: the share of word-internal
    tokens (## pieces) among the chosen ones is within 2 points of their share of the
    maskable tokens, and many chosen pieces leave another piece of their word unmasked."""
    task, ds, blocks = stats["token"]
    pad, special = task.dictionary.pad(), ds.masker.special
    inner_chosen = chosen = inner = maskable = partial = 0
    for tokens, _, target, word_start, _ in blocks:
        ok = ~special[tokens]
        is_chosen = target != pad
        starts, lengths = words_from_starts(word_start, ok)
        word = np.repeat(np.arange(len(starts)), lengths)  # word of each maskable token
        inside = ok & ~np.isin(np.arange(len(tokens)), starts)
        inner_chosen += (is_chosen & inside).sum()
        chosen += is_chosen.sum()
        inner += inside.sum()
        maskable += ok.sum()
        hits = np.bincount(word[is_chosen[ok]], minlength=len(starts))
        partial += ((hits > 0) & (hits < lengths)).sum()
    assert inner / maskable > 0.08  # 11 %: WordPiece splits enough words for the test to mean something
    assert inner_chosen / chosen == pytest.approx(inner / maskable, abs=0.02)
    assert partial > 500  # 1,234


def test_whole_word_masking_takes_whole_words(stats):
    """Every word is chosen whole or not at all, each word's replacement is one of
    80/10/10 for all its pieces (within 3 points over about 7,500 words)."""
    task, ds, blocks = stats["whole-word"]
    pad, special, mask = task.dictionary.pad(), ds.masker.special, task.mask_idx
    kinds = np.zeros(3)
    multi = 0
    for tokens, source, target, word_start, ranges in blocks:
        ok = ~special[tokens]
        is_chosen = target != pad
        starts, lengths = words_from_starts(word_start, ok)
        for s, n in zip(starts, lengths):
            assert is_chosen[s:s + n].all() or not is_chosen[s:s + n].any(), (s, n)
        for s, e in ranges:  # each range is one word
            assert s in starts and e - s == lengths[np.searchsorted(starts, s)]
            multi += e - s > 1
            if (source[s:e] == mask).all():
                kinds[0] += 1
            elif (source[s:e] == tokens[s:e]).all():
                kinds[2] += 1
            else:
                kinds[1] += 1
    assert kinds.sum() > 2500 and multi > 200
    assert np.allclose(kinds / kinds.sum(), [0.8, 0.1, 0.1], atol=0.03), kinds / kinds.sum()


def test_token_masking_replaces_per_token(stats):
    task, ds, blocks = stats["token"]
    mask = task.mask_idx
    kinds = np.zeros(3)
    for tokens, source, _, _, ranges in blocks:
        assert ((ranges[:, 1] - ranges[:, 0]) == 1).all()
        pos = ranges[:, 0]
        kinds += [(source[pos] == mask).sum(), ((source[pos] != mask) & (source[pos] != tokens[pos])).sum(),
                  (source[pos] == tokens[pos]).sum()]
    # A random replacement may draw the token itself (1 in 30,000): counted as unchanged.
    assert np.allclose(kinds / kinds.sum(), [0.8, 0.1, 0.1], atol=0.02), kinds / kinds.sum()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_masking_is_deterministic_per_seed_epoch_and_block(wiki, scheme):
    a = masked_view(make_task(wiki, masking=scheme))
    b = masked_view(make_task(wiki, masking=scheme))  # another task: another process, a relaunch
    other_seed = masked_view(make_task(wiki, masking=scheme, seed=2))
    for ds in (a, b, other_seed):
        ds.set_epoch(3)
    for i in (0, 7, len(a) - 1):
        assert torch.equal(a[i]["source"], b[i]["source"]) and torch.equal(a[i]["target"], b[i]["target"])
    assert not all(torch.equal(a[i]["target"], other_seed[i]["target"]) for i in range(5))
    assert not all(torch.equal(a[i]["target"], a._masked(1, 1, i)["target"]) for i in range(5))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_span_boundaries_of_every_run_are_visible_tokens_of_the_row(wiki, scheme):
    """The SBO's runs (maximal runs of targets in a padded batch) have both boundary
    positions inside the row, unmasked and not padding, for every scheme."""
    from span_plugin.modules.span_boundary import masked_runs

    task = make_task(wiki, masking=scheme)
    task.load_dataset("train")
    dataset = task.datasets["train"]
    batch = dataset.collater([dataset[i] for i in range(0, len(dataset), 3)])
    target, tokens = batch["target"], batch["net_input"]["src_tokens"]
    mask = target.ne(task.dictionary.pad())
    rows, position, left, right = masked_runs(mask)
    assert len(position) > 500
    assert (left < position).all() and (position < right).all()
    for edge in (left, right):
        assert not mask[rows, edge].any()
        assert tokens[rows, edge].ne(task.dictionary.pad()).all()
    lengths = batch["net_input"]["src_lengths"]
    assert (right < lengths[rows]).all()
    # Runs: for token masking mostly single tokens, for spans several.
    runs = (position == left + 1).sum().item()
    mean_run = len(position) / runs
    assert {"token": mean_run < 1.4, "whole-word": 1.2 < mean_run < 2.5, "span": mean_run > 2.5}[scheme], mean_run


def test_masker_refuses_unknown_scheme_and_missing_word_starts():
    special = np.zeros(10, dtype=bool)
    special[:4] = True
    with pytest.raises(ValueError, match=r"masking scheme 'words': expected one of"):
        SpanMasker(mask_idx=9, pad_idx=1, replacement_ids=np.arange(4, 9), special=special, scheme="words")
    masker = SpanMasker(mask_idx=9, pad_idx=1, replacement_ids=np.arange(4, 9), special=special,
                        scheme="whole-word")
    with pytest.raises(ValueError, match=r"'whole-word' needs the word starts"):
        masker(np.random.default_rng(0), np.array([0, 5, 6, 7, 2]))


# ---- complete_doc on empty lines ---------------------------------------------------------


def test_empty_lines_are_document_breaks_for_complete_doc(wiki):
    """`span-preprocess binarize` writes an empty line as an item of one </s>; fairseq's
    TokenBlockDataset complete_doc takes it as a document break. With the task's default
    (complete_doc), no block holds tokens of two articles, every text token is in exactly
    one block, and no block is longer than --tokens-per-sample (lines longer than a block
    are cut into pieces, instead of fairseq's oversized blocks that fairseq-train drops)."""
    from fairseq.data import TokenBlockDataset

    raw = wiki_lines(0, 300)
    empty = [i for i, line in enumerate(raw) if not line.strip()]
    assert len(empty) == 4
    task = make_task(wiki, tokens_per_sample=128)
    assert task.cfg.sample_break_mode == "complete_doc" and task.cfg.masking == "span"
    lines = text_lines(wiki, task)
    sizes = np.asarray(lines.sizes)
    assert np.flatnonzero(sizes == 1).tolist() == empty
    assert all(lines[i].tolist() == [task.dictionary.eos()] for i in empty)
    doc = np.repeat(np.cumsum(sizes == 1), sizes)  # the article of every token

    # fairseq alone, blocks big enough for every line: whole lines, never across articles.
    plain = TokenBlockDataset(lines, sizes, 1024, pad=1, eos=2, break_mode="complete_doc")
    assert all(len(set(doc[a:b])) == 1 for a, b in plain.slice_indices)
    assert sum(b - a for a, b in plain.slice_indices) == sizes.sum() - len(empty)
    # ... but a line longer than the block becomes one oversized block.
    small = TokenBlockDataset(lines, sizes, 127, pad=1, eos=2, break_mode="complete_doc")
    assert small.sizes.max() == sizes.max() > 127

    ds = masked_view(task)
    blocks = ds.dataset.dataset  # the TokenBlockDataset the task built
    assert (sizes > 127).sum() > 50  # many paragraphs are longer than a block
    assert blocks.sizes.max() <= 127 and all(len(ds.dataset[i]) <= 128 for i in range(len(ds)))
    assert all(len(set(doc[a:b])) == 1 for a, b in blocks.slice_indices)
    covered = np.zeros(sizes.sum(), dtype=int)
    for a, b in blocks.slice_indices:
        covered[a:b] += 1
    assert (covered[sizes.cumsum()[empty] - 1] == 0).all()  # the breaks themselves
    assert covered.sum() == sizes.sum() - len(empty) and covered.max() == 1
    # The blocks hold the text in order: block tokens = the lines' tokens.
    flat = torch.cat([lines[i] for i in range(len(lines))]).numpy()
    for i in (0, 1, len(blocks) // 2, len(blocks) - 1):
        a, b = blocks.slice_indices[i]
        assert (blocks[i].numpy() == flat[a:b]).all()


def test_line_pieces_never_leave_a_lone_eos():
    lines = [torch.arange(n) + 1000 * j for j, n in enumerate([1, 5, 9, 4, 13, 1, 3, 8])]
    pieces = LinePiecesDataset(lines, [len(x) for x in lines], 4)
    assert pieces.sizes.tolist() == [1, 3, 2, 4, 3, 2, 4, 4, 4, 3, 2, 1, 3, 4, 4]
    assert torch.equal(torch.cat([pieces[i] for i in range(len(pieces))]), torch.cat(lines))
    assert pieces.line.tolist() == [0, 1, 1, 2, 2, 2, 3, 4, 4, 4, 4, 5, 6, 7, 7]
    with pytest.raises(ValueError, match=r"--tokens-per-sample must be at least 4"):
        LinePiecesDataset(lines, [len(x) for x in lines], 2)


def test_ngram_segments_follow_cut_lines(wiki):
    """--span-masking ngram with complete_doc blocks of cut lines: the block's segments
    (here one word each: segmentation none) start exactly at its word starts."""
    task = make_task(wiki, span_masking="ngram", tokens_per_sample=64)
    ds = masked_view(task)
    rule = task.word_boundaries()
    assert ds.segments.item_lines is not None
    for i in range(len(ds)):
        tokens = ds.dataset[i].numpy()
        segs = ds.segments[i]
        starts, _ = words_from_starts(rule(tokens), ~ds.masker.special[tokens])
        assert (segs[:, 0] >= 1).all() and (segs[:, 1] <= len(tokens)).all()
        assert np.array_equal(np.sort(segs[:, 0]), starts), i


# ---- end to end: fairseq-train --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("scheme, sbo", [("span", 1), ("span", 0), ("whole-word", 1), ("token", 1)])
def test_fairseq_train_two_updates(wiki, tmp_path, scheme, sbo):
    log = run_main("fairseq-train", *[
        wiki, "--user-dir", USER_DIR, "--task", "spanbert_masked_lm", "--criterion", "spanbert_masked_lm",
        "--arch", "roberta_spanbert_base", *TINY_ROBERTA, "--masking", scheme, "--sbo-weight", sbo,
        "--tokens-per-sample", "64", "--batch-size", "8", "--optimizer", "adam", "--lr", "1e-3",
        "--max-update", "2", "--cpu", "--num-workers", "0", "--seed", "1", "--save-dir", tmp_path,
        "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1",
        "--validate-interval-updates", "2", "--no-progress-bar"]).stdout
    assert "num_updates 2" in log or "num_updates=2" in log, log[-3000:]
    valid = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert valid and "mlm_loss" in valid[-1]
    assert ("sbo_loss" in valid[-1]) == bool(sbo)
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert state["cfg"]["task"]["masking"] == scheme
    assert state["cfg"]["task"]["sample_break_mode"] == "complete_doc"


@pytest.mark.research  # experiments/masking_ablation.py and masking_report.py
def test_masking_records_carry_their_folder_and_the_report_prints_it(tmp_path):
    """experiments/masking_ablation.py: a new record carries its binarized folder's
    record (no provenance.json there: its segmentation file) and the model's settings;
    the report says "not recorded" for the committed records made before."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    import grid_lib

    data = tmp_path / "data"
    data.mkdir()
    (data / "segmentation").write_text("none\n")
    facts = grid_lib.trained_on(data, tmp_path / "no-checkpoint.pt")
    assert facts["data_record"]["encoder"] == {"segmentation": "none"}
    old = (ROOT / "experiments" / "results" / "masking_ablation.jsonl").read_text().splitlines()
    new = dict(json.loads(old[0]), condition="token", **facts)
    results = tmp_path / "r.jsonl"
    results.write_text("\n".join(old[:3] + [json.dumps(new)]) + "\n")
    out = tmp_path / "r.md"
    subprocess.run([sys.executable, ROOT / "experiments" / "masking_report.py", "--results",
                    results, "--out", out, "--figure", tmp_path / "f.png"], check=True)
    text = out.read_text()
    assert "- n-gram dictionary: none (segmentation none) (1 run: token)" in text
    assert "- n-gram dictionary: not recorded (3 runs: " in text
