"""The inputs of a ``span-export onnx`` graph made from raw text by a predictor's own code
(:func:`model_inputs`), and by the predictor of an exported folder for a graph traced on
its checkpoint (:func:`onnx_inputs`).

The graph was traced on the fairseq model: its ``src_tokens`` are the fairseq
dictionary's ids (``onnx.json``'s ``special_ids``: pad 1), not the ids of the exported
folder's Hugging Face tokenizer, which :meth:`encode` of a :func:`~span_plugin.portable.
load_model` predictor gives. The two agree for GPT-2 BPE (the folder's ``vocab.json`` maps
each token to its fairseq index); for WordPiece the folder's ids are ``vocab.txt``'s
(``[PAD]`` 0) and the dictionary is ``span-convert``'s order of the same tokens (BERT's
specials first, ``[MASK]`` last: :func:`span_plugin.convert.bert.vocab_mapping`), so each
id is mapped back. The mapping is checked against ``onnx.json``: the special ids, and the
dictionary ``onnx.json``'s data record names must be the folder's.
"""

import os

import torch

from span_plugin.convert.bert import vocab_mapping
from span_plugin.formats.model_folder import ModelFolderError, read_json
from span_plugin.formats.squad import QAExample
from span_plugin.portable.batches import pad_rows, pad_tokens
from span_plugin.portable.ner import NerPredictor
from span_plugin.portable.qa import QAPredictor
from span_plugin.portable.sentence import SentencePredictor

# Predictors whose inputs model_inputs makes; the others are not exported.
EXPORTED = (SentencePredictor, NerPredictor, QAPredictor)


def model_inputs(model, examples, names):
    """``{name: int64 tensor}`` for ``names`` of one batch of raw ``examples``, encoded by
    the predictor ``model``'s own code:

    - sentence models: str or (str, str) per example (``[B, T]``, ``spans [B, S, 2]``);
    - tagging models: a list of words per example (``words [B, W, 2]`` too);
    - QA models: (question, context) per example; one row per passage window
      (``passage [B, 2]``), so B may exceed the number of examples.
    """
    pad = model.vocab.pad
    if isinstance(model, SentencePredictor):
        encoded = model.encode(examples)
        net = {"src_tokens": pad_tokens([t for t, _ in encoded], pad),
               "spans": pad_rows([s for _, s in encoded], 2)}
    elif isinstance(model, NerPredictor):
        items = [model._encode_words(list(words)) for words in examples]
        net = {"src_tokens": pad_tokens([t for t, _, _ in items], pad),
               "spans": pad_rows([s for _, s, _ in items], 2),
               "words": pad_rows([w for _, _, w in items], 2)}
    elif isinstance(model, QAPredictor):
        windows = model.windows([QAExample(id=str(n), question=q, context=c, answers=[],
                                           impossible=False, where="pair", labelled=False)
                                 for n, (q, c) in enumerate(examples)])
        net = {"src_tokens": pad_tokens([w[1] for w in windows], pad),
               "passage": torch.tensor([w[2] for w in windows], dtype=torch.long),
               "spans": pad_rows([w[4] for w in windows], 2)}
    else:
        raise ValueError(f"{type(model).__name__} ({model.task_name}): ONNX export covers "
                         f"sentence and pair classification, tagging and QA")
    return {n: net[n].long() for n in names}


def record_dictionaries(record):
    """``{name: entry}`` of the dictionaries a data record lists (its ``*dict.txt``
    files): what two exports of one checkpoint share."""
    files = (record or {}).get("files") or {}
    return {k: v for k, v in files.items() if k.endswith("dict.txt")}


def graph_ids(model):
    """LongTensor ``[V]``: the fairseq dictionary id of each of the folder's token ids
    (``model``: a :func:`~span_plugin.portable.load_model` predictor); None when they
    are the same ids."""
    encoder = ((model.record or {}).get("encoder") or {}).get("bpe")
    if encoder != "wordpiece":
        return None
    path = os.path.join(model.folder.path, "tokenizer.json")
    table = read_json(path, "tokenizer")["model"]["vocab"]  # checked at load_model
    order = vocab_mapping(sorted(table, key=table.get), path).order
    table = torch.empty(len(order), dtype=torch.long)
    table[order] = torch.arange(len(order))  # order: fairseq row -> folder id
    return table


def graph_id_table(model, meta, where="onnx.json"):
    """How the graph that ``onnx.json`` (``meta``, read from ``where``) describes takes
    the token ids of ``model`` (a :func:`~span_plugin.portable.load_model` predictor):
    None when they are its own (a graph traced on the folder), else LongTensor ``[V]``,
    the dictionary id of each folder id (a graph traced on the checkpoint). A
    ModelFolderError names the mismatch: a data record of other dictionaries (another
    checkpoint's graph), special ids neither the folder's nor its dictionary's."""
    ours, theirs = record_dictionaries(model.record), record_dictionaries(meta.get("record"))
    if ours != theirs:
        raise ModelFolderError(f"{where}: its data record names other dictionaries than "
                               f"{model.folder.where} ({sorted(theirs.items())[:1]} against "
                               f"{sorted(ours.items())[:1]}): the graph of another model")
    vocab = model.vocab
    specials = {"bos": vocab.bos, "pad": vocab.pad, "eos": vocab.eos, "unk": vocab.unk}
    if meta.get("special_ids") == specials:
        return None
    table = graph_ids(model)
    if table is None or {k: int(table[v]) for k, v in specials.items()} != meta.get("special_ids"):
        raise ModelFolderError(f"{where}: special_ids {meta.get('special_ids')}, neither "
                               f"{model.folder.where}'s token ids ({specials}) nor its "
                               f"dictionary's")
    return table


def onnx_inputs(model, meta, examples):
    """``{input name: int64 numpy array [B, ...]}`` of the graph ``onnx.json`` (``meta``,
    its dict) describes, for the raw ``examples`` (str, or (str, str) pairs) encoded by
    ``model``, the :func:`~span_plugin.portable.load_model` predictor of the
    ``span-export hf`` folder of the same checkpoint: the graph's ids
    (:func:`graph_id_table`) right-padded with its pad id, the n-gram spans
    (0, 0)-padded. Sentence models (``span_classification``, ``sentence_prediction``); a
    ValueError names any mismatch with ``meta``."""
    if not hasattr(model, "encode"):
        raise ValueError(f"{model.folder.where}: task {model.folder.task!r}; onnx_inputs makes "
                         f"the inputs of sentence and pair models")
    table = graph_id_table(model, meta)
    feed = model_inputs(model, examples, ("src_tokens", "spans"))
    if table is not None:  # the pads too: the folder's pad maps to special_ids.pad (checked)
        feed["src_tokens"] = table[feed["src_tokens"]]
    unknown = sorted(set(meta["inputs"]) - set(feed))
    if unknown:
        raise ValueError(f"onnx.json names inputs {unknown} that a sentence model's "
                         f"inputs do not hold")
    return {name: feed[name].long().numpy() for name in meta["inputs"]}
