"""span-convert roberta: Hugging Face RoBERTa-family -> fairseq RoBERTa, token ids kept.

The reference is Hugging Face's own implementation: small random models of each family
built with ``transformers`` (RobertaForMaskedLM over a byte-level BPE trained here,
XLMRobertaModel and CamembertModel over a sentencepiece model trained here), on real
GLUE sentences tokenized by the plugin's own tokenizer from the converted folder.
Hidden states (and LM logits) agree to 1e-5; dict.txt index == Hugging Face id.
"""

import json
import shutil

import pytest
import torch

from conftest import GLUE, run_cli
from test_convert import load_fairseq
from span_plugin.cli.convert import main as cli_main
from span_plugin.tokenizers import words as W

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")

TOL = 1e-5
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
             layer_norm_eps=1e-5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def glue_sentences(task, column, n, split="train.tsv", skip=0):
    rows = (GLUE / task / split).read_text(encoding="utf-8").splitlines()[1 + skip:1 + skip + n]
    return [r.split("\t")[column] for r in rows]


def train_text():
    """A few hundred lines of real, cased English (MRPC sentences)."""
    return glue_sentences("MRPC", 3, 400) + glue_sentences("MRPC", 4, 400)


def real_sentences():
    """Real sentences the tokenizers were not trained on (MRPC dev, SST-2)."""
    return glue_sentences("MRPC", 3, 6, "dev.tsv") + glue_sentences("SST-2", 0, 4, "dev.tsv")


def randomize(model, seed):
    """Move every weight off its initialisation (LayerNorms included), so that each
    tensor's mapping shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


# ------------------------------------------------------------------------------------
# the three families, saved with save_pretrained
# ------------------------------------------------------------------------------------


def make_roberta(folder):
    """RobertaForMaskedLM over a byte-level BPE: RoBERTa's specials at ids 0-3, <mask> last."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(train_text(), vocab_size=420, min_frequency=2, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    folder.mkdir(parents=True)
    bpe.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab["<mask>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = transformers.RobertaTokenizer.from_pretrained(folder)
    tok.save_pretrained(folder)
    config = transformers.RobertaConfig(vocab_size=len(vocab), bos_token_id=0, eos_token_id=2,
                                        **SIZES)
    model = randomize(transformers.RobertaForMaskedLM(config), 1)
    model.save_pretrained(folder)
    return tok, model


def make_spm_family(folder, spm_dir, kind):
    """XLMRobertaModel or CamembertModel (each with its pooler) over one sentencepiece
    model; the Hugging Face tokenizer is converted from it by transformers."""
    tok_cls, model_cls, config_cls = {
        "xlmr": (transformers.XLMRobertaTokenizer, transformers.XLMRobertaModel,
                 transformers.XLMRobertaConfig),
        "camembert": (transformers.CamembertTokenizer, transformers.CamembertModel,
                      transformers.CamembertConfig),
    }[kind]
    folder.mkdir(parents=True)
    shutil.copy(spm_dir / "sp.model", folder / "sentencepiece.bpe.model")
    tok = tok_cls.from_pretrained(folder)
    tok.save_pretrained(folder)
    config = config_cls(vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id, **SIZES)
    model = randomize(model_cls(config), 2)
    model.save_pretrained(folder)
    return tok, model


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    (folder / "text.txt").write_text("\n".join(train_text()) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(folder / "text.txt"), model_prefix=str(folder / "sp"),
                                   vocab_size=500, model_type="unigram", minloglevel=2)
    return folder


@pytest.fixture(scope="module", params=["roberta", "xlmr", "camembert"])
def family(request, tmp_path_factory, spm_model):
    """(name, HF tokenizer, HF model, converted folder, span-convert output)."""
    root = tmp_path_factory.mktemp(request.param)
    hf = root / "hf"
    if request.param == "roberta":
        tok, model = make_roberta(hf)
    else:
        tok, model = make_spm_family(hf, spm_model, request.param)
    out = root / request.param  # the folder name is the recipes' run prefix
    printed = convert(hf, out)
    return request.param, tok, model, out, printed


def convert(hf, out, *extra):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["roberta", "--hf-dir", str(hf), "--out", str(out), *extra]) == 0
    return buf.getvalue()


def project_tokenizer(out):
    """The plugin's tokenizer over the converted folder's files, as the recipes build it."""
    from span_plugin.tokenizers.gpt2 import GPT2Tokenizer
    from span_plugin.tokenizers.sentencepiece import SentencePieceTokenizer

    if (out / "encoder.json").is_file():
        return GPT2Tokenizer(str(out / "encoder.json"), str(out / "vocab.bpe"))
    return SentencePieceTokenizer(str(out / "sentencepiece.bpe.model"))


def fairseq_ids(out, dictionary, text):
    """[<s>] + the dictionary ids of the plugin's tokens + [</s>]."""
    tokens = project_tokenizer(out).pieces(text)[0]
    return [dictionary.bos()] + [dictionary.index(t) for t in tokens] + [dictionary.eos()]


def batch(rows, pad):
    """LongTensor [B, T], right-padded with ``pad``; and the mask of real tokens."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return ids, ids.ne(pad)


# ------------------------------------------------------------------------------------
# faithfulness
# ------------------------------------------------------------------------------------


def test_hidden_states_and_logits_match_transformers(family):
    name, tok, hf_model, out, printed = family
    model, task, cfg = load_fairseq(out)
    d = task.source_dictionary
    assert cfg.model.arch == "roberta" and len(d) == hf_model.config.vocab_size
    rows = [fairseq_ids(out, d, s) for s in real_sentences()]
    assert all(3 not in r for r in rows[:6]), "MRPC dev sentences hold no unknown token"
    ids, mask = batch(rows, d.pad())
    with torch.no_grad():
        ours, _ = model(ids, features_only=True)
        hf_out = hf_model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
        theirs = hf_out.hidden_states[-1]
    diff = (ours - theirs)[mask].abs().max().item()
    print(f"{name}: max |hidden state difference| {diff:.2e} over {int(mask.sum())} tokens")
    assert diff < TOL
    if name == "roberta":  # RobertaForMaskedLM: the LM head too
        with torch.no_grad():
            logits, _ = model(ids)
        ldiff = (logits - hf_out.logits)[mask].abs().max().item()
        print(f"{name}: max |LM logit difference| {ldiff:.2e}")
        assert logits.shape[-1] == hf_out.logits.shape[-1] and ldiff < TOL
        assert "lm_head: converted" in printed
    else:  # XLMRobertaModel / CamembertModel: the pooler has no place in fairseq's roberta
        assert "dropped pooler.dense.weight: pooler: fairseq's roberta has no place" in printed
        assert "lm_head: fresh" in printed


def test_token_ids_are_the_hugging_face_ids(family):
    """The plugin's tokens through dict.txt give Hugging Face's own ids. Byte-level BPE:
    whole sentences, specials included. sentencepiece: the plugin encodes each GPT-2 word
    on its own (its word scheme), Hugging Face the whole line, so they agree where the
    words are space-separated: on each word alone, and on the sentence re-spaced."""
    name, tok, _, out, _ = family
    _, task, _ = load_fairseq(out)
    d = task.source_dictionary
    for text in real_sentences():
        ours = fairseq_ids(out, d, text)
        if name == "roberta":
            assert ours == tok(text)["input_ids"]
            continue
        words = W.split_words(text)
        assert ours[1:-1] == tok(" ".join(words), add_special_tokens=False)["input_ids"]
        for word in words:
            assert fairseq_ids(out, d, word)[1:-1] == tok(word, add_special_tokens=False)["input_ids"]
        # XLM-R starts and ends with fairseq's own <s> and </s>; CamemBERT's Hugging Face
        # tokenizer uses its sentencepiece <s> (5) and </s> (6) instead, which fairseq's
        # CamemBERT never did (it was trained with <s> = 0): the rows are converted as
        # they are and the hidden states compared on fairseq's layout.
        special = tok(text)["input_ids"]
        assert [special[0], special[-1]] == ([0, 2] if name == "xlmr" else [5, 6])


def test_dictionary_layout(family):
    name, tok, hf_model, out, printed = family
    lines = (out / "dict.txt").read_text(encoding="utf-8").splitlines()
    v = hf_model.config.vocab_size
    assert len(lines) == v - 5  # + <s> <pad> </s> <unk> + <mask>
    if name == "roberta":
        assert lines[0] == "4 1" and lines[-1] == f"{v - 2} 1"
        assert {"encoder.json", "vocab.bpe"} <= {p.name for p in out.iterdir()}
        assert json.loads((out / "encoder.json").read_text(encoding="utf-8")) == tok.get_vocab()
    else:
        vocab = tok.get_vocab()
        for k, line in enumerate(lines, 4):
            token = line[:-2]
            assert token.startswith("madeupword") or vocab[token] == k
        # CamemBERT's sentencepiece <unk>/<s>/</s> rows (4, 5, 6) keep their rows.
        placeholders = [line for line in lines if line.startswith("madeupword")]
        assert len(placeholders) == (0 if name == "xlmr" else 3)
        assert (out / "sentencepiece.bpe.model").is_file()
    assert "dict.txt index == Hugging Face id" in printed


def test_ngram_dictionary_counts_in_the_tokenizers_words(family, tmp_path):
    """An n-gram dictionary counted in the tokenizer's word scheme (gpt2 words for both
    kinds) segments text encoded by the converted folder's tokenizer."""
    name, _, _, out, _ = family
    if name == "camembert":
        pytest.skip("same tokenizer kind as xlmr")
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(train_text()) + "\n", encoding="utf-8")
    ngrams = tmp_path / "ngrams.txt"
    run_cli("span-preprocess", "ngrams", "--text", text, "--out", ngrams, "--words", "gpt2",
            "--min-count", "3", "--workers", "1")
    enc = (["--bpe", "gpt2", "--gpt2-encoder-json", out / "encoder.json",
            "--gpt2-vocab-bpe", out / "vocab.bpe"] if name == "roberta" else
           ["--bpe", "sentencepiece", "--sentencepiece-model", out / "sentencepiece.bpe.model"])
    log = run_cli("span-preprocess", "encode", *enc, "--srcdict", out / "dict.txt",
                  "--ngrams", ngrams, "--workers", "1",
                  "Amrozi accused his brother of deliberately distorting his evidence .").stdout
    assert " | " in log and any(len(span.split()) > 1 for span in log.strip().splitlines()[-1].split(" | "))


# ------------------------------------------------------------------------------------
# errors and the recipes
# ------------------------------------------------------------------------------------


def test_refuses_folders_it_cannot_convert(family, tmp_path, capsys):
    name, _, _, out, _ = family
    if name != "roberta":
        pytest.skip("one family is enough")
    hf = out.parent / "hf"
    bad = tmp_path / "bad"
    shutil.copytree(hf, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    assert cli_main(["roberta", "--hf-dir", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "model_type 'bert' is not supported; span-convert roberta" in capsys.readouterr().err
    (bad / "config.json").write_text(json.dumps(config))
    vocab = json.loads((bad / "vocab.json").read_text())
    vocab["<mask>"], vocab["<unk>"] = 3, vocab["<mask>"]
    (bad / "vocab.json").write_text(json.dumps(vocab))
    assert cli_main(["roberta", "--hf-dir", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "vocab.json: '<unk>' has id" in err and "expected <s> <pad> </s> <unk> at ids 0-3" in err
    assert not (tmp_path / "o" / "model.pt").exists()


def test_recipes_take_the_folder_as_model_dir(family):
    """recipes/lib.sh picks the folder's tokenizer and RoBERTa's pair layout (the NER,
    QA and pre-training recipes take encoder_args the same way)."""
    from conftest import ROOT

    _, _, _, out, _ = family
    script = (f'RECIPE_NAME=t; source "{ROOT}/recipes/lib.sh"; MODEL_DIR="{out}"; ROBERTA_PATH=; '
              f'use_pretrained_encoder; echo "$MODEL_LAYOUT ${{encoder_args[*]}} | ${{size_args[*]}}"')
    line = run_cli("bash", "-c", script).stdout.strip().splitlines()[-1]
    layout, rest = line.split(" ", 1)
    assert layout == "roberta"
    assert ("--bpe gpt2" in rest) == (out.name == "roberta")
    assert "--encoder-layers 2 --encoder-embed-dim 32" in rest and "--max-positions 128" in rest


@pytest.mark.slow
def test_glue_recipe_fine_tunes_the_converted_xlmr(family, tmp_path):
    """recipes/glue/MRPC.sh with MODEL_DIR = the converted XLM-R: span-preprocess with its
    sentencepiece, RoBERTa's <s> A </s> </s> B </s>, fine-tuning from its weights."""
    from test_recipes_bert import run_recipe

    name, _, _, out, _ = family
    if name != "xlmr":
        pytest.skip("one end-to-end run")
    log = run_recipe("MRPC", tmp_path, out, "--max-update", "2").stdout
    assert f"Loaded checkpoint {out}/model.pt" in log or f"loading pretrained model from {out}" in log
    assert "separator_token=2" in log or "'separator_token': 2" in log
    data = tmp_path / "data-bin" / "xlmr" / "MRPC"
    assert (data / "input0" / "dict.txt").read_bytes() == (out / "dict.txt").read_bytes()
    assert '"sentencepiece"' in (data / "provenance.json").read_text()
    assert (tmp_path / "runs" / "xlmr" / "MRPC" / "results.json").is_file()
