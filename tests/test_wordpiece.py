"""WordPiece with spans: the BERT word scheme, token ids against an independent
tokenizer on real GLUE rows, the fast path against the library's pipeline, and
dictionary/encoder scheme checks."""

import functools

import pytest

from conftest import GLUE, GPT2_BPE, minilm_dir, run_cli, run_main

from span_plugin.preprocess import load_ngrams, make_encoder
from span_plugin.tokenizers import words as W
from span_plugin.formats.glue import TASKS, read_split

SOURCES = [("CoLA", "train"), ("SST-2", "dev"), ("MRPC", "train"), ("STS-B", "train"),
           ("QNLI", "dev"), ("WNLI", "train")]


@functools.lru_cache(maxsize=None)
def glue_sentences():
    """Every input field of the real GLUE files above (about 40k sentences)."""
    out = []
    for task, split in SOURCES:
        rows = read_split(TASKS[task], GLUE / task / f"{split}.tsv", split)
        for column in rows.inputs:
            out.extend(column)
    return out


@functools.lru_cache(maxsize=None)
def encoder(segmentation="greedy"):
    return make_encoder(bpe="wordpiece", wordpiece=str(minilm_dir()), segmentation=segmentation)


def sample():
    """A few hundred plain rows plus every row that leaves ASCII (the library path)."""
    sents = glue_sentences()
    unusual = [s for s in sents if not s.isascii()]
    assert len(unusual) > 50  # real GLUE has accents, dashes, CJK, ...
    return sents[::100] + unusual


def test_token_ids_equal_an_independent_bert_tokenizer_on_real_rows():
    from transformers import BertTokenizer  # the pure-Python reference implementation

    reference = BertTokenizer(str(minilm_dir() / "vocab.txt"), do_lower_case=True)
    enc = encoder()
    specials = {v: k for k, v in enc.tokenizer.SPECIALS.items()}
    for text in sample():
        tokens, _ = enc.encode(text)
        ours = reference.convert_tokens_to_ids([specials.get(t, t) for t in tokens])
        assert ours == reference.encode(text.strip(), add_special_tokens=False), text


def test_spans_cover_whole_words_of_the_tokenizer():
    """Spans partition the tokens, each span is whole words (the tokenizer's own
    pre-tokens), and each multi-word span is an n-gram of the BERT dictionary."""
    enc = encoder()
    grams = enc.segmenter.ngrams.grams
    multi = 0
    for text in sample():
        tokens, spans = enc.encode(text)
        e = enc.tokenizer.library.encode(text.strip(), add_special_tokens=False)
        word_starts = {i for i, w in enumerate(e.word_ids) if i == 0 or w != e.word_ids[i - 1]}
        assert [s for s, _ in spans] == sorted(s for s, _ in spans)
        assert all(b[1] == a[0] for b, a in zip(spans, spans[1:]))
        assert (spans[0][0], spans[-1][1]) == (0, len(tokens)) if tokens else spans == []
        for s, end in spans:
            assert s in word_starts and (end in word_starts or end == len(tokens))
            words = [e.word_ids[i] for i in range(s, end)]
            if words[0] != words[-1]:
                multi += 1
                keys = W.bert_keys([text.strip()[e.offsets[i][0]:e.offsets[j - 1][1]]
                                    for i, j in _word_ranges(e.word_ids, s, end)])
                assert tuple(keys) in grams, (text, keys)
    assert multi > 100


def _word_ranges(word_ids, start, end):
    bounds = [i for i in range(start, end) if i == start or word_ids[i] != word_ids[i - 1]]
    return list(zip(bounds, bounds[1:] + [end]))


def test_fast_path_equals_the_library_pipeline_on_every_glue_row():
    enc = encoder()
    fast = 0
    for text in glue_sentences():
        text = text.strip()
        if enc.tokenizer._plain(text):
            fast += 1
            assert enc.tokenizer.pieces(text) == enc.tokenizer._pieces_full(text), text
    assert fast > 0.9 * len(glue_sentences())


def test_fast_path_steps_aside_for_added_tokens_and_unicode():
    enc = encoder()
    for text in ["a [SEP] b", "Café au lait", "ctrl\x07char", "中国"]:
        assert not enc.tokenizer._plain(text)
        assert enc.tokenizer.pieces(text) == enc.tokenizer._pieces_full(text)
    tok = enc.tokenizer
    assert tok._plain("tab\there") and tok.pieces("tab\there") == tok._pieces_full("tab\there")
    assert enc.encode("a [SEP] b")[0] == ["a", "</s>", "b"]


def test_bert_words_split_punctuation_per_character():
    assert W.bert_words("Don't stop -- New York's café!") == [
        "don", "'", "t", "stop", "-", "-", "new", "york", "'", "s", "cafe", "!"]
    # Keys of words cut by a cased tokenizer are canonical too.
    assert W.bert_keys(["Café", "York", "中"]) == ["cafe", "york", "中"]


def test_dictionary_and_encoder_must_share_the_word_scheme(tmp_path):
    assert load_ngrams(words="bert").words == "bert"
    assert load_ngrams().words == "gpt2"
    with pytest.raises(ValueError, match="over 'gpt2' words.*segments 'bert' words"):
        make_encoder(bpe="wordpiece", wordpiece=str(minilm_dir()),
                     ngrams=load_ngrams(words="gpt2"))
    with pytest.raises(ValueError, match="over 'bert' words.*segments 'gpt2' words"):
        make_encoder(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                     vocab_bpe=str(GPT2_BPE / "vocab.bpe"), ngrams=load_ngrams(words="bert"))
    # The same refusal from the command line, as an error and not a traceback.
    gpt2_dict = tmp_path / "g.txt"
    gpt2_dict.write_text("# span_plugin ngrams v1 words=gpt2 n=2..5\nnew york\t5\n")
    proc = run_cli("span-preprocess", "encode", "--bpe", "wordpiece", "--wordpiece",
                   minilm_dir(), "--ngrams", gpt2_dict, "New York", check=False)
    assert proc.returncode == 2 and "span-preprocess ngrams --words bert" in proc.stdout


def test_ngrams_counted_over_bert_words(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Don't go to New York's zoo.\n" * 3 + "We don't go.\n")
    out = tmp_path / "d.txt"
    run_main("span-preprocess", "ngrams", "--text", text, "--out", out, "--words", "bert",
            "--min-count", "3", "--workers", "1")
    d = load_ngrams(out)
    assert d.words == "bert"
    assert ("don", "'", "t") in d.grams and ("new", "york") in d.grams
    enc = make_encoder(bpe="wordpiece", wordpiece=str(minilm_dir()), ngrams=d)
    assert enc.encode_words("We don't like New York.") == [
        ["we"], ["don", "'", "t"], ["like"], ["new", "york"], ["."]]


def test_vocab_txt_and_tokenizer_json_give_the_same_tokens(tmp_path):
    (tmp_path / "vocab.txt").write_bytes((minilm_dir() / "vocab.txt").read_bytes())
    from_vocab = make_encoder(bpe="wordpiece", wordpiece=str(tmp_path / "vocab.txt"))
    for text in sample()[:300]:
        assert from_vocab.encode(text) == encoder().encode(text), text
