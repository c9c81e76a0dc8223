"""The one input-layout builder (``modules.span_layout.lay_out_example``, which the task's
datasets of ``data.layout`` and the predictors call) on real rows of a folder made by
``span-preprocess glue``: the task's batches hold exactly the layout computed by hand
from the files (<s> A </s> </s> B </s>, truncation clipping and dropping spans, r/l
limits), and the predictors' path (the builder, the truncation window, ``place_spans``)
gives the same items."""

import numpy as np
import pytest
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from span_plugin.data import span_index
from span_plugin.data.in_memory import TensorListDataset
from span_plugin.data.layout import check_label_count, lay_out
from span_plugin.modules.span_layout import lay_out_example, layout_starts, place_spans
from test_task_data import glue_folder

MAX_LEN = 24


def _rows(folder, split, n):
    """(tokens, spans) per input of the first n rows, as Python lists from the files."""
    d = Dictionary.load(str(folder / "input0" / "dict.txt"))
    rows = []
    for key in ("input0", "input1"):
        prefix = str(folder / key / split)
        toks = data_utils.load_indexed_dataset(prefix, d)
        spans = span_index.load_spans(span_index.span_prefix(prefix))
        rows.append([(toks[i].tolist(), np.asarray(spans[i]).reshape(-1, 2).tolist()) for i in range(n)])
    return list(zip(*rows))


def _by_hand(row, max_len, max_spans=None, max_span_tokens=None):
    (a, sa), (b, sb) = row
    tokens = [0] + a + [2] + b  # a and b end in </s>
    spans = [[s + 1, e + 1] for s, e in sa] + [[s + 2 + len(a), e + 2 + len(a)] for s, e in sb]
    kept = [[s, min(e, max_len)] for s, e in spans if s < max_len]
    if max_span_tokens:
        kept = [[s, min(e, s + max_span_tokens)] for s, e in kept]
    return tokens[:max_len], kept[:max_spans] if max_spans else kept


def _task(folder, *extra):
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(folder), "--task", "span_classification", "--criterion", "sentence_prediction",
        "--arch", "roberta_span_base", "--num-classes", "2", "--init-token", "0",
        "--separator-token", "2", "--no-shuffle", *extra])
    return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


@pytest.mark.parametrize("limits", [(), ("--max-spans", "3", "--max-span-tokens", "2")])
def test_task_batches_hold_the_hand_computed_layout(limits):
    folder = glue_folder("MRPC")
    task = _task(folder, "--shorten-method", "truncate", "--max-positions", str(MAX_LEN), *limits)
    dataset = task.load_dataset("valid")
    r, l = (3, 2) if limits else (None, None)
    rows = _rows(folder, "valid", 6)
    batch = dataset.collater([dataset[i] for i in range(len(rows))])
    clipped = 0
    for i, row in enumerate(rows):
        tokens, spans = _by_hand(row, MAX_LEN, r, l)
        n = batch["net_input"]["src_lengths"][i]
        assert batch["net_input"]["src_tokens"][i, :n].tolist() == tokens
        got = batch["net_input"]["spans"][i]
        assert got[: len(spans)].tolist() == spans
        assert not got[len(spans):].any()  # (0, 0) padding
        clipped += len(row[0][0]) + len(row[1][0]) + 2 > MAX_LEN
    assert clipped  # the rows do reach the truncation


def test_one_builder_lays_out_files_and_raw_inputs_alike():
    folder = glue_folder("MRPC")
    rows = _rows(folder, "valid", 6)
    sizes = [np.array([len(row[k][0]) for row in rows]) for k in (0, 1)]
    for init, sep in ((0, 2), (0, None)):  # RoBERTa's pairs, BERT's
        starts = layout_starts(sizes, init, sep)  # the datasets' spans: every row at once
        for i, row in enumerate(rows):
            tokens, at = lay_out_example([torch.tensor(row[k][0]) for k in (0, 1)], init, sep)
            assert at == [int(starts[0][i]), int(starts[1][i])]
            assert tokens.tolist() == [init, *row[0][0], *([sep] if sep else []), *row[1][0]]
    cut = 0
    for row in rows:  # the predictors' truncation and spans
        tokens, at = lay_out_example([torch.tensor(row[k][0]) for k in (0, 1)], 0, 2)
        window = (0, MAX_LEN) if len(tokens) > MAX_LEN else None
        spans = place_spans([torch.tensor(row[k][1], dtype=torch.long) for k in (0, 1)], at, window)
        assert (tokens[:MAX_LEN].tolist(), spans.tolist()) == _by_hand(row, MAX_LEN)
        cut += window is not None
    assert cut


def test_phrase_pairs_past_the_truncation_are_dropped():
    a = TensorListDataset([torch.tensor([5, 6, 7, 2])])
    b = TensorListDataset([torch.tensor([8, 9, 2])])
    layout = lay_out([a, b], init_token=0, separator_token=2, shorten="truncate", max_len=7)
    pairs = layout.phrase_pairs(TensorListDataset([torch.tensor([0, 1, 1, 2])]),
                                TensorListDataset([torch.tensor([0, 1, 1, 2])]),
                                TensorListDataset([torch.tensor([1, 0])]))
    assert pairs[0].tolist() == [[1, 2, 6, 7, 1]]  # <s> 5 6 7 </s> </s> 8 | 9 </s>
    with pytest.raises(ValueError, match="truncate or none"):
        lay_out([a, b], 0, 2, shorten="random_crop", max_len=7).phrase_pairs(a, b, a)


def test_label_count_error_names_both_files():
    with pytest.raises(ValueError, match=r"label/x: 2 labels but input0/x has 3 sentences"):
        check_label_count([0, 1], "label/x", 3, "input0/x")
