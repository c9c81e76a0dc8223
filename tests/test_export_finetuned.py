"""span-export hf of fine-tuned checkpoints (issue 52, parts 2 and 5): one tiny model of
every task and head kind, trained here for 2 updates on real rows (GLUE MRPC and STS-B,
CoNLL-2003, SQuAD, MRPC phrase pairs), exported and checked: every head tensor exactly
the checkpoint's, the encoder loaded by transformers' Auto classes alone giving the
fairseq model's last-layer features on raw text, the labels of the task's dictionaries,
the n-gram dictionary copied by sha256, files.json verifying; and what bad input gets."""

import ast
import json
import os
import runpy
from pathlib import Path

import pytest
import torch

from conftest import DATA, GLUE, GPT2_BPE, TINY_ROBERTA, USER_DIR, run_main
from conftest import fairseq_train, small_conll_folder, tiny_train_args

NLTK_DATA = DATA / "nltk_data"
from span_plugin.cli.export import main as export_main
from span_plugin.formats.model_folder import MANIFEST, PICKLE_SUFFIXES, verify_folder
from test_task_data import glue_folder
from test_task_train import span_args

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.slow

TOL = 1e-5




_TRAINED = {}  # task -> checkpoint: the MRPC one serves two fixtures


def _sentence(root, task, *extra, num_classes=2):
    if task not in _TRAINED:
        save = root / "ckpt"
        argv = span_args(glue_folder(task), save, *extra, num_classes=num_classes, max_update=2)
        fairseq_train([*argv, "--disable-validation"])
        _TRAINED[task] = save / "checkpoint_last.pt"
    return _TRAINED[task]


@pytest.fixture(scope="module")
def conll_bin(tmp_path_factory):
    return small_conll_folder(tmp_path_factory.mktemp("export_conll"))


def _tagging(root, folder, task, *extra):
    save = root / "ckpt"
    fairseq_train([folder, "--user-dir", USER_DIR, "--task", task, "--criterion", task,
                   "--arch", "roberta_tagging", *TINY_ROBERTA, "--init-token", "0", *extra,
                   *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


def _qa(root, qa_folder, head):
    save = root / "ckpt"
    fairseq_train([qa_folder / "bin", "--user-dir", USER_DIR, "--task", "span_qa",
                   "--criterion", "span_qa", "--arch", "roberta_qa", "--qa-head", head,
                   "--max-answer-tokens", "12", *TINY_ROBERTA, *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


def _pair(root, folder):
    save = root / "ckpt"
    fairseq_train([folder, "--user-dir", USER_DIR, "--task", "span_pair_classification",
                   "--criterion", "span_pair_classification", "--arch",
                   "roberta_span_pair_base", *TINY_ROBERTA, "--num-classes", "2",
                   "--init-token", "0", "--separator-token", "2", "--shorten-method",
                   "truncate", *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


def _minilm(root, model_dir):
    """The README's first run, in small: the converted all-MiniLM-L6-v2 fine-tuned on
    MRPC as recipes/glue/MRPC.sh fine-tunes it (WordPiece folder, BERT's layout, its
    sizes, segment B and pooler; from the pretrained weights), 2 updates."""
    from span_plugin.convert.flags import checkpoint_train_flags
    from test_task_data import mini_glue

    run_main("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(),
            "--out", root / "bin", "--bpe", "wordpiece", "--wordpiece", model_dir,
            "--srcdict", model_dir / "dict.txt", "--workers", "1")
    save = root / "ckpt"
    fairseq_train([root / "bin", "--user-dir", USER_DIR, "--task", "span_classification",
                   "--criterion", "span_classification", "--arch", "roberta_span",
                   "--num-classes", "2", "--init-token", "0", "--max-positions", "512",
                   *checkpoint_train_flags(model_dir / "model.pt"), "--shorten-method",
                   "truncate", "--max-spans", "64", "--max-span-tokens", "16",
                   "--finetune-from-model", model_dir / "model.pt", *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


# name -> (build(root, request) -> checkpoint, task, {head: kind})
CASES = {
    "mrpc": (lambda root, r: _sentence(root, "MRPC"), "span_classification",
             {"sentence_classification_head": "sentence"}),
    "sst2-plain": (lambda root, r: _sentence(root, "SST-2", "--sentence-head", "plain"),
                   "span_classification", {"sentence_classification_head": "plain"}),
    # with BERT's parts: segment B added to the tokens, the head over the pooled <s>
    "stsb": (lambda root, r: _sentence(root, "STS-B", "--regression-target", "--bert-pooler",
                                       "--bert-token-types", num_classes=1),
             "span_classification", {"sentence_classification_head": "sentence"}),
    "ner-token": (lambda root, r: _tagging(root, r.getfixturevalue("conll_bin"), "span_tagging",
                                           "--tagging-head", "token"),
                  "span_tagging", {"tagging_head": "token"}),
    "ner-span": (lambda root, r: _tagging(root, r.getfixturevalue("conll_bin"), "span_labeling",
                                          "--max-span-words", "4"),
                 "span_labeling", {"tagging_head": "span"}),
    # the sf head, on chunker segmentation
    "ner-chunker": (lambda root, r: _tagging(root, small_conll_folder(root, segmentation="chunker",
                                                                        nltk_data=str(NLTK_DATA)),
                                             "span_tagging", "--tagging-head", "sf"),
                    "span_tagging", {"tagging_head": "sf"}),
    # a pretrained BERT: WordPiece, segment B, pooler
    "minilm": (lambda root, r: _minilm(root, r.getfixturevalue("converted_minilm")),
                      "span_classification", {"sentence_classification_head": "sentence"}),
    "qa-boundary": (lambda root, r: r.getfixturevalue("qa_checkpoint"), "span_qa",
                    {"qa_head": "qa_boundary"}),
    "qa-sf": (lambda root, r: _qa(root, r.getfixturevalue("qa_folder"), "sf"), "span_qa",
              {"qa_head": "qa_boundary_sf"}),
    "qa-span": (lambda root, r: _qa(root, r.getfixturevalue("qa_folder"), "span"), "span_qa",
                {"qa_head": "qa_span"}),
    "pair": (lambda root, r: _pair(root, r.getfixturevalue("pair_folders")["labelled"]),
             "span_pair_classification", {"sentence_classification_head": "span_pair"}),
}


@pytest.fixture(scope="module", params=list(CASES))
def exported(request, tmp_path_factory):
    """(case, checkpoint, the fairseq hub, export folder, the command's output)."""
    from span_plugin.hub import SpanHubInterface

    build, _, _ = CASES[request.param]
    root = tmp_path_factory.mktemp(f"export_{request.param}")
    checkpoint = build(root, request)
    out = root / "out"
    assert export_main(["hf", str(checkpoint), "--out", str(out)]) == 0
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    heads = sorted({k.split(".")[1] for k in state["model"]
                    if k.startswith("classification_heads.")})
    hub = SpanHubInterface.from_pretrained(checkpoint, head=heads[0])
    return request.param, checkpoint, state, hub, out


def texts(n=4):
    """Real MRPC dev sentences."""
    rows = (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:1 + n]
    return [r.split("\t")[3] for r in rows]


def test_folder_is_whole_and_holds_no_pickle(exported):
    name, _, _, hub, out = exported
    config = verify_folder(out)
    manifest = json.loads((out / MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)
    assert not [p for p in out.rglob("*") if p.suffix in PICKLE_SUFFIXES]
    span = config["span_plugin"]
    _, task, kinds = CASES[name]
    assert span["format"] == 1 and span["task"] == task
    assert {h: v["kind"] for h, v in span["heads"].items()} == kinds
    assert "data" not in span["task_args"]
    assert span["model_args"]["encoder_embed_dim"] == hub.model.args.encoder_embed_dim
    for key, value in span["task_args"].items():  # every setting, choices as their value
        want = getattr(hub.task.cfg, key)
        assert value == getattr(want, "value", want), key
    if task == "span_tagging":
        assert span["task_args"]["token_decoding"] == "viterbi"
    record = span["data_record"]
    ngrams, chunker = record["encoder"]["ngrams"], record["encoder"].get("chunker")
    # The checkpoint's record, each copied file's name in the folder added.
    for part, key in ((ngrams, "ngrams"), (chunker, "chunker")):
        if part:
            assert part.pop("file") == span["files"][key]
    assert record == json.loads(json.dumps(hub.record))
    if ngrams:  # the dictionary training segmented with, copied in by its recorded sha256
        assert manifest["files"][span["files"]["ngrams"]] == ngrams["sha256"]
    else:
        assert span["files"]["ngrams"] is None
    assert span["files"]["chunker"] == (chunker and "chunker")
    if chunker:  # an NLTK data folder: NLTK's files as recorded, and the trained chunker
        from span_plugin.preprocess.segmentation import chunker as C

        for part, rel in C.TAGGER_FILES.items():
            assert manifest["files"]["chunker/" + rel] == chunker["tagger"][part]["sha256"]
        assert manifest["files"]["chunker/" + C.TRAIN_FILE] == chunker["train"]["sha256"]
        model = json.loads((out / "chunker" / C.MODEL_FILE).read_text())["model"]
        assert C.ChunkTagger(model["weights"], model["classes"]).fingerprint() == (
            chunker["model_sha256"])
    card = (out / "README.md").read_text()
    assert task in card and "load_model" in card and "files.json" in card


def test_head_tensors_are_the_checkpoints_exactly(exported):
    """Each head tensor under span_heads.<head>.*, or under the transformers class's
    classifier.* names its config maps (a plain head)."""
    from span_plugin.formats.model_folder import head_tensor_names

    name, _, state, _, out = exported
    saved = safetensors_torch.load_file(str(out / "model.safetensors"))
    heads = {k: v for k, v in state["model"].items() if k.startswith("classification_heads.")}
    assert heads
    stored = {}
    for head, spec in verify_folder(out)["span_plugin"]["heads"].items():
        stored.update({f"classification_heads.{head}.{k}": v
                       for k, v in head_tensor_names(head, spec, saved).items()})
    assert sorted(stored) == sorted(heads)
    assert all(v.startswith("classifier.") for v in stored.values()) == (
        name in ("sst2-plain", "ner-token"))
    for key, value in heads.items():
        mine = saved[stored[key]]
        assert mine.dtype == value.dtype and torch.equal(mine, value), key


def test_transformers_class_or_the_plugins_type(exported):
    """A plain head's folder is transformers' own task class, which computes the head's
    logits as load_model does on a real sentence (the sequence classifier over SST-2's
    plain head, the token classifier over the tagging head); every other folder is of
    the plugin's type, named span_plugin_<family>."""
    from span_plugin.portable import load_model

    name, _, _, _, out = exported
    config = verify_folder(out)
    classes = {"sst2-plain": "RobertaForSequenceClassification",
               "ner-token": "RobertaForTokenClassification"}
    if name not in classes:
        family = "bert" if config["span_export"]["tokenizer"] == "wordpiece" else "roberta"
        assert config["model_type"] == "span_plugin_" + family
        assert config["architectures"][0].startswith("SpanPlugin")
        return
    assert config["architectures"] == [classes[name]] and config["model_type"] == "roberta"
    model = load_model(out)
    hf = getattr(transformers, classes[name]).from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    text = texts(1)[0]
    if name == "ner-token":
        tokens = model._encode_words(text.split())[0]
        text = " ".join(text.split())
    else:
        tokens = model.encode([text])[0][0]
    inputs = tok(text, return_tensors="pt")
    assert inputs["input_ids"][0].tolist() == tokens.tolist()
    with torch.no_grad():
        got = hf(**inputs).logits
    want = model.forward_batch([tokens])
    assert got.shape == want.shape and (got - want).abs().max() < TOL
    assert config["id2label"] == {str(i): n for i, n in enumerate(
        next(iter(config["span_plugin"]["labels"].values())))}


def test_config_and_encoder_load_with_auto_classes(exported):
    """AutoConfig, AutoTokenizer and AutoModel read the folder (a span model's type as
    span_plugin.portable, imported here, registers it), and the encoder gives the
    fairseq model's last-layer features on raw text."""
    _, _, _, hub, out = exported
    config = transformers.AutoConfig.from_pretrained(out)
    args = hub.model.args
    assert (config.num_hidden_layers, config.hidden_size) == (args.encoder_layers,
                                                              args.encoder_embed_dim)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModel.from_pretrained(out).eval()
    init = getattr(hub.task.cfg, "init_token", 0)  # span_qa: always <s>
    for text in texts():
        symbols, _ = hub.encoder.encode(text)
        ids = hub.tokens_of(symbols)
        if init is not None:
            ids = torch.cat([torch.tensor([init]), ids])
        with torch.no_grad():
            want, _ = hub.model(ids[None], features_only=True)
            got = model(**tok(text, return_tensors="pt")).last_hidden_state
        assert got.shape == want.shape, text
        assert (want - got).abs().max() < TOL, text
    if hub.model.token_types is not None:  # a pair: segment B's row; BERT's pooler
        from span_plugin.modules.bert_segment_pooler import segment_ids

        a, b = texts(2)
        ids = hub.encode([(a, b)])[0][0][None]
        inputs = tok(a, b, return_tensors="pt")  # BERT's tokenizer gives the segments
        if "token_type_ids" not in inputs:  # RoBERTa's: as the plugin's model reads them
            inputs["token_type_ids"] = segment_ids(inputs["input_ids"], tok.sep_token_id)
        with torch.no_grad():
            want, _ = hub.model(ids, features_only=True)
            got = model(**inputs)
        assert config.type_vocab_size == 2 and hub.model.token_types.weight[1].any()
        assert (want - got.last_hidden_state).abs().max() < TOL
        assert (hub.model.pooler(want[:, 0]) - got.pooler_output).abs().max() < TOL


def _dict_symbols(path):
    return [line.rsplit(" ", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("madeupword")]


def test_labels_are_the_task_dictionarys(exported):
    name, _, _, hub, out = exported
    span = verify_folder(out)["span_plugin"]
    labels, data = span["labels"], Path(hub.data)
    if name in ("mrpc", "minilm", "sst2-plain"):
        assert labels == {"sentence_classification_head": _dict_symbols(data / "label" / "dict.txt")}
    elif name.startswith("qa") or name == "stsb":
        assert labels == {}
    elif name == "ner-span":
        assert labels == {"tagging_head": ["O", *hub.task.entity_types]}
        assert hub.task.entity_types == ["LOC", "MISC", "ORG", "PER"]
    elif name.startswith("ner"):
        assert labels == {"tagging_head": list(hub.task.tag_names)}
        assert {"O", "B-PER", "I-PER"} <= set(labels["tagging_head"])
    else:
        assert labels == {"sentence_classification_head": {
            "phrasal": list(hub.task.phrase_labels),
            "sentential": _dict_symbols(data / "label" / "dict.txt")}}


# ---- what bad input gets ---------------------------------------------------------------


def one_line_error(argv, capsys):
    assert export_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
    """A span_classification checkpoint in a recipe's layout: OUT/checkpoints/ and
    OUT/results.json."""
    checkpoint = _sentence(tmp_path_factory.mktemp("export_rules"), "MRPC")
    (checkpoint.parent.parent / "results.json").write_text(json.dumps(
        {"task": "MRPC", "metric": "f1", "valid": {"f1": 71.25, "accuracy": 64.5}}))
    return checkpoint


def test_output_rules_and_stale_partials(mrpc, tmp_path, capsys):
    """A non-empty --out is refused without --force; with it, only an earlier export is
    replaced (whole), never a folder of the user's; a partial folder a killed export
    left (its process gone) is removed by the next run, a running export's is not."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    err = one_line_error(["hf", str(mrpc), "--out", str(out)], capsys)
    assert "not empty" in err and "--force" in err and (out / "notes.txt").exists()
    err = one_line_error(["hf", str(mrpc), "--out", str(out), "--force"], capsys)
    assert "not an earlier span-export hf folder" in err and "notes.txt" in err, err
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    assert export_main(["hf", str(mrpc), "--out", str(out)]) == 0  # empty: no --force needed
    (out / "notes.txt").write_text("mine")  # an earlier export with a file of the user's
    err = one_line_error(["hf", str(mrpc), "--out", str(out), "--force"], capsys)
    assert "holds notes.txt, which span-export hf does not write" in err, err
    (out / "notes.txt").unlink()
    dead = tmp_path / "out.partial-999999999"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"cut short")
    live = tmp_path / f"out.partial-{os.getppid()}"
    live.mkdir()
    (tmp_path / "out.old-999999999").mkdir()  # killed between its two renames
    assert export_main(["hf", str(mrpc), "--out", str(out), "--force"]) == 0
    assert verify_folder(out)
    card = (out / "README.md").read_text()
    assert '"f1": 71.25' in card and 'load_model("out")' in card
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", live.name]


def _with_record(checkpoint, path, change):
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    change(state["task_state"]["span_plugin_data_record"]["encoder"])
    torch.save(state, path)
    return path


def test_ngram_dictionary_checked_by_sha256(mrpc, tmp_path, capsys):
    """The n-gram dictionary the record names must be there with the recorded bytes."""
    from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path

    packaged = default_ngrams_path("gpt2")
    other = tmp_path / "ngrams.txt.gz"
    data = bytearray(open(packaged, "rb").read())
    data[-1] ^= 1
    other.write_bytes(bytes(data))

    def elsewhere(path):
        def change(enc):
            enc["ngrams"].update(packaged=None, path=str(path))
        return change

    for path, why in ((other, "sha256"), (tmp_path / "gone.txt.gz", "")):
        bad = _with_record(mrpc, tmp_path / "bad.pt", elsewhere(path))
        err = one_line_error(["hf", str(bad), "--out", str(tmp_path / "x")], capsys)
        assert str(path) in err and why in err, err
        assert not (tmp_path / "x").exists()
    # A dictionary that moved is given again, and checked.
    moved = tmp_path / "moved.txt.gz"
    moved.write_bytes(open(packaged, "rb").read())
    assert export_main(["hf", str(bad), "--out", str(tmp_path / "x"), "--ngrams", str(moved)]) == 0
    assert verify_folder(tmp_path / "x")["span_plugin"]["files"]["ngrams"] == "ngrams.txt.gz"
    assert (tmp_path / "x" / "ngrams.txt.gz").read_bytes() == moved.read_bytes()
    err = one_line_error(["hf", str(bad), "--out", str(tmp_path / "y"), "--ngrams", str(other)],
                         capsys)
    assert str(other) in err and "sha256" in err, err


def test_model_card_lines_load_and_predict(mrpc, tmp_path, monkeypatch):
    """The card's three lines, run as written in the folder's parent, load the folder
    without fairseq's hub and predict the hub's label."""
    from span_plugin.hub import SpanHubInterface

    out = tmp_path / "MRPC-export"
    assert export_main(["hf", str(mrpc), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    block = card.split("```python\n")[1].split("```")[0].strip().splitlines()
    assert len(block) == 3 and 'load_model("MRPC-export")' in block[1]
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "card_lines.py"  # the card's lines as a user pastes them into a file
    script.write_text("\n".join([*block[:2], f"result = {block[2]}"]) + "\n")
    got = runpy.run_path(str(script))["result"]
    hub = SpanHubInterface.from_pretrained(mrpc)
    pair = ast.literal_eval(block[2].split("predict(", 1)[1].rsplit(")", 1)[0])
    want = hub.predict(pair)
    assert [g["label"] for g in got] == [w["label"] for w in want]
    for g, w in zip(got, want):
        assert g["probs"] == pytest.approx(w["probs"], abs=1e-4)


def test_checkpoint_without_data_record_is_refused(mrpc, tmp_path, capsys):
    """Without its data record nobody knows how its inputs were made: refused."""
    state = torch.load(mrpc, map_location="cpu", weights_only=True)
    del state["task_state"]["span_plugin_data_record"]
    torch.save(state, tmp_path / "old.pt")
    data = str(glue_folder("MRPC"))
    err = one_line_error(["hf", str(tmp_path / "old.pt"), "--out", str(tmp_path / "x"),
                          "--data", data, "--gpt2-encoder-json", str(GPT2_BPE / "encoder.json"),
                          "--gpt2-vocab-bpe", str(GPT2_BPE / "vocab.bpe")], capsys)
    assert "no data record" in err and "fine-tune again" in err and str(tmp_path / "old.pt") in err
    assert not (tmp_path / "x").exists()
