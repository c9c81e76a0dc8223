"""End to end: recipes/pretrain/spanbert.sh on raw WikiText-2 (data preparation, a short
CPU pre-training through fairseq-train that lowers both losses), its hydra twin, the
checkpoint fine-tuned with span_classification (no conversion), and checkpoints that do
not fit refused."""

import json
import re

import pytest
import torch

from conftest import GPT2_BPE, ROOT, TINY_ROBERTA, USER_DIR, run_cli, run_main
from span_pretrain_fixtures import wikitext_lines

TINY = TINY_ROBERTA  # 2 layers, H = 32, 128 positions
_RUN = {}


def pretrain_run(tmp_path_factory):
    """The recipe's smoke run, once: (working folder, log)."""
    if "run" not in _RUN:
        cwd = tmp_path_factory.mktemp("pretrain")
        (cwd / "wiki.txt").write_text("".join(wikitext_lines("wiki.valid.tokens", 300)))
        (cwd / "wiki_valid.txt").write_text("".join(wikitext_lines("wiki.test.tokens", 60)))
        env = {"TRAIN_TEXT": "wiki.txt", "VALID_TEXT": "wiki_valid.txt", "BPE_DIR": str(GPT2_BPE),
               "WORKERS": "1", "TOKENS_PER_SAMPLE": "64", "BATCH_SIZE": "8", "OMP_NUM_THREADS": "1",
               "FROM_SCRATCH": "1"}
        log = run_cli("bash", ROOT / "recipes" / "pretrain" / "spanbert.sh", "--cpu",
                      "--max-update", "16", *TINY, "--lr", "5e-3", "--warmup-updates", "0",
                      "--log-interval", "4", "--num-workers", "0", cwd=cwd, env=env).stdout
        _RUN["run"] = (cwd, log)
    return _RUN["run"]


def logged(log, key):
    return [float(v) for v in re.findall(rf"train_inner .*? {key}=([\d.]+)", log)]


@pytest.mark.slow
def test_recipe_pretrains_on_wikitext2_lowering_both_losses(tmp_path_factory):
    cwd, log = pretrain_run(tmp_path_factory)
    data = cwd / "data-bin" / "pretrain" / "wiki"
    out = cwd / "runs" / "pretrain" / "wiki-geometric"
    assert (data / "train.spans.idx").is_file() and (data / "encoder.json").is_file()
    mlm, sbo = logged(log, "mlm_loss"), logged(log, "sbo_loss")
    assert len(mlm) == len(sbo) >= 4, log[-3000:]
    assert mlm[-1] < mlm[0] - 1.5 and sbo[-1] < sbo[0] - 1.5, (mlm, sbo)  # bits
    results = json.loads((out / "results.json").read_text())
    assert {"loss", "mlm_loss", "sbo_loss"} <= set(results["valid"])
    assert list((out / "tensorboard").rglob("events.out.tfevents.*"))
    state = torch.load(out / "checkpoints" / "checkpoint_best.pt", map_location="cpu")
    assert "classification_heads.span_boundary.dense.weight" in state["model"]

    # The hydra twin trains on the same folder.
    hydra_log = run_main(
        "fairseq-hydra-train", "--config-dir", ROOT / "recipes" / "hydra",
        "--config-name", "pretrain_spanbert", f"common.user_dir={USER_DIR}", "common.cpu=true",
        "common.fp16=false", f"task.data={data}", "task.tokens_per_sample=64",
        "optimization.max_update=2", "dataset.batch_size=4", "checkpoint.save_dir=runs/hydra/checkpoints",
        "+model.encoder_layers=2", "+model.encoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
        "+model.encoder_attention_heads=2", "+model.max_positions=128", "dataset.num_workers=0",
        cwd=cwd).stdout
    assert re.search(r"num_updates=?\s?2\b", hydra_log) and "sbo_loss" in hydra_log, hydra_log[-3000:]


@pytest.mark.slow
def test_pretrained_checkpoint_fine_tunes_with_span_classification(tmp_path_factory, tmp_path):
    from test_task_data import glue_folder

    cwd, _ = pretrain_run(tmp_path_factory)
    pretrained = cwd / "runs" / "pretrain" / "wiki-geometric" / "checkpoints" / "checkpoint_best.pt"
    log = run_main(
        "fairseq-train", glue_folder("CoLA"), "--user-dir", USER_DIR, "--task", "span_classification",
        "--criterion", "span_classification", "--arch", "roberta_span_base", *TINY,
        "--num-classes", "2", "--init-token", "0", "--separator-token", "2",
        "--shorten-method", "truncate", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16",
        "--max-update", "2", "--save-dir", tmp_path, "--cpu", "--seed", "1", "--num-workers", "0",
        "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints",
        "--best-checkpoint-metric", "mcc", "--maximize-best-checkpoint-metric",
        "--finetune-from-model", pretrained, env={"OMP_NUM_THREADS": "1"}).stdout
    assert "deleting classification head (span_boundary) from checkpoint" in log
    assert re.search(r"valid on 'valid' subset .*\| mcc ", log), log[-3000:]
    before = torch.load(pretrained, map_location="cpu")["model"]
    after = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu")["model"]
    key = "encoder.sentence_encoder.layers.0.fc1.weight"
    assert (after[key] - before[key]).abs().max() < 5e-3  # 2 Adam steps from the pretrained weights
    assert not any("span_boundary" in k for k in after)


def _model(data, *extra):
    """A tiny roberta_spanbert built by fairseq's own setup for a data folder."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", str(USER_DIR), "--task", "spanbert_masked_lm",
        "--criterion", "spanbert_masked_lm", "--arch", "roberta_spanbert_base", *TINY,
        "--cpu", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model)


@pytest.mark.slow
def test_pretrained_checkpoint_exports_to_hugging_face(tmp_path_factory, tmp_path):
    """span-export hf takes the run's checkpoint as it is (its data record names the GPT-2
    BPE files, the SBO head is left out): AutoTokenizer + AutoModel give the encoder's
    features on raw WikiText lines."""
    from fairseq import checkpoint_utils
    from fairseq.data.encoders.gpt2_bpe import get_encoder
    from transformers import AutoModel, AutoTokenizer

    from span_plugin.cli.export import main as export_main

    cwd, _ = pretrain_run(tmp_path_factory)
    checkpoint = cwd / "runs" / "pretrain" / "wiki-geometric" / "checkpoints" / "checkpoint_best.pt"
    # The run records no tokenizer files (it read GPT-2's from BPE_DIR): given here.
    assert export_main(["hf", str(checkpoint), "--out", str(tmp_path / "hf"),
                        "--gpt2-encoder-json", str(GPT2_BPE / "encoder.json"),
                        "--gpt2-vocab-bpe", str(GPT2_BPE / "vocab.bpe")]) == 0
    [model], task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(cwd / "data-bin" / "pretrain" / "wiki")})[::2]
    bpe, dictionary = get_encoder(GPT2_BPE / "encoder.json", GPT2_BPE / "vocab.bpe"), task.dictionary
    tok, hf = AutoTokenizer.from_pretrained(tmp_path / "hf"), AutoModel.from_pretrained(tmp_path / "hf")
    # Lines that fit the 128 positions, without WikiText's "<unk>": Hugging Face's
    # tokenizer reads a special token's text as that token (docs/EXPORT.md).
    lines = [line.strip() for line in wikitext_lines("wiki.test.tokens", 1000)
             if 40 < len(line) < 300 and "<unk>" not in line][:10]
    assert len(lines) == 10
    for line in lines:
        ids = [0] + [dictionary.index(str(i)) for i in bpe.encode(line)] + [2]
        assert tok(line)["input_ids"] == ids, line
        with torch.no_grad():
            want = model.eval().encoder.extract_features(torch.tensor([ids]))[0]
            got = hf.eval()(torch.tensor([ids])).last_hidden_state
        assert (want - got).abs().max() < 1e-5, line


def test_blocks_longer_than_the_positions_and_foreign_checkpoints_are_refused(tmp_path):
    from span_plugin.models.checkpoint_fit import CheckpointMismatchError

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.txt").write_bytes((GPT2_BPE / "dict.txt").read_bytes())
    (data / "encoder.json").write_bytes((GPT2_BPE / "encoder.json").read_bytes())
    with pytest.raises(ValueError, match=r"blocks of --tokens-per-sample 512 tokens are longer "
                                         r"than the model's 128 positions"):
        _model(data, "--tokens-per-sample", "512")
    model = _model(data, "--tokens-per-sample", "128")

    small = tmp_path / "small"
    small.mkdir()
    (small / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(100, 140)))
    other = _model(small, "--tokens-per-sample", "128")
    with pytest.raises(CheckpointMismatchError, match=r"vocabulary of 45 embedding rows, this "
                                                      r"model 50265 .*another dictionary"):
        model.load_state_dict(other.state_dict())
    no_mask = {k: (v[:-1] if k.endswith("embed_tokens.weight") else v)
               for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointMismatchError, match=r"no <mask> symbol"):
        model.load_state_dict(no_mask)
    # A plain RoBERTa state (no SBO head) loads; the head keeps its fresh weights.
    plain = {k: v for k, v in model.state_dict().items() if "span_boundary" not in k}
    model.load_state_dict(plain)


def test_model_projects_both_objectives_as_fairseqs_lm_head_and_the_sbo_head_do(tmp_path):
    """The model's one shared output projection (its fast path) gives the logits of
    fairseq's RobertaLMHead and of SpanBoundaryHead.forward, with the same gradients."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.txt").write_bytes((GPT2_BPE / "dict.txt").read_bytes())
    (data / "encoder.json").write_bytes((GPT2_BPE / "encoder.json").read_bytes())
    model = _model(data, "--tokens-per-sample", "32").double().eval()
    torch.manual_seed(0)
    tokens = torch.randint(4, 1000, (2, 20))
    tokens[:, 0] = 0
    mask = torch.zeros(2, 20, dtype=torch.bool)
    mask[0, 3:6] = mask[0, 9] = mask[1, 2:8] = True

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    mlm, extra = model(tokens, masked_tokens=mask, span_boundary=True)
    fast = grads(mlm.sum() + (extra["sbo_logits"] ** 2).sum())
    x, _ = model.encoder.extract_features(tokens)
    ref_mlm = model.encoder.output_layer(x, masked_tokens=mask)
    ref_sbo = model.classification_heads["span_boundary"](x, mask, model.encoder.lm_head.weight)
    assert torch.allclose(mlm, ref_mlm, atol=1e-10) and torch.allclose(extra["sbo_logits"], ref_sbo, atol=1e-10)
    slow = grads(ref_mlm.sum() + (ref_sbo ** 2).sum())
    assert fast.keys() == slow.keys()
    for k in fast:
        assert torch.allclose(fast[k], slow[k], atol=1e-9), k
