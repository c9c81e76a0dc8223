"""A predictor's network answered by ONNX Runtime: ``load_model(DIR, onnx=GRAPH)`` and
``span-predict --model DIR --onnx GRAPH`` predict with the ``span-export onnx`` graph
(float32 or int8) of the same model, through the predictor's own encoding, batching and
decoding: one way to predict, whatever computes the network.

:class:`SessionNetwork` stands in for the network (``network(src_tokens [B, T], head,
**side)`` -> the head's output); :func:`onnx_network` checks that the graph is the
folder's (task, head, the data record's dictionaries, its special ids) and maps the
folder's token ids to the graph's when the graph was traced on the fairseq checkpoint
(WordPiece: the dictionary's order; :func:`~span_plugin.portable.onnx_inputs.graph_ids`).
"""

import os

import torch
import torch.nn as nn

from span_plugin.formats.model_folder import ModelFolderError, read_json
from span_plugin.portable.onnx_inputs import graph_id_table
from span_plugin.requires import require

MODEL, META = "model.onnx", "onnx.json"


def open_session(path, threads=1):
    """An ONNX Runtime CPU session of ``path`` with ``threads`` intra-op threads (None:
    ONNX Runtime's default, one per core)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class SessionNetwork(nn.Module):
    """A predictor's network call, ``network(src_tokens [B, T], head, **side)`` -> the
    head's output, answered by ONNX Runtime ``session`` of its graph. ``input_names`` /
    ``output_names``: the graph's (``onnx.json``); the output is built as the head
    returns it: ``logits`` a tensor, ``(logits, valid)`` a pair, other names a dict (QA).
    ``ids``: LongTensor ``[V]`` mapping the predictor's token ids to the graph's, or None
    (the same ids). Runs on the CPU; it has no parameters, one empty buffer says where."""

    def __init__(self, session, input_names, output_names, ids=None):
        super().__init__()
        self.session = session
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)
        self.ids = ids
        self.register_buffer("where", torch.zeros(0), persistent=False)

    def forward(self, src_tokens, head=None, **side):
        if self.ids is not None:
            src_tokens = self.ids[src_tokens]
        given = {"src_tokens": src_tokens, **side}
        feed = {n: given[n].detach().cpu().long().numpy() for n in self.input_names}
        got = [torch.from_numpy(x) for x in self.session.run(list(self.output_names), feed)]
        if self.output_names == ("logits",):
            return got[0]
        if self.output_names == ("logits", "valid"):
            return tuple(got)
        return dict(zip(self.output_names, got))


def onnx_network(predictor, graph, threads=1):
    """A :class:`SessionNetwork` of the ``span-export onnx`` folder ``graph`` for
    ``predictor`` (a :func:`~span_plugin.portable.load_model` predictor of the same
    model). Refused in one line naming the file: a folder without ``model.onnx`` and
    ``onnx.json``, another task or head, the graph of another model or ids that fit
    neither the folder nor its dictionary (:func:`~span_plugin.portable.onnx_inputs.
    graph_id_table`), an input the predictor does not feed, a graph ONNX Runtime cannot
    load."""
    require("onnxruntime", "predicting with an ONNX graph (onnx=, --onnx)",
            "pip install 'span_plugin[onnx]' (or pip install onnxruntime)")
    path, meta_path = os.path.join(graph, MODEL), os.path.join(graph, META)
    for need in (path, meta_path):
        if not os.path.isfile(need):
            raise ModelFolderError(f"{need}: not found; onnx= (--onnx) names a folder that "
                                   f"span-export onnx wrote ({MODEL} and {META})")
    meta = read_json(meta_path, "onnx.json")
    if not (isinstance(meta, dict) and isinstance(meta.get("inputs"), dict)
            and isinstance(meta.get("outputs"), dict)):
        raise ModelFolderError(f"{meta_path}: not the onnx.json span-export onnx writes "
                               f"(an object with inputs and outputs)")
    where = predictor.folder.where
    for key, ours in (("task", predictor.task_name), ("head", predictor.head)):
        if meta.get(key) != ours:
            raise ModelFolderError(f"{meta_path}: a graph of {key} {meta.get(key)!r}, but "
                                   f"{where} predicts with {key} {ours!r}")
    ids = graph_id_table(predictor, meta, meta_path)
    feeds = {"src_tokens", *(predictor.folder.heads[predictor.head].get("inputs") or ())}
    unfed = sorted(set(meta["inputs"]) - feeds)
    if unfed:
        raise ModelFolderError(f"{meta_path}: the graph reads {unfed}, which head "
                               f"{predictor.head!r} is not fed")
    try:
        session = open_session(path, threads)
    except Exception as err:  # noqa: BLE001 - ONNX Runtime's own kinds: one line
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise ModelFolderError(f"{path}: ONNX Runtime does not load it ({line})") from None
    reads = [i.name for i in session.get_inputs()]
    if reads != list(meta["inputs"]):
        raise ModelFolderError(f"{path}: the graph reads {reads}, {META} says "
                               f"{list(meta['inputs'])}")
    return SessionNetwork(session, meta["inputs"], meta["outputs"], ids)
