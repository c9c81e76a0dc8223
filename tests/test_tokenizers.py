"""The tokenizer registry (a kind registered anywhere is a ``--bpe`` kind) and each real
tokenizer's character offsets, which map its tokens back to the text."""

import unicodedata

import pytest

from conftest import GLUE, GPT2_BPE, minilm_dir
from span_plugin.cli.preprocess import main as preprocess_main
from span_plugin.files.atomic import atomic_write
from span_plugin.formats.glue import TASKS, read_split
from span_plugin.preprocess.segmentation.encoding import BPE_KINDS, EncoderSpec, SpanTokenizer, make_encoder
from span_plugin.tokenizers import TOKENIZERS, Tokenizer, build_tokenizer, register_tokenizer
from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.base import offsets_in_words


@pytest.fixture
def toy_kind():
    """A whitespace tokenizer that reads a vocabulary (``bpe_vocab``): out-of-vocabulary
    words become ``<unk>``. Registered for the test only."""

    @register_tokenizer("toy-whitespace")
    class WhitespaceTokenizer(Tokenizer):
        files = ("bpe_vocab",)

        def __init__(self, bpe_vocab):
            with open(bpe_vocab, encoding="utf-8") as f:
                self.vocab = set(f.read().split())

        def pieces(self, text):
            words = W.split_words(text)
            tokens = [w if w in self.vocab else "<unk>" for w in words]
            return tokens, list(range(len(words))), W.match_keys(words)

        def offsets(self, text):
            tokens, starts, _ = self.pieces(text)
            return offsets_in_words(text, tokens, starts, lambda t: "" if t == "<unk>" else t)

        def decode(self, tokens):
            return " ".join(tokens)

    yield "toy-whitespace"
    del TOKENIZERS["toy-whitespace"]


def test_a_registered_tokenizer_is_a_bpe_kind(toy_kind, tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("New York is a big city .\n", encoding="utf-8")
    assert toy_kind in BPE_KINDS
    enc = EncoderSpec(bpe=toy_kind, bpe_vocab=str(vocab)).build()
    assert isinstance(enc, SpanTokenizer)
    tokens, spans = enc.encode("  New York is a big city.  ")
    assert tokens == ["New", "York", "is", "a", "big", "city", "."]
    assert spans[0] == (0, 2)  # "new york" is an n-gram of the packaged dictionary
    assert enc.tokenizer.tokens_with_offsets("New York, Paris") == (
        ["New", "York", "<unk>", "<unk>"], [(0, 3), (4, 8), (8, 9), (10, 15)])
    with pytest.raises(ValueError, match="toy-whitespace needs local bpe_vocab paths"):
        make_encoder(bpe=toy_kind)
    # and the command line offers it
    assert preprocess_main(["encode", "--bpe", toy_kind, "--bpe-vocab", str(vocab),
                            "New York was big"]) == 0
    assert "New York <unk> big" in capsys.readouterr().out


def test_unknown_kinds_and_files_are_named():
    with pytest.raises(ValueError, match=r"bpe 'nope': expected one of \('gpt2', "):
        build_tokenizer("nope")
    with pytest.raises(ValueError, match="gpt2 BPE needs local encoder_json and vocab_bpe"):
        make_encoder(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"))
    with pytest.raises(TypeError, match="unknown file argument 'encoder_jsn'"):
        make_encoder(bpe="gpt2", encoder_jsn="x")
    with pytest.raises(ValueError, match="registered twice"):
        register_tokenizer("gpt2")(type("Again", (Tokenizer,), {}))


def _mrpc_texts():
    rows = read_split(TASKS["MRPC"], GLUE / "MRPC" / "dev.tsv", "dev")
    return [t.strip() for column in rows.inputs for t in column]


def _check_ranges(text, offsets):
    """Ranges lie in the text, in order, and hold no leading whitespace."""
    last = 0
    for lo, hi in offsets:
        assert last <= lo <= hi <= len(text), (text, offsets)
        assert lo == hi or not text[lo].isspace()
        last = lo


def test_gpt2_offsets_spell_each_token():
    tok = make_encoder(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"), segmentation="none").tokenizer
    texts = _mrpc_texts() + ["naïve café — “q”  two  spaces"]
    for text in texts:
        tokens, offsets = tok.tokens_with_offsets(text)
        _check_ranges(text, offsets)
        for t, (lo, hi) in zip(tokens, offsets):
            piece = tok.decode([t])
            if "\ufffd" not in piece:  # a whole-character token
                assert text[lo:hi] == piece.lstrip(), (text, t)
    assert len(texts) > 800


def _bert_form(s):
    """What BERT's uncased normalizer makes of ``s``: lower-case, accents stripped."""
    return "".join(c for c in unicodedata.normalize("NFD", s.lower())
                   if unicodedata.category(c) != "Mn")


def test_wordpiece_offsets_spell_each_token():
    tok = make_encoder(bpe="wordpiece", wordpiece=str(minilm_dir()),
                       segmentation="none").tokenizer
    checked = 0
    for text in _mrpc_texts() + ["Café au lait, naïve [SEP] 中国"]:
        tokens, offsets = tok.tokens_with_offsets(text)
        _check_ranges(text, offsets)
        for t, (lo, hi) in zip(tokens, offsets):
            if t not in tok.SPECIALS.values():
                assert _bert_form(text[lo:hi]) == t.removeprefix("##"), (text, t)
                checked += 1
    assert checked > 10000


def test_sentencepiece_and_fastbpe_offsets_spell_each_token(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    texts = _mrpc_texts()
    corpus = tmp_path / "mrpc.txt"
    corpus.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=400, model_type="bpe", minloglevel=2)
    codes = tmp_path / "codes"
    codes.write_text("t h 10\nth e</w> 9\na n 8\nan d</w> 7\no f</w> 6\n", encoding="utf-8")
    sp = build_tokenizer("sentencepiece", sentencepiece_model=str(tmp_path / "sp.model"))
    fast = build_tokenizer("fastbpe", bpe_codes=str(codes))
    for tok, surface in ((sp, lambda t: t.lstrip("\u2581")),
                         (fast, lambda t: t[:-2] if t.endswith("@@") else t)):
        for text in texts[:300]:
            tokens, offsets = tok.tokens_with_offsets(text)
            _check_ranges(text, offsets)
            for t, (lo, hi) in zip(tokens, offsets):
                assert text[lo:hi] == surface(t) or "<unk>" in t or "\u2047" in t, (text, t)


def test_atomic_write_leaves_old_content_when_the_writer_fails(tmp_path):
    path = tmp_path / "f.txt"
    atomic_write(path, lambda f: f.write(b"old"))

    def fail(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, fail)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
