"""The README's transfer example, run as written: recipes/transfer/paraphrase.sh
with ALIGN_FROM=MRPC and EXCLUDE naming STS-B's dev and test files, then
recipes/glue/STS-B.sh from the transferred encoder, on small files of real GLUE rows
(a tiny model from random weights instead of the pretrained encoder, too slow for the
suite). No STS-B dev or test sentence reaches the transfer data; the data folder is
keyed by source, exclusion set and seed, and a folder or run directory built from other
phrase pairs is refused."""

import json
import re
import shlex

import pytest

from conftest import GLUE, GPT2_BPE, ROOT, run_cli

SMOKE = ["--cpu", "--num-workers", "0", "--encoder-layers", "2", "--encoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2"]


def norm(sentence):
    return re.sub(r"[\W_]", "", sentence.lower())


def readme_commands():
    """The bash block of the README's transfer section: [(env, script)], continuation
    lines joined, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Transfer fine-tuning with phrasal paraphrases"):]
    block = section[section.index("```bash\n") + 8:]
    block = block[:block.index("```")].replace("\\\n", " ")
    out = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("recipes/"))
        script, = [w for w in words if w.startswith("recipes/")]
        out.append((env, script))
    return out


def tsv(path, header, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "".join(lines), encoding="utf-8")


def lines_of(path):
    with open(path, encoding="utf-8-sig") as f:
        return f.readline(), f.readlines()


def sentences(header, row):
    """Normalised sentences of a GLUE row (MRPC or STS-B columns, by header name)."""
    names = header.rstrip("\n").split("\t")
    fields = row.rstrip("\n").split("\t")
    return {norm(fields[names.index(c)]) for c in ("#1 String", "#2 String", "sentence1", "sentence2")
            if c in names}


def build_glue(root):
    """glue_data/ of real rows: MRPC train with 24 paraphrases sharing a sentence with
    STS-B dev or test (12 each) and 40 rows that do not; STS-B dev and test holding those
    shared sentences' rows and their first 20 rows; the first rows of the other files.
    Returns (normalised STS-B dev and test sentences, the leaking MRPC train rows)."""
    stsb = {}
    for split in ("dev", "test"):
        header, rows = lines_of(GLUE / "STS-B" / f"{split}.tsv")
        stsb[split] = (header, rows, {k: r for r in rows for k in sentences(header, r)})
    header, train = lines_of(GLUE / "MRPC" / "train.tsv")
    picked = {"dev": [], "test": []}
    others = []
    for row in train:
        keys = sentences(header, row)
        hit = [s for s in ("dev", "test") if keys & set(stsb[s][2])]
        if hit and row.startswith("1\t") and len(picked[hit[0]]) < 12:
            picked[hit[0]].append((row, keys))
        elif not hit and len(others) < 40:
            others.append(row)
    tsv(root / "MRPC" / "train.tsv", header, [r for s in picked for r, _ in picked[s]] + others)
    for split, n in (("dev", 40), ("test", 10)):
        h, rows = lines_of(GLUE / "MRPC" / f"{split}.tsv")
        tsv(root / "MRPC" / f"{split}.tsv", h, rows[:n])
    banned = set()
    for split in ("dev", "test"):
        h, rows, by_key = stsb[split]
        shared = {by_key[k] for _, keys in picked[split] for k in keys if k in by_key}
        kept = sorted(shared, key=rows.index) + [r for r in rows[:20] if r not in shared]
        tsv(root / "STS-B" / f"{split}.tsv", h, kept)
        banned |= {k for r in kept for k in sentences(h, r)}
    h, rows = lines_of(GLUE / "STS-B" / "train.tsv")
    tsv(root / "STS-B" / "train.tsv", h, rows[:60])
    return banned, [r for s in picked for r, _ in picked[s]]


def run(cwd, env, script, *extra, check=True):
    return run_cli("bash", ROOT / script, *extra, cwd=cwd, check=check,
                   env={"BPE_DIR": str(GPT2_BPE), "WORKERS": "1", **env})


def as_run_here(env):
    """The README's variables, but a tiny model from random weights for the pretrained
    encoder it starts from (the packaged MiniLM, or roberta.base), which would take
    minutes here."""
    env = dict(env)
    if env.get("ROBERTA_PATH") == "roberta.base/model.pt":
        del env["ROBERTA_PATH"]
    if "ROBERTA_PATH" not in env and "MODEL_DIR" not in env:
        env["FROM_SCRATCH"] = "1"
    return env


@pytest.fixture(scope="module")
def readme(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("readme")
    (transfer_env, transfer_script), (glue_env, glue_script) = readme_commands()
    assert transfer_script == "recipes/transfer/paraphrase.sh"
    assert glue_script == "recipes/glue/STS-B.sh"
    # The example transfers from MRPC to STS-B and excludes the target's own files.
    assert transfer_env["ALIGN_FROM"] == "MRPC"
    assert transfer_env["EXCLUDE"].split() == ["glue_data/STS-B/dev.tsv", "glue_data/STS-B/test.tsv"]
    banned, leaking = build_glue(cwd / transfer_env["GLUE_DIR"])
    transfer = run(cwd, as_run_here(transfer_env), transfer_script, "--max-update", "2", *SMOKE)
    glue = run(cwd, {**as_run_here(glue_env), "TEST_PREDICTIONS": "0"}, glue_script,
               "--max-update", "1", *SMOKE)
    data = re.search(r"preparing (data-bin/transfer-MRPC-s1-[0-9a-f]{8})\n", transfer.stdout)
    assert data, transfer.stdout[-3000:]
    return {"cwd": cwd, "env": as_run_here(transfer_env), "script": transfer_script,
            "log": transfer.stdout, "glue_log": glue.stdout, "data": cwd / data.group(1),
            "banned": banned, "leaking": leaking}


def texts_of(jsonl):
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    return {r[k] for r in rows for k in ("sentence1", "sentence2")}


@pytest.mark.slow
def test_readme_example_keeps_the_targets_evaluation_sentences_out(readme):
    cwd, log = readme["cwd"], readme["log"]
    assert len(readme["leaking"]) == 24  # the fixture has real overlap to remove
    assert f"({len(readme['leaking'])} paraphrase pairs dropped: they share a sentence" in log
    aligned = cwd / "runs" / "transfer-MRPC" / "aligned"
    seen = texts_of(aligned / "train.jsonl") | texts_of(aligned / "dev.jsonl")
    # What the encoder is trained on: the folder's raw text, both inputs, both splits.
    raw = sorted((readme["data"] / "raw").glob("*.input*"))
    assert len(raw) == 4
    for path in raw:
        seen |= set(path.read_text(encoding="utf-8").splitlines())
    assert len(seen) > 50
    assert not {norm(s) for s in seen} & readme["banned"]
    # Neither sentence of a leaking pair is left (its partner sentence goes with it).
    gone = {norm(s) for r in readme["leaking"] for s in r.rstrip("\n").split("\t")[3:5]}
    assert len(gone) >= 40 and not gone & {norm(s) for s in seen}
    # The README's second command fine-tuned STS-B from the transferred encoder.
    assert "transferred encoder: runs/transfer-MRPC/transferred.pt" in log
    assert "valid on 'valid' subset" in readme["glue_log"]
    assert "pearson" in readme["glue_log"]


@pytest.mark.slow
def test_exclude_and_seed_key_the_folder_and_stale_ones_are_refused(readme):
    cwd, env, script, first = readme["cwd"], readme["env"], readme["script"], readme["data"]

    def prepare(**changes):
        return run(cwd, {**env, "PREPARE_ONLY": "1", **changes}, script, "--cpu")

    def folder(proc):
        return cwd / re.search(r"transfer data: (\S+)\n", proc.stdout).group(1)

    # The same settings find their folder and use it.
    again = prepare()
    assert f"using {first.relative_to(cwd)} (built from these phrase pairs)" in again.stdout
    assert folder(again) == first
    # Without EXCLUDE, or with another seed: another folder.
    open_ = prepare(EXCLUDE="", OUT_DIR="runs/no-exclude")
    seed2 = prepare(SEED="2", OUT_DIR="runs/seed2")
    assert re.fullmatch(r"transfer-MRPC-s1-[0-9a-f]{8}", folder(open_).name)
    assert re.fullmatch(r"transfer-MRPC-s2-[0-9a-f]{8}", folder(seed2).name)
    assert len({first, folder(open_), folder(seed2)}) == 3
    unfiltered = texts_of(cwd / "runs" / "no-exclude" / "aligned" / "train.jsonl")
    assert {norm(s) for s in unfiltered} & readme["banned"]  # the pairs EXCLUDE keeps out
    # A folder built with EXCLUDE, given as DATA_DIR to a run without it: refused by its
    # provenance record, before anything trains.
    stale = run(cwd, {**env, "EXCLUDE": "", "DATA_DIR": str(first), "OUT_DIR": "runs/stale"},
                script, *SMOKE, check=False)
    assert stale.returncode == 2, stale.stdout[-3000:]
    assert f"was built from {cwd.resolve() / 'runs' / 'transfer-MRPC' / 'aligned' / 'train.jsonl'}" in stale.stdout
    assert "not built from this run's phrase pairs" in stale.stdout
    assert not (cwd / "runs" / "stale" / "checkpoints").exists()
    # The README run's directory, relaunched on other phrase pairs: refused.
    mixed = run(cwd, {**env, "SEED": "3", "OUT_DIR": "runs/transfer-MRPC"}, script, *SMOKE,
                check=False)
    assert mixed.returncode == 2 and "holds a run on" in mixed.stdout, mixed.stdout[-3000:]


@pytest.mark.slow
def test_excluding_the_sources_own_dev_file_validates_on_held_out_rows(readme):
    """Transfer to MRPC from MRPC with its dev and test files excluded used to stop at
    "0 paraphrase rows; need at least 2" (MRPC dev excluded from MRPC dev)."""
    cwd = readme["cwd"]
    proc = run(cwd, {**readme["env"], "PREPARE_ONLY": "1", "OUT_DIR": "runs/mrpc-self",
                     "EXCLUDE": "glue_data/MRPC/dev.tsv glue_data/MRPC/test.tsv",
                     "VALID_ROWS": "5"}, readme["script"], "--cpu")
    assert "validating on the last 5 paraphrase rows of glue_data/MRPC/train.tsv" in proc.stdout
    aligned = cwd / "runs" / "mrpc-self" / "aligned"
    banned = set()
    for split in ("dev", "test"):
        _, rows = lines_of(cwd / "glue_data" / "MRPC" / f"{split}.tsv")
        banned |= {norm(s) for r in rows for s in r.rstrip("\n").split("\t")[3:5]}
    seen = texts_of(aligned / "train.jsonl") | texts_of(aligned / "dev.jsonl")
    assert seen and not {norm(s) for s in seen} & banned
    assert sum(1 for line in (aligned / "dev.jsonl").open() if '"label": "1"' in line) == 5
