"""Transfer, then fine-tune: recipes/transfer/paraphrase.sh on real
MRPC pairs, its hydra twin, recipes/glue/MRPC.sh started from the transferred encoder
(fresh heads, same encoder weights), and the hub's predict_pairs."""

import json
import re
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import GLUE, GPT2_BPE, ROOT, USER_DIR, run_cli, run_main

RECIPE = ROOT / "recipes" / "transfer" / "paraphrase.sh"
GLUE_RECIPE = ROOT / "recipes" / "glue" / "MRPC.sh"
HYDRA = ROOT / "recipes" / "hydra"
# The tiny model of tests/test_recipes.py: the GLUE recipe sets --max-positions 512, so
# the transfer run keeps the recipe's 512 too (the position table must match).
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2"]
TINY_HYDRA = ["+model.encoder_layers=2", "+model.encoder_embed_dim=32",
              "+model.encoder_ffn_embed_dim=64", "+model.encoder_attention_heads=2"]
HEADS = "classification_heads."


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def valid_line(log):
    lines = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert lines, log[-3000:]
    return re.sub(r"\| (wps|wpb|bsz) [\d.]+ ", "", lines[-1].split("subset", 1)[1])


@pytest.fixture(scope="module")
def transfer(tmp_path_factory):
    """The recipe's smoke run on the first 64 rows of real MRPC (aligner on train.tsv
    and dev.tsv): {cwd, glue, out, log}."""
    cwd = tmp_path_factory.mktemp("transfer")
    glue = cwd / "glue"
    (glue / "MRPC").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        with open(GLUE / "MRPC" / f"{split}.tsv", "rb") as f:
            head = [line for _, line in zip(range(65), f)]  # header + 64 rows
        (glue / "MRPC" / f"{split}.tsv").write_bytes(b"".join(head))
    # A "target dev file" holding the first training paraphrase, re-cased and
    # re-punctuated: the aligner keeps that pair out (EXCLUDE).
    train = (glue / "MRPC" / "train.tsv").read_bytes().splitlines()[1:]
    first = next(line.split(b"\t") for line in train if line.startswith(b"1\t"))
    a, b = (x.decode().strip() for x in first[3:5])
    (cwd / "target_dev.tsv").write_text(f"sentence1\tsentence2\n{a.upper()}\t{b.rstrip('.')}\n")
    env = {"GLUE_DIR": str(glue), "BPE_DIR": str(GPT2_BPE), "WORKERS": "1",
           "EXCLUDE": str(cwd / "target_dev.tsv")}
    log = run_cli("bash", RECIPE, "--cpu", "--max-update", "2", *TINY, "--num-workers", "0",
                  cwd=cwd, env={**env, "FROM_SCRATCH": "1"}).stdout
    data = re.search(r"preparing (data-bin/transfer-MRPC-s1-[0-9a-f]{8})\n", log)
    assert data, log[-3000:]  # keyed by source, exclusion set and seed
    return {"cwd": cwd, "glue": glue, "out": cwd / "runs" / "transfer-MRPC", "log": log,
            "env": env, "excluded": (a, b), "data": cwd / data.group(1)}


@pytest.mark.slow
def test_transfer_recipe_writes_the_encoder_without_heads(transfer):
    out, log = transfer["out"], transfer["log"]
    assert "transferred encoder: runs/transfer-MRPC/transferred.pt" in log
    assert "fine-tune it: ROBERTA_PATH=runs/transfer-MRPC/transferred.pt" in log
    assert "recipes/glue/MRPC.sh" in log
    # EXCLUDE: the one training paraphrase sharing a sentence with the target file is out.
    assert log.count("(1 paraphrase pairs dropped: they share a sentence with") == 1, log[-3000:]
    train = transfer["out"] / "aligned" / "train.jsonl"
    texts = {json.loads(line)[k] for line in train.read_text().splitlines()
             for k in ("sentence1", "sentence2")}
    assert not set(transfer["excluded"]) & texts
    # No stack notices, as for the GLUE recipes (tests/test_recipes.py).
    assert not re.findall(r".*(?:Please install tensorboardX|Warning:|DEBUG:).*", log)
    best = load(out / "checkpoints" / "checkpoint_best.pt")
    stripped = load(out / "transferred.pt")
    heads = {k for k in best["model"] if k.startswith(HEADS)}
    assert any(".phrasal." in k for k in heads) and any(".sentential." in k for k in heads)
    assert not [k for k in stripped["model"] if k.startswith(HEADS)]
    assert set(stripped["model"]) == set(best["model"]) - heads
    assert all(torch.equal(v, best["model"][k]) for k, v in stripped["model"].items())
    assert stripped["last_optimizer_state"] is None
    assert stripped["span_transfer"]["heads_removed"] == ["sentence_classification_head"]
    assert not list(out.glob("*.tmp"))


@pytest.mark.slow
def test_hydra_twin_gives_the_same_validation(transfer):
    """The config's settings are the recipe's: the same smoke run validates the same
    (the update count of the schedule taken from the shell run, which sized it to the
    tiny folder)."""
    log = transfer["log"]
    total = re.search(r"'total_num_update': '?(\d+)", log).group(1)
    warmup = re.search(r"'warmup_updates': (\d+)", log).group(1)
    cwd = transfer["cwd"]
    hydra_log = run_main(
        "fairseq-hydra-train", "--config-dir", HYDRA, "--config-name", "transfer_paraphrase",
        f"common.user_dir={USER_DIR}", "common.cpu=true", "common.fp16=false",
        f"task.data={transfer['data']}", "optimization.max_update=2",
        f"lr_scheduler.total_num_update={total}", f"lr_scheduler.warmup_updates={warmup}",
        "checkpoint.save_dir=runs/hydra/checkpoints", "dataset.num_workers=0", *TINY_HYDRA,
        cwd=cwd).stdout
    assert valid_line(hydra_log) == valid_line(log)


def fresh_model(checkpoint, data):
    """The model of the run of ``checkpoint`` before it loaded any checkpoint: built
    again under its seed, as fairseq_cli/train.py builds it."""
    from fairseq import checkpoint_utils, tasks, utils
    from omegaconf import open_dict

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["cfg"]
    with open_dict(cfg):
        cfg.task.data = str(data)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model)


@pytest.mark.slow
@pytest.mark.parametrize("head", ["plain", "span"])
def test_glue_run_from_the_transferred_encoder_starts_with_fresh_heads(transfer, head):
    """recipes/glue/MRPC.sh with ROBERTA_PATH=transferred.pt, no conversion step; --lr 0
    keeps the weights it started from, so its checkpoint shows them: the encoder is the
    transferred one, the heads are the new model's own initialisation (never the
    transfer heads, although the 2-class sentential head has the plain head's shapes)."""
    cwd = transfer["cwd"]
    transferred = transfer["out"] / "transferred.pt"
    out = cwd / f"glue-{head}"
    run_cli("bash", GLUE_RECIPE, "--cpu", "--max-update", "1", "--lr", "0", *TINY,
            "--num-workers", "0", cwd=cwd,
            env={**transfer["env"], "HEAD": head, "ROBERTA_PATH": str(transferred),
                 "OUT_DIR": str(out), "TEST_PREDICTIONS": "0"})
    last = out / "checkpoints" / "checkpoint_last.pt"
    started = load(last)["model"]
    encoder = load(transferred)["model"]
    heads = [k for k in started if k.startswith(HEADS)]
    assert heads and set(started) - set(heads) == set(encoder)
    assert all(torch.equal(started[k], encoder[k]) for k in encoder)
    model = fresh_model(last, cwd / "data-bin" / "MRPC")
    fresh = model.state_dict()
    assert all(torch.equal(started[k], fresh[k]) for k in heads)
    # The transfer heads differ from these (the plain head's shapes equal the
    # sentential head's: the case fairseq would have kept).
    transfer_heads = load(transfer["out"] / "checkpoints" / "checkpoint_best.pt")["model"]
    if head == "plain":
        p = HEADS + "sentence_classification_head."
        for name in ("dense.weight", "out_proj.weight"):
            assert started[p + name].shape == transfer_heads[p + "sentential." + name].shape
            assert not torch.equal(started[p + name], transfer_heads[p + "sentential." + name])
        # Why the heads are stripped: given a head of matching name and shapes, fairseq
        # keeps it as the starting head instead of the fresh one.
        unstripped = dict(encoder)
        for name in ("dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias"):
            unstripped[p + name] = transfer_heads[p + "sentential." + name]
        model.upgrade_state_dict_named(unstripped, "")
        assert torch.equal(unstripped[p + "out_proj.weight"],
                           transfer_heads[p + "sentential.out_proj.weight"])


@pytest.mark.slow
def test_glue_run_refuses_an_encoder_of_another_vocabulary(transfer, tmp_path):
    """A transferred checkpoint whose vocabulary is not the target folder's: the run
    stops at loading it, naming the file and the embedding whose size differs."""
    other = tmp_path / "other-vocab.pt"
    state = load(transfer["out"] / "transferred.pt")
    for k in ("encoder.sentence_encoder.embed_tokens.weight", "encoder.lm_head.weight"):
        state["model"][k] = state["model"][k][:1000].clone()
    state["model"]["encoder.lm_head.bias"] = state["model"]["encoder.lm_head.bias"][:1000].clone()
    torch.save(state, other)
    proc = run_cli("bash", GLUE_RECIPE, "--cpu", "--max-update", "1", *TINY,
                   "--num-workers", "0", cwd=transfer["cwd"], check=False,
                   env={**transfer["env"], "HEAD": "plain", "ROBERTA_PATH": str(other),
                        "OUT_DIR": str(tmp_path / "run"), "TEST_PREDICTIONS": "0"})
    assert proc.returncode != 0
    assert f"Cannot load model parameters from checkpoint {other}" in proc.stdout
    assert re.search(r"size mismatch for encoder\.sentence_encoder\.embed_tokens\.weight: "
                     r"copying a param with shape torch\.Size\(\[1000, 32\]\)", proc.stdout)


@pytest.mark.slow
def test_glue_run_refuses_an_encoder_of_a_same_size_vocabulary(transfer, tmp_path):
    """Same number of entries, other content: the weights would load without error and
    every embedding row would stand for another token. The transferred checkpoint records
    the dictionary it was trained with; the recipe compares it before training."""
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    for name in ("encoder.json", "vocab.bpe"):
        (bpe / name).write_bytes((GPT2_BPE / name).read_bytes())
    lines = (GPT2_BPE / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]  # two tokens trade embedding rows
    (bpe / "dict.txt").write_text("".join(lines), encoding="utf-8")
    transferred = transfer["out"] / "transferred.pt"
    proc = run_cli("bash", GLUE_RECIPE, "--cpu", "--max-update", "1", *TINY,
                   "--num-workers", "0", cwd=transfer["cwd"], check=False,
                   env={**transfer["env"], "HEAD": "plain", "ROBERTA_PATH": str(transferred),
                        "BPE_DIR": str(bpe), "DATA_DIR": str(tmp_path / "data"),
                        "OUT_DIR": str(tmp_path / "run"), "TEST_PREDICTIONS": "0"})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert f"{transferred} was trained on" in proc.stdout
    assert f"tokenized with {GPT2_BPE / 'dict.txt'}" in proc.stdout
    assert f"not with {bpe / 'dict.txt'}" in proc.stdout
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training
    # With the dictionary it was trained with, the same check passes.
    ok = run_cli(sys.executable, "-m", "span_plugin.runtime.checkpoints", "same-dictionary",
                 transferred, GPT2_BPE / "dict.txt", check=False)
    assert ok.returncode == 0, ok.stdout


@pytest.mark.slow
def test_strip_refuses_a_model_folder_of_another_dictionary(transfer, tmp_path):
    """transfer strip --model-dir copies that folder's dict.txt next to the weights: a
    folder other than the one the run was trained with is refused."""
    from span_plugin.preprocess.records.provenance import ProvenanceError
    from span_plugin.runtime.transfer import write_stripped

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"")
    lines = (GPT2_BPE / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "dict.txt").write_text("".join(lines[1:] + lines[:1]), encoding="utf-8")
    best = transfer["out"] / "checkpoints" / "checkpoint_best.pt"
    with pytest.raises(ProvenanceError, match=r"checkpoint_best\.pt was trained on .* not with "
                       + str(folder / "dict.txt")):
        write_stripped(best, tmp_path / "out", model_dir=folder)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def hub(transfer):
    from span_plugin.hub import SpanHubInterface

    return SpanHubInterface.from_pretrained(transfer["out"] / "checkpoints" / "checkpoint_best.pt")


@pytest.mark.slow
def test_predict_pairs_equals_the_model_on_the_prepared_folder(transfer, hub):
    """predict_pairs on the raw JSON Lines rows gives what the model gives on the items
    span-preprocess pairs made of them (the same rows, in order, in the valid split)."""
    from span_plugin.portable.pairs import PairPredictor

    assert isinstance(hub, PairPredictor)
    rows = [json.loads(line) for line in
            (transfer["out"] / "aligned" / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    hub.task.load_dataset("valid")
    ds = hub.task.datasets["valid"]
    assert len(ds) == len(rows)
    # Paraphrase rows with phrase pairs, and a random partner with some (last).
    with_pairs = [i for i, row in enumerate(rows) if row["phrases"]]
    picked = with_pairs[:3] + [i for i in with_pairs if rows[i]["label"] == "0"][-1:]
    assert len(picked) == 4 and rows[picked[-1]]["label"] == "0"
    for i in picked:
        row = rows[i]
        got = hub.predict_pairs(row["sentence1"], row["sentence2"], row["phrases"])
        batch = ds.collater([ds[i]])
        with torch.no_grad():
            out, _ = hub.model(batch["net_input"]["src_tokens"],
                               phrases=batch["net_input"]["phrases"],
                               classification_head_name=hub.head)
        want = F.softmax(out["phrasal"], dim=-1)
        assert len(got["phrases"]) == len(row["phrases"]) == want.size(0), i
        scores = torch.tensor([[p["scores"][n] for n in hub.phrase_labels] for p in got["phrases"]])
        assert torch.allclose(scores.view_as(want), want, atol=1e-6), i
        assert [p["label"] for p in got["phrases"]] == [hub.phrase_labels[j] for j in want.argmax(-1)]
        sent = F.softmax(out["sentential"][0], dim=-1)
        assert got["sentence"]["scores"] == pytest.approx(dict(zip(hub.labels, sent.tolist())), abs=1e-6)
    # Tuples of ranges are the same request.
    row = rows[0]
    as_tuples = [(p["source"], p["target"]) for p in row["phrases"]]
    assert hub.predict_pairs(row["sentence1"], row["sentence2"], as_tuples)["phrases"] == \
        hub.predict_pairs(row["sentence1"], row["sentence2"], row["phrases"])["phrases"]


@pytest.mark.slow
def test_predict_pairs_refuses_a_range_inside_a_token(hub):
    with pytest.raises(ValueError, match=r"phrase pair 1 target \(sentence2\): range \[1, 5\] "
                                         r"starts inside token 0"):
        hub.predict_pairs("Amrozi accused his brother", "Amrozi blamed his brother",
                          [{"source": [7, 14], "target": [7, 13]}, ([0, 6], [1, 5])])
    with pytest.raises(ValueError, match="phrase pair 0 has no 'target'"):
        hub.predict_pairs("a b", "a b", [{"source": [0, 1]}])
