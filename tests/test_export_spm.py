"""span-export hf of XLM-R and CamemBERT (the sentencepiece-line kind): they leave as
they came in.

Small random XLMRobertaForMaskedLM and CamembertForMaskedLM over one sentencepiece
model trained here on real MRPC text, their tokenizers made by transformers from it,
make the round trip Hugging Face -> span-convert -> span-export hf. The exported folder
is read with transformers' Auto classes only: every tensor comes back (token type 0
folded into the positions, exactly), and so do the tokenizer's ids; those ids equal
sentencepiece-line's on every GLUE dev sentence but the score ties (two cuts of equal
score, counted and checked to be ties); the features on raw text are fairseq's. Each
family fine-tuned (fairseq-train on real MRPC rows) predicts through
span_plugin.portable as the fairseq hub does.
"""

import json
import shutil

import pytest
import torch

from conftest import GLUE, fairseq_train, run_main
from test_convert_roberta import SIZES, TOL  # the tiny HF encoders' sizes, the features' tolerance
from span_plugin.cli.convert import main as convert_main
from span_plugin.cli.export import main as export_main

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

FAMILIES = {"xlmr": ("XLMRoberta", "xlm-roberta"), "camembert": ("Camembert", "camembert")}
# GLUE dev files and their sentence columns (CoLA's dev.tsv has no header)
GLUE_TEXT = {"CoLA": (3,), "MRPC": (3, 4), "QNLI": (1, 2), "SST-2": (0,), "STS-B": (7, 8),
             "WNLI": (1, 2)}


def glue_dev(task, columns=None, n=None):
    lines = (GLUE / task / "dev.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines[0 if task == "CoLA" else 1:]][:n]
    return [r[c] for r in rows for c in (columns or GLUE_TEXT[task]) if c < len(r)]


def train_text():
    """Real, cased English: the first 400 MRPC training pairs."""
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:401]
    return [s for line in lines for s in line.split("\t")[3:5]]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    (folder / "text.txt").write_text("\n".join(train_text()) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(folder / "text.txt"), model_prefix=str(folder / "sp"),
                                   vocab_size=500, model_type="unigram", minloglevel=2)
    return folder / "sp.model"


def make_family(folder, sp_model, name):
    """A random {XLMRoberta,Camembert}ForMaskedLM with a nonzero token type row (so the
    fold into the positions shows) and the family's tokenizer as transformers makes it
    from the sentencepiece model."""
    prefix, _ = FAMILIES[name]
    folder.mkdir(parents=True)
    shutil.copy(sp_model, folder / "sentencepiece.bpe.model")
    tok = getattr(transformers, prefix + "Tokenizer").from_pretrained(folder)
    tok.save_pretrained(folder)
    config = getattr(transformers, prefix + "Config")(
        vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        **SIZES)
    torch.manual_seed(0)
    model = getattr(transformers, prefix + "ForMaskedLM")(config)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight off its initialisation, LayerNorms included
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    model.save_pretrained(folder)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory, spm_model):
    """(name, original folder, span-convert folder, span-export folder)."""
    root = tmp_path_factory.mktemp(request.param)
    make_family(root / "hf", spm_model, request.param)
    assert convert_main(["roberta", "--hf-dir", str(root / "hf"), "--out", str(root / "fs")]) == 0
    run_main("span-export", "hf", root / "fs", "--out", root / "out")
    return request.param, root / "hf", root / "fs", root / "out"


def test_folder_holds_the_sentencepiece_model_and_autotokenizers_files(family):
    name, hf, _, out = family
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.safetensors", "sentencepiece.bpe.model", "tokenizer.json",
        "tokenizer_config.json"]
    assert (out / "sentencepiece.bpe.model").read_bytes() == \
        (hf / "sentencepiece.bpe.model").read_bytes()
    prefix, model_type = FAMILIES[name]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == model_type and "auto_map" not in config
    assert config["architectures"] == [prefix + "ForMaskedLM"]
    assert config["span_export"]["tokenizer"] == "sentencepiece-line"
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert type(tok).__name__ == prefix + "Tokenizer"
    assert type(transformers.AutoModelForMaskedLM.from_pretrained(out)).__name__ == \
        prefix + "ForMaskedLM"


def test_round_trip_gives_every_tensor_and_id_back(family):
    """Every tensor equal, but RoBERTa's token type 0, which span-convert folded into the
    positions: the exported positions are the original's plus that row, exactly (rows
    from padding_idx + 1, the ones a token takes), and its type row is zero. The
    tokenizer's ids equal the original's, specials included (CamemBERT opens with its
    sentencepiece <s>, id 5, as its own tokenizer does)."""
    name, hf, _, out = family
    auto = transformers.AutoModelForMaskedLM
    original = auto.from_pretrained(hf).state_dict()
    exported = auto.from_pretrained(out).state_dict()
    assert original.keys() == exported.keys()
    positions = "roberta.embeddings.position_embeddings.weight"
    types = "roberta.embeddings.token_type_embeddings.weight"
    differ = [k for k, t in original.items() if not torch.equal(t, exported[k])]
    assert sorted(differ) == [positions, types]
    assert bool(original[types][0].abs().sum() > 0)  # the fold shows
    assert torch.equal(exported[positions][2:], original[positions][2:] + original[types][0])
    assert torch.equal(exported[positions][:2], original[positions][:2])
    assert not bool(exported[types].any())
    tok_a = transformers.AutoTokenizer.from_pretrained(hf)
    tok_b = transformers.AutoTokenizer.from_pretrained(out)
    texts = glue_dev("MRPC")
    assert tok_a(texts)["input_ids"] == tok_b(texts)["input_ids"]
    pairs = tok_a(texts[:50], texts[50:100])["input_ids"]
    assert pairs == tok_b(texts[:50], texts[50:100])["input_ids"]
    assert pairs[0][0] == (5 if name == "camembert" else 0)


def unigram_score(scores, tokens):
    return sum(scores[t] for t in tokens)


def test_ids_are_sentencepiece_lines_but_score_ties(family):
    """AutoTokenizer's ids equal those of the plugin's sentencepiece-line tokenizer
    (through the dictionary) on every GLUE dev sentence, except where two cuts of the
    line score the same (sentencepiece and the tokenizers library break such a tie
    differently, e.g. ``6000`` as ``6 0 00`` or ``6 00 0``): each such sentence is
    counted and checked to be a tie."""
    from fairseq.data import Dictionary

    from span_plugin.tokenizers.sentencepiece_line import SentencePieceLineTokenizer

    name, _, fs, out = family
    texts = [t for task in GLUE_TEXT for t in glue_dev(task)] if name == "xlmr" else \
        glue_dev("MRPC")
    line = SentencePieceLineTokenizer(str(fs / "sentencepiece.bpe.model"))
    dictionary = Dictionary.load(str(fs / "dict.txt"))
    dictionary.add_symbol("<mask>")
    tok = transformers.AutoTokenizer.from_pretrained(out)
    theirs = tok(texts, add_special_tokens=False)["input_ids"]
    scores = dict(map(tuple, json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]))
    ties = []
    for text, ids in zip(texts, theirs):
        pieces = line.pieces(text)[0]
        if [dictionary.index(p) for p in pieces] != ids:
            hf_pieces = tok.convert_ids_to_tokens(ids)
            assert "".join(pieces) == "".join(hf_pieces), text  # the same text, cut otherwise
            assert unigram_score(scores, pieces) == pytest.approx(
                unigram_score(scores, hf_pieces), abs=1e-4), (text, pieces, hf_pieces)
            ties.append(text)
    print(f"{name}: {len(texts) - len(ties)} of {len(texts)} GLUE dev sentences give "
          f"sentencepiece-line's ids; {len(ties)} score ties: {ties}")
    assert len(ties) <= len(texts) // 1000


def test_a_checkpoint_without_its_conversion_record_opens_with_fairseqs_rows(family, tmp_path):
    """A checkpoint that does not say where it came from (as one trained here: no
    hf_conversion record) is exported as fairseq computes it: <s> and </s> at rows 0 and
    2, also for CamemBERT, whose family is then told by its dictionary's layout (pieces
    at sentencepiece id + 4). AutoTokenizer + AutoModel on raw text then give the fairseq
    hub's features (1e-5)."""
    from test_export_hf import fairseq_hub

    name, _, fs, _ = family
    bare = tmp_path / "fs"
    shutil.copytree(fs, bare)
    state = torch.load(bare / "model.pt", weights_only=True)
    del state["cfg"]["model"]["hf_conversion"]  # cfg.bpe (fairseq's sentencepiece) remains
    torch.save(state, bare / "model.pt")
    assert export_main(["hf", str(bare), "--out", str(tmp_path / "out")]) == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == FAMILIES[name][1]
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 2)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    hub, texts = fairseq_hub(bare), glue_dev("MRPC", n=20)
    batch = tok(texts, return_tensors="pt", padding=True)
    real = batch["attention_mask"].bool()
    fs_batch = torch.full(real.shape, 1, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = hub.encode(text)
        assert batch["input_ids"][i][real[i]].tolist() == ids.tolist(), text
        fs_batch[i, :len(ids)] = ids
    with torch.no_grad():
        want = hub.extract_features(fs_batch)
        got = transformers.AutoModel.from_pretrained(tmp_path / "out").eval()(**batch)
    assert (want - got.last_hidden_state)[real].abs().max() < TOL


def test_reads_the_models_settings_as_protobuf_does(spm_model, tmp_path):
    """The sentencepiece model's settings, read from its bytes without protobuf, are
    protobuf's; a model Hugging Face's Unigram tokenizer cannot follow (BPE, no ▁ prefix,
    user-defined pieces) is named."""
    from span_plugin.convert.hf_source import ConversionError
    from span_plugin.convert.spm_export import _check_settings, spm_settings

    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    spm.SentencePieceTrainer.train(input=str(spm_model.parent / "text.txt"),
                                   model_prefix=str(tmp_path / "bpe"), vocab_size=300,
                                   model_type="bpe", add_dummy_prefix=False, minloglevel=2)
    for path in (spm_model, tmp_path / "bpe.model"):
        proto = pb.ModelProto()
        proto.ParseFromString(path.read_bytes())
        got = spm_settings(path)
        assert got.charsmap == proto.normalizer_spec.precompiled_charsmap and got.charsmap
        assert got.unigram == (proto.trainer_spec.model_type == 1)
        assert got.dummy_prefix == proto.normalizer_spec.add_dummy_prefix
        assert got.squeeze_spaces == proto.normalizer_spec.remove_extra_whitespaces
        assert got.byte_fallback == proto.trainer_spec.byte_fallback
    _check_settings(spm_model, spm_settings(spm_model))
    with pytest.raises(ConversionError, match="not a Unigram model; add_dummy_prefix is off"):
        _check_settings(tmp_path / "bpe.model", spm_settings(tmp_path / "bpe.model"))
    spm.SentencePieceTrainer.train(input=str(spm_model.parent / "text.txt"),
                                   model_prefix=str(tmp_path / "user"), vocab_size=300,
                                   user_defined_symbols=["[SEP]", "New York"], minloglevel=2)
    with pytest.raises(ConversionError, match=r"2 user-defined pieces \(first: \['\[SEP\]', "
                                              r"'New York'\]\), which sentencepiece never cuts"):
        _check_settings(tmp_path / "user.model", spm_settings(tmp_path / "user.model"))
    (tmp_path / "bad.model").write_bytes(b"\x0a\xff")
    with pytest.raises(ConversionError, match="bad.model: not a sentencepiece model"):
        spm_settings(tmp_path / "bad.model")


def test_refuses_a_dictionary_without_every_piece(family, tmp_path, capsys):
    """A piece the dictionary lacks (fairseq: <unk>) cannot be said by a Unigram
    vocabulary: refused in one line naming it, nothing written."""
    name, _, fs, _ = family
    if name != "xlmr":
        pytest.skip("one family is enough")
    bad = tmp_path / "fs"
    shutil.copytree(fs, bad)
    lines = (bad / "dict.txt").read_text(encoding="utf-8").splitlines()
    piece = lines[10].split(" ")[0]
    lines[10] = f"madeupword9999 {lines[10].split(' ')[1]}"
    (bad / "dict.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert export_main(["hf", str(bad), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "1 pieces of" in err and repr(piece) in err, err
    assert not (tmp_path / "x").exists()


def test_sentencepiece_model_found_or_given(family, tmp_path, capsys):
    """A folder whose sentencepiece model is neither beside the checkpoint nor where
    its record says is refused naming --sentencepiece-model; given with it, exported."""
    name, _, fs, out = family
    if name != "xlmr":
        pytest.skip("one family is enough")
    moved = tmp_path / "fs"
    shutil.copytree(fs, moved)
    (moved / "sentencepiece.bpe.model").rename(tmp_path / "elsewhere.model")
    state = torch.load(moved / "model.pt", weights_only=True)
    state["cfg"]["bpe"]["sentencepiece_model"] = str(tmp_path / "gone" / "sp.model")
    torch.save(state, moved / "model.pt")
    assert export_main(["hf", str(moved), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "sentencepiece.bpe.model is not at" in err and "--sentencepiece-model" in err, err
    given = ["--sentencepiece-model", str(tmp_path / "elsewhere.model")]
    assert export_main(["hf", str(moved), "--out", str(tmp_path / "x"), *given]) == 0
    assert (tmp_path / "x" / "tokenizer.json").read_bytes() == (out / "tokenizer.json").read_bytes()
    # the folder is an earlier export, sentencepiece model and all: --force replaces it
    assert export_main(["hf", str(moved), "--out", str(tmp_path / "x"), *given, "--force"]) == 0


@pytest.fixture(scope="module")
def fine_tuned(family, tmp_path_factory):
    """The converted model fine-tuned on real MRPC rows (span-preprocess with its
    sentencepiece-line tokenizer and an spm n-gram dictionary counted on MRPC text; 2
    updates), exported with span-export hf. (checkpoint, folder)"""
    from test_task_data import mini_glue
    from test_task_train import span_args

    name, _, fs, _ = family
    root = tmp_path_factory.mktemp(f"{name}_mrpc")
    (root / "corpus.txt").write_text("\n".join(train_text()) + "\n", encoding="utf-8")
    run_main("span-preprocess", "ngrams", "--text", root / "corpus.txt", "--out",
             root / "ngrams.txt", "--words", "spm", "--min-count", "3", "--workers", "1")
    data = root / "MRPC-bin"
    run_main("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(), "--out", data,
             "--bpe", "sentencepiece-line", "--sentencepiece-model", fs / "sentencepiece.bpe.model",
             "--srcdict", fs / "dict.txt", "--ngrams", root / "ngrams.txt", "--workers", "1")
    save = root / "ckpt"
    # span_args' sizes are the converted model's (TINY_ROBERTA): its weights load
    log = fairseq_train([*span_args(data, save, "--restore-file", fs / "model.pt",
                                    "--reset-optimizer", "--reset-dataloader", "--reset-meters",
                                    "--reset-lr-scheduler", max_update=2),
                         "--disable-validation"])
    assert str(fs / "model.pt") in log
    out = root / "hf"
    run_main("span-export", "hf", save / "checkpoint_last.pt", "--out", out)
    return save / "checkpoint_last.pt", out, fs


@pytest.mark.slow
def test_fine_tuned_model_predicts_as_the_hub(family, fine_tuned):
    """span_plugin.portable.load_model of the exported folder gives the fairseq hub's
    logits (1e-4) and labels on 100 real MRPC dev pairs; the folder's tokenizer files
    (XLMRobertaTokenizer's, or CamembertTokenizer's: a fine-tuned CamemBERT is told by its
    dictionary's layout) give the pieces of sentencepiece-line between fairseq's <s> and
    </s>, the rows it was trained with."""
    from span_plugin.hub import SpanHubInterface
    from span_plugin.portable import load_model
    from span_plugin.tokenizers.sentencepiece_line import SentencePieceLineTokenizer

    checkpoint, out, fs = fine_tuned
    pairs = list(zip(glue_dev("MRPC", (3,), 100), glue_dev("MRPC", (4,), 100)))
    hub = SpanHubInterface.from_pretrained(checkpoint)
    want = hub.predict_logits(pairs, batch_size=16)
    model = load_model(out)
    got = model.predict_logits(pairs, batch_size=16)
    assert torch.as_tensor(got).shape == want.shape == (100, 2)
    assert (torch.as_tensor(got) - want).abs().max() < 1e-4
    assert torch.equal(torch.as_tensor(got).argmax(-1), want.argmax(-1))
    config = json.loads((out / "config.json").read_text())
    assert config["span_plugin"]["data_record"]["encoder"]["bpe"] == "sentencepiece-line"
    assert (out / "sentencepiece.bpe.model").read_bytes() == \
        (fs / "sentencepiece.bpe.model").read_bytes()
    prefix, model_type = FAMILIES[family[0]]
    assert config["model_type"] == "span_plugin_" + model_type  # a span head: the plugin's type
    # The family's tokenizer class over the folder's files (AutoTokenizer of a span-head
    # folder is the plugin's own encoder).
    tok = getattr(transformers, prefix + "Tokenizer").from_pretrained(out)
    line = SentencePieceLineTokenizer(str(out / "sentencepiece.bpe.model"))
    for a, b in pairs[:10]:
        ids = tok(a, b)["input_ids"]
        assert ids[:1] + ids[-1:] == [0, 2] and ids.count(2) == 3
        assert ids[1:ids.index(2)] == [tok.convert_tokens_to_ids(p) for p in line.pieces(a)[0]]
