"""Files that join predictions with text join them with the text predicted (issue 66,
part 2): ``span-predict --data OTHER --conll-out`` of an NER model (``--checkpoint`` and
``--model``) writes its tags onto OTHER's source lines, not onto those of the folder it
was trained on; and every writer checks the counts (rows, words per sentence) before it
writes: a cut or mismatched file, or a source that changed, is one line naming the file
and the first mismatching line, exit 2, nothing written. Seeded fuzz cases over the
folder's files."""

import json
import random
import shutil

import pytest

from conftest import (DATA, GPT2_BPE, TINY_ROBERTA, USER_DIR, conll_sentences, fairseq_train,
                      run_main, small_conll_folder, tiny_train_args)

pytestmark = pytest.mark.slow

SEED = 66


def _conll_folder(root, valid_text):
    """A tagging folder whose train split is small_conll_folder's (same tags and
    dictionary) and whose valid split is ``valid_text``."""
    from span_plugin.preprocess.folders.conll import prepare_conll
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    root.mkdir(parents=True, exist_ok=True)
    (root / "train.txt").write_text(conll_sentences(DATA / "conll2003" / "train.txt", 24))
    (root / "valid.txt").write_text(valid_text)
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    prepare_conll(root / "bin", {"train": str(root / "train.txt"), "valid": str(root / "valid.txt")},
                  FolderOptions(spec, str(GPT2_BPE / "dict.txt"), name="conll2003"))
    return root / "bin"


@pytest.fixture(scope="module")
def ner(tmp_path_factory):
    """(trained-on folder, another folder of other sentences, checkpoint, exported folder)."""
    from span_plugin.cli.export import main as export_main

    root = tmp_path_factory.mktemp("joins")
    (root / "a").mkdir()
    trained = small_conll_folder(root / "a")
    # valid sentences 40..70 of CoNLL-2003 valid: none of the trained folder's 8
    text = conll_sentences(DATA / "conll2003" / "valid.txt", 70)
    blocks = text.split("\n\n")
    other = _conll_folder(root / "b", "\n\n".join(blocks[40:]))
    save = root / "ckpt"
    fairseq_train([trained, "--user-dir", USER_DIR, "--task", "span_tagging", "--criterion",
                   "span_tagging", "--arch", "roberta_tagging", *TINY_ROBERTA, "--init-token",
                   "0", "--tagging-head", "token", *tiny_train_args(save)])
    exported = root / "exported"
    assert export_main(["hf", str(save / "checkpoint_last.pt"), "--out", str(exported)]) == 0
    return trained, other, save / "checkpoint_last.pt", exported


def _word_lines(path):
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.split() and not line.startswith("-DOCSTART-")]


@pytest.mark.parametrize("flag", ["--checkpoint", "--model"])
def test_conll_out_of_another_folder_is_that_folders_text(ner, flag, tmp_path):
    trained, other, checkpoint, exported = ner
    source = exported if flag == "--model" else checkpoint
    out = tmp_path / "valid.conll"
    proc = run_main("span-predict", flag, source, "--data", other, "--conll-out", out,
                    "--spans-out", tmp_path / "valid.jsonl")
    words = [line.split(" ") for line in (other / "raw" / "valid.input0").read_text().splitlines()]
    n_words = sum(map(len, words))
    assert f"{out}: {n_words} word lines with predictions" in proc.stdout, proc.stdout
    # every word line of the other folder's source, each with one more column; and the
    # words, in order, are the words predicted
    source_lines = _word_lines(other.parent / "valid.txt")
    written = _word_lines(out)
    assert [w.rsplit(" ", 1)[0] for w in written] == source_lines
    assert [w.split()[0] for w in written] == [w for item in words for w in item]
    spans = [json.loads(line) for line in (tmp_path / "valid.jsonl").read_text().splitlines()]
    assert [s["words"] for s in spans] == words


def test_conll_join_refuses_mismatches(ner, tmp_path):
    """Seeded fuzz: the folder's raw files cut or shifted, a source line changed, the
    record pointing at another CoNLL file (with that file's own sha256): exit 2, one
    line naming the file and line, no output file."""
    from span_plugin.preprocess.file_records import file_entry

    trained, other, checkpoint, _ = ner
    rng = random.Random(SEED)
    n_items = len((other / "raw" / "valid.input0").read_text().splitlines())

    def copy(name):
        folder = tmp_path / name
        shutil.copytree(other, folder)
        return folder

    def edit_lines(path, change):
        lines = path.read_text(encoding="utf-8").splitlines()
        change(lines)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    cases = []
    k = rng.randrange(n_items)
    folder = copy("cut-source")  # the last row of raw/valid.source gone
    edit_lines(folder / "raw" / "valid.source", lambda ls: ls.pop())
    cases.append((folder, f"{folder}/raw/valid.source: {n_items - 1} lines but "))
    folder = copy("count")  # one item's word count off by one
    edit_lines(folder / "raw" / "valid.source",
               lambda ls: ls.__setitem__(k, f"{ls[k].split()[0]} {int(ls[k].split()[1]) + 1}"))
    cases.append((folder, f"{folder}/raw/valid.input0:{k + 1}: "))
    folder = copy("garbled")  # a line of raw/valid.source that is not two numbers
    edit_lines(folder / "raw" / "valid.source", lambda ls: ls.__setitem__(k, "x"))
    cases.append((folder, f"{folder}/raw/valid.source:{k + 1}: 'x', expected 'LINE WORDS'"))
    folder = copy("shifted")  # every item one line further down
    edit_lines(folder / "raw" / "valid.source",
               lambda ls: ls.__setitem__(slice(None), [f"{int(a) + 1} {b}" for a, b in
                                                       (x.split() for x in ls)]))
    first = int((other / "raw" / "valid.source").read_text().split()[0])
    cases.append((folder, f"{other.parent / 'valid.txt'}:{first + 1}: "))
    folder = copy("elsewhere")  # the record names the trained folder's file (its own sha256)
    record = json.loads((folder / "provenance.json").read_text())
    record["source"]["valid"] = file_entry(trained.parent / "valid.txt")
    (folder / "provenance.json").write_text(json.dumps(record))
    cases.append((folder, f"{trained.parent / 'valid.txt'}:"))
    changed = tmp_path / "changed"  # the source file edited after the folder was built
    shutil.copytree(other.parent, changed)
    line = rng.choice([n for n, x in enumerate((changed / "valid.txt").read_text().splitlines())
                       if x.split() and not x.startswith("-DOCSTART-")])
    edit_lines(changed / "valid.txt", lambda ls: ls.__setitem__(line, "Zzz " + ls[line]))
    record = json.loads((changed / "bin" / "provenance.json").read_text())
    record["source"]["valid"]["path"] = str(changed / "valid.txt")
    (changed / "bin" / "provenance.json").write_text(json.dumps(record))
    cases.append((changed / "bin", f"{changed / 'valid.txt'}: changed since {changed / 'bin'} "
                                   f"was built from it"))
    for folder, expected in cases:
        out = tmp_path / f"{folder.name}.conll"
        proc = run_main("span-predict", "--checkpoint", checkpoint, "--data", folder,
                        "--conll-out", out, check=False)
        assert proc.returncode == 2, (folder, proc.stdout)
        error = [x for x in proc.stdout.splitlines() if x.startswith("span-predict: error:")]
        assert len(error) == 1 and expected in error[0], (folder, proc.stdout)
        assert "Traceback" not in proc.stdout and not out.exists(), proc.stdout


def test_write_conll_checks_each_item_against_its_lines(ner, tmp_path):
    """Seeded fuzz of the writer itself: 30 random items moved, cut or given another
    word; each named by the file line it would have gone to, nothing written."""
    from span_plugin.files.errors import BadInputError
    from span_plugin.portable.conll_files import read_items, write_conll

    _, other, _, _ = ner
    words, gold, source = read_items(other, "valid")
    path = other.parent / "valid.txt"
    assert write_conll(path, tmp_path / "ok.conll", source, gold, words) == sum(map(len, words))
    rng = random.Random(SEED)
    for case in range(30):
        w, s, g = [list(x) for x in words], list(source), [list(x) for x in gold]
        k = rng.randrange(len(w))
        kind = rng.choice(["word", "move", "tags", "rows"])
        if kind == "word":
            j = rng.randrange(len(w[k]))
            w[k][j] = w[k][j] + "x"
            at = f"{path}:{s[k][0] + j}: "
        elif kind == "move":
            s[k] = (s[k][0] + rng.choice([-1, 1]) * rng.randrange(1, 5), s[k][1])
            at = f"{path}:"
        elif kind == "tags":
            g[k] = g[k][:-1]
            at = f"rows:{k + 1}: {s[k][1]} words but {len(g[k])} predicted tags"
        else:
            g = g[:-1]
            at = f"{len(g)} predicted items for the {len(s)} of rows"
        out = tmp_path / f"{case}.conll"
        with pytest.raises(BadInputError) as err:
            write_conll(path, out, s, g, w, "rows")
        assert at in str(err.value) and "nothing written" in str(err.value), (kind, err.value)
        assert not out.exists()
