"""The plugin's plain-torch encoder (:mod:`span_plugin.modules.bert_encoder`) against
``transformers``' own class on the same exported folder: last-layer features and pooled
``<s>`` within 1e-5 (fp32) on real MRPC dev pairs encoded by the portable text encoder,
for a BERT export (the pretrained all-MiniLM-L6-v2: WordPiece, real token types and
pooler) with and without token types, and for RoBERTa exports fine-tuned here (GPT-2 BPE;
one with the plugin's segment B and pooler); padding in the batch changes no row; the
predictions of ``load_model(encoder="torch")`` equal the fairseq hub's, in a process that
imports neither fairseq nor transformers; and what a folder it cannot compute gets.
"""

import json
import subprocess
import sys

import pytest
import torch

from conftest import GLUE
from test_export_finetuned import _sentence
from test_export_hf import minilm  # noqa: F401  (the fixture: all-MiniLM-L6-v2 exported)
from test_portable_parity import NO_FAIRSEQ

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from span_plugin.modules.bert_encoder import EncoderConfigError, load_bert_encoder  # noqa: E402
from span_plugin.modules.bert_segment_pooler import segment_ids  # noqa: E402
from span_plugin.portable.batches import pad_tokens  # noqa: E402

pytestmark = pytest.mark.slow

TOL = 1e-5
PAIRS = 16


def mrpc_pairs(n=PAIRS):
    """The first ``n`` (sentence1, sentence2) pairs of MRPC dev."""
    lines = (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:1 + n]
    return [tuple(line.split("\t")[3:5]) for line in lines]


def wordpiece_items(folder, pairs):
    """MRPC pairs as BERT lays them out, ``[CLS] A [SEP] B [SEP]`` (LongTensor ``[T_i]``
    each), by the portable text encoder on the folder's own tokenizer.json; and the
    folder's vocabulary."""
    from span_plugin.portable.folder import ModelFolder
    from span_plugin.portable.text import text_encoder

    found = ModelFolder(path=str(folder), config={}, task="span_classification",
                        model_args={}, task_args={}, heads={}, labels={}, files={},
                        record={"encoder": {"bpe": "wordpiece", "segmentation": "none"}})
    text, vocab = text_encoder(found)
    items = [torch.tensor([vocab.bos, *vocab.line(text.encode(a)[0]),
                           *vocab.line(text.encode(b)[0])]) for a, b in pairs]
    return items, vocab


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory):
    """``{name: exported folder}``: RoBERTa span models fine-tuned for 2 updates on MRPC
    (plain) and STS-B (the plugin's segment B and pooler, the head on the pooled <s>)."""
    from span_plugin.export.model_export import export_model

    out = {}
    for name, args in (("mrpc", ("MRPC",)),
                       ("stsb", ("STS-B", "--regression-target", "--bert-pooler",
                                 "--bert-token-types"))):
        root = tmp_path_factory.mktemp(f"encoder_{name}")
        checkpoint = _sentence(root, *args, num_classes=1 if name == "stsb" else 2)
        export_model(checkpoint, root / "hf")
        out[name] = (root / "hf", checkpoint)
    return out


def both_encoders(folder):
    """(the torch encoder, transformers' AutoModel) of an exported folder."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tensors = safetensors_torch.load_file(str(folder / "model.safetensors"))
    return load_bert_encoder(config, tensors), transformers.AutoModel.from_pretrained(folder).eval()


@pytest.fixture(scope="module", params=["bert-types", "bert-no-types", "roberta",
                                        "roberta-types"])
def case(request):
    """(name, the torch encoder, transformers' model, token items, vocabulary, token
    types on)."""
    from span_plugin.portable import load_model

    name = request.param
    if name.startswith("bert"):
        folder = request.getfixturevalue("minilm")[2]
        items, vocab = wordpiece_items(folder, mrpc_pairs())
    else:
        folder = request.getfixturevalue("fine_tuned")["stsb" if "types" in name else "mrpc"][0]
        model = load_model(folder)
        vocab, items = model.vocab, [t for t, _ in model.encode(mrpc_pairs())]
    ours, theirs = both_encoders(folder)
    return name, ours, theirs, items, vocab, name.endswith("-types")


@torch.no_grad()
def test_features_and_pooler_equal_transformers(case):
    """16 MRPC dev pairs in one padded batch: every real token's last-layer feature, and
    the pooled <s> where the folder has a pooler, within 1e-5 of transformers'."""
    name, ours, theirs, items, vocab, types_on = case
    tokens = pad_tokens(items, vocab.pad)
    real = tokens.ne(vocab.pad)
    assert not real.all()  # the batch is padded: the mask is exercised
    types = segment_ids(tokens, vocab.eos) if types_on else None
    if types_on:  # segment B really changes the input
        rows = theirs.embeddings.token_type_embeddings.weight
        assert types.any() and not torch.equal(rows[0], rows[1])
    extra = {} if types is None else {"token_type_ids": types}
    want = theirs(input_ids=tokens, attention_mask=real.long(), **extra)
    got = ours(tokens, types)
    assert got.shape == want.last_hidden_state.shape
    assert (got - want.last_hidden_state)[real].abs().max() < TOL
    assert (got[~real] == 0).all()  # pads: zero, read by nothing
    assert (ours.pooler is None) == (name == "roberta")  # loaded when the file has it
    if ours.pooler is not None:
        assert (ours.pool(got) - want.pooler_output).abs().max() < TOL


@torch.no_grad()
def test_padding_changes_no_row(case):
    """A pair alone (no padding, no mask) gives the features it gets in the padded
    batch: the shortest, the longest and two more."""
    _, ours, _, items, vocab, types_on = case
    tokens = pad_tokens(items, vocab.pad)
    batch = ours(tokens, segment_ids(tokens, vocab.eos) if types_on else None)
    lengths = [len(t) for t in items]
    assert len(set(lengths)) > 1
    shortest, longest = lengths.index(min(lengths)), lengths.index(max(lengths))
    for i in sorted({shortest, longest, 0, 1}):
        item = items[i]
        alone = ours(item[None], segment_ids(item[None], vocab.eos) if types_on else None)
        assert (alone[0] - batch[i, :len(item)]).abs().max() < TOL, i


@torch.no_grad()
def test_gelu_new_as_transformers_computes_it(fine_tuned, tmp_path):
    """The other activation an export writes (fairseq's gelu_accurate): the folder with
    hidden_act gelu_new and the first feed-forward layer's input weights scaled up (so
    that the two GELUs differ: they part only well away from zero), both encoders."""
    from span_plugin.portable import load_model

    folder = fine_tuned["mrpc"][0]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tensors = safetensors_torch.load_file(str(folder / "model.safetensors"))
    tensors["roberta.encoder.layer.0.intermediate.dense.weight"] *= 100
    tensors["roberta.encoder.layer.0.output.dense.weight"] *= 10
    folders = {}
    for act in ("gelu", "gelu_new"):
        folders[act] = tmp_path / act
        folders[act].mkdir()
        safetensors_torch.save_file(tensors, str(folders[act] / "model.safetensors"))
        (folders[act] / "config.json").write_text(json.dumps({**config, "hidden_act": act}),
                                                  encoding="utf-8")
    model = load_model(folder)
    tokens = pad_tokens([t for t, _ in model.encode(mrpc_pairs(4))], model.vocab.pad)
    real = tokens.ne(model.vocab.pad)
    ours, theirs = both_encoders(folders["gelu_new"])
    assert theirs.config.hidden_act == "gelu_new"
    got, want = ours(tokens), theirs(input_ids=tokens, attention_mask=real.long())
    assert (got - want.last_hidden_state)[real].abs().max() < TOL
    erf, _ = both_encoders(folders["gelu"])
    assert (erf(tokens) - got)[real].abs().max() > 10 * TOL  # the two GELUs part here


def test_what_it_cannot_compute_is_refused(fine_tuned):
    """An activation without a line here, a missing, unknown or misshapen encoder tensor:
    one error naming it."""
    folder = fine_tuned["mrpc"][0]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tensors = safetensors_torch.load_file(str(folder / "model.safetensors"))
    with pytest.raises(EncoderConfigError, match=r"config.json: hidden_act 'swish'; the torch "
                                                 r"encoder computes gelu, gelu_new"):
        load_bert_encoder({**config, "hidden_act": "swish"}, tensors)
    missing = dict(tensors)
    del missing["roberta.encoder.layer.1.attention.self.value.bias"]
    with pytest.raises(EncoderConfigError, match=r"model.safetensors: no roberta.encoder.layer."
                                                 r"1.attention.self.value.bias"):
        load_bert_encoder(config, missing)
    extra = {**tensors, "roberta.encoder.layer.2.output.dense.weight": torch.zeros(2, 2)}
    with pytest.raises(EncoderConfigError, match=r"roberta.encoder.layer.2.output.dense.weight "
                                                 r"is not a tensor of the roberta encoder"):
        load_bert_encoder(config, extra)
    shaped = {**tensors, "roberta.embeddings.LayerNorm.bias": torch.zeros(3)}
    with pytest.raises(EncoderConfigError, match=r"roberta.embeddings.LayerNorm.bias has shape "
                                                 r"\(3,\), expected \(32,\)"):
        load_bert_encoder(config, shaped)
    # Outside the encoder's prefix (masked-LM head, span heads): not the encoder's business.
    assert load_bert_encoder(config, {**tensors, "lm_head.extra": torch.zeros(1)})


CHILD = NO_FAIRSEQ + """
import json
from span_plugin.portable import load_model
folder, pairs, out = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
model = load_model(folder, encoder="torch")
logits = model.predict_logits([tuple(p) for p in pairs], batch_size=16).tolist()
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"transformers", "fairseq"})
json.dump({"logits": logits, "loaded": loaded}, open(out, "w"))
"""


def test_predictions_equal_the_hubs_without_transformers(fine_tuned, tmp_path):
    """STS-B dev pairs through ``load_model(encoder="torch")`` (segment B, the pooled
    <s>) in a child where fairseq cannot be imported: the hub's regression values
    within 1e-4, and neither transformers nor fairseq in its ``sys.modules``; the
    transformers encoder gives the same values here."""
    from span_plugin.hub import SpanHubInterface
    from span_plugin.portable import load_model

    folder, checkpoint = fine_tuned["stsb"]
    lines = (GLUE / "STS-B" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:101]
    pairs = [line.split("\t")[7:9] for line in lines]
    (tmp_path / "pairs.json").write_text(json.dumps(pairs), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", CHILD, folder, tmp_path / "pairs.json",
                           tmp_path / "out.json"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    child = json.loads((tmp_path / "out.json").read_text())
    assert child["loaded"] == []
    got = torch.tensor(child["logits"])
    want = SpanHubInterface.from_pretrained(checkpoint).predict_logits(
        [tuple(p) for p in pairs], batch_size=16)
    assert got.shape == want.shape == (100, 1)
    assert (got - want).abs().max() < 1e-4
    other = load_model(folder, encoder="transformers").predict_logits(
        [tuple(p) for p in pairs], batch_size=16)
    assert (other - got).abs().max() < 1e-4


def test_unknown_encoder_choice_refused(fine_tuned):
    from span_plugin.portable import load_model

    with pytest.raises(ValueError, match=r"encoder 'onnx'; expected one of torch, transformers"):
        load_model(fine_tuned["mrpc"][0], encoder="onnx")
