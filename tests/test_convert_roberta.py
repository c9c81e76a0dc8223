"""span-convert roberta: Hugging Face RoBERTa-family -> fairseq RoBERTa, token ids kept.

The reference is Hugging Face's own implementation: small random models of each family
built with ``transformers`` (RobertaForMaskedLM over a byte-level BPE trained here,
XLMRobertaModel and CamembertModel over a sentencepiece model trained here), on real
GLUE sentences tokenized by the plugin's own tokenizer from the converted folder.
Hidden states (and LM logits) agree to 1e-5; dict.txt index == Hugging Face id; the
sentencepiece-line tokenizer gives Hugging Face's own ids on whole sentences and its words
are the spm word scheme's (what span-preprocess ngrams --words spm counts).
"""

import json
import shutil

import pytest
import torch

from conftest import DATA, GLUE, run_cli, run_main
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


# One character normalized into two (ﬁ -> fi) that sentencepiece splits between pieces:
# the character's range goes to one of them.
LIGATURE = "a ﬁne day"
# Punctuation on words, runs of spaces, other spaces, non-ASCII (letters the small model
# does not know: <unk>), compatibility forms that NFKC rewrites.
EDGE_CASES = ['New  York,  he said: "fine."', "  lead and trail  ", "tab\tand\u00a0no-break",
              "Zürich café – naïve coöperation", "日本語のテキスト", "full\u3000width ｆｕｌｌ",
              "(brackets) [and] {braces}!? 3.5% $10,000", "x\u200bzero-width space",
              LIGATURE]


def many_sentences():
    """All MRPC dev sentences (816, unseen in training) and the edge cases."""
    return (glue_sentences("MRPC", 3, 408, "dev.tsv") + glue_sentences("MRPC", 4, 408, "dev.tsv")
            + EDGE_CASES)


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


def encoder_args(out):
    """span-preprocess's tokenizer arguments for a converted folder (as recipes/lib.sh)."""
    if (out / "encoder.json").is_file():
        return ["--bpe", "gpt2", "--gpt2-encoder-json", out / "encoder.json",
                "--gpt2-vocab-bpe", out / "vocab.bpe"]
    return ["--bpe", "sentencepiece-line", "--sentencepiece-model", out / "sentencepiece.bpe.model"]


def project_tokenizer(out):
    """The plugin's tokenizer over the converted folder's files, as the recipes build it."""
    from span_plugin.tokenizers.gpt2 import GPT2Tokenizer
    from span_plugin.tokenizers.sentencepiece_line import SentencePieceLineTokenizer

    if (out / "encoder.json").is_file():
        return GPT2Tokenizer(str(out / "encoder.json"), str(out / "vocab.bpe"))
    return SentencePieceLineTokenizer(str(out / "sentencepiece.bpe.model"))


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
    """The plugin's tokens through dict.txt give Hugging Face's own ids on whole
    sentences, specials included (sentencepiece-line encodes the line as XLM-R's and
    CamemBERT's tokenizers do: "York," is ▁York , not ▁York ▁,)."""
    name, tok, _, out, _ = family
    _, task, _ = load_fairseq(out)
    d = task.source_dictionary
    for text in real_sentences():
        theirs = tok(text)["input_ids"]
        if name == "camembert":
            # CamemBERT's Hugging Face tokenizer uses its sentencepiece <s> (5) and </s>
            # (6), which fairseq's CamemBERT never did (it was trained with <s> = 0): the
            # rows are converted as they are and the hidden states compared on fairseq's.
            assert [theirs[0], theirs[-1]] == [5, 6]
            theirs = [0, *theirs[1:-1], 2]
        assert fairseq_ids(out, d, text) == theirs
    if name == "roberta":
        return
    tokenizer = project_tokenizer(out)
    texts = many_sentences()
    differ = [t for t in texts if [d.index(x) for x in tokenizer.pieces(t.strip())[0]]
              != tok(t, add_special_tokens=False)["input_ids"]]
    print(f"{name}: {len(texts) - len(differ)} of {len(texts)} sentences give Hugging Face's ids")
    assert not differ


def spm_normalized(text):
    """``text`` as sentencepiece's nmt_nfkc rule writes it, without its word markers."""
    return "".join(W._spm_normalizer().normalize(text).split(W.SPM_SPACE))


def test_words_are_sentencepiece_word_starts(family):
    """sentencepiece-line's words start at the pieces starting with ▁; its keys are the
    words span-preprocess ngrams --words spm counts; each token's character range spells
    the token, and each word's tokens cover the spm word's range in the text."""
    name, _, _, out, _ = family
    if name == "roberta":
        pytest.skip("byte-level BPE: gpt2 words")
    tokenizer = project_tokenizer(out)
    assert tokenizer.word_scheme == "spm"
    for text in many_sentences():
        text = text.strip()
        tokens, starts, keys = tokenizer.pieces(text)
        assert starts == [i for i, t in enumerate(tokens) if t.startswith("\u2581")]
        assert keys == W.splitter("spm")(text), text
        offsets = tokenizer.offsets(text)
        for token, (lo, hi) in zip(tokens, offsets, strict=True):
            if token != "<unk>" and text != LIGATURE:
                assert spm_normalized(text[lo:hi]) == token.lstrip("\u2581"), (text, token)
        ends = [s - 1 for s in starts[1:]] + [len(tokens) - 1]
        words = [(offsets[a][0], offsets[b][1]) for a, b in zip(starts, ends)]
        assert words == W.spm_word_ranges(text), text
        for (lo, hi), a, b in zip(words, starts, ends):
            if "<unk>" not in tokens[a:b + 1]:
                assert spm_normalized(text[lo:hi]) == "".join(tokens[a:b + 1]).lstrip("\u2581")
    assert tokenizer.pieces("New York, he said.")[2] == ["new", "york,", "he", "said."]


def test_span_pretraining_reads_the_word_starts_from_the_converted_dictionary(family):
    """Span masking's word starts, read from the converted dict.txt alone
    (--word-boundaries auto), are the tokenizer's own word starts."""
    import numpy as np
    from fairseq.data import Dictionary

    from span_plugin.data.word_boundaries import build_word_boundaries, detect_kind

    name, _, _, out, _ = family
    dictionary = Dictionary.load(str(out / "dict.txt"))
    encoder_json = out / "encoder.json" if name == "roberta" else None
    assert detect_kind(dictionary.symbols, dictionary.nspecial) == (
        "gpt2" if name == "roberta" else "sentencepiece")
    rule = build_word_boundaries("auto", dictionary.symbols, dictionary.nspecial, encoder_json)
    tokenizer = project_tokenizer(out)
    checked = 0
    for text in many_sentences():
        tokens, starts, _ = tokenizer.pieces(text.strip())
        if not tokens or "<unk>" in tokens or (name == "roberta" and not text.isascii()):
            continue  # the test's tiny BPE splits accented letters into bytes: a
            # character split across tokens reads as a word edge (word_boundaries.py)
        ids = np.array([dictionary.index(t) for t in tokens])
        assert np.flatnonzero(rule(ids)).tolist() == starts, text
        checked += 1
    assert checked > 50


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


@pytest.fixture(scope="module")
def ngram_files(tmp_path_factory):
    """{word scheme: n-gram dictionary counted on the training text} (gpt2 and spm)."""
    folder = tmp_path_factory.mktemp("ngrams")
    text = folder / "corpus.txt"
    text.write_text("\n".join(train_text()) + "\n", encoding="utf-8")
    out = {}
    for scheme in ("gpt2", "spm"):
        out[scheme] = folder / f"ngrams.{scheme}.txt"
        run_main("span-preprocess", "ngrams", "--text", text, "--out", out[scheme],
                "--words", scheme, "--min-count", "3", "--workers", "1")
    return out


def test_ngram_dictionary_counts_in_the_tokenizers_words(family, ngram_files):
    """An n-gram dictionary counted in the tokenizer's word scheme (gpt2 for byte-level
    BPE, spm for sentencepiece-line) segments the converted tokenizer's words: every
    span of several words is a dictionary entry (greedy), and many are found."""
    from span_plugin.preprocess import load_ngrams, make_encoder

    name, _, _, out, _ = family
    if name == "camembert":
        pytest.skip("same tokenizer kind as xlmr")
    scheme = "gpt2" if name == "roberta" else "spm"
    ngrams = load_ngrams(ngram_files[scheme])
    assert ngrams.words == scheme
    files = ({"encoder_json": str(out / "encoder.json"), "vocab_bpe": str(out / "vocab.bpe")}
             if name == "roberta" else {"sentencepiece_model": str(out / "sentencepiece.bpe.model")})
    enc = make_encoder(encoder_args(out)[1], ngrams=ngrams, **files)
    spans = [s for text in train_text()[:200] for s in enc.encode_words(text)]
    multi = [s for s in spans if len(s) > 1]
    assert all(tuple(s) in ngrams for s in multi)
    assert len(multi) > 50, f"{len(multi)} multi-word spans in 200 sentences"
    log = run_main("span-preprocess", "encode", *encoder_args(out), "--srcdict", out / "dict.txt",
                  "--ngrams", ngram_files[scheme], "--workers", "1",
                  "Amrozi accused his brother of deliberately distorting his evidence .").stdout
    assert " | " in log and any(len(span.split()) > 1 for span in log.strip().splitlines()[-1].split(" | "))


def test_spm_words_need_a_counted_dictionary(family):
    """No dictionary is packaged for spm words: greedy spans without --ngrams say how to
    count one; --segmentation none needs none."""
    name, _, _, out, _ = family
    if name != "xlmr":
        pytest.skip("one sentencepiece family is enough")
    text = "Amrozi accused his brother, whom he called the witness."
    failed = run_cli("span-preprocess", "encode", *encoder_args(out), text, check=False)
    assert failed.returncode == 2
    assert ("no packaged n-gram dictionary for 'spm' words" in failed.stdout
            and "span-preprocess ngrams --words spm" in failed.stdout), failed.stdout
    plain = run_cli("span-preprocess", "encode", *encoder_args(out), "--segmentation", "none",
                    text).stdout
    assert "brother," in plain.replace(" ", "")


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
    # merges.txt empty, or of another vocabulary; a tokenizer.json of another model type
    shutil.copy(hf / "vocab.json", bad / "vocab.json")
    merges = (hf / "merges.txt").read_text(encoding="utf-8")
    for text, said in (("#version: 0.2\n", "merges.txt: no merges"),
                       (merges.replace("\n", "\nq z\n", 1), "the merge 'q z' makes 'qz', which "
                        "vocab.json does not hold")):
        (bad / "merges.txt").write_text(text, encoding="utf-8")
        assert cli_main(["roberta", "--hf-dir", str(bad), "--out", str(tmp_path / "o")]) == 2
        assert said in capsys.readouterr().err
    for name in ("vocab.json", "merges.txt"):
        (bad / name).unlink()
    (bad / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    assert cli_main(["roberta", "--hf-dir", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "its tokenizer.json is a Unigram tokenizer" in capsys.readouterr().err
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
    assert ("--bpe sentencepiece-line" in rest) == (out.name != "roberta")
    assert "--encoder-layers 2 --encoder-embed-dim 32" in rest and "--max-positions 128" in rest


def test_span_preprocess_glue_on_the_converted_xlmr(family, ngram_files, tmp_path):
    """span-preprocess glue with the converted folder's tokenizer and an spm dictionary:
    the record names sentencepiece-line and spm words, and span-preprocess check passes."""
    from test_task_data import mini_glue

    name, _, _, out, _ = family
    if name != "xlmr":
        pytest.skip("one sentencepiece family is enough")
    data = tmp_path / "MRPC"
    run_main("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(), "--out", data,
            *encoder_args(out), "--srcdict", out / "dict.txt", "--ngrams", ngram_files["spm"],
            "--workers", "1")
    encoder = json.loads((data / "provenance.json").read_text(encoding="utf-8"))["encoder"]
    assert encoder["bpe"] == "sentencepiece-line" and encoder["ngrams"]["words"] == "spm"
    run_cli("span-preprocess", "check", data)


@pytest.mark.slow
def test_glue_recipe_fine_tunes_the_converted_xlmr(family, ngram_files, tmp_path):
    """recipes/glue/MRPC.sh with MODEL_DIR = the converted XLM-R: span-preprocess with
    sentencepiece-line and an spm dictionary (NGRAMS: none is packaged for spm words),
    RoBERTa's <s> A </s> </s> B </s>, fine-tuning from its weights."""
    from test_recipes_bert import run_recipe

    name, _, _, out, _ = family
    if name != "xlmr":
        pytest.skip("one end-to-end run")
    log = run_recipe("MRPC", tmp_path, out, "--max-update", "2",
                     NGRAMS=ngram_files["spm"]).stdout
    assert f"Loaded checkpoint {out}/model.pt" in log or f"loading pretrained model from {out}" in log
    assert "separator_token=2" in log or "'separator_token': 2" in log
    data = tmp_path / "data-bin" / "xlmr" / "MRPC"
    assert (data / "input0" / "dict.txt").read_bytes() == (out / "dict.txt").read_bytes()
    assert '"sentencepiece-line"' in (data / "provenance.json").read_text()
    assert (tmp_path / "runs" / "xlmr" / "MRPC" / "results.json").is_file()


@pytest.mark.slow
def test_ner_recipe_fine_tunes_the_converted_roberta(family, tmp_path):
    """recipes/ner/conll2003.sh with MODEL_DIR = the converted RoBERTa (byte-level BPE,
    GPT-2 words: the packaged dictionary serves): real CoNLL-2003 sentences, tagging
    folder made with the folder's own tokenizer, fine-tuning from its weights, a CoNLL
    prediction file per split."""
    from conftest import conll_sentences
    from test_ner_recipes import RECIPE, conll_columns

    name, _, _, out, _ = family
    if name != "roberta":
        pytest.skip("one end-to-end run")
    conll = tmp_path / "conll"
    conll.mkdir()
    for split, n in (("train", 16), ("valid", 8), ("test", 8)):
        (conll / f"{split}.txt").write_text(conll_sentences(DATA / "conll2003" / f"{split}.txt", n))
    log = run_cli("bash", RECIPE, "--cpu", "--max-update", "2", "--batch-size", "8",
                  "--num-workers", "0", "--log-interval", "1", cwd=tmp_path,
                  env={"CONLL_DIR": str(conll), "MODEL_DIR": str(out), "WORKERS": "1",
                       "OUT_DIR": str(tmp_path / "run")}).stdout
    assert f"Loaded checkpoint {out}/model.pt" in log or f"loading pretrained model from {out}" in log
    data = tmp_path / "data-bin" / "roberta" / "conll2003"
    assert (data / "input0" / "dict.txt").read_bytes() == (out / "dict.txt").read_bytes()
    assert '"bpe": "gpt2"' in (data / "provenance.json").read_text()
    for split in ("valid", "test"):
        gold, pred = conll_columns(tmp_path / "run" / "predictions" / f"{split}.conll")
        assert len(gold) == len(pred) == 8 and all(len(g) == len(p) for g, p in zip(gold, pred))
