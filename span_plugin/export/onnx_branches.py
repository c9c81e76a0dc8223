"""One ONNX graph of two traces of a model: ``If`` the batch holds no pad, the unpadded
trace (every position computed, nothing to pack), else the packed one (the per-token
products on the real tokens alone; :mod:`span_plugin.modules.bert_encoder`).

Why two: packing costs a batch without pads a gather per layer for nothing (3-6% of an
int8 graph's time at batch 1), while computing the pads costs a padded batch their
products (a sixth of an int8 graph's time at batch 32 on MRPC pairs) and, in int8,
activation scales that the pads' values take part in (benchmarks/RESULTS.md, "int8 on
the CPU, fourth pass"). torch's exporter cannot branch
on the batch's values in a form ONNX Runtime's quantizer then handles (its ``If`` shares
the weights between branches, which the quantizer rewrites for one branch only), so
each trace is exported, and quantized, alone, and :func:`combine` joins them: each
trace's nodes become a branch's, renamed apart, and each weight one initializer of the
outer graph, stored once when the two traces hold the same tensor (all of them here).
"""

import hashlib
import os

PREFIXES = ("unpadded/", "packed/")


def _renamed(graph, prefix, keep, shared):
    """``graph``'s nodes and output infos with every value name but ``keep`` (the
    model's inputs) prefixed, initializers read by their ``shared`` name."""
    import onnx
    from onnx import helper

    def name(value):
        if not value or value in keep:
            return value
        return shared.get(value, prefix + value)

    nodes = []
    for k, node in enumerate(graph.node):
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute):
            raise ValueError(f"node {node.name} ({node.op_type}) holds a graph of its own")
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"{prefix}{k}/{node.name}"  # unique, even where the trace left it empty
        copy.input[:] = [name(v) for v in node.input]
        copy.output[:] = [name(v) for v in node.output]
        nodes.append(copy)
    outputs = [helper.make_tensor_value_info(name(o.name), o.type.tensor_type.elem_type, None)
               for o in graph.output]
    return helper.make_graph(nodes, prefix.strip("/"), [], outputs)


def combine(unpadded, packed, pad_id, out, external_data=False):
    """Write to ``out`` the graph that runs ONNX model ``unpadded`` when no
    ``src_tokens`` value is ``pad_id`` and ``packed`` otherwise (paths; the two must
    take the same inputs and give the same outputs). ``external_data``: the weights in
    ``out``'s ``.data`` file beside it (protobuf's 2 GB limit). A ValueError when the
    two do not fit together."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    models = [onnx.load(str(path)) for path in (unpadded, packed)]
    a, b = (m.graph for m in models)
    for what, x, y in (("inputs", a.input, b.input), ("outputs", a.output, b.output)):
        if [(v.name, v.type.tensor_type.elem_type) for v in x] != \
                [(v.name, v.type.tensor_type.elem_type) for v in y]:
            raise ValueError(f"the two traces differ in their {what}")
    keep = {v.name for v in a.input}
    weights, branches = {}, []
    for model, prefix in zip(models, PREFIXES):
        shared = {}
        for tensor in model.graph.initializer:
            array = numpy_helper.to_array(tensor)
            key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(array.tobytes()).digest())
            if key not in weights:
                weights[key] = numpy_helper.from_array(array, prefix + tensor.name)
            shared[tensor.name] = weights[key].name
        branches.append(_renamed(model.graph, prefix, keep, shared))
    nodes = [
        helper.make_node("Constant", [], ["branch/pad_id"],
                         value=helper.make_tensor("pad_id", TensorProto.INT64, [], [pad_id])),
        helper.make_node("Equal", ["src_tokens", "branch/pad_id"], ["branch/is_pad"]),
        helper.make_node("Cast", ["branch/is_pad"], ["branch/pads"], to=TensorProto.INT32),
        helper.make_node("ReduceMax", ["branch/pads"], ["branch/any_pad"], keepdims=0),
        helper.make_node("Constant", [], ["branch/zero"],
                         value=helper.make_tensor("zero", TensorProto.INT32, [], [0])),
        helper.make_node("Equal", ["branch/any_pad", "branch/zero"], ["branch/no_pad"]),
        helper.make_node("If", ["branch/no_pad"], [o.name for o in a.output],
                         then_branch=branches[0], else_branch=branches[1]),
    ]
    graph = helper.make_graph(nodes, a.name or "span_model", list(a.input), list(a.output),
                              list(weights.values()))
    opsets = {}
    for model in models:
        for op in model.opset_import:
            opsets[op.domain] = max(op.version, opsets.get(op.domain, 0))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in sorted(opsets.items())],
                              producer_name=models[0].producer_name)
    model.ir_version = max(m.ir_version for m in models)
    onnx.save_model(model, str(out), save_as_external_data=external_data,
                    all_tensors_to_one_file=True,
                    location=f"{os.path.basename(str(out))}.data")
