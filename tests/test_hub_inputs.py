"""What hub users pass in: a string is one input, anything that is not text is a
TypeError naming its index and type, inputs longer than the model are cut as recorded
with one warning that counts them, the QA hub refuses an empty question as
span-preprocess qa does, and a data folder of another kind than the checkpoint's task
is refused naming both kinds (span-predict: exit 2, no traceback)."""

import warnings

import pytest

from conftest import GPT2_BPE, run_main
from test_task_data import glue_folder
from test_task_train import span_args

from span_plugin.formats.text_inputs import example_width
from span_plugin.portable.tasks import KINDS, check_folder_kind, folder_kind
from span_plugin.formats.text_inputs import (InputCutWarning, as_list, question_pairs,
                                             text_examples, warn_cut, word_lists)

BPE = {"gpt2_encoder_json": GPT2_BPE / "encoder.json", "gpt2_vocab_bpe": GPT2_BPE / "vocab.bpe"}

# ---------------------------------------------------------------- the checks alone


def test_a_string_is_one_input():
    assert text_examples("hello world") == [("hello world",)]
    assert text_examples(["a", ("b", "c"), ["d"]]) == [("a",), ("b", "c"), ("d",)]
    assert text_examples(x for x in ["a", "b"]) == [("a",), ("b",)]
    assert text_examples([]) == []
    assert as_list("q", "pairs", "...") == ["q"]


@pytest.mark.parametrize("examples,message", [
    (b"hello world", "examples is bytes, expected a string, or a list of strings"),
    (5, "examples is int, expected"),
    (None, "examples is NoneType, expected"),
    ({"a": 1}, "examples is dict, expected"),
    (["ok", 5], r"example 1 is int \(5\), expected a string or a \(string, string\) pair"),
    (["ok", b"x"], "example 1 is bytes, expected str: decode it first"),
    (["ok", None], r"example 1 is NoneType \(None\), expected a string"),
    ([("a", 3.5)], r"example 0, text 1 is float \(3.5\), expected str"),
    ([("a", b"b")], "example 0, text 1 is bytes, expected str: decode it first"),
])
def test_what_is_not_text_is_named(examples, message):
    with pytest.raises(TypeError, match=message):
        text_examples(examples)


def test_a_tuple_of_three_texts_is_refused():
    with pytest.raises(ValueError, match="example 0 has 3 texts"):
        text_examples([("a", "b", "c")])


def test_one_width_per_call_and_the_trained_one():
    assert example_width(text_examples(["a", "b"])) == 1
    assert example_width(text_examples([("a", "b")]), trained=2) == 2
    with pytest.raises(ValueError, match="mix of single sentences and pairs in one call"):
        example_width(text_examples(["a", ("b", "c")]))
    with pytest.raises(ValueError, match=r"trained on sentence pairs \(\(a, b\) tuples\); got "
                                         r"single sentences \(one string each\)"):
        example_width(text_examples(["a"]), trained=2)
    with pytest.raises(ValueError, match="trained on single sentences .*; got sentence pairs"):
        example_width(text_examples([("a", "b")]), trained=1)


@pytest.mark.parametrize("pairs,error,message", [
    ([("q", "c"), ("", "context")], ValueError, "pair 1: empty question"),
    ([("  \n", "context")], ValueError, "pair 0: empty question"),
    ([("q", " ")], ValueError, "pair 0: empty context"),
    (["question only"], TypeError, "pair 0 is str .*expected a \\(question, context\\) pair"),
    ([("q", "c", "x")], TypeError, "pair 0 is tuple"),
    ([(b"q", "c")], TypeError, "pair 0: the question is bytes, expected str: decode"),
    ([("q", 7)], TypeError, "pair 0: the context is int"),
    (b"qc", TypeError, "pairs is bytes"),
])
def test_question_pairs(pairs, error, message):
    with pytest.raises(error, match=message):
        question_pairs(pairs)


def test_ner_word_lists():
    assert word_lists([["EU", "rejects"], ("German",)]) == [["EU", "rejects"], ["German"]]
    with pytest.raises(TypeError, match="sentences is str, expected a list of word lists; "
                                        "predict_entities"):
        word_lists("EU rejects German call")
    with pytest.raises(TypeError, match="sentence 1 is str"):
        word_lists([["EU"], "rejects"])
    with pytest.raises(TypeError, match="sentence 0, word 1 is int"):
        word_lists([["EU", 3]])


def test_one_warning_counts_the_cut_inputs_and_tokens():
    with pytest.warns(InputCutWarning, match=r"2 of 4 inputs are longer than the model's "
                                             r"10 positions: 7 tokens cut \(how\)"):
        assert warn_cut([3, 12, 10, 15], 10, "how") == (2, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_cut([3, 10], 10, "how") == (0, 0)


@pytest.mark.parametrize("files,kind", [
    (["qa/train.window.idx", "input0/dict.txt"], "qa"),
    (["phrase_label/labels.txt", "label/dict.txt", "input0/dict.txt"], "pairs"),
    (["label/tags.txt", "words/train.idx", "input0/dict.txt"], "tagging"),
    (["label/dict.txt", "input0/dict.txt", "input1/dict.txt"], "sentence"),
    (["input0/dict.txt"], "sentence"),
    (["train.tsv"], None),
])
def test_folder_kinds(tmp_path, files, kind):
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert folder_kind(tmp_path) == kind
    needs = {"qa": "span_qa", "tagging": "span_tagging", "pairs": "span_pair_classification",
             "sentence": "span_classification", None: "span_qa"}
    if kind is not None:
        check_folder_kind(tmp_path, needs[kind], "ckpt.pt")
    wrong = "span_tagging" if kind != "tagging" else "span_qa"
    with pytest.raises(ValueError) as err:
        check_folder_kind(tmp_path, wrong, "ckpt.pt")
    what = KINDS[kind] if kind else "not a data folder (no input0/dict.txt)"
    assert str(err.value).startswith(f"{tmp_path} is {what}, but ckpt.pt was trained with "
                                     f"task {wrong!r}, which reads ")


def test_sentence_tasks_read_phrase_pair_folders(tmp_path):
    for rel in ("phrase_label/labels.txt", "label/dict.txt", "input0/dict.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    check_folder_kind(tmp_path, "span_classification", "ckpt.pt")
    check_folder_kind(tmp_path, "unknown_task", "ckpt.pt")  # not checked


def _refused(checkpoint, folder, kind, needs, *args):
    proc = run_main("span-predict", "--checkpoint", checkpoint, "--data", folder, *args,
                    check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    assert f"{folder} is {KINDS[kind]}, but {checkpoint} was trained with task" in proc.stdout
    assert f"which reads {KINDS[needs]}" in proc.stdout, proc.stdout


# ---------------------------------------------------------------- real checkpoints


@pytest.mark.slow
def test_sentence_hub_inputs_and_folder_kind(tmp_path, qa_folder):
    data = glue_folder("SST-2")
    run_main("fairseq-train", *span_args(data, tmp_path, max_update=1))
    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(tmp_path / "checkpoint_last.pt", data=data, **BPE)
    one = hub.predict("hello world")
    assert len(one) == 1 and one == hub.predict(["hello world"])
    assert hub.predict_logits("hello world").shape == (1, 2)
    for bad, message in ((b"hello world", "examples is bytes"),
                         (["fine", 7], "example 1 is int"),
                         (["fine", b"x"], "example 1 is bytes")):
        with pytest.raises(TypeError, match=message):
            hub.predict(bad)
    long = " ".join(["word"] * 300)
    full = len(hub.encoder.encode(long)[0]) + 2  # <s> ... </s>
    limit = hub.task.max_positions()
    with pytest.warns(InputCutWarning, match=rf"1 of 2 inputs are longer than the model's "
                                             rf"{limit} positions: {full - limit} tokens cut "
                                             rf"\(the first {limit} kept; trained with "
                                             rf"--shorten-method truncate\)"):
        out = hub.predict(["short", long])
    assert len(out) == 2
    _refused(tmp_path / "checkpoint_last.pt", qa_folder / "bin", "qa", "sentence",
             "--split", "valid", "--output", tmp_path / "out.tsv")


@pytest.mark.slow
def test_qa_hub_inputs_and_folder_kind(qa_folder, qa_checkpoint, tmp_path):
    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(qa_checkpoint)
    context = "It was written by Ann Lee in 1990."
    [answer] = hub.predict_answers([("Who wrote it?", context)])
    assert context[answer["start"]:answer["end"]] == answer["text"]
    with pytest.raises(ValueError, match="pair 1: empty question, expected the question's text"):
        hub.predict_answers([("Who wrote it?", context), (" ", context)])
    with pytest.raises(TypeError, match="pair 0 is str"):
        hub.predict_answers(["Who wrote it?"])
    with pytest.raises(TypeError, match="pair 0: the context is bytes"):
        hub.predict_answers([("Who wrote it?", context.encode())])
    _refused(qa_checkpoint, glue_folder("SST-2"), "sentence", "qa",
             "--input", qa_folder / "valid.json", "--output", tmp_path / "p.json")
