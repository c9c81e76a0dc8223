"""The model's input layout over a task's datasets (:func:`lay_out` -> :class:`Layout`):
each example laid out as ``<s> A </s> </s> B </s>`` by
:func:`~span_plugin.modules.span_layout.lay_out_example` (the builder the predictors call
too), with the side items (n-gram spans, word spans, phrase pairs) moved to their
positions and shortened as the tokens are. Usage: docs/TASK_MODEL.md, "Module notes"."""

import numpy as np
from fairseq.data import (
    FairseqDataset,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    PadDataset,
    SortDataset,
    data_utils,
)

from span_plugin.data.phrase_pairs import PhrasePairsDataset
from span_plugin.data.span_datasets import CropWindowDataset, LayoutSpansDataset, SizedDataset
from span_plugin.modules.span_layout import lay_out_example, layout_starts

SHORTEN_METHODS = ("none", "truncate", "random_crop")


class RightPadToMultipleDataset(PadDataset):
    """fairseq's ``RightPadDataset`` with every batch's length rounded up to a multiple
    of ``multiple`` (``--length-multiple``): a compiled model then sees a few lengths
    and reuses one graph for each."""

    def __init__(self, dataset, pad_idx, multiple=1):
        super().__init__(dataset, pad_idx, left_pad=False)
        self.multiple = multiple

    def collater(self, samples):
        return data_utils.collate_tokens(samples, self.pad_idx, left_pad=False,
                                         pad_to_multiple=self.multiple)


class LaidOutDataset(SizedDataset, FairseqDataset):
    """Item i: example i's inputs in the model's layout, by
    :func:`~span_plugin.modules.span_layout.lay_out_example` (LongTensor ``[T_i]``).
    ``inputs``: one or two token datasets of equal length."""

    def __init__(self, inputs, init_token=None, separator_token=None):
        super().__init__()
        self.inputs, self.init_token, self.separator_token = list(inputs), init_token, separator_token
        specials = int(init_token is not None) + int(separator_token is not None) * (len(inputs) - 1)
        self._sizes = sum(np.asarray(ds.sizes, dtype=np.int64) for ds in inputs) + specials

    def __getitem__(self, index):
        return lay_out_example([ds[index] for ds in self.inputs], self.init_token,
                               self.separator_token)[0]

    def __len__(self):
        return len(self.inputs[0])

    @property
    def supports_prefetch(self):
        return all(getattr(ds, "supports_prefetch", False) for ds in self.inputs)

    def prefetch(self, indices):
        for ds in self.inputs:
            ds.prefetch(indices)

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        for ds in self.inputs:
            if hasattr(ds, "set_epoch"):
                ds.set_epoch(epoch)


def lay_out(inputs, init_token=None, separator_token=None, shorten="none", max_len=None, seed=1):
    """Concatenate one or two token datasets into the model's layout.

    inputs: list of datasets (fairseq's, or :class:`~span_plugin.data.in_memory.TensorListDataset`),
        item i = sentence i's own tokens + ``</s>``, LongTensor ``[T_k,i]``; same length N.
    init_token: prepended to input 0 (None: nothing); separator_token: prepended to
        input 1 (None: nothing).
    shorten: "none", "truncate" or "random_crop" (window drawn from (seed, epoch, i));
        max_len: the length it shortens to.
    Returns a :class:`Layout`.
    """
    if shorten not in SHORTEN_METHODS:
        raise ValueError(f"unknown shorten method {shorten!r}; expected one of {SHORTEN_METHODS}")
    if len(inputs) not in (1, 2):
        raise ValueError(f"an example is one or two inputs, got {len(inputs)}")
    starts = layout_starts([ds.sizes for ds in inputs], init_token, separator_token)
    tokens = LaidOutDataset(inputs, init_token, separator_token)
    crop = None
    if shorten != "none":
        crop = tokens = CropWindowDataset(tokens, max_len, mode=shorten, seed=seed)
    return Layout(tokens, starts, crop)


class Layout:
    """Token sequences of N examples in the model's layout, and the way to bring side
    items (spans, phrase pairs) into it.

    tokens: dataset, item i = LongTensor ``[T_i]`` (shortened when a shorten method is set).
    starts: one int64 array ``[N]`` per input (see :func:`layout_starts`).
    crop: the :class:`CropWindowDataset` the tokens went through, or None.
    """

    def __init__(self, tokens, starts, crop):
        self.tokens = tokens
        self.starts = starts
        self.crop = crop

    @property
    def truncated_at(self):
        """The length truncation cuts at, None when the tokens are not truncated."""
        return self.crop.max_len if self.crop is not None and self.crop.mode == "truncate" else None

    def spans(self, side, max_spans=None, max_span_tokens=None):
        """Spans of the examples in the layout (see :class:`LayoutSpansDataset`).

        side: one dataset per input, item i = flat offsets ``[s0, e0, s1, e1, ...]`` in
            sentence i's own tokens. max_spans (r), max_span_tokens (l): None keeps all.
        Items LongTensor ``[n_i, 2]``; collated ``[B, S, 2]``.
        """
        return LayoutSpansDataset(side, self.starts, crop=self.crop, max_spans=max_spans,
                                  max_span_tokens=max_span_tokens)

    def phrase_pairs(self, sources, targets, labels, part="phrases"):
        """Phrase pairs in the layout: sources in input 0, targets in input 1 (flat
        offsets per sentence), labels one id per pair. Items ``[P_i, 5]``; pairs whose
        target the truncation cuts are dropped (see :class:`PhrasePairsDataset`)."""
        if self.crop is not None and self.crop.mode != "truncate":
            raise ValueError("phrase pairs need --shorten-method truncate or none")
        return PhrasePairsDataset(sources, targets, labels, self.starts[0], self.starts[1],
                                  self.truncated_at, part)

    def dataset(self, pad, net_input=None, targets=None, shuffle_seed=None, length_multiple=1):
        """The fairseq dataset of a split: ``id``, ``net_input`` (``src_tokens``
        ``[B, T]`` right-padded with ``pad`` to a multiple of ``length_multiple``,
        ``src_lengths`` ``[B]`` and the given side datasets), ``nsentences``,
        ``ntokens`` and the given targets; batched by token count; shuffled with
        ``shuffle_seed`` (None: file order)."""
        fields = {
            "id": IdDataset(),
            "net_input": {
                "src_tokens": RightPadToMultipleDataset(self.tokens, pad, length_multiple),
                "src_lengths": NumelDataset(self.tokens, reduce=False),
                **(net_input or {}),
            },
            "nsentences": NumSamplesDataset(),
            "ntokens": NumelDataset(self.tokens, reduce=True),
            **(targets or {}),
        }
        dataset = NestedDictionaryDataset(fields, sizes=[self.tokens.sizes])
        if shuffle_seed is None:
            return dataset
        with data_utils.numpy_seed(shuffle_seed):
            order = np.random.permutation(len(dataset))
        return SortDataset(dataset, sort_order=[order])


def check_label_count(labels, label_path, examples, input_path):
    """Raise ValueError unless there is one label per example.

    labels: the label dataset (or None: no file); label_path / input_path: the files, for
    the message; examples: the number of examples of the inputs.
    """
    found = 0 if labels is None else len(labels)
    if found != examples:
        raise ValueError(
            f"{label_path}: {found} labels but {input_path} has {examples} sentences; "
            f"rebuild the folder so every input has one label"
        )
