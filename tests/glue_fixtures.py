"""glue_data folders for the tasks whose real files are not on this machine (RTE, QNLI
with train, MNLI, QQP, SNLI), shaped exactly like the published files: the same file
names, header lines, column layouts and label sets, a few dozen synthetic rows each.

Layouts (GLUE's download script, as fairseq's examples/roberta/preprocess_GLUE_tasks.sh
reads them; SNLI as GLUE's SNLI folder ships it):

- RTE  {train,dev}.tsv: index sentence1 sentence2 label (entailment | not_entailment);
  test.tsv: index sentence1 sentence2
- QNLI {train,dev}.tsv: index question sentence label (entailment | not_entailment);
  test.tsv: index question sentence
- MNLI train.tsv: 12 columns, index promptID pairID genre sentence1_binary_parse
  sentence2_binary_parse sentence1_parse sentence2_parse sentence1 sentence2 label1
  gold_label; dev_{matched,mismatched}.tsv: 16 columns, label1..label5 then gold_label
  (the annotators' label1 differs from gold_label on some rows here, so reading the
  wrong column shows); test_{matched,mismatched}.tsv: the first 10 columns.
  Labels: contradiction | entailment | neutral.
- QQP  {train,dev}.tsv: id qid1 qid2 question1 question2 is_duplicate (0 | 1);
  test.tsv: id question1 question2. Like the real train/dev files, a few rows are
  malformed: a question holding a line break (the row spans two lines of 4 and 3
  fields) and one holding a tab (7 fields); fairseq's recipe drops them (NF == 6).
- SNLI train.tsv: 11 columns, index captionID pairID sentence1_binary_parse
  sentence2_binary_parse sentence1_parse sentence2_parse sentence1 sentence2 label1
  gold_label; {dev,test}.tsv: 15 columns, label1..label5 then gold_label. Labels:
  contradiction | entailment | neutral, and "-" where the annotators had no majority.

The sentences are real English: pairs of real MRPC train rows from ../shared.
"""

from conftest import GLUE

ROWS = {"train": 40, "dev": 16, "test": 12}

NLI = ["contradiction", "entailment", "neutral"]
MNLI_TEST = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
             "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
             "sentence2"]
MNLI_TRAIN = MNLI_TEST + ["label1", "gold_label"]
MNLI_DEV = MNLI_TEST + ["label1", "label2", "label3", "label4", "label5", "gold_label"]
SNLI_BASE = ["index", "captionID", "pairID", "sentence1_binary_parse", "sentence2_binary_parse",
             "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
SNLI_TRAIN = SNLI_BASE + ["label1", "gold_label"]
SNLI_DEV = SNLI_BASE + ["label1", "label2", "label3", "label4", "label5", "gold_label"]
QQP = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]

# task: {file: (header, label set or None for an unlabelled file, rows)}
FILES = {
    "RTE": {
        "train": (["index", "sentence1", "sentence2", "label"], ["entailment", "not_entailment"], ROWS["train"]),
        "dev": (["index", "sentence1", "sentence2", "label"], ["entailment", "not_entailment"], ROWS["dev"]),
        "test": (["index", "sentence1", "sentence2"], None, ROWS["test"]),
    },
    "QNLI": {
        "train": (["index", "question", "sentence", "label"], ["entailment", "not_entailment"], ROWS["train"]),
        "dev": (["index", "question", "sentence", "label"], ["entailment", "not_entailment"], ROWS["dev"]),
        "test": (["index", "question", "sentence"], None, ROWS["test"]),
    },
    "MNLI": {
        "train": (MNLI_TRAIN, NLI, ROWS["train"]),
        "dev_matched": (MNLI_DEV, NLI, ROWS["dev"]),
        "dev_mismatched": (MNLI_DEV, NLI, 12),
        "test_matched": (MNLI_TEST, None, 10),
        "test_mismatched": (MNLI_TEST, None, 9),
    },
    "QQP": {
        "train": (QQP, ["0", "1"], ROWS["train"]),
        "dev": (QQP, ["0", "1"], ROWS["dev"]),
        "test": (["id", "question1", "question2"], None, ROWS["test"]),
    },
    "SNLI": {
        "train": (SNLI_TRAIN, NLI, ROWS["train"]),
        "dev": (SNLI_DEV, NLI, ROWS["dev"]),
        "test": (SNLI_DEV, NLI, ROWS["test"]),
    },
}
FIXTURE_TASKS = list(FILES)
GENRES = {"matched": ["fiction", "government", "slate", "telephone", "travel"],
          "mismatched": ["facetoface", "letters", "nineteen", "oup", "verbatim"]}


def mrpc_pairs():
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    return [tuple(line.split("\t")[3:5]) for line in lines]


def _parses(sentence):
    words = sentence.split()
    binary = "( " + " ".join(words) + " )"
    tree = "(ROOT (S " + " ".join(f"(X {w})" for w in words) + "))"
    return binary, tree


def _row(header, i, a, b, label, name, other_label):
    """One row of ``header``: every column filled the way the real file fills it."""
    values = {}
    for col in header:
        if col in ("index", "id"):
            values[col] = str(i)
        elif col in ("promptID", "captionID", "qid1"):
            values[col] = str(10000 + 2 * i)
        elif col == "qid2":
            values[col] = str(10001 + 2 * i)
        elif col == "pairID":
            values[col] = f"{10000 + 2 * i}{'ecn'[i % 3]}"
        elif col == "genre":
            values[col] = GENRES["mismatched" if "mismatched" in name else "matched"][i % 5]
        elif col.startswith("sentence1_") or col.startswith("sentence2_"):
            binary, tree = _parses(a if col.startswith("sentence1") else b)
            values[col] = binary if "binary" in col else tree
        elif col in ("sentence1", "question", "question1"):
            values[col] = a
        elif col in ("sentence2", "sentence", "question2"):
            values[col] = b
        elif col == "label1":
            values[col] = other_label  # an annotator's label, not the gold one
        elif col.startswith("label") and col != "label":
            values[col] = label
        else:  # label, gold_label, is_duplicate
            values[col] = label
    return "\t".join(values[c] for c in header)


def write_task(root, task):
    """Write ``root/task/*.tsv``; returns {file: number of well-formed data rows}."""
    pairs = mrpc_pairs()
    out = root / task
    out.mkdir(parents=True, exist_ok=True)
    counts, k = {}, 0
    for name, (header, labels, n) in FILES[task].items():
        lines = ["\t".join(header)]
        for i in range(n):
            a, b = pairs[k % len(pairs)]
            k += 1
            label = labels[i % len(labels)] if labels else None
            if task == "SNLI" and i % 7 == 3:
                label = "-"  # no annotator majority
            other = labels[(i + 1) % len(labels)] if labels and i % 4 == 0 else label
            lines.append(_row(header, i, a, b, label, name, other))
        if task == "QQP" and name != "test":
            # Malformed rows as the real QQP files have them: a question with a line
            # break, and one with a tab.
            lines.insert(5, "\t".join(["900001", "1", "2", "What is the best way\tto learn?",
                                       "How do I learn?", "1"]))
            lines.insert(9, "\t".join(["900002", "3", "4", "Why is the sky"]))
            lines.insert(10, "\t".join([" blue?", "What colour is the sky?", "0"]))
        (out / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts[name] = n
    return counts


def write_all(root):
    for task in FIXTURE_TASKS:
        write_task(root, task)
    return root
