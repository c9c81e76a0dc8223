"""int8 inference of an exported folder on the CPU: torch's dynamic quantization of the
encoder's ``nn.Linear`` layers (weights stored as int8 with one scale per output
channel, activations quantized per batch as they come: 8 bits on a CPU with
AVX512-VNNI, 7 elsewhere, :func:`full_range_activations`). The heads, the embeddings, the
LayerNorms and BERT's pooler stay float32: the heads are small next to the encoder, and
keeping them exact leaves the features they read as the only thing int8 changes.

What int8 costs in accuracy is measured, not assumed: ``span-export int8-check DIR``
(:mod:`span_plugin.export.int8_guard`) predicts a validation split both ways and
records both figures in the folder.
"""

import warnings

import torch
import torch.ao.nn.quantized.dynamic as nnqd
import torch.nn as nn

QUANTIZE = ("int8",)  # what load_model(quantize=...) accepts besides None


def check_quantize(quantize, device):
    """Refuse a ``quantize`` value other than None or ``"int8"``, and int8 on a device
    other than the CPU (torch's dynamic quantization has CPU kernels only)."""
    if quantize is None:
        return
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize {quantize!r}; expected None or one of {', '.join(QUANTIZE)}")
    if torch.device(device).type != "cpu":
        raise ValueError(f"quantize={quantize!r} runs on the CPU only (torch's dynamic "
                         f"quantization has no {torch.device(device).type} kernels); "
                         f"device {str(device)!r} was given")


def quantized_linear_names(encoder):
    """Names of the ``nn.Linear`` modules of ``encoder`` that int8 replaces: every one
    but the pooler's (a head's input, kept float32 as the heads are)."""
    return [name for name, module in encoder.named_modules()
            if isinstance(module, nn.Linear) and "pooler" not in name.split(".")]


def full_range_activations(cpuinfo="/proc/cpuinfo"):
    """Whether activations may use all 8 bits: on a CPU with AVX512-VNNI, where fbgemm
    sums unsigned x signed byte products straight into 32 bits. Elsewhere (without VNNI,
    or where the flags cannot be read) torch's 7-bit activations (``reduce_range``) keep
    fbgemm's 16-bit pair sums from saturating. Full range halves the rounding step of
    every activation: a NER model's entity F1 lost 0.02 points instead of 0.58
    (benchmarks/RESULTS.md, "int8 on fine-tuned NER and QA models")."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            return any(line.startswith("flags") and "avx512_vnni" in line.split() for line in f)
    except OSError:
        return False


class FullRangeLinear(nnqd.Linear):
    """torch's dynamic int8 Linear with activations quantized to all 8 bits."""

    def forward(self, x):
        y = torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=False)
        return y.to(x.dtype)


def quantize_encoder(encoder):
    """A copy of ``encoder`` (the torch :class:`~span_plugin.modules.bert_encoder.BertEncoder`
    or :class:`~span_plugin.portable.model.TransformersEncoder`) whose Linear layers
    (:func:`quantized_linear_names`) compute in int8; same interface: ``forward(tokens
    [B, T], token_types [B, T] or None)`` -> ``[B, T, D]`` float32."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    from torch.ao.quantization.quantization_mappings import get_default_dynamic_quant_module_mappings

    names = quantized_linear_names(encoder)
    if not names:
        raise ValueError(f"{type(encoder).__name__} has no Linear layer to quantize")
    with warnings.catch_warnings():
        # torch marks its eager quantization API deprecated in favour of torchao, which
        # is not a dependency here; the API still computes int8.
        warnings.simplefilter("ignore")
        # One scale per output channel: a row with small weights keeps its resolution
        # (per tensor, the largest row sets the step of all; benchmarks/RESULTS.md).
        mapping = None
        if full_range_activations():
            mapping = {**get_default_dynamic_quant_module_mappings(), nn.Linear: FullRangeLinear}
        return quantize_dynamic(encoder.eval(), {n: per_channel_dynamic_qconfig for n in names},
                                dtype=torch.qint8, mapping=mapping, inplace=False)
