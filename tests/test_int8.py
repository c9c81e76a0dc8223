"""int8 on the CPU (issue 69, part 1): a tiny MRPC model trained here for 2 updates on
real rows, exported through the commands; the accuracy guard predicts the real dev rows
of its folder in float32 and in int8 and records both figures, refuses past --max-drop
in one line with nothing written, keeps int8 with --force-int8; the portable int8 path
quantizes the encoder's Linear layers only; span-predict --quantize int8."""

import json

import numpy as np
import pytest
import torch

from conftest import GLUE, fairseq_train, run_main
from test_task_data import glue_folder
from test_task_train import span_args

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from span_plugin.cli.export import main as export_main  # noqa: E402
from span_plugin.export import int8_guard  # noqa: E402
from span_plugin.export import paired_metrics as paired  # noqa: E402
from span_plugin.export.onnx_export import META, MODEL  # noqa: E402
from span_plugin.portable import load_model  # noqa: E402


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
    """``(checkpoint, its data folder, its span-export hf folder)``."""
    root = tmp_path_factory.mktemp("int8")
    data = glue_folder("MRPC")
    fairseq_train([*span_args(data, root / "ckpt", num_classes=2, max_update=2),
                   "--disable-validation"])
    checkpoint = root / "ckpt" / "checkpoint_last.pt"
    assert export_main(["hf", str(checkpoint), "--out", str(root / "hf")]) == 0
    return checkpoint, data, root / "hf"


def _ops(path):
    """The op types of the graph at ``path``, its branches' included."""
    import onnx

    def of(graph):
        for node in graph.node:
            yield node.op_type
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    yield from of(attribute.g)

    return set(of(onnx.load(str(path)).graph))


def _dev_rows(data):
    return (data / "raw" / "valid.label").read_text(encoding="utf-8").splitlines()


def test_onnx_int8_export_measures_the_dev_split_and_writes_the_int8_graph(mrpc, tmp_path,
                                                                           capsys):
    checkpoint, data, _ = mrpc
    out = tmp_path / "onnx"
    assert export_main(["onnx", str(checkpoint), "--out", str(out), "--quantize", "int8"]) == 0
    said = capsys.readouterr().out
    meta = json.loads((out / META).read_text(encoding="utf-8"))
    record = meta["int8"]
    assert record["examples"] == len(_dev_rows(data)) and str(data) in record["source"]
    assert record["metric"] == "f1" and record["accepted"] == "within max_drop"
    assert record["max_drop"] == int8_guard.DEFAULT_MAX_DROP
    assert record["drop"] == pytest.approx(record["fp32"] - record["int8"], abs=0.011)
    low, high = record["drop_interval"]
    assert low <= record["drop"] <= high and f"95% interval {low:.2f} to {high:.2f}" in said
    assert 0 <= record["agreement"] <= 100
    assert f"f1 {record['int8']:.2f} against float32 {record['fp32']:.2f}" in said
    # model.onnx is the int8 graph (MatMulInteger, no float Gemm); nothing else is left
    ops = _ops(out / MODEL)
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops and "Gemm" not in ops
    assert sorted(p.name for p in out.iterdir()) == [MODEL, META]
    # The float32 figure is the metric of the float32 graph's labels on the dev rows:
    # recomputed from the torch model's logits (the graph's within 1e-4) by scikit-learn.
    from sklearn.metrics import f1_score

    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(checkpoint)
    rows = (data / "raw" / "valid.input0").read_text(encoding="utf-8").splitlines()
    rows2 = (data / "raw" / "valid.input1").read_text(encoding="utf-8").splitlines()
    labels = [hub.labels[i] for i in hub.predict_logits(list(zip(rows, rows2))).argmax(1)]
    gold = _dev_rows(data)
    assert record["fp32"] == pytest.approx(100 * f1_score(gold, labels, pos_label="1"), abs=0.01)


def test_onnx_int8_refused_past_max_drop_in_one_line_nothing_written(mrpc, tmp_path, capsys):
    checkpoint, _, _ = mrpc
    out = tmp_path / "onnx"
    # int8 can never beat float32 by more than 100 points: -100.5 refuses whatever it measures
    assert export_main(["onnx", str(checkpoint), "--out", str(out), "--quantize", "int8",
                        "--max-drop", "-100.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "int8 f1 " in err and "against float32 " in err and "--max-drop -100.5" in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    # --force-int8 keeps it, said so in the record
    assert export_main(["onnx", str(checkpoint), "--out", str(out), "--quantize", "int8",
                        "--max-drop", "-100.5", "--force-int8"]) == 0
    record = json.loads((out / META).read_text(encoding="utf-8"))["int8"]
    assert record["accepted"] == "forced past max_drop" and record["max_drop"] == -100.5


def test_guard_flags_need_quantize(mrpc, tmp_path, capsys):
    checkpoint, _, _ = mrpc
    assert export_main(["onnx", str(checkpoint), "--out", str(tmp_path / "o"),
                        "--max-drop", "1"]) == 2
    assert "--max-drop applies to --quantize int8" in capsys.readouterr().err
    assert export_main(["onnx", str(checkpoint), "--out", str(tmp_path / "o"),
                        "--min-agreement", "90"]) == 2
    assert "--min-agreement applies to --quantize int8" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_portable_int8_quantizes_the_encoder_linears_only(mrpc):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    _, _, folder = mrpc
    fp32, int8 = load_model(folder), load_model(folder, quantize="int8")
    linears = [m for m in int8.network.encoder.modules() if isinstance(m, DynamicLinear)]
    layers = len(fp32.network.encoder.layers)
    assert len(linears) == 4 * layers  # q/k/v, attention out, intermediate, output
    assert not any(isinstance(m, DynamicLinear) for m in int8.network.heads.modules())
    for (name, a), b in zip(fp32.network.heads.state_dict().items(),
                            int8.network.heads.state_dict().values()):
        assert torch.equal(a, b), name
    pairs = [tuple(line.split("\t")[3:5]) for line in
             (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:65]]
    a, b = fp32.predict_logits(pairs), int8.predict_logits(pairs)
    assert a.shape == b.shape and torch.isfinite(b).all()
    assert not torch.equal(a, b)  # int8 computed something else ...
    assert (a.argmax(1) == b.argmax(1)).float().mean() >= 0.9  # ... and mostly the same labels


def test_activations_use_8_bits_only_on_a_cpu_with_avx512_vnni(tmp_path, monkeypatch):
    """The gate reads the CPU's flags (a missing file: 7 bits, the safe side); with the
    flag, the encoder's int8 Linears quantize activations to all 8 bits, and their output
    is closer to float32 than torch's 7-bit one on the same weights."""
    from span_plugin.portable import quantize

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    assert quantize.full_range_activations(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx_vnni\n")
    assert not quantize.full_range_activations(cpuinfo)
    assert not quantize.full_range_activations(tmp_path / "missing")

    generator = torch.Generator().manual_seed(0)
    linear = torch.nn.Sequential(torch.nn.Linear(64, 64))
    x = torch.randn(32, 64, generator=generator) * torch.linspace(0.1, 4, 64)
    errors = {}
    for full in (True, False):
        monkeypatch.setattr(quantize, "full_range_activations", lambda full=full: full)
        int8 = quantize.quantize_encoder(linear)
        assert isinstance(int8[0], quantize.FullRangeLinear) == full
        errors[full] = (int8(x) - linear(x)).abs().mean().item()
    assert errors[True] < errors[False], errors


def test_load_model_int8_refusals(mrpc):
    _, _, folder = mrpc
    with pytest.raises(ValueError, match="quantize 'int4'; expected None or one of int8"):
        load_model(folder, quantize="int4")
    with pytest.raises(ValueError, match="runs on the CPU only"):
        load_model(folder, quantize="int8", device="meta")


def test_int8_check_writes_both_figures_into_the_folder(mrpc, tmp_path):
    import shutil

    from span_plugin.formats.model_folder import check_folder

    _, data, exported = mrpc
    folder = tmp_path / "hf"
    shutil.copytree(exported, folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    # refused: nothing in the folder changes
    proc = run_main("span-export", "int8-check", folder, "--data", data, "--max-drop", "-100.5",
                    check=False)
    said = [line for line in proc.stdout.splitlines() if "span-export int8-check" in line]
    assert proc.returncode == 2 and len(said) == 1, proc.stdout
    assert "int8 f1 " in said[0] and "against float32 " in said[0], said
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # no agreement reaches more than 100%: refused on it, by the same one line
    proc = run_main("span-export", "int8-check", folder, "--data", data, "--min-agreement", "100.5",
                    check=False)
    said = [line for line in proc.stdout.splitlines() if "span-export int8-check" in line]
    assert proc.returncode == 2 and len(said) == 1 and "less than --min-agreement 100.5" in said[0], said
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    proc = run_main("span-export", "int8-check", folder, "--data", data)
    assert proc.returncode == 0, proc.stdout
    config, listed, _ = check_folder(folder)  # files.json lists the new contents
    record = config["span_plugin"]["int8"]
    assert record["examples"] == len(_dev_rows(data)) and record["accepted"] == "within max_drop"
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert card.count("## int8 on the CPU") == 1
    assert f"| float32 | {record['fp32']:.2f} |" in card and f"| int8 | {record['int8']:.2f} |" in card
    assert (folder / "model.safetensors").read_bytes() == before["model.safetensors"]
    # measured again: the section is replaced, not added
    assert run_main("span-export", "int8-check", folder, "--data", data).returncode == 0
    assert (folder / "README.md").read_text(encoding="utf-8").count("## int8 on the CPU") == 1
    assert load_model(folder, quantize="int8").folder.config["span_plugin"]["int8"]["fp32"] \
        == record["fp32"]
    # no data named: the data record's folder; when it is gone, one line saying what to give
    assert run_main("span-export", "int8-check", folder).returncode == 0
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["span_plugin"]["data_record"]["data_dir"] = str(tmp_path / "gone")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    from span_plugin.formats.model_folder import write_manifest

    write_manifest(folder)
    proc = run_main("span-export", "int8-check", folder, check=False)
    assert proc.returncode == 2 and "give --data FOLDER" in proc.stdout, proc.stdout


def test_span_predict_model_quantize_int8(mrpc, tmp_path):
    checkpoint, data, folder = mrpc
    out8, out32 = tmp_path / "int8.tsv", tmp_path / "fp32.tsv"
    for out, extra in ((out8, ["--quantize", "int8"]), (out32, [])):
        proc = run_main("span-predict", "--model", folder, "--data", data, "--split", "valid",
                        "--output", out, *extra)
        assert proc.returncode == 0, proc.stdout
    a = out32.read_text().splitlines()
    b = out8.read_text().splitlines()
    assert len(a) == len(b) == len(_dev_rows(data)) + 1
    assert np.mean([x == y for x, y in zip(a[1:], b[1:])]) >= 0.9
    proc = run_main("span-predict", "--checkpoint", checkpoint, "--split", "valid", "--output",
                    tmp_path / "x.tsv", "--quantize", "int8", check=False)
    assert proc.returncode == 2 and "--quantize int8 applies to --model DIR" in proc.stdout


def test_load_model_and_span_predict_with_the_onnx_graph(mrpc, tmp_path):
    """load_model(DIR, onnx=GRAPH) predicts through ONNX Runtime with the folder's own
    encoding and batching, its torch weights not loaded: the folder's float32 graph gives
    load_model's logits within 1e-4 on the real dev rows; span-predict --onnx with the
    int8 graph writes every row, labels mostly agreeing with float32's. A graph of
    another head, --onnx with --checkpoint, and onnx= with int8 or a GPU are refused in
    one line."""
    import shutil

    from span_plugin.formats.model_folder import ModelFolderError

    checkpoint, data, folder = mrpc
    graph32, graph8 = tmp_path / "onnx32", tmp_path / "onnx8"
    assert export_main(["onnx", str(folder), "--out", str(graph32)]) == 0
    assert export_main(["onnx", str(folder), "--out", str(graph8), "--quantize", "int8",
                        "--max-drop", "100"]) == 0
    raw = data / "raw"
    rows = list(zip(*((raw / f"valid.input{k}").read_text(encoding="utf-8").splitlines()
                      for k in (0, 1))))
    want = load_model(folder).predict_logits(rows, batch_size=8)
    assert {"If", "MatMulInteger"} <= _ops(graph8 / MODEL) and "Gemm" not in _ops(graph8 / MODEL)
    model = load_model(folder, onnx=graph32)
    assert not list(model.network.parameters())
    assert (model.predict_logits(rows, batch_size=8) - want).abs().max() < 1e-4

    out8, out32 = tmp_path / "int8.tsv", tmp_path / "fp32.tsv"
    for out, extra in ((out8, ["--onnx", graph8]), (out32, [])):
        proc = run_main("span-predict", "--model", folder, "--data", data, "--split", "valid",
                        "--output", out, *extra)
        assert proc.returncode == 0, proc.stdout
    a, b = out32.read_text().splitlines(), out8.read_text().splitlines()
    assert len(a) == len(b) == len(_dev_rows(data)) + 1
    assert np.mean([x == y for x, y in zip(a[1:], b[1:])]) >= 0.9

    other = tmp_path / "other"
    shutil.copytree(graph32, other)
    meta = json.loads((other / META).read_text(encoding="utf-8"))
    meta["head"] = "another"
    (other / META).write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(ModelFolderError, match="a graph of head 'another'"):
        load_model(folder, onnx=other)
    (other / MODEL).write_bytes(b"not a graph")
    (other / META).write_text(json.dumps({**meta, "head": model.head}), encoding="utf-8")
    with pytest.raises(ModelFolderError, match="ONNX Runtime does not load it"):
        load_model(folder, onnx=other)
    with pytest.raises(ValueError, match="runs on the CPU as the graph was written"):
        load_model(folder, onnx=graph8, quantize="int8")
    proc = run_main("span-predict", "--checkpoint", checkpoint, "--split", "valid", "--output",
                    tmp_path / "x.tsv", "--onnx", graph8, check=False)
    assert proc.returncode == 2 and "--onnx" in proc.stdout and "applies to --model DIR" in \
        proc.stdout, proc.stdout


def test_onnx_without_onnxruntime_names_the_install(mrpc, tmp_path, monkeypatch):
    """onnx= where onnxruntime is not installed (the lean install): one line saying what
    to install, from load_model and from span-predict."""
    import span_plugin.requires as requires
    from span_plugin.cli.predict import main as predict_main

    _, data, folder = mrpc
    real = requires.installed
    monkeypatch.setattr(requires, "installed", lambda m: m != "onnxruntime" and real(m))
    with pytest.raises(requires.MissingPackageError, match=r"pip install 'span_plugin\[onnx\]'"):
        load_model(folder, onnx=tmp_path)
    assert predict_main(["--model", str(folder), "--onnx", str(tmp_path), "--data", str(data),
                         "--split", "valid", "--output", str(tmp_path / "x.tsv")]) == 2
    assert not (tmp_path / "x.tsv").exists()


def _points(name, predicted, gold, **options):
    return paired.points(name, paired.labels_counts(predicted, gold, name, **options))


def test_guard_metrics_against_scikit_learn_and_scipy():
    """The guard's F1, MCC and Pearson on MRPC's and STS-B's real dev labels against a
    changed copy of them, as scikit-learn and SciPy compute them."""
    from scipy.stats import pearsonr
    from sklearn.metrics import f1_score, matthews_corrcoef

    rows = [line.split("\t") for line in
            (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    gold = [r[0] for r in rows]
    rng = np.random.default_rng(0)
    pred = [g if rng.random() < 0.8 else ("0" if g == "1" else "1") for g in gold]
    assert _points("f1", pred, gold, positive="1") == pytest.approx(
        100 * f1_score(gold, pred, pos_label="1"))
    assert _points("mcc", pred, gold) == pytest.approx(100 * matthews_corrcoef(gold, pred))
    assert _points("accuracy", pred, gold) == pytest.approx(
        100 * np.mean([p == g for p, g in zip(pred, gold)]))
    scores = [float(line.split("\t")[-1]) for line in
              (GLUE / "STS-B" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    noisy = [s + rng.normal() for s in scores]
    assert _points("pearson", noisy, scores) == pytest.approx(100 * pearsonr(noisy, scores)[0])


def test_guard_entity_and_squad_f1_are_the_official_scorers():
    """The guard's entity F1 (per-sentence counts) against span-predict's CoNLL scorer on
    real CoNLL-2003 valid tags with a fifth of the entities dropped; its SQuAD F1
    (per-question counts) against the official script's summary on real SQuAD 1.1 dev
    questions answered with a shortened gold answer or a wrong word."""
    from types import SimpleNamespace

    from conftest import DATA
    from span_plugin.formats.squad import read_qa
    from span_plugin.formats.squad_metrics import squad_scores
    from span_plugin.modules import entities as ner
    from span_plugin.portable.conll_files import scores

    rng = np.random.default_rng(2)
    blocks = (DATA / "conll2003" / "valid.txt").read_text(encoding="utf-8").split("\n\n")
    gold = [[line.split()[-1] for line in b.splitlines()
             if line and not line.startswith("-DOCSTART-")] for b in blocks[:300]]
    gold = [g for g in gold if g]
    predicted = [tuple(e for e in ner.entities_of(g) if rng.random() > 0.2) for g in gold]
    tagger = SimpleNamespace(metric_mode="default")
    name, points, _ = int8_guard.metric(tagger, int8_guard.Examples("span_tagging", [], gold, "x"),
                                        predicted)
    assert name == "entity f1"
    assert points == pytest.approx(scores([list(p) for p in predicted],
                                          [ner.entities_of(g) for g in gold])["f1"], abs=0.006)

    questions = read_qa(DATA / "squad" / "dev-v1.1.json", official=True).examples[:200]
    answers = [q.answers[0][0].split()[: max(1, len(q.answers[0][0].split()) - 1)]
               if rng.random() < 0.7 else ["nothing"] for q in questions]
    answers = [" ".join(a) for a in answers]
    examples = int8_guard.Examples("span_qa", questions, questions, "x", {"version": "1.1"})
    name, points, _ = int8_guard.metric(None, examples, answers)
    official = squad_scores(dict(zip((q.id for q in questions), answers)), questions, "1.1")
    assert name == "squad f1" and points == pytest.approx(official["f1"])


def test_drop_interval_is_a_paired_bootstrap_of_the_metric():
    """The interval against a plain loop over resamples (the same seeded draws, the
    metric recomputed by scikit-learn on each): equal. It narrows as the two predictions
    agree more, holds 0 when they are the same, and is refused for unpaired counts."""
    from sklearn.metrics import f1_score

    rows = [line.split("\t") for line in
            (GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    gold = [r[0] for r in rows]
    rng = np.random.default_rng(1)

    def flipped(share):
        return [("0" if g == "1" else "1") if rng.random() < share else g for g in gold]

    fp32, int8 = flipped(0.15), flipped(0.2)
    c32, c8 = (paired.labels_counts(p, gold, "f1", positive="1") for p in (fp32, int8))
    got = paired.drop_interval("f1", c32, c8)
    n = len(gold)
    drops = []
    for w in np.concatenate(list(paired.resample_weights(n))):
        idx = np.repeat(np.arange(n), w)
        g = [gold[i] for i in idx]
        drops.append(100 * (f1_score(g, [fp32[i] for i in idx], pos_label="1")
                            - f1_score(g, [int8[i] for i in idx], pos_label="1")))
    assert got == pytest.approx(list(np.percentile(drops, [2.5, 97.5])), abs=0.006)
    assert got[0] < _points("f1", fp32, gold, positive="1") - _points(
        "f1", int8, gold, positive="1") < got[1]
    assert paired.drop_interval("f1", c32, c32) == [0.0, 0.0]
    near = paired.drop_interval("f1", c32, paired.labels_counts(
        [p if rng.random() < 0.98 else g for p, g in zip(fp32, gold)], gold, "f1",
        positive="1"))
    assert near[1] - near[0] < got[1] - got[0]
    with pytest.raises(ValueError, match="not one paired sample"):
        paired.drop_interval("f1", c32, c8[:-1])
    # a split of 40,000 rows (QQP's dev set) is resampled a few hundred rows at a time
    assert [len(w) for w in paired.resample_weights(40_000)][:2] == [104, 104]
    assert sum(len(w) for w in paired.resample_weights(40_000)) == paired.RESAMPLES


def test_judge_refuses_a_threshold_that_is_not_a_number():
    record = {"metric": "f1", "fp32": 80.0, "int8": 79.0, "drop": 1.0, "source": "x",
              "examples": 3}
    with pytest.raises(ValueError, match="expected a finite number"):
        int8_guard.judge(record, float("nan"))
    assert int8_guard.judge(record, 1.0)["accepted"] == "within max_drop"
    with pytest.raises(int8_guard.Int8Refused, match="a drop of 1.00 points, more than"):
        int8_guard.judge(record, 0.99)


def test_judge_refuses_int8_below_min_agreement_even_when_the_metric_holds():
    """A QA model's F1 can hold while half its answers change (benchmarks/RESULTS.md):
    --min-agreement refuses that, names both figures, and --force-int8 keeps it."""
    record = {"metric": "squad f1", "fp32": 36.68, "int8": 37.29, "drop": -0.61, "source": "x",
              "examples": 600, "agreement": 52.67, "agreement_of": "answers"}
    assert int8_guard.judge(record)["accepted"] == "within max_drop"
    with pytest.raises(int8_guard.Int8Refused, match="answers agreeing 52.67%, less than "
                       "--min-agreement 90; nothing written"):
        int8_guard.judge(record, min_agreement=90)
    kept = int8_guard.judge(record, min_agreement=90, force=True)
    assert kept["accepted"] == "forced past min_agreement" and kept["min_agreement"] == 90
    assert int8_guard.judge(record, min_agreement=50)["accepted"] == "within max_drop and min_agreement"
    with pytest.raises(ValueError, match="--min-agreement inf: expected a finite number"):
        int8_guard.judge(record, min_agreement=float("inf"))


@pytest.fixture(scope="module")
def conll_bin(tmp_path_factory):
    from conftest import small_conll_folder

    return small_conll_folder(tmp_path_factory.mktemp("int8_conll"))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["span_labeling", "qa_boundary"])
def test_onnx_int8_guard_decodes_entities_and_answers(case, request, tmp_path):
    """Span labeling (entities: a pair of outputs) and QA (a dict of four, -inf masks)
    through the graph answering the hub: both figures of the task's metric, on the
    folder's labelled valid split, recorded."""
    from test_export_onnx import qa_checkpoint_of, tagging_checkpoint

    if case == "span_labeling":
        checkpoint = tagging_checkpoint(tmp_path / "ckpt", request.getfixturevalue("conll_bin"),
                                        "span_labeling", "--max-span-words", "4")
        metric, agreement_of = "entity f1", "entities"
    else:
        checkpoint = qa_checkpoint_of(tmp_path / "ckpt", request.getfixturevalue("qa_folder"),
                                      "boundary")
        metric, agreement_of = "squad f1", "answers"
    out = tmp_path / "onnx"
    assert export_main(["onnx", str(checkpoint), "--out", str(out), "--quantize", "int8",
                        "--max-drop", "100"]) == 0
    record = json.loads((out / META).read_text(encoding="utf-8"))["int8"]
    assert (record["metric"], record["agreement_of"]) == (metric, agreement_of)
    assert record["examples"] > 0 and "split valid of" in record["source"]
    assert 0 <= record["int8"] <= 100 and 0 <= record["agreement"] <= 100
    assert "MatMulInteger" in _ops(out / MODEL)
