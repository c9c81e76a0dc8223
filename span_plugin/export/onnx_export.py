"""``span-export onnx``: a fine-tuned checkpoint as ``model.onnx`` plus ``onnx.json``.

The model is loaded as the hub loads it (weights_only, the data record checked), wrapped
in :class:`span_plugin.export.onnx_graph.HeadGraph` and traced by torch's dynamo
exporter with dynamic batch and length axes (and span, word counts). Before anything is
written, ONNX Runtime runs the graph on batches of other sizes than the traced one and
must agree with torch within :data:`TOLERANCE`. ``onnx.json`` says how to feed it: input
names, shapes and meanings, outputs, label names, the special ids and the data record
(dictionary, tokenizer, segmentation) that made the training inputs.
"""

import json
import logging
import os
import warnings

import numpy as np
import torch

from span_plugin.convert.hf_export import check_export_dir, check_finite_tensors
from span_plugin.convert.hf_source import ConversionError
from span_plugin.files.atomic import staged_folder
from span_plugin.export import int8_guard
from span_plugin.hub import SpanHubInterface
from span_plugin.export.int8_guard import GuardSettings
from span_plugin.export.onnx_branches import combine
from span_plugin.export.onnx_graph import (DYNAMIC_AXES, MEANINGS, HeadGraph, encoder_path,
                                           has_two_paths, traceable)
from span_plugin.export.onnx_quantize import answered_by, quantize_graph
from span_plugin.portable.ner import NerPredictor
from span_plugin.portable.onnx_inputs import EXPORTED, model_inputs
from span_plugin.portable.onnx_network import META, MODEL, open_session
from span_plugin.portable.qa import QAPredictor

INT8_STAGED = "model.int8.onnx"  # the int8 graph beside the float32 one until the guard passes
UNPADDED, PACKED = "unpadded.onnx", "packed.onnx"  # the two traces, staged, not kept
BRANCHES = ("two traces under an If on the pads: unpadded batches run the one that "
            "computes every position, padded ones the one that packs the real tokens")
INT8_METHOD = ("ONNX Runtime basic graph optimizations, then quantize_dynamic: MatMul/Gemm "
               "weights int8 per output column, activations quantized per call")
# 20: GELU is one ONNX Gelu node, one ONNX Runtime kernel; opset 18 spells it out in an
# order ONNX Runtime's fusion does not match (benchmarks/RESULTS.md, "int8 on the CPU, third pass")
OPSET = 20
EXTERNAL_DATA_BYTES = 1 << 30  # weights above it are written beside the graph
TOLERANCE = 1e-4  # ONNX Runtime vs torch, fp32, largest absolute difference

# Examples traced (the first two: padding in every dynamic axis) and checked (the third
# alone: another batch size and length; all three; the shortest input, one word a
# side: one token, one span). Real text, nothing of a data set.
SENTENCES = ["The company said its profit rose sharply in the third quarter of the year.",
             "He declined to comment.",
             "Shares of the bank fell 3 percent after the report."]
PAIRS = [(SENTENCES[0], "Profits climbed in the third quarter, the firm said."),
         (SENTENCES[1], "She would not comment on it."),
         (SENTENCES[2], "The bank's stock dropped after the news.")]
QUESTIONS = [("Who founded the museum in 1902?",
              "The museum was founded in 1902 by a group of local merchants who wanted the "
              "city to have a public collection of paintings and maps."),
             ("Where is it?", "It lies on the north bank of the river."),
             ("When did the bridge open?", "The bridge opened to traffic in May 1937.")]
SHORTEST = {"sentence": "Yes", "pair": ("Yes", "No"), "words": ["Yes"], "qa": ("Who?", "Ann")}


def example_sets(hub):
    """``(examples, shortest)``: the raw examples :func:`model_inputs` encodes for
    ``hub``'s kind of model, and its shortest input."""
    if isinstance(hub, QAPredictor):
        return QUESTIONS, SHORTEST["qa"]
    if isinstance(hub, NerPredictor):
        words = [s.replace(",", " ,").replace(".", " .").split() for s in SENTENCES]
        return words, SHORTEST["words"]
    if hub.num_inputs == 2:
        return PAIRS, SHORTEST["pair"]
    return SENTENCES, SHORTEST["sentence"]


def max_abs_diff(a, b):
    """Largest ``|a - b|`` of two arrays; infinities must sit at the same places with the
    same sign (QA's masked scores), else inf."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(a[~finite], b[~finite]):
        return float("inf")
    return float(np.abs(a[finite] - b[finite]).max(initial=0.0))


def run_session(session, inputs):
    """``{name: tensor}`` (extra names ignored) -> ``{output name: np.ndarray}``."""
    feed = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def _trace(graph, example, path):
    """Export ``graph`` on ``example`` ({name: tensor}) to ``path``."""
    dims = {}
    shapes = {name: {axis: dims.setdefault(label, torch.export.Dim(label))
                     for axis, label in DYNAMIC_AXES[name].items()}
              for name in graph.input_names}
    # The exporter's notes (passes run, torchvision absent, axes renamed) are not the
    # user's concern; its failures are raised.
    for name in ("onnx_ir", "onnxscript", "torch.onnx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # By forward's argument names; an empty *side is not one.
    by_arg = {"src_tokens": shapes["src_tokens"]}
    if len(graph.input_names) > 1:
        by_arg["side"] = tuple(shapes[n] for n in graph.input_names[1:])
    with traceable(graph.network), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, graph.args_of(example), str(path), dynamo=True,
                          input_names=list(graph.input_names),
                          output_names=list(graph.output_names),
                          dynamic_shapes=by_arg,
                          opset_version=OPSET, verbose=False,
                          # protobuf's 2 GB limit: larger weights go to model.onnx.data
                          external_data=_weight_bytes(graph) > EXTERNAL_DATA_BYTES)


def _trace_model(graph, example, folder, pad_id):
    """``folder/model.onnx`` of ``graph``: one trace, or, when its encoder has an
    unpadded path beside the packed one, both traces joined under a branch on the pads
    (:mod:`span_plugin.export.onnx_branches`). Returns the two traces' paths (kept for
    int8, which quantizes each alone), or None."""
    if not has_two_paths(graph.network):
        _trace(graph, example, folder / MODEL)
        return None
    paths = (folder / UNPADDED, folder / PACKED)
    for path, packed in zip(paths, (False, True)):
        with encoder_path(graph.network, packed):
            _trace(graph, example, path)
    combine(*paths, pad_id, folder / MODEL,
            external_data=_weight_bytes(graph) > EXTERNAL_DATA_BYTES)
    return paths


def _remove(paths):
    """Delete each path and its external weights' file, where there is one."""
    for path in paths:
        for name in (str(path), f"{path}.data"):
            if os.path.exists(name):
                os.unlink(name)


def _weight_bytes(module):
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def _summary(err):
    """The line of an exporter error that says what failed (its summary, else its first)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    after = [k for k, line in enumerate(lines) if line.startswith("## Exception summary")]
    line = lines[after[0] + 1] if after and after[0] + 1 < len(lines) else (lines or [""])[0]
    return f"{type(err).__name__}: {line[:300]}"


def _write_error(err):
    """The OSError of a failed write (a full disk, a read-only folder) behind an
    exporter's error, which wraps what it caught; None when there is none."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno is not None:
            return err
        err = err.__cause__ or err.__context__
    return None


def _check(graph, path, batches):
    """ONNX Runtime vs torch on each batch; ConversionError past :data:`TOLERANCE`.
    Returns the check's record."""
    session = open_session(path)
    worst = 0.0
    for inputs in batches:
        with torch.no_grad():
            ref = graph(*graph.args_of(inputs))
        got = run_session(session, inputs)
        for name, r in zip(graph.output_names, ref):
            for who, values in (("torch", r.float().numpy()), ("ONNX Runtime", got[name])):
                if np.isnan(values).any() or np.isposinf(values).any():
                    raise ConversionError(
                        f"{path}: {who}'s {name} are not finite numbers (NaN or inf) on a "
                        f"batch of src_tokens {list(inputs['src_tokens'].shape)}: the "
                        f"model's weights or its computation overflow; the graph is not "
                        f"written")
            diff = max_abs_diff(got[name], r.float().numpy())
            if not diff <= TOLERANCE:
                shape = list(inputs["src_tokens"].shape)
                raise ConversionError(f"{path}: ONNX Runtime's {name} differs from torch's by "
                                      f"{diff:.3g} on a batch of src_tokens {shape} (expected "
                                      f"at most {TOLERANCE}); the graph is not written")
            worst = max(worst, diff)
    return {"batches": [list(b["src_tokens"].shape) for b in batches], "max_abs_diff": worst,
            "tolerance": TOLERANCE}


def _labels(hub):
    """Class names in logit order: tags (tagging), "O" then the entity types (span
    labeling: class 0 is no entity), the task's labels; None for regression and QA."""
    if isinstance(hub, NerPredictor):
        return list(hub.head_labels)
    if isinstance(hub, QAPredictor) or hub.regression:
        return None
    return hub.labels


def describe(hub, graph, example, outputs, check):
    """``onnx.json``'s dict."""
    v = hub.vocab
    shape = {name: [DYNAMIC_AXES[name].get(k, int(n)) for k, n in enumerate(t.shape)]
             for name, t in example.items()}
    return {
        "format": 1,
        "task": hub.task_name,
        "head": hub.head,
        "head_kind": graph.head_kind,
        "inputs": {n: {"dtype": "int64", "shape": shape[n], "meaning": MEANINGS[n]}
                   for n in graph.input_names},
        "outputs": {n: {"dtype": str(t.dtype).replace("torch.", ""),
                        "example_shape": list(t.shape)} for n, t in zip(graph.output_names, outputs)},
        "labels": _labels(hub),
        "regression": bool(getattr(hub.cfg, "regression_target", False)),
        "special_ids": {"bos": v.bos, "pad": v.pad, "eos": v.eos, "unk": v.unk},
        "max_positions": hub.max_positions,
        "record": hub.record,
        "opset": OPSET,
        "check": check,
    }


def _require_packages():
    import importlib.util

    missing = [p for p in ("onnx", "onnxruntime", "onnxscript") if importlib.util.find_spec(p) is None]
    if missing:
        raise ConversionError(f"span-export onnx needs {', '.join(missing)} (not installed): "
                              f"pip install 'span_plugin[onnx]' or requirements.txt")


def load_hub(checkpoint, data=None, **files):
    """The predictor of a checkpoint or an exported folder; its refusals as one
    ConversionError line."""
    try:
        hub = SpanHubInterface.from_pretrained(checkpoint, data=data, **files)
    except ValueError as err:
        raise ConversionError(f"{checkpoint}: {err}") from None
    if not isinstance(hub, EXPORTED):
        raise ConversionError(f"{checkpoint}: a {hub.task_name} model; span-export onnx "
                              f"covers sentence and pair classification, tagging and QA")
    check_finite_tensors(hub.network.state_dict(), checkpoint)
    return hub


def quantized(hub, graph, folder, guard=GuardSettings(), where="int8", branches=None):
    """Replace ``folder``'s float32 ``model.onnx`` by its int8 graph
    (:func:`~span_plugin.export.onnx_quantize.quantize_graph`) after the accuracy guard
    (``guard``): both graphs predict the labelled examples (its split of the predictor's
    data folder, or its file) through the predictor's own decoding; returns the guard's
    record (:mod:`span_plugin.export.int8_guard`), or raises
    :class:`~span_plugin.export.int8_guard.Int8Refused` with the folder left as it
    was."""
    if hub.data is None and guard.input_path is None:  # an exported folder: its record's
        hub.use_data(int8_guard.recorded_data(hub.record))
    try:
        examples = int8_guard.read_examples(hub, guard.split, guard.input_path)
    except ValueError as err:  # no labelled split, a file of another task: one line
        raise ConversionError(f"{where}: {err}") from None
    fp32_path, int8_path = folder / MODEL, folder / INT8_STAGED
    if branches is None:
        quantize_graph(fp32_path, int8_path)
    else:  # each trace alone (the quantizer mishandles weights an If's branches share)
        staged = [path.with_suffix(".int8.onnx") for path in branches]
        for src, dst in zip(branches, staged):
            quantize_graph(src, dst)
        combine(*staged, hub.vocab.pad, int8_path,
                external_data=max(map(os.path.getsize, staged)) > EXTERNAL_DATA_BYTES)
        _remove(staged)
    found = []
    for path in (fp32_path, int8_path):
        with answered_by(hub, open_session(path), graph.input_names, graph.output_names):
            found.append(int8_guard.outcome(hub, examples))
    record = int8_guard.judge(int8_guard.compare(examples, INT8_METHOD, *found),
                              guard.max_drop, guard.force, where, guard.min_agreement)
    os.replace(int8_path, fp32_path)
    data = folder / (MODEL + ".data")  # the float32 weights' file; the int8 graph holds its own
    if data.exists():
        data.unlink()
    return record


def export_onnx(checkpoint, out_dir, force=False, data=None, int8=None, **files):
    """Export the fine-tuned ``checkpoint`` to ``out_dir`` (``model.onnx``, ``onnx.json``),
    written whole or not at all; returns ``onnx.json``'s dict. ``data`` and ``files``:
    as :meth:`SpanHubInterface.from_pretrained` (default: the checkpoint's record).
    ``int8`` (:class:`~span_plugin.export.int8_guard.GuardSettings`; None: float32):
    ``model.onnx`` is the int8 graph, kept only when the accuracy guard passes
    (:func:`quantized`), its figures in ``onnx.json``'s ``int8``."""
    out_dir = check_export_dir(out_dir, force, "onnx")
    _require_packages()
    hub = load_hub(checkpoint, data, **files)
    try:
        graph = HeadGraph(hub)
    except ValueError as err:
        raise ConversionError(f"{checkpoint}: {err}") from None
    examples, shortest = example_sets(hub)
    example = model_inputs(hub, examples[:2], graph.input_names)
    with torch.no_grad():
        outputs = graph(*graph.args_of(example))  # names the outputs
    checks = [example] + [model_inputs(hub, x, graph.input_names)
                          for x in (examples[2:], examples, [shortest])]
    with staged_folder(out_dir) as tmp:
        try:
            branches = _trace_model(graph, example, tmp, hub.vocab.pad)
        except Exception as err:  # the exporter's many kinds of refusal: one line
            written = _write_error(err)
            if written is not None:  # a full disk, not the graph: named by staged_folder
                raise OSError(written.errno, written.strerror) from None
            raise ConversionError(f"{checkpoint}: head {graph.head_kind} does not trace to "
                                  f"ONNX ({_summary(err)})") from err
        meta = describe(hub, graph, example, outputs, _check(graph, tmp / MODEL, checks))
        meta["graph"] = "one trace" if branches is None else BRANCHES
        if int8 is not None:
            meta["int8"] = quantized(hub, graph, tmp, int8, where=str(checkpoint),
                                     branches=branches)
        _remove(branches or ())
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta
