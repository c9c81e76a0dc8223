"""A tokenizer or segmentation kind is declared once, in its class: registered here in the
test only, a new kind with a new option is accepted by span-preprocess, span-predict and
the hub, written into the data record, and checked against it at inference."""

import os

import pytest

from conftest import GPT2_BPE
from span_plugin.cli import predict
from span_plugin.cli.preprocess import build_parser as preprocess_parser
from span_plugin.cli.preprocess import main as preprocess_main
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.records.encoder_settings import SettingsMismatch, encoder_spec, given_files
from span_plugin.preprocess.segmentation.encoding import EncoderSpec
from span_plugin.preprocess.file_records import file_entry
from span_plugin.preprocess.segmentation.segment import SEGMENTATIONS, Segmentation, register_segmentation
from span_plugin.tokenizers import TOKENIZERS, Option, Tokenizer, register_tokenizer
from span_plugin.tokenizers import words as W


def _with_notes(path):
    """The toy's files: its word list, and a notes file beside it when there is one."""
    notes = str(path) + ".notes"
    return {"toy_vocab": str(path), "toy_vocab_notes": notes if os.path.isfile(notes) else None}


@pytest.fixture
def toy_tokenizer():
    @register_tokenizer("toy-words")
    class ToyTokenizer(Tokenizer):
        files = (Option("toy_vocab", names=("toy_vocab", "toy_word_list"),
                        help="toy word list", recorded=_with_notes),)

        def __init__(self, toy_vocab):
            with open(toy_vocab, encoding="utf-8") as f:
                self.vocab = set(f.read().split())

        def pieces(self, text):
            words = W.split_words(text)
            return ([w if w in self.vocab else "<unk>" for w in words],
                    list(range(len(words))), W.match_keys(words))

        def decode(self, tokens):
            return " ".join(tokens)

    yield "toy-words"
    del TOKENIZERS["toy-words"]


@pytest.fixture
def toy_segmentation():
    @register_segmentation("toy-runs")
    class RunSegmentation(Segmentation):
        """Spans of ``toy_run`` words; records the run length, takes it back."""

        needs_dictionary = False
        help = "runs of --toy-run words"
        options = (Option("toy_run", help="words a span"),)

        def __init__(self, ngrams=None, seed=0, scheme=None, toy_run="2"):
            super().__init__(ngrams, seed, scheme)
            self.run = int(toy_run)

        def __call__(self, keys, text=""):
            full, rest = divmod(len(keys), self.run)
            return [self.run] * full + ([rest] if rest else [])

        @classmethod
        def record(cls, spec):
            return {"toy_runs": {"run": int(spec.toy_run or 2)}}

        @classmethod
        def settings_from_record(cls, encoder, checkpoint):
            return {"toy_run": str(encoder["toy_runs"]["run"])}

        @classmethod
        def describe(cls, encoder):
            return [f"  toy runs of {encoder['toy_runs']['run']} words"]

    yield "toy-runs"
    del SEGMENTATIONS["toy-runs"]


@pytest.fixture
def vocab(tmp_path):
    path = tmp_path / "toy.txt"
    path.write_text("New York is a big city .\n", encoding="utf-8")
    (tmp_path / "toy.txt.notes").write_text("made by hand\n", encoding="utf-8")
    return path


def test_a_new_tokenizer_file_reaches_every_command_the_hub_and_the_record(
        toy_tokenizer, vocab, capsys):
    # span-preprocess: --bpe choice and the file flag (each of its names)
    args = preprocess_parser().parse_args(["encode", "--bpe", toy_tokenizer, "--toy-word-list",
                                        str(vocab), "x"])
    assert (args.bpe, args.toy_vocab) == (toy_tokenizer, str(vocab))
    assert preprocess_main(["encode", "--bpe", toy_tokenizer, "--toy-vocab", str(vocab),
                            "New York was big"]) == 0
    assert "New York <unk> big" in capsys.readouterr().out
    # span-predict: the same flags, handed to the hub by field
    args = predict.build_parser().parse_args(["--checkpoint", "c.pt", "--bpe", toy_tokenizer,
                                           "--toy-vocab", str(vocab)])
    assert predict.encoder_files(args) == {"toy_vocab": str(vocab)}
    # the hub's keywords: any of its names, or the field
    assert given_files({"toy_word_list": vocab}) == {"toy_vocab": vocab}
    with pytest.raises(TypeError, match="unknown argument 'toy_vocabs'"):
        given_files({"toy_vocabs": vocab}, "from_pretrained")

    # the record: the file and what the kind records beside it
    spec = EncoderSpec(bpe=toy_tokenizer, toy_vocab=str(vocab), segmentation="none")
    record = {"encoder": provenance.encoder_record(spec, GPT2_BPE / "dict.txt")}
    assert record["encoder"]["files"] == {"toy_vocab": file_entry(vocab),
                                          "toy_vocab_notes": file_entry(str(vocab) + ".notes")}
    # checked at inference: the recorded files, or the ones given (by any name)
    assert encoder_spec(record, {}, "ckpt.pt").toy_vocab == str(vocab)
    assert encoder_spec(record, {"toy_word_list": str(vocab)}, "ckpt.pt").build().encode(
        "New York")[0] == ["New", "York"]
    other = vocab.parent / "other.txt"
    other.write_text("New\n", encoding="utf-8")
    with pytest.raises(SettingsMismatch, match=r"toy_vocab=.*other.txt \(sha256 \w+\) is not "
                                               r"the file ckpt.pt was trained with"):
        encoder_spec(record, {"toy_vocab": str(other)}, "ckpt.pt")
    with pytest.raises(SettingsMismatch, match="gpt2_encoder_json=.* reads no such file"):
        encoder_spec(record, {"gpt2_encoder_json": str(vocab)}, "ckpt.pt")
    (vocab.parent / "toy.txt.notes").write_text("changed\n", encoding="utf-8")
    with pytest.raises(SettingsMismatch, match="pass toy vocab notes=PATH"):
        encoder_spec(record, {}, "ckpt.pt")


def test_the_hub_takes_a_new_tokenizer_file_by_name(toy_tokenizer, vocab, tmp_path):
    from span_plugin.hub import SpanHubInterface

    missing = tmp_path / "none.pt"
    with pytest.raises(FileNotFoundError):  # the names pass; the checkpoint is not there
        SpanHubInterface.from_pretrained(missing, toy_word_list=vocab)
    with pytest.raises(TypeError, match="from_pretrained: unknown argument 'toy_vocabs'"):
        SpanHubInterface.from_pretrained(missing, toy_vocabs=vocab)


def test_a_new_segmentation_reaches_span_preprocess_and_the_record(
        toy_segmentation, capsys):
    assert preprocess_main(["encode", "--gpt2-encoder-json", str(GPT2_BPE / "encoder.json"),
                            "--gpt2-vocab-bpe", str(GPT2_BPE / "vocab.bpe"),
                            "--segmentation", toy_segmentation, "--toy-run", "3",
                            "one two three four"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "one two three | four"
    with pytest.raises(SystemExit, match="--toy-run is read only by --segmentation toy-runs "
                                         r"\(got --segmentation greedy\)"):
        preprocess_main(["encode", "--toy-run", "3", "x"])

    spec = EncoderSpec(encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"), segmentation=toy_segmentation,
                       toy_run="3")
    enc = provenance.encoder_record(spec, GPT2_BPE / "dict.txt")
    assert enc["ngrams"] is None and enc["toy_runs"] == {"run": 3}
    record = {"encoder": enc}
    back = encoder_spec(record, {}, "ckpt.pt")
    assert (back.segmentation, back.toy_run, back.ngrams) == (toy_segmentation, "3", None)
    assert back.build().encode_words("a b c d e") == [["a", "b", "c"], ["d", "e"]]
    with pytest.raises(SettingsMismatch, match="segmentation='greedy', but ckpt.pt was trained "
                                               "with segmentation='toy-runs'"):
        encoder_spec(record, {"segmentation": "greedy"}, "ckpt.pt")
    with pytest.raises(SettingsMismatch, match=r"trained with segmentation 'toy-runs' \(no "
                                               r"dictionary\)"):
        encoder_spec(record, {"ngrams": "d.txt"}, "ckpt.pt")
    lines = provenance.describe({**_record_shell(), "encoder": enc})
    assert "  toy runs of 3 words" in lines


def _record_shell():
    return {"plugin_version": "0", "command": "c", "task": "t", "inputs": 1,
            "labels": {"kind": "none"}, "rows": {}, "files": {}}


def test_a_file_the_chosen_tokenizer_does_not_read_is_refused(tmp_path):
    """A stray file flag (--bpe-vocab with --bpe gpt2) is not ignored: before the
    registries it was written into the record as if it had been used."""
    gpt2 = ["--gpt2-encoder-json", str(GPT2_BPE / "encoder.json"),
            "--gpt2-vocab-bpe", str(GPT2_BPE / "vocab.bpe")]
    with pytest.raises(SystemExit, match="--bpe-vocab is not read by --bpe gpt2, which reads "
                                         "--gpt2-encoder-json, --gpt2-vocab-bpe"):
        preprocess_main(["encode", *gpt2, "--bpe-vocab", str(GPT2_BPE / "dict.txt"), "x"])
    with pytest.raises(SystemExit, match="--wordpiece is not read by --bpe gpt2"):
        preprocess_main(["encode", *gpt2, "--wordpiece", str(tmp_path), "x"])
