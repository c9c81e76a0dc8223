"""recipes/ner/conll2003.sh end to end on real CoNLL-2003 rows (both tasks, fairseq-train,
CoNLL prediction files scored by seqeval), the hub's predict_entities, the hydra twin."""

import json
import shlex
import sys

import pytest
from omegaconf import OmegaConf

from conftest import DATA, GPT2_BPE, ROOT, TINY_ROBERTA, conll_sentences, run_cli

RECIPE = ROOT / "recipes" / "ner" / "conll2003.sh"
HYDRA = ROOT / "recipes" / "hydra" / "conll2003.yaml"


@pytest.fixture(scope="module")
def conll_dir(tmp_path_factory):
    """A few dozen real sentences per split, and their tagging folder ``bin/`` (made
    here, in-process, as `span-preprocess conll` makes it: a process less per run)."""
    from span_plugin.preprocess.folders.conll import prepare_conll
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    root = tmp_path_factory.mktemp("conll")
    files = {}
    for split, n in (("train", 48), ("valid", 24), ("test", 24)):
        files[split] = root / f"{split}.txt"
        files[split].write_text(conll_sentences(DATA / "conll2003" / f"{split}.txt", n))
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    prepare_conll(root / "bin", {k: str(v) for k, v in files.items()},
                  FolderOptions(spec, str(GPT2_BPE / "dict.txt"), name="conll2003"))
    return root


def recipe_env(conll_dir, tmp_path, **extra):
    return {"CONLL_DIR": str(conll_dir), "BPE_DIR": str(GPT2_BPE), "WORKERS": "1", "FROM_SCRATCH": "1",
            "DATA_DIR": str(conll_dir / "bin"), "OUT_DIR": str(tmp_path / "run"),
            "LR": "1e-3", "BATCH_SIZE": "8", **extra}


def conll_columns(path):
    """(gold, predicted) tag sequences of a CoNLL prediction file, by sentence."""
    gold, pred, g, p = [], [], [], []
    for line in open(path, encoding="utf-8").read().splitlines() + [""]:
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if g:
                gold.append(g)
                pred.append(p)
            g, p = [], []
            continue
        g.append(fields[-2])
        p.append(fields[-1])
    return gold, pred


@pytest.mark.slow
@pytest.mark.parametrize("head", ["sf", "span"])
def test_recipe_smoke_run_scores_like_seqeval(head, conll_dir, tmp_path):
    seqeval = pytest.importorskip("seqeval.metrics")
    run_cli("bash", RECIPE, "--cpu", "--max-update", "4", "--log-interval", "1",
            "--num-workers", "0", *TINY_ROBERTA,
            env=recipe_env(conll_dir, tmp_path, HEAD=head, MAX_SPAN_WORDS="4"))
    out = tmp_path / "run"
    assert (out / "checkpoints" / "checkpoint_best.pt").is_file()
    assert any((out / "tensorboard").iterdir())
    results = json.loads((out / "results.json").read_text())["dev"]
    for split, n in (("valid", 24), ("test", 24)):
        gold, pred = conll_columns(out / "predictions" / f"{split}.conll")
        assert len(gold) == n
        assert results[split]["f1"] == round(100 * seqeval.f1_score(gold, pred), 2)
        assert results[split]["precision"] == round(100 * seqeval.precision_score(gold, pred), 2)
        by_type = seqeval.classification_report(gold, pred, output_dict=True, zero_division=0)
        assert set(results[split]["by_type"]) == set(by_type) - {"micro avg", "macro avg", "weighted avg"}
        for kind, scores in results[split]["by_type"].items():
            assert scores["f1"] == round(100 * by_type[kind]["f1-score"], 2)
            assert scores["entities"] == by_type[kind]["support"]
    # Every source line is kept; word lines get one more column.
    source = (conll_dir / "test.txt").read_text().splitlines()
    written = (out / "predictions" / "test.conll").read_text().splitlines()
    assert [w.rsplit(" ", 1)[0] if s.strip() and not s.startswith("-DOCSTART-") else w
            for s, w in zip(source, written)] == source

    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(out / "checkpoints" / "checkpoint_best.pt")
    text = "EU rejects German call to boycott British lamb, says Peter Blackburn of the U.S."
    for e in hub.predict_entities(text):
        assert text[e["start"]:e["end"]] == e["text"]
        assert e["type"] in ("LOC", "MISC", "ORG", "PER")
    assert hub.predict_entities("") == []


@pytest.mark.research  # experiments/ner_grid.py
@pytest.mark.slow
def test_ner_grid_records_resumes_and_reports(conll_dir, tmp_path):
    """experiments/ner_grid.py runs the recipe per (variant, seed) and appends its dev and
    test scores and decoding; a relaunch runs nothing; ner_report.py pairs the variants
    by seed and names each one's decoding."""
    results = tmp_path / "ner.jsonl"
    grid = [ROOT / "experiments" / "ner_grid.py", "--conll-dir", conll_dir,
            "--data-dir", conll_dir / "bin", "--variants", "token", "token-viterbi", "span",
            "--seeds", "1",
            "--lr", "1e-3", "--batch-size", "8", "--epochs", "1", "--device", "cpu",
            "--workers", "1", "--results", results, "--work-dir", tmp_path / "work",
            "--extra", "--max-update", "2", *TINY_ROBERTA]
    assert "0 of 3 runs already" in run_cli(sys.executable, *grid).stdout
    records = {r["variant"]: r for r in map(json.loads, results.read_text().splitlines())}
    assert set(records) == {"token", "token-viterbi", "span"}
    for variant, r in records.items():
        run = tmp_path / "work" / "runs" / f"scratch-{variant}-lr0.001-e1-s1"
        scores = json.loads((run / "results.json").read_text())["dev"]
        assert r["dev"] == scores["valid"] and r["test"] == scores["test"]
        assert r["dev_f1"] == scores["valid"]["f1"] and scores["test"]["items"] == 24
        assert not (run / "checkpoints").exists()  # removed unless --keep-checkpoints
        # The variant's decoding went to fairseq-train (hence the checkpoint) and span-predict.
        assert r["decoding"] == json.loads((run / "results.json").read_text())["decoding"]
        log = (run / "recipe.log").read_text()
        if variant != "span":
            assert f"'token_decoding': {r['decoding']['token_decoding']}," in log
    assert records["token"]["decoding"] == {"token_decoding": "argmax"}
    assert records["token-viterbi"]["decoding"] == {"token_decoding": "viterbi"}
    assert records["span"]["decoding"] == {"overlap": "flat", "span_threshold": None}
    assert records["span"]["settings"]["MAX_SPAN_WORDS"] == "8"
    provenance = json.loads((conll_dir / "bin" / "provenance.json").read_text())
    for r in records.values():
        assert r["data_record"]["encoder"] == provenance["encoder"]
        assert "dropout" in r["model_settings"]
    assert records["token"]["model_settings"]["tagging_head"] == "token"
    assert "3 of 3 runs already" in run_cli(sys.executable, *grid).stdout
    assert len(results.read_text().splitlines()) == 3
    # A run from random weights is stamped as such, and refused on a file of a real
    # encoder's runs (the committed MiniLM records) before anything runs.
    assert {r["model_flags"] for r in records.values()} == {"from scratch (no --model-dir)"}
    real = tmp_path / "real.jsonl"
    committed = ROOT / "experiments" / "results" / "ner_minilm.jsonl"
    real.write_text(committed.read_text().splitlines()[0] + "\n")
    at = grid.index("--results") + 1
    refused = run_cli(sys.executable, *grid[:at], real, *grid[at + 1:], check=False)
    assert refused.returncode != 0 and f"{real}:1: a run of a model with flags" in refused.stdout
    assert real.read_text().count("\n") == 1

    md = tmp_path / "ner.md"
    run_cli(sys.executable, ROOT / "experiments" / "ner_report.py", "--results", results,
            "--out", md, "--plot", tmp_path / "ner.png")
    text = md.read_text()
    assert "- n-gram dictionary: " in text and "(3 runs: span, token, token-viterbi)" in text
    token, span = records["token"], records["span"]
    span_dev_p = span["dev"]["precision"]
    assert f"| token | argmax | 1 | {token['dev']['precision']:.2f} |" in text
    viterbi = records["token-viterbi"]
    assert f"| token-viterbi | viterbi | 1 | {viterbi['dev']['precision']:.2f} |" in text
    assert f"| span | flat spans | 1 | {span_dev_p:.2f} |" in text
    diff = span["test_f1"] - token["test_f1"]
    assert f"| span | {span['dev_f1'] - token['dev_f1']:+.2f} (" in text
    assert f"{diff:+.2f} ({int(diff > 0)} of 1) |" in text
    # and against the token head decoded by Viterbi, the stronger token baseline
    assert "minus the token-viterbi head" in text
    vs = text[text.index("minus the token-viterbi head"):]
    assert f"| span | {span['dev_f1'] - viterbi['dev_f1']:+.2f} (" in vs
    kinds = sorted(set(token["test"]["by_type"]) | set(span["test"]["by_type"]))
    by_type = token["test"]["by_type"]
    assert "| token | " + " | ".join(f"{by_type[k]['f1']:.2f}" if k in by_type else "-"
                                    for k in kinds) + " |" in text
    assert (tmp_path / "ner.png").stat().st_size > 0


def test_recipe_refuses_bad_settings(tmp_path):
    env = {"CONLL_DIR": str(tmp_path), "BPE_DIR": str(GPT2_BPE), "OUT_DIR": str(tmp_path / "r"),
           "DATA_DIR": str(tmp_path / "bin"), "FROM_SCRATCH": "1"}
    proc = run_cli("bash", RECIPE, "--cpu", env=dict(env, HEAD="crf"), check=False)
    assert proc.returncode == 2 and "HEAD=crf: expected token, sf or span" in proc.stdout
    proc = run_cli("bash", RECIPE, "--cpu", env=env, check=False)
    assert proc.returncode == 2 and f"{tmp_path}/train.txt not found" in proc.stdout


def test_hydra_twin_has_the_recipe_defaults():
    cfg = OmegaConf.load(HYDRA)
    recipe = RECIPE.read_text()

    def default(name):
        line = next(x for x in recipe.splitlines() if x.startswith(f"{name}=${{{name}:-"))
        return shlex.split(line.split(":-", 1)[1].rstrip("}"))[0]

    assert cfg.task._name == cfg.criterion._name == "span_tagging"
    assert cfg.task.tagging_head == default("HEAD")
    assert cfg.optimization.lr[0] == float(default("LR"))
    assert cfg.dataset.batch_size == int(default("BATCH_SIZE"))
    assert cfg.optimization.max_epoch == int(default("EPOCHS"))
    updates = (14042 + cfg.dataset.batch_size - 1) // cfg.dataset.batch_size * cfg.optimization.max_epoch
    assert cfg.optimization.max_update == cfg.lr_scheduler.total_num_update == updates
    assert cfg.lr_scheduler.warmup_updates == round(float(default("WARMUP")) * updates)
    assert cfg.model._name == "roberta_tagging"
    assert cfg.checkpoint.best_checkpoint_metric == "f1"
