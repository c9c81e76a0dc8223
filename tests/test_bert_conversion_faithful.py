"""A converted BERT encodes pairs and reads ``[CLS]`` as BERT does.

``span-convert bert`` keeps BERT's segment-B embedding and its pooler; the plugin's
model gives the tokens after the first ``</s>`` segment B, and its sentence heads read
the pooled ``<s>``: the plain head is BERT's classifier, the span head joins the pooled
``<s>`` with the span vector (the paper's code). References: Hugging Face's BertModel
and BertForSequenceClassification (``transformers``, test-only) with the token types
of BERT's own tokenizer, on the real all-MiniLM-L6-v2 and real GLUE pairs, and on small
random BERTs. Features and pooled outputs are compared in float64 on both sides, which
removes float32's arithmetic noise; what remains (up to 3e-6 on MiniLM) is the float32
rounding of the sums the checkpoint stores (positions + type 0, type 1 - type 0). In
float32 MiniLM's features differ by up to 5e-6 (tests/test_convert.py checks 1e-4).

What must not change: a fairseq RoBERTa checkpoint (no segment B, no pooler) builds
and computes bit for bit as before, and a conversion made before these parts were kept
still loads, with a log line that says so. Models are built as fairseq-train builds
them (options, task.build_model, the --finetune-from-model load).
"""

import logging
import shutil

import pytest
import torch

from conftest import TINY_ROBERTA, USER_DIR, minilm_dir, run_main
from test_convert import (
    CASED,
    UNCASED,
    bert_token_types,
    glue_texts,
    make_hf_folder,
    pad_batch,
    random_sequences,
    wordpiece,
)
from test_task_data import glue_folder

from span_plugin.convert import checkpoint_train_flags, convert_bert, read_vocab, vocab_mapping
from span_plugin.modules.bert_segment_pooler import segment_ids

transformers = pytest.importorskip("transformers")

TOL = 1e-5
HEAD = "sentence_classification_head"
PARTS_LOG = "span_plugin.models.bert_attach"


# ------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------


def build(data, arch, *flags, num_classes=2, seed=1):
    """(cfg, model) as fairseq-train builds them for the sentence_prediction task (which
    registers the sentence head through ``register_classification_head``)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", str(USER_DIR), "--task", "sentence_prediction",
        "--criterion", "sentence_prediction", "--arch", arch, "--num-classes", str(num_classes),
        "--init-token", "0", "--seed", str(seed), *map(str, flags)])
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(seed)  # as fairseq-train seeds before building
    task = tasks.setup_task(cfg.task)
    return cfg, task, task.build_model(cfg.model)


def load(cfg, model, checkpoint):
    """The weights of a checkpoint file (or a state dict) into ``model``, as
    --finetune-from-model loads them (Trainer.load_checkpoint: upgrade, strict load)."""
    from fairseq import checkpoint_utils

    state = (checkpoint if isinstance(checkpoint, dict)
             else checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["model"])
    model.load_state_dict(dict(state), strict=True, model_cfg=cfg.model)
    return model.eval()


def own_model(folder):
    """A converted folder through fairseq's loader and the architecture its cfg names."""
    from fairseq import checkpoint_utils

    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(folder / "model.pt")], arg_overrides={"data": str(folder)})
    return models[0].eval(), cfg


def features(model, seqs, left=False):
    """Encoder features of each fairseq-id sequence ([len, H] each), batched."""
    src = pad_batch(seqs, 1, left=left)
    with torch.no_grad():
        x, _ = model(src, features_only=True)
    width = src.size(1)
    return [x[i, width - len(s):] if left else x[i, : len(s)] for i, s in enumerate(seqs)]


def max_diff(a_list, b_list):
    return max((a - b).abs().max().item() for a, b in zip(a_list, b_list))


def bert_reference(hf, encodings, cls=None):
    """Hugging Face's outputs on tokenizer encodings (ids, BERT's own token types),
    right-padded: (last_hidden_state per sequence, pooler_output), or the logits of
    ``cls`` (a BertForSequenceClassification) when given."""
    ids = pad_batch([e.ids for e in encodings], 0)
    types = pad_batch([e.type_ids for e in encodings], 0)
    mask = pad_batch([[1] * len(e.ids) for e in encodings], 0)
    with torch.no_grad():
        if cls is not None:
            return cls(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        out = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    return [out.last_hidden_state[i, : len(e.ids)] for i, e in enumerate(encodings)], out.pooler_output


def parts_log(caplog):
    """What span_plugin.models.bert_attach logged."""
    return " ".join(r.getMessage() for r in caplog.records if r.name == PARTS_LOG)


def strip_bert_flags(flags):
    return [f for f in flags if f not in ("--bert-token-types", "--bert-pooler")]


# ------------------------------------------------------------------------------------
# fixtures: the real MiniLM, converted three ways
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    out = tmp_path_factory.mktemp("faithful") / "minilm"
    convert_bert(minilm_dir(), out)
    return out


@pytest.fixture(scope="module")
def minilm_roberta_only(tmp_path_factory):
    out = tmp_path_factory.mktemp("faithful") / "roberta_only"
    convert_bert(minilm_dir(), out, roberta_only=True)
    return out


@pytest.fixture(scope="module")
def minilm_old(minilm_roberta_only, tmp_path_factory):
    """What span-convert wrote before its faithful conversion: the --roberta-only checkpoint without
    the record entries the new converter adds."""
    out = tmp_path_factory.mktemp("faithful") / "old"
    shutil.copytree(minilm_roberta_only, out)
    state = torch.load(out / "model.pt", weights_only=True)
    for key in ("token_types", "pooler"):
        del state["cfg"]["model"]["bert_conversion"][key]
    torch.save(state, out / "model.pt")
    return out


@pytest.fixture(scope="module")
def minilm_data(minilm, tmp_path_factory):
    """What sentence_prediction needs to build a model for the MiniLM: its dictionary
    and two labels."""
    data = tmp_path_factory.mktemp("faithful") / "data"
    (data / "input0").mkdir(parents=True)
    (data / "label").mkdir()
    shutil.copy(minilm / "dict.txt", data / "input0" / "dict.txt")
    (data / "label" / "dict.txt").write_text("0 1\n1 1\n")
    return data


@pytest.fixture(scope="module")
def glue_encodings():
    """Real GLUE pairs (MRPC, STS-B) and singles (CoLA, SST-2), encoded by the MiniLM's
    own tokenizer: BERT ids and BERT's token types; and the same ids in fairseq's order."""
    tok = wordpiece(minilm_dir())
    singles, pairs = glue_texts(n_single=4, n_pairs=8)
    encodings = [tok.encode(a, b) for a, b in pairs] + [tok.encode(s) for s in singles]
    assert sum(any(e.type_ids) for e in encodings) == len(pairs)
    to_fs = vocab_mapping(read_vocab(minilm_dir() / "vocab.txt")).bert_to_fairseq
    return encodings, [to_fs[torch.tensor(e.ids)] for e in encodings]


@pytest.fixture(scope="module")
def hf_minilm():
    return transformers.BertModel.from_pretrained(minilm_dir()).eval()


# ------------------------------------------------------------------------------------
# segment B: which positions
# ------------------------------------------------------------------------------------


def test_segment_b_is_berts_token_type_1(glue_encodings):
    """The tokens after the first </s> are segment B: BERT's tokenizer agrees on every
    real pair ([CLS] A [SEP] -> 0, B [SEP] -> 1) and single; RoBERTa's doubled
    separator opens segment B; right padding follows the last segment."""
    encodings, fs = glue_encodings
    for e, ids in zip(encodings, fs):
        assert segment_ids(ids[None], 2)[0].tolist() == e.type_ids
    batch = torch.tensor([[0, 5, 6, 2, 2, 7, 8, 2, 1, 1],
                          [0, 5, 6, 7, 2, 1, 1, 1, 1, 1]])
    assert segment_ids(batch, 2).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
                                              [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]]


# ------------------------------------------------------------------------------------
# the converted model computes BERT's function
# ------------------------------------------------------------------------------------


def test_minilm_pair_features_and_pooler_match_bert(minilm, minilm_roberta_only, hf_minilm,
                                                    glue_encodings):
    encodings, fs = glue_encodings
    model, cfg = own_model(minilm)
    assert type(model).__name__ == "RobertaSpanModel"
    assert cfg.model.bert_token_types and cfg.model.bert_pooler
    model, hf = model.double(), hf_minilm.double()
    reference, pooled = bert_reference(hf, encodings)
    for left in (False, True):
        assert max_diff(features(model, fs, left), reference) < TOL
    src = pad_batch(fs, 1)
    with torch.no_grad():
        x, _ = model(src, features_only=True)
        assert (model.pooler(x[:, 0]) - pooled).abs().max().item() < TOL

    # Before: every token segment A, and no pooler; the pairs came out otherwise.
    old, _ = own_model(minilm_roberta_only)
    old.double()
    for module in old.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 1e-12
    pairs = sum(any(e.type_ids) for e in encodings)
    diff = max_diff(features(old, fs[:pairs]), reference[:pairs])
    print(f"\nMiniLM pair features with segment A throughout (before): max abs diff {diff:.3f}")
    assert diff > 1e-2
    assert max_diff(features(old, fs[pairs:]), reference[pairs:]) < TOL  # singles: as before


RANDOM = {
    # name: (vocab, make_hf_folder kwargs); every one has pairs among its sequences
    "pretraining-heads": (UNCASED, {"head": "pretraining"}),
    "bertmodel-gelu-tanh": (CASED, {"head": "none", "hidden_act": "gelu_new"}),
    "three-token-types": (UNCASED, {"head": "pretraining", "type_vocab_size": 3}),
    "spanbert-like-no-pooler": (CASED, {"head": "mlm"}),
}


@pytest.mark.parametrize("variant", sorted(RANDOM))
def test_random_bert_pairs_and_pooler_match_bert(variant, tmp_path):
    vocab, kwargs = RANDOM[variant]
    hf = make_hf_folder(tmp_path / "hf", vocab, **kwargs).double()
    convert_bert(tmp_path / "hf", tmp_path / "out")
    model, cfg = own_model(tmp_path / "out")
    model.double()
    record = cfg.model.bert_conversion
    seqs = random_sequences(vocab)
    sep = vocab.index("[SEP]")
    assert any(any(bert_token_types(s, sep)) for s in seqs)
    fs = [vocab_mapping(vocab).bert_to_fairseq[torch.tensor(s)] for s in seqs]
    encoder = hf if kwargs["head"] == "none" else hf.bert
    ids, mask = pad_batch(seqs, 0), pad_batch([[1] * len(s) for s in seqs], 0)
    with torch.no_grad():
        out = encoder(input_ids=ids, attention_mask=mask,
                      token_type_ids=pad_batch([bert_token_types(s, sep) for s in seqs], 0))
    reference = [out.last_hidden_state[i, : len(s)] for i, s in enumerate(seqs)]
    assert max_diff(features(model, fs), reference) < TOL

    if kwargs["head"] == "mlm":  # BertForMaskedLM has no pooler: none to keep
        assert not cfg.model.bert_pooler and model.pooler is None
        assert record["pooler"] == "none kept" and cfg.model.bert_token_types
        return
    with torch.no_grad():
        x, _ = model(pad_batch(fs, 1), features_only=True)
        assert (model.pooler(x[:, 0]) - out.pooler_output).abs().max().item() < TOL
    dropped = {d["tensor"] for d in record["dropped"]}
    if variant == "three-token-types":
        assert "bert.embeddings.token_type_embeddings.weight[2:]" in dropped
        assert model.token_types.weight.shape == (2, 32)
    assert ("cls.seq_relationship.weight" in dropped) == (kwargs["head"] == "pretraining")


# ------------------------------------------------------------------------------------
# the heads over the pooler
# ------------------------------------------------------------------------------------


def test_plain_head_is_berts_classifier(minilm, minilm_data, glue_encodings, caplog):
    """recipes' HEAD=plain on a converted BERT: roberta_span --sentence-head plain with
    the flags span-convert prints, loaded as --finetune-from-model loads: its logits are
    BertForSequenceClassification's with the same classifier weights."""
    from span_plugin.modules.sentence_heads import PooledClassificationHead

    flags = checkpoint_train_flags(minilm)
    assert flags[-2:] == ["--bert-token-types", "--bert-pooler"]
    cfg, _, model = build(minilm_data, "roberta_span", *flags, "--sentence-head", "plain",
                          "--layernorm-eps", "1e-12")
    with caplog.at_level(logging.WARNING, logger=PARTS_LOG):
        load(cfg, model, minilm / "model.pt")
    assert not parts_log(caplog)  # nothing fresh, nothing dropped
    head = model.classification_heads[HEAD]
    assert isinstance(head, PooledClassificationHead) and head.dropout.p == 0.1  # BERT's

    hf = transformers.BertForSequenceClassification.from_pretrained(minilm_dir(), num_labels=2)
    with torch.no_grad():
        hf.classifier.weight.copy_(head.out_proj.weight)
        hf.classifier.bias.copy_(head.out_proj.bias)
    model, hf = model.double(), hf.eval().double()
    encodings, fs = glue_encodings
    with torch.no_grad():
        logits, _ = model(pad_batch(fs, 1), classification_head_name=HEAD)
    assert (logits - bert_reference(None, encodings, cls=hf)).abs().max().item() < TOL


def test_span_head_joins_the_span_vector_with_the_pooled_cls(minilm, minilm_data, hf_minilm,
                                                             glue_encodings):
    """The paper's code over BERT: [s; pooled <s>] -> dropout -> one linear layer;
    dropout 0.1 on the span vectors and on the classifier input."""
    from span_plugin.modules.sentence_heads import SpanClassificationHead

    cfg, _, model = build(minilm_data, "roberta_span", *checkpoint_train_flags(minilm),
                          "--layernorm-eps", "1e-12")
    load(cfg, model, minilm / "model.pt")
    head = model.classification_heads[HEAD]
    assert isinstance(head, SpanClassificationHead) and head.dense is None
    assert head.out_proj.in_features == 2 * 384
    assert head.input_dropout.p == head.span_encoder.within_dropout.p == 0.1
    assert head.span_encoder.across_dropout.p == 0.1

    encodings, fs = glue_encodings
    model, hf = model.double(), hf_minilm.double()
    _, pooled = bert_reference(hf, encodings)
    seen = {}
    head.register_forward_pre_hook(lambda _, args, kwargs: seen.update(kwargs), with_kwargs=True)
    src = pad_batch(fs, 1)
    spans = torch.tensor([[[1, 3], [3, 5], [0, 0]]] * len(fs))
    with torch.no_grad():
        logits, _ = model(src, spans=spans, classification_head_name=HEAD)
        x, _ = model(src, features_only=True)
        expected = head.out_proj(torch.cat([head.span_encoder(x, spans), pooled], -1))
    assert (seen["pooled"] - pooled).abs().max().item() < TOL
    assert (logits - expected).abs().max().item() < TOL


# ------------------------------------------------------------------------------------
# the span head's dropout (--span-dropout)
# ------------------------------------------------------------------------------------


def test_span_dropout_is_the_papers_and_zero_is_the_old_head():
    """Default 0.1 on the span vectors and the classifier input (fairseq's dropout
    after the dense layer stays 0); --span-dropout 0: no dropout in the head, as before."""
    from test_model_span import build as build_span

    mrpc = glue_folder("MRPC")
    _, task, model = build_span(mrpc)
    head = model.classification_heads[HEAD]
    assert (head.input_dropout.p, head.span_encoder.within_dropout.p,
            head.span_encoder.across_dropout.p, head.dropout.p) == (0.1, 0.1, 0.1, 0.0)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    net = ds.collater([ds[i] for i in range(8)])["net_input"]
    assert not torch.equal(_head_logits(model, net, True), _head_logits(model, net, False))

    _, _, old = build_span(mrpc, "--span-dropout", "0")
    assert _head_logits(old, net, True).equal(_head_logits(old, net, False))
    # a parameter-free level has no dropout of its own (cnn-max: max across spans)
    _, _, cnn_max = build_span(mrpc, "--span-encoder", "cnn-max")
    encoder = cnn_max.classification_heads[HEAD].span_encoder
    assert (encoder.within_dropout.p, encoder.across_dropout.p) == (0.1, 0.0)
    _, _, cnn = build_span(mrpc, "--span-encoder", "cnn")
    assert cnn.classification_heads[HEAD].span_encoder.dropout.p == 0.1


def _head_logits(model, net, train):
    """The sentence head's logits with the encoder in eval mode and the head in train
    (dropout on) or eval mode."""
    model.eval()
    model.classification_heads.train(train)
    torch.manual_seed(0)
    with torch.no_grad():
        return model(**net, classification_head_name=HEAD)[0]


# ------------------------------------------------------------------------------------
# what must not change
# ------------------------------------------------------------------------------------


def test_roberta_checkpoint_computes_as_before(caplog):
    """fairseq's own roberta with its head, and roberta_span --sentence-head plain,
    built alike: the same weights from the same seed, the same state-dict keys (no
    segment B, no pooler), bit-identical features, LM output and logits when the plugin
    loads the fairseq model's checkpoint, with nothing said about BERT's parts."""
    mrpc = glue_folder("MRPC")
    cfg, task, fairseq_model = build(mrpc, "roberta_base", *TINY_ROBERTA)
    _, _, plugin = build(mrpc, "roberta_span_base", *TINY_ROBERTA, "--sentence-head", "plain")
    assert type(fairseq_model).__name__ == "RobertaModel"
    theirs, mine = fairseq_model.state_dict(), plugin.state_dict()
    assert set(theirs) == set(mine) and all(torch.equal(theirs[k], mine[k]) for k in theirs)

    with torch.no_grad():  # a fine-tuned-looking checkpoint: weights moved off their init
        for p in fairseq_model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    checkpoint = fairseq_model.state_dict()
    with caplog.at_level(logging.INFO, logger=PARTS_LOG):
        load(cfg, plugin, checkpoint)
    assert not parts_log(caplog) and plugin.token_types is None and plugin.pooler is None

    task.load_dataset("valid")
    ds = task.dataset("valid")
    src = ds.collater([ds[i] for i in range(8)])["net_input"]["src_tokens"]
    fairseq_model.eval()
    with torch.no_grad():
        for kwargs in ({"features_only": True}, {}, {"classification_head_name": HEAD}):
            assert torch.equal(plugin(src, **kwargs)[0], fairseq_model(src, **kwargs)[0]), kwargs

        # Asking for BERT's parts on a checkpoint without them: said, and segment B
        # starts at zero, so the features are still the same.
        _, _, bert_like = build(mrpc, "roberta_span_base", *TINY_ROBERTA,
                                "--bert-token-types", "--bert-pooler")
        with caplog.at_level(logging.WARNING, logger=PARTS_LOG):
            load(cfg, bert_like, checkpoint)
        said = parts_log(caplog)
        assert "--bert-token-types: the checkpoint has no BERT's segment-B" in said
        assert "--bert-pooler: the checkpoint has no BERT's pooler" in said
        assert torch.equal(bert_like(src, features_only=True)[0],
                           fairseq_model(src, features_only=True)[0])


def test_old_conversion_loads_with_a_clear_log_line(minilm_old, minilm_data, glue_encodings,
                                                    caplog):
    """A folder converted before the faithful conversion: span-convert flags says so (the recipes show
    it) and prints the size flags only; the plugin's model built from them computes what
    fairseq's own roberta computes on it; with BERT's options given by hand it loads
    too, says what starts fresh, and still computes the same."""
    with caplog.at_level(logging.WARNING, logger="span_plugin.convert.flags"):
        flags = checkpoint_train_flags(minilm_old)
    assert flags == strip_bert_flags(flags) and flags[-1] == "512"
    assert "converted before span-convert kept its segment-B embedding and pooler" in caplog.text
    cli = run_main("span-convert", "flags", minilm_old / "model.pt")
    assert cli.stdout.splitlines()[-1] == " ".join(flags)
    assert "re-convert it with span-convert bert" in cli.stdout  # (stderr merged)

    _, fs = glue_encodings
    reference = features(own_model(minilm_old)[0], fs)  # fairseq's roberta
    cfg, _, model = build(minilm_data, "roberta_span", *flags, "--sentence-head", "plain")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=PARTS_LOG):
        load(cfg, model, minilm_old / "model.pt")
    assert not parts_log(caplog)
    assert max_diff(features(model, fs), reference) == 0

    cfg, _, model = build(minilm_data, "roberta_span", *flags, "--bert-token-types",
                          "--bert-pooler", "--sentence-head", "plain")
    with caplog.at_level(logging.WARNING, logger=PARTS_LOG):
        load(cfg, model, minilm_old / "model.pt")
    said = parts_log(caplog)
    assert "a BERT converted before span-convert kept it" in said
    assert max_diff(features(model, fs), reference) == 0


def test_new_conversion_without_the_options_runs_as_the_roberta_only_one(
        minilm, minilm_roberta_only, minilm_data, glue_encodings, caplog):
    """--bert-token-types / --bert-pooler off on a checkpoint that has the parts: they
    are dropped, with a warning, and the model computes what fairseq's roberta computes
    on the --roberta-only conversion (the behaviour before the faithful conversion)."""
    _, fs = glue_encodings
    flags = strip_bert_flags(checkpoint_train_flags(minilm))
    cfg, _, model = build(minilm_data, "roberta_span", *flags)
    with caplog.at_level(logging.WARNING, logger=PARTS_LOG):
        load(cfg, model, minilm / "model.pt")
    said = parts_log(caplog)
    assert "segment-B (token type 1) embedding, which this model runs without" in said
    assert "every token is encoded as segment A" in said and "pooler" in said
    reference = features(own_model(minilm_roberta_only)[0], fs)
    assert max_diff(features(model, fs), reference) == 0


def test_fairseqs_hub_loads_the_converted_folder_with_the_plugin(minilm, hf_minilm,
                                                                 glue_encodings):
    """fairseq's RobertaModel.from_pretrained with the plugin as user dir: the folder's
    architecture (roberta_span) with segment B, so its extract_features of a pair in
    BERT's layout are BERT's."""
    from fairseq.models.roberta import RobertaModel

    hub = RobertaModel.from_pretrained(str(minilm), "model.pt", str(minilm),
                                       user_dir=str(USER_DIR)).eval()
    assert type(hub.model).__name__ == "RobertaSpanModel"
    encodings, fs = glue_encodings
    reference, _ = bert_reference(hf_minilm.float(), encodings[:2])
    with torch.no_grad():
        got = [hub.extract_features(ids)[0] for ids in fs[:2]]
    assert max_diff(got, reference) < 1e-4  # float32


def test_segment_b_in_half_precision(minilm, glue_encodings):
    """fp16: the segment rows are added in the model's dtype (no float32 tensor meets a
    half one); the features stay finite and near float32's."""
    _, fs = glue_encodings
    model, _ = own_model(minilm)
    full = features(model, fs[:4])
    model.half()
    assert model.token_types.weight.dtype == torch.float16
    half = features(model, fs[:4])
    assert all(h.dtype == torch.float16 and torch.isfinite(h).all() for h in half)
    assert max_diff([h.float() for h in half], full) < 0.1


def test_spanbert_pretraining_carries_the_parts_unchanged(minilm, caplog):
    """Continued pre-training (roberta_spanbert, which the pre-training recipe builds with
    span-convert's flags) loads a converted BERT whole and keeps its segment B and pooler
    frozen: pre-training reads neither, and the checkpoint it writes still has them."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(minilm), "--user-dir", str(USER_DIR), "--task", "masked_lm",
        "--criterion", "masked_lm", "--arch", "roberta_spanbert",
        *checkpoint_train_flags(minilm)])
    cfg = convert_namespace_to_omegaconf(args)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    with caplog.at_level(logging.WARNING, logger=PARTS_LOG):
        load(cfg, model, minilm / "model.pt")
    assert not parts_log(caplog)
    converted = torch.load(minilm / "model.pt", weights_only=True)["model"]
    for key in ("token_types.weight", "pooler.dense.weight", "pooler.dense.bias"):
        assert torch.equal(model.state_dict()[key], converted[key])
    assert not any(p.requires_grad for name in ("token_types", "pooler")
                   for p in getattr(model, name).parameters())
