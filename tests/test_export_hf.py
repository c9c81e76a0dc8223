"""span-export hf: fairseq encoder checkpoints -> standard Hugging Face folders.

Two real encoders make the round trip Hugging Face -> span-convert -> span-export hf:
the pretrained all-MiniLM-L6-v2 (BERT, WordPiece) and a small random RobertaForMaskedLM
over the real GPT-2 BPE files of ../shared/data/gpt2_bpe (fairseq's dictionary order).
The exported folder is loaded with transformers' Auto classes only, and compared with
the original (every tensor, exact; token ids) and with fairseq's hub on real GLUE
sentences (last-layer features on raw text within 1e-5; the masked-LM head's top-5).
"""

import json
import shutil

import pytest
import torch

from conftest import DATA, GLUE, minilm_dir, run_main
from span_plugin.cli.convert import main as convert_main
from span_plugin.cli.export import main as export_main

transformers = pytest.importorskip("transformers")

TOL = 1e-5
GPT2 = DATA / "gpt2_bpe"
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
             eos_token_id=2, layer_norm_eps=1e-5, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)


def sentences(n=50):
    """Real MRPC dev sentences."""
    rows = (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:1 + n]
    return [r.split("\t")[3] for r in rows]


def make_roberta(folder):
    """A random RobertaForMaskedLM whose tokenizer is GPT-2's BPE in fairseq's dictionary
    order (as roberta-base's vocab.json); token type row zero, as RoBERTa's."""
    encoder = json.loads((GPT2 / "encoder.json").read_text(encoding="utf-8"))
    token = {str(i): t for t, i in encoder.items()}
    symbols = [line.rsplit(" ", 1)[0] for line in
               (GPT2 / "dict.txt").read_text(encoding="utf-8").splitlines()]
    ordered = ["<s>", "<pad>", "</s>", "<unk>", *(token.get(s, s) for s in symbols), "<mask>"]
    folder.mkdir(parents=True)
    merges = [tuple(m.split(" ")) for m in
              (GPT2 / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:] if m]
    transformers.RobertaTokenizerFast(vocab={t: i for i, t in enumerate(ordered)},
                                      merges=merges).save_pretrained(folder)
    torch.manual_seed(0)
    model = transformers.RobertaForMaskedLM(
        transformers.RobertaConfig(vocab_size=len(ordered), **SIZES))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight off its initialisation, LayerNorms included
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
        model.roberta.embeddings.token_type_embeddings.weight.zero_()
    model.save_pretrained(folder)


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    """(original folder, span-convert folder, span-export folder), the export through
    the span-export command itself."""
    root = tmp_path_factory.mktemp("export_roberta")
    make_roberta(root / "hf")
    assert convert_main(["roberta", "--hf-dir", str(root / "hf"), "--out", str(root / "fs")]) == 0
    run_main("span-export", "hf", root / "fs", "--out", root / "out")
    return root / "hf", root / "fs", root / "out"


@pytest.fixture(scope="module")
def minilm(converted_minilm, tmp_path_factory):
    out = tmp_path_factory.mktemp("export_minilm") / "out"
    assert export_main(["hf", str(converted_minilm), "--out", str(out)]) == 0
    return minilm_dir(), converted_minilm, out


@pytest.fixture(params=["roberta", "minilm"])
def family(request):
    return request.param, request.getfixturevalue(request.param)


def test_folder_is_plain_hugging_face(family):
    _, (_, _, out) = family
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((out / "config.json").read_text())
    assert "auto_map" not in config  # no custom code


def test_round_trip_gives_every_tensor_and_id_back(family):
    name, (hf, _, out) = family
    auto = transformers.AutoModelForMaskedLM if name == "roberta" else transformers.AutoModel
    original, exported = auto.from_pretrained(hf).state_dict(), auto.from_pretrained(out).state_dict()
    assert original.keys() <= exported.keys()
    differ = [k for k, t in original.items() if not torch.equal(t, exported[k])]
    assert differ == []
    tok_a, tok_b = transformers.AutoTokenizer.from_pretrained(hf), \
        transformers.AutoTokenizer.from_pretrained(out)
    for s in sentences():
        assert tok_a(s)["input_ids"] == tok_b(s)["input_ids"], s


def fairseq_hub(folder):
    """fairseq's own hub over the span-convert folder (its BPE from the checkpoint's cfg)."""
    from fairseq.models.roberta import RobertaModel

    import span_plugin

    span_plugin.register()
    hub = RobertaModel.from_pretrained(str(folder), "model.pt", str(folder)).eval()
    eps = hub.cfg.model.get("layernorm_eps") or 1e-5  # fairseq's roberta hard-codes 1e-5
    for module in hub.model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = eps
    return hub


def hf_ids(tok, fs_dictionary, fs_ids):
    """fairseq ids as the exported tokenizer's ids (its specials by their BERT names)."""
    specials = {"<s>": tok.cls_token, "<pad>": tok.pad_token, "</s>": tok.sep_token,
                "<unk>": tok.unk_token, "<mask>": tok.mask_token}
    symbols = [fs_dictionary[i] for i in fs_ids]
    if tok.cls_token == "<s>":  # GPT-2 BPE: fairseq id == HF id
        return list(fs_ids)
    return tok.convert_tokens_to_ids([specials.get(s, s) for s in symbols])


def test_features_and_fill_mask_equal_fairseqs_on_raw_text(family):
    """AutoTokenizer + AutoModel on raw text give the fairseq hub's last-layer features
    (1e-5); the masked-LM head's top-5 at one masked token of each sentence are the hub
    model's. all-MiniLM-L6-v2 has no masked-LM head: the one span-convert initialised was
    never trained and is not exported (its class is BertModel, the config says why)."""
    name, (_, fs, out) = family
    config = json.loads((out / "config.json").read_text())
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        lm_tensors = [k for k in f.keys() if k.startswith(("cls.", "lm_head."))]
    if name == "minilm":
        assert lm_tensors == [] and config["architectures"] == ["BertModel"]
        assert "never trained" in config["span_export"]["lm_head"]
    else:
        assert lm_tensors and config["architectures"] == ["RobertaForMaskedLM"]
    hub, texts = fairseq_hub(fs), sentences()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    fs_dict = hub.task.source_dictionary
    fs_ids = [hub.encode(s) for s in texts]
    batch = tok(texts, return_tensors="pt", padding=True)
    real = batch["attention_mask"].bool()
    for i, s in enumerate(texts):
        assert batch["input_ids"][i][real[i]].tolist() == hf_ids(tok, fs_dict, fs_ids[i].tolist()), s
    fs_batch = torch.full(real.shape, fs_dict.pad(), dtype=torch.long)
    for i, ids in enumerate(fs_ids):
        fs_batch[i, :len(ids)] = ids
    with torch.no_grad():
        want = hub.extract_features(fs_batch)
        got = transformers.AutoModel.from_pretrained(out).eval()(**batch).last_hidden_state
        assert (want - got)[real].abs().max() < TOL
        # One token in the middle of each sentence masked.
        middle = torch.tensor([len(ids) // 2 for ids in fs_ids])
        rows = torch.arange(len(texts))
        fs_batch[rows, middle] = fs_dict.index("<mask>")
        batch["input_ids"][rows, middle] = tok.mask_token_id
        masked = torch.zeros_like(real)
        masked[rows, middle] = True
        if name == "minilm":
            return
        fs_top = hub.model(fs_batch, masked_tokens=masked)[0].topk(5).indices
        mlm = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
        hf_top = mlm(**batch).logits[rows, middle].topk(5).indices
    for i, s in enumerate(texts):
        assert hf_top[i].tolist() == hf_ids(tok, fs_dict, fs_top[i].tolist()), s


def one_line_error(argv, capsys):
    assert export_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_output_folder_rules(roberta, tmp_path, capsys):
    """A non-empty --out is refused without --force; with it, an earlier export is
    replaced whole, a folder of the user's never; an --out that holds the checkpoint is
    refused; a failure leaves the old folder as it was."""
    _, fs, out = roberta
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    err = one_line_error(["hf", str(fs), "--out", str(target)], capsys)
    assert "not empty" in err and "--force" in err and (target / "notes.txt").exists()
    err = one_line_error(["hf", str(fs), "--out", str(target), "--force"], capsys)
    assert "not an earlier span-export hf folder" in err and "notes.txt" in err, err
    (target / "notes.txt").unlink()
    assert export_main(["hf", str(fs), "--out", str(target)]) == 0
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in out.iterdir())
    assert export_main(["hf", str(fs), "--out", str(target), "--force"]) == 0  # an encoder's
    err = one_line_error(["hf", str(fs), "--out", str(fs.parent), "--force"], capsys)
    assert "--out" in err and str(fs.parent) in err

    from span_plugin.convert import hf_export

    def broken(plan, out_dir):
        plan.write_tokenizer = lambda folder: (_ for _ in ()).throw(OSError(28, "No space"))
        return write(plan, out_dir)

    write = hf_export.write_hf_folder
    before = (target / "model.safetensors").read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hf_export, "write_hf_folder", broken)
        one_line_error(["hf", str(fs), "--out", str(target), "--force"], capsys)
    assert (target / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["target"]  # no partial folder left


def test_refuses_what_has_no_counterpart(roberta, tmp_path, capsys):
    """A tokenizer kind without a Hugging Face counterpart is refused in one line, before
    anything is written (fine-tuned checkpoints: tests/test_export_finetuned.py)."""
    # The same RoBERTa, its record saying the sentencepiece kind (GPT-2 words encoded
    # one by one: pieces XLM-R's tokenizer never makes; sentencepiece-line is exported).
    _, fs, _ = roberta
    spm = tmp_path / "spm"
    shutil.copytree(fs, spm)
    state = torch.load(spm / "model.pt", weights_only=True)
    state["cfg"]["model"]["hf_conversion"]["tokenizer"] = "sentencepiece"
    torch.save(state, spm / "model.pt")
    err = one_line_error(["hf", str(spm), "--out", str(tmp_path / "x")], capsys)
    assert "'sentencepiece'" in err and "supported: gpt2, wordpiece, sentencepiece-line" in err
    assert not (tmp_path / "x").exists()


def test_trained_bert_keeps_its_function(minilm, tmp_path):
    """A BERT checkpoint changed since span-convert (as training changes it) no longer
    holds the fold of the kept tables: type 0 stays in the positions, and the features
    are still the fairseq model's."""
    _, converted, _ = minilm
    trained = tmp_path / "trained"
    shutil.copytree(converted, trained)
    state = torch.load(trained / "model.pt", weights_only=True)
    state["model"]["encoder.sentence_encoder.embed_positions.weight"][2:].mul_(1.5)
    torch.save(state, trained / "model.pt")
    assert export_main(["hf", str(trained), "--out", str(tmp_path / "out")]) == 0
    hub, texts = fairseq_hub(trained), sentences(8)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    model = transformers.AutoModel.from_pretrained(tmp_path / "out").eval()
    assert not model.embeddings.token_type_embeddings.weight[0].any()
    for s in texts:
        with torch.no_grad():
            want = hub.extract_features(hub.encode(s))
            got = model(**tok(s, return_tensors="pt")).last_hidden_state
        assert (want - got).abs().max() < TOL, s


def test_roberta_only_bert_reads_segment_b_as_fairseq_does(minilm, tmp_path):
    """span-convert bert --roberta-only leaves segment B out (fairseq's roberta reads
    every token as segment A): the export's type 1 row is type 0's, so a pair's
    token_type_ids change nothing, as in fairseq; the tables are still BERT's own and
    the features fairseq's."""
    hf, _, _ = minilm
    assert convert_main(["bert", "--hf-dir", str(hf), "--out", str(tmp_path / "fs"),
                         "--roberta-only"]) == 0
    assert export_main(["hf", str(tmp_path / "fs"), "--out", str(tmp_path / "out")]) == 0
    original = transformers.AutoModel.from_pretrained(hf).embeddings
    exported = transformers.AutoModel.from_pretrained(tmp_path / "out").eval()
    assert torch.equal(exported.embeddings.position_embeddings.weight,
                       original.position_embeddings.weight)
    assert torch.equal(exported.embeddings.token_type_embeddings.weight,
                       original.token_type_embeddings.weight[[0, 0]])
    hub = fairseq_hub(tmp_path / "fs")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    for s in sentences(4):
        with torch.no_grad():
            got = exported(**tok(s, return_tensors="pt")).last_hidden_state
            want = hub.extract_features(hub.encode(s))
        assert (want - got).abs().max() < TOL, s
