"""Exported fine-tuned models that transformers cannot misuse (issue 68, part 4): tiny
models trained here for 2 updates on real MRPC rows (and all-MiniLM-L6-v2 from its
pretrained weights), exported by span-export hf, then used the obvious ways.

- Plain heads (fairseq's own RobertaClassificationHead of a HEAD=plain sentence_prediction
  run; BERT's classifier over its pooler) are transformers' own task classes:
  ``pipeline("text-classification", model=DIR)`` in a process that never imports
  span_plugin gives the hub's labels and probabilities on 40 MRPC dev pairs.
- A span head is written under the plugin's model type: without span_plugin,
  transformers refuses the folder naming the type; after ``import span_plugin.portable``,
  the same pipeline gives the hub's predictions.
- No fine-tuned export carries a masked-LM head; ``id2label`` holds the label names;
  the card's first lines say what it is, how to install, predict, and what transformers
  alone does.
- docs/EXPORT.md's ONNX snippet, run as written, gives ``load_model``'s logits.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import GLUE, USER_DIR, fairseq_train, run_main, tiny_train_args
from test_task_data import glue_folder, mini_glue
from test_task_train import span_args

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

N = 40
TOL = 1e-4
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "EXPORT.md")

# A child that runs transformers' pipeline on each job's folder; span_plugin is imported
# only when argv[3] says so.
CHILD = """
import json, sys
if sys.argv[3] == "plugin":
    import span_plugin.portable
from transformers import AutoModelForSequenceClassification, pipeline
jobs, out = json.load(open(sys.argv[1], encoding="utf-8")), {}
for name, job in jobs.items():
    try:
        classify = pipeline("text-classification", model=job["dir"], top_k=None)
        out[name] = classify([{"text": a, "text_pair": b} for a, b in job["pairs"]])
    except Exception as err:
        out[name] = {"pipeline": f"{type(err).__name__}: {err}"}
        try:
            AutoModelForSequenceClassification.from_pretrained(job["dir"])
            out[name]["auto"] = None
        except Exception as err:
            out[name]["auto"] = f"{type(err).__name__}: {err}"
out["span_plugin_loaded"] = sorted(m for m in sys.modules if m.startswith("span_plugin"))
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"))
"""


def _pairs(n=N):
    lines = (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    return [tuple(line.split("\t")[3:5]) for line in lines[-n:]]


def _fairseq_plain(save):
    """recipes/glue with HEAD=plain, in small: fairseq's own sentence_prediction task and
    RobertaClassificationHead (the plugin's criterion, as the recipe runs it)."""
    argv = span_args(glue_folder("MRPC"), save, max_update=2)
    argv[argv.index("span_classification")] = "sentence_prediction"
    argv[argv.index("roberta_span_base")] = "roberta_base"
    for flag in ("--max-spans", "--max-span-tokens"):
        k = argv.index(flag)
        del argv[k:k + 2]
    fairseq_train([*argv, "--disable-validation"])
    return save / "checkpoint_last.pt"


def _span(save):
    fairseq_train([*span_args(glue_folder("MRPC"), save, max_update=2), "--disable-validation"])
    return save / "checkpoint_last.pt"


def _minilm_plain(save, model_dir):
    """The converted all-MiniLM-L6-v2 fine-tuned on MRPC with BERT's own classifier
    (--sentence-head plain over its pooler, segment B), as recipes/glue runs HEAD=plain
    for a MODEL_DIR; 2 updates from the pretrained weights."""
    from span_plugin.convert.flags import checkpoint_train_flags

    data = save.parent / "minilm-bin"
    run_main("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(),
             "--out", data, "--bpe", "wordpiece", "--wordpiece", model_dir,
             "--srcdict", model_dir / "dict.txt", "--workers", "1")
    fairseq_train([data, "--user-dir", USER_DIR, "--task", "span_classification",
                   "--criterion", "span_classification", "--arch", "roberta_span",
                   "--sentence-head", "plain", "--num-classes", "2", "--init-token", "0",
                   "--max-positions", "512", *checkpoint_train_flags(model_dir / "model.pt"),
                   "--shorten-method", "truncate", "--finetune-from-model",
                   model_dir / "model.pt", *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def exports(tmp_path_factory, request):
    """{case: (checkpoint, export folder)}."""
    root = tmp_path_factory.mktemp("export_transformers")
    minilm = request.getfixturevalue("converted_minilm")
    checkpoints = {"fairseq-plain": _fairseq_plain(root / "fairseq-plain"),
                   "span": _span(root / "span"),
                   "minilm-plain": _minilm_plain(root / "minilm-plain", minilm)}
    out = {}
    for case, checkpoint in checkpoints.items():
        folder = root / "hf" / case
        run_main("span-export", "hf", checkpoint, "--out", folder)
        out[case] = (checkpoint, folder)
    return out


@pytest.fixture(scope="module")
def hub_predictions(exports):
    from span_plugin.hub import SpanHubInterface

    return {case: SpanHubInterface.from_pretrained(ckpt).predict(_pairs())
            for case, (ckpt, _) in exports.items()}


def _child(tmp_path, exports, cases, plugin):
    jobs = {c: {"dir": str(exports[c][1]), "pairs": _pairs()} for c in cases}
    (tmp_path / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "jobs.json"),
                           str(tmp_path / "out.json"), "plugin" if plugin else "alone"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))


def _same_as_hub(got, want, labels):
    assert len(got) == len(want) == N
    for g, w in zip(got, want):
        probs = {x["label"]: x["score"] for x in g}
        assert sorted(probs) == sorted(labels)
        assert max(probs, key=probs.get) == w["label"]
        for label in labels:
            assert probs[label] == pytest.approx(w["probs"][label], abs=TOL)


def _config(folder):
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def test_plain_heads_are_transformers_classes_that_predict_alone(exports, hub_predictions,
                                                                 tmp_path):
    """fairseq's HEAD=plain head and BERT's pooler classifier: their transformers class,
    the label names, and the pipeline of a process without span_plugin gives the hub's
    labels and probabilities on real MRPC dev pairs."""
    classes = {"fairseq-plain": "RobertaForSequenceClassification",
               "minilm-plain": "BertForSequenceClassification"}
    for case, cls in classes.items():
        config = _config(exports[case][1])
        assert config["architectures"] == [cls]
        assert config["model_type"] in ("roberta", "bert")
        labels = config["span_plugin"]["labels"]["sentence_classification_head"]
        assert config["id2label"] == {str(i): name for i, name in enumerate(labels)}
        assert sorted(labels) == ["0", "1"] and config["label2id"][labels[0]] == 0
        assert config["span_export"]["transformers"]["pipeline"] == "text-classification"
    got = _child(tmp_path, exports, list(classes), plugin=False)
    assert got.pop("span_plugin_loaded") == []
    for case in classes:
        labels = _config(exports[case][1])["span_plugin"]["labels"]["sentence_classification_head"]
        _same_as_hub(got[case], hub_predictions[case], labels)


def test_span_head_refused_by_name_without_the_plugin(exports, hub_predictions, tmp_path):
    """The span head's folder is of the plugin's type: transformers alone refuses it in
    its own words naming the type (pipeline and AutoModelForSequenceClassification);
    with span_plugin.portable imported, the pipeline gives the hub's predictions."""
    folder = exports["span"][1]
    config = _config(folder)
    assert config["model_type"] == "span_plugin_roberta"
    assert config["architectures"] == ["SpanPluginRobertaForSequenceClassification"]
    alone = _child(tmp_path, exports, ["span"], plugin=False)
    assert alone.pop("span_plugin_loaded") == []
    for how in ("pipeline", "auto"):
        assert "span_plugin_roberta" in alone["span"][how], alone["span"]
        assert "does not recognize this architecture" in alone["span"][how], alone["span"]
    (tmp_path / "out.json").unlink()
    plugin = _child(tmp_path, exports, ["span"], plugin=True)
    assert "span_plugin.portable.hf_auto" in plugin.pop("span_plugin_loaded")
    _same_as_hub(plugin["span"], hub_predictions["span"], ["0", "1"])


def test_no_masked_lm_head_and_the_card_says_what_transformers_does(exports):
    """A fine-tuned export writes no masked-LM head (none of its tensors, no *ForMaskedLM
    class, the config says why); the card's first lines: what the model is, the pip
    line, load_model, and what transformers alone can or cannot do."""
    from safetensors import safe_open

    for case, (_, folder) in exports.items():
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            assert not [k for k in f.keys() if k.startswith(("lm_head.", "cls."))], case
        config = _config(folder)
        assert not config["architectures"][0].endswith("ForMaskedLM")
        assert "fine-tuned" in config["span_export"]["lm_head"]
        head = (folder / "README.md").read_text(encoding="utf-8").split("\n## ")[0]
        assert "fine-tuned by span_plugin for sentence classification" in head, head
        assert "pip install span_plugin" in head and "load_model(" in head, head
        assert "no masked-LM head" in head, head
        if case == "span":
            assert "`transformers` alone cannot run it" in head
            assert "`span_plugin_roberta`" in head and "import span_plugin.portable" in head
        else:
            assert f"its own `{config['architectures'][0]}`" in head
            assert 'pipeline("text-classification"' in head


def test_both_encoders_load_each_layout(exports):
    """load_model's transformers encoder reads the encoder of a task-class folder and of a
    plugin-type folder as the torch encoder does (logits within 1e-5)."""
    from span_plugin.portable import load_model

    pairs = _pairs(8)
    for case, (_, folder) in exports.items():
        want = load_model(folder).predict_logits(pairs)
        got = load_model(folder, encoder="transformers").predict_logits(pairs)
        assert (want - got).abs().max() < 1e-5, case


def _docs_block(marker):
    text = open(DOCS, encoding="utf-8").read()
    blocks = [b.split("```")[0] for b in text.split("```python\n")[1:]]
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"docs/EXPORT.md: {len(found)} python blocks hold {marker!r}"
    return found[0]


def test_onnx_snippet_of_the_docs_feeds_the_graph_its_inputs(exports, tmp_path, monkeypatch):
    """docs/EXPORT.md's ONNX block, run as written with the folders at its paths (the
    WordPiece MiniLM: the folder's ids are not the dictionary's), gives load_model's
    logits; the tokenizer's ids fed instead (the old snippet) do not."""
    pytest.importorskip("onnxruntime")
    import runpy

    from span_plugin.portable import load_model
    from span_plugin.portable.batches import pad_tokens

    checkpoint, folder = exports["minilm-plain"]
    os.makedirs(tmp_path / "hf")
    os.symlink(folder, tmp_path / "hf" / "mrpc")
    run_main("span-export", "onnx", checkpoint, "--out", tmp_path / "onnx" / "mrpc")
    block = _docs_block("onnx_inputs")
    (tmp_path / "snippet.py").write_text(block, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    ran = runpy.run_path(str(tmp_path / "snippet.py"))
    model = ran["model"]
    pair = [("A man plays.", "A man is playing.")]
    want = model.predict_logits(pair)
    assert torch.from_numpy(ran["logits"]).sub(want).abs().max() < TOL
    # The tokenizer's own ids, padded with its pad: another input, other logits.
    (tokens, _), = model.encode(pair)
    wrong = ran["session"].run(None, {"src_tokens": pad_tokens([tokens], model.vocab.pad)
                                      .numpy()})[0]
    assert torch.from_numpy(wrong).sub(want).abs().max() > 1e-3
    assert load_model(folder).predict_logits(pair).sub(want).abs().max() < 1e-6
    # load_model(onnx=) maps the folder's ids to the graph's (the dictionary's) itself
    via_graph = load_model(folder, onnx=tmp_path / "onnx" / "mrpc").predict_logits(pair)
    assert via_graph.sub(want).abs().max() < TOL


def test_the_type_and_the_classifier_tensors_are_checked_at_load(exports, tmp_path):
    """A span folder edited to the standard type (which transformers would load with a
    random head) and a plain folder whose head entry no longer names its classifier.*
    tensors are refused by load_model in one line naming config.json's field, even with
    files.json recomputed."""
    import shutil

    from span_plugin.formats.model_folder import ModelFolderError, write_manifest
    from span_plugin.portable import load_model

    def edited(case, change):
        folder = tmp_path / case
        shutil.copytree(exports[case][1], folder)
        config = _config(folder)
        change(config)
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        write_manifest(folder)
        with pytest.raises(ModelFolderError) as err:
            load_model(folder)
        assert "\n" not in str(err.value)
        return str(err.value)

    message = edited("span", lambda c: c.update(model_type="roberta"))
    assert message.startswith(f"{tmp_path / 'span' / 'config.json'}: model_type: 'roberta' "
                              f"with architectures 'SpanPluginRobertaForSequenceClassification'")
    assert "'span_plugin_roberta'" in message
    message = edited("fairseq-plain", lambda c: c["span_plugin"]["heads"][
        "sentence_classification_head"].pop("tensors"))
    assert "span_plugin.heads: no head's tensors name classifier." in message, message


REGISTRATION = """
import importlib.util, sys
import span_plugin.portable
alone = sorted(m for m in ("torch", "transformers") if m in sys.modules)
assert importlib.util.find_spec("transformers") is not None  # a look-up imports nothing
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
print(alone, sorted(t for t in CONFIG_MAPPING if t.startswith("span_plugin_")))
"""


def test_importing_the_plugin_registers_its_types_when_transformers_is_imported():
    """import span_plugin.portable imports neither torch nor transformers; the types are
    registered once transformers is imported, even after a find_spec look-up."""
    proc = subprocess.run([sys.executable, "-c", REGISTRATION], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == ("[] ['span_plugin_bert', 'span_plugin_camembert', "
                                   "'span_plugin_roberta', 'span_plugin_xlm-roberta']")
