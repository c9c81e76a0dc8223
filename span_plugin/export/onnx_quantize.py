"""int8 graphs of ``span-export onnx --quantize int8``, and a predictor answered by an
ONNX Runtime session (what the accuracy guard predicts a split with).

:func:`quantize_graph`: ONNX Runtime's basic graph optimizations, then its dynamic
quantization: the weights of every ``MatMul`` and ``Gemm`` stored as int8 (one scale per
output column: per tensor lost 1.9 points of a NER model's entity F1, per column 0.1),
activations quantized per call (``DynamicQuantizeLinear`` + ``MatMulInteger``);
embeddings, LayerNorms and the rest stay float32. :func:`answered_by` has a predictor's
network answered by a session of the graph
(:class:`~span_plugin.portable.onnx_network.SessionNetwork`), so its own batching and
decoding run on the graph's outputs.
"""

import contextlib
import logging
import os
import tempfile


QUANTIZED_OPS = ("MatMul", "Gemm")


def quantize_graph(src, dst):
    """Write the int8 graph of the float32 graph ``src`` to ``dst``.

    The dynamo exporter's shape annotations (``value_info``) are dropped first: ONNX's
    shape inference, which the quantizer runs, disagrees with some of them (a span
    head's padded axes) and stops; ONNX Runtime infers what it needs at load. Then ONNX
    Runtime's basic graph optimizations (constant folding, redundant nodes: rewrites
    that hold on every machine) run and are saved, so that a weight the graph reshapes
    at run time (the span head's convolutions, a matrix product of their unfolded
    windows) is a constant the quantizer stores as int8 too."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    root = logging.getLogger()
    level = root.level
    # the quantizer logs a hint about calibration pre-processing, which dynamic
    # quantization does not use, on the root logger
    root.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(dst))) as tmp:
            bare, folded = os.path.join(tmp, "bare.onnx"), os.path.join(tmp, "folded.onnx")
            onnx.save(model, bare)
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.optimized_model_filepath = folded
            ort.InferenceSession(bare, options, providers=["CPUExecutionProvider"])
            quantize_dynamic(folded, str(dst), op_types_to_quantize=list(QUANTIZED_OPS),
                             weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


@contextlib.contextmanager
def answered_by(hub, session, input_names, output_names):
    """The predictor ``hub`` with its network's calls answered by ``session``
    (:class:`SessionNetwork`); its own network put back on exit."""
    # imported here: span_plugin.portable registers the plugin's model type with
    # transformers' Auto classes, which quantize_graph's callers (a benchmark's plain
    # peer) must not get
    from span_plugin.portable.onnx_network import SessionNetwork

    own = hub.network
    hub.network = SessionNetwork(session, input_names, output_names)
    try:
        yield hub
    finally:
        hub.network = own
