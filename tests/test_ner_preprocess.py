"""span-preprocess conll: real CoNLL-2003 rows with each encoder, tag schemes, long
sentences, bad input."""

import pytest
from fairseq.data import indexed_dataset

from conftest import DATA, GPT2_BPE, minilm_dir
from span_plugin.formats import tags as T
from span_plugin.preprocess.folders import conll as C
from span_plugin.files.errors import BadInputError
from span_plugin.preprocess.binary.binarize import _get_encoder
from span_plugin.preprocess.folders.check import check_folder
from span_plugin.preprocess.folders.options import FolderOptions
from span_plugin.preprocess.segmentation.encoding import EncoderSpec

CONLL = DATA / "conll2003"


def head_lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


@pytest.fixture(scope="module")
def real_files(tmp_path_factory):
    """The first sentences of the real train and valid files (-DOCSTART- kept)."""
    root = tmp_path_factory.mktemp("conll_rows")
    for split, n in (("train", 400), ("valid", 120)):
        (root / f"{split}.txt").write_text("".join(head_lines(CONLL / f"{split}.txt", n)))
    return root


def gpt2_spec():
    return EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe")), GPT2_BPE / "dict.txt"


def wordpiece_spec(tmp):
    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    (tmp / "dict.txt").write_text("".join(f"{t} 1\n" for t in vocab if t not in specials))
    return EncoderSpec(bpe="wordpiece", wordpiece=str(minilm_dir())), tmp / "dict.txt"


def sentencepiece_spec(tmp, train):
    spm = pytest.importorskip("sentencepiece")
    words = [line.split()[0] for line in open(train, encoding="utf-8") if line.strip()]
    (tmp / "corpus.txt").write_text(" ".join(words) + "\n")
    spm.SentencePieceTrainer.train(input=str(tmp / "corpus.txt"), model_prefix=str(tmp / "sp"),
                                   vocab_size=300, model_type="bpe", minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp / "sp.model"))
    (tmp / "dict.txt").write_text("".join(f"{sp.id_to_piece(i)} 1\n" for i in range(3, 300)))
    # segmentation none: the gpt2 test covers n-gram spans (and loading a dictionary costs)
    return EncoderSpec(bpe="sentencepiece", sentencepiece_model=str(tmp / "sp.model"),
                       segmentation="none"), tmp / "dict.txt"


def items(prefix):
    ds = indexed_dataset.MMapIndexedDataset(str(prefix))
    return [ds[i].tolist() for i in range(len(ds))]


@pytest.mark.parametrize("encoder", ["gpt2", "wordpiece", "sentencepiece"])
def test_real_rows_align_words_tokens_tags_and_spans(encoder, real_files, tmp_path):
    spec, srcdict = {"gpt2": gpt2_spec, "wordpiece": lambda: wordpiece_spec(tmp_path),
                     "sentencepiece": lambda: sentencepiece_spec(tmp_path, real_files / "train.txt")
                     }[encoder]()
    out = tmp_path / "bin"
    files = {s: str(real_files / f"{s}.txt") for s in ("train", "valid")}
    counts, stats = C.prepare_conll(out, files, FolderOptions(spec, str(srcdict)), max_tokens=40)
    assert stats["train"]["split_sentences"] >= 1  # a sentence past 40 tokens, cut
    check_folder(str(out))
    C.check_tagging_folder(str(out))
    names = C.read_tag_names(out)
    assert names == T.tag_names(["LOC", "MISC", "ORG", "PER"])
    enc = _get_encoder(spec)  # the one prepare_conll built
    for split in files:
        sentences = C.read_conll(files[split]).sentences
        raw_words = (out / "raw" / f"{split}.input0").read_text().splitlines()
        tokens, words, labels = (items(out / "input0" / split), items(out / "words" / split),
                                 items(out / "label" / split))
        source = [tuple(map(int, x.split())) for x in (out / "raw" / f"{split}.source").read_text().splitlines()]
        assert len(tokens) == len(words) == len(labels) == len(raw_words) == counts[split]
        # Items put back together are the sentences, words and tags, in order.
        by_line = {}
        for (first, n), w, lab in zip(source, raw_words, labels):
            for k, (word, tag) in enumerate(zip(w.split(" "), lab)):
                by_line[first + k] = (word, names[tag])
        expected = {s.line + k: (w, t) for s in sentences for k, (w, t) in enumerate(zip(s.words, s.tags))}
        assert by_line.keys() == expected.keys()
        assert all(by_line[k][0] == expected[k][0] for k in expected)
        for i, (tok, bounds, w) in enumerate(zip(tokens, words, raw_words)):
            assert len(tok) - 1 <= 40
            pairs = list(zip(bounds[0::2], bounds[1::2]))
            assert pairs[0][0] == 0 and pairs[-1][1] == len(tok) - 1
            symbols, _ = enc.encode(w)
            for (s, e), word in zip(pairs, w.split(" ")):
                piece = symbols[s:e]
                if encoder == "gpt2":
                    assert enc.decode(piece).strip() == word
                elif encoder == "wordpiece" and word.isascii():
                    assert "".join(p.removeprefix("##") for p in piece) in (word.lower(), "<unk>")
                else:
                    assert "".join(piece).replace("▁", "") in (word, "<unk>")
    (out / "label" / "tags.txt").write_text("O\n")  # fewer tags than the ids use
    with pytest.raises(BadInputError, match="tag ids outside"):
        C.check_tagging_folder(str(out))


def test_tag_schemes_and_their_repairs():
    assert T.to_iob2("I-PER I-PER O I-LOC B-LOC I-ORG".split(), "iob1") == (
        "B-PER I-PER O B-LOC B-LOC B-ORG".split(), 0)
    assert T.to_iob2("S-PER B-LOC E-LOC O E-ORG".split(), "bioes") == (
        "B-PER B-LOC I-LOC O B-ORG".split(), 1)
    assert T.to_iob2("O I-PER B-LOC I-ORG".split(), "iob2") == ("O B-PER B-LOC B-ORG".split(), 2)
    with pytest.raises(T.TagError, match="after O"):
        T.to_iob2("O I-PER".split(), "iob2", repair=False)
    for bad in ("X-PER", "B-", "PER", "E-PER"):
        with pytest.raises(T.TagError, match="not in the iob2 scheme"):
            T.to_iob2(["O", bad], "iob2")


def write(tmp_path, text, name="f.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_bad_input_names_file_and_line(tmp_path):
    f = write(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ O\n")
    with pytest.raises(BadInputError, match=rf"{f}:4: 3 columns, but the file's first word line has 4"):
        C.read_conll(f)
    f = write(tmp_path, "EU B-ORG\n\nx B-FOO\ny Q-PER\n")
    with pytest.raises(BadInputError, match=rf"{f}:4: tag 'Q-PER' is not in the iob2 scheme"):
        C.read_conll(f)
    f = write(tmp_path, "EU O\nrejects I-ORG\n")
    with pytest.raises(BadInputError, match=rf"{f}:2: tag 'I-ORG' after O"):
        C.read_conll(f, bad_tags="error")
    parsed = C.read_conll(f)
    assert parsed.repairs == 1 and parsed.sentences[0].tags == ["O", "B-ORG"]
    f = write(tmp_path, "-DOCSTART- O\n\n-DOCSTART- O\n\nA B-PER\n\n-DOCSTART- O\n")
    parsed = C.read_conll(f)
    assert (parsed.documents, parsed.empty_documents, len(parsed.sentences)) == (3, 2, 1)
    with pytest.raises(BadInputError, match="no sentences"):
        C.read_conll(write(tmp_path, "-DOCSTART- -X- O\n\n\n"))


def test_long_sentences_are_cut_between_words_outside_entities():
    counts = [3, 3, 3, 3, 3]
    tags = "O B-PER I-PER I-PER O".split()
    # 9 tokens fit, but word 3 continues an entity: cut before word 1 (a clean start).
    assert C.split_points(counts, tags, 9) == [0, 1, 4, 5]
    assert C.split_points([3] * 4, ["B-PER"] + ["I-PER"] * 3, 6) == [0, 2, 4]  # no clean cut
    with pytest.raises(BadInputError, match="word 2 alone has 12 tokens"):
        C.split_points([1, 12], ["O", "O"], 10)


def test_word_with_no_tokens_is_an_error(tmp_path):
    spec, srcdict = wordpiece_spec(tmp_path)
    spec.segmentation = "none"
    f = write(tmp_path, "EU B-ORG\n\u0301 O\n", "accent.txt")  # a lone accent: BERT drops it
    # the line named is the line that holds the word (line 2), not the sentence's first
    with pytest.raises(BadInputError, match=rf"{f}:2: word 2 of the sentence .* gives no tokens"):
        C.prepare_conll(tmp_path / "out", {"train": f}, FolderOptions(spec, str(srcdict)))
