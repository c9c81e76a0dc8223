"""Reading a Hugging Face model folder: ``config.json`` and the weights file.

Shared by every converter (:mod:`.bert`, :mod:`.roberta`). Weights are opened lazily:
safetensors hands out views of its memory map; ``.bin`` files go through the one safe
loader (:mod:`.safe_load`: ``weights_only=True``, allow-listed types only), memory-mapped.
Every error is a :class:`ConversionError` naming the file and what was expected.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Sequence

import torch

from span_plugin.convert import safe_load

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Hugging Face activation -> fairseq activation of the same formula. gelu_new and
# gelu_pytorch_tanh are 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), which is
# fairseq's gelu_accurate (fairseq/modules/gelu.py); "gelu" is the exact erf GELU in both.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate"}


class ConversionError(ValueError):
    """Bad input: names the file and what was expected."""


# --------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncoderShape:
    """What a conversion needs from config.json, with fairseq's names.
    ``max_positions`` is the config's ``max_position_embeddings`` (rows of its table)."""

    layers: int
    embed_dim: int
    ffn_embed_dim: int
    attention_heads: int
    vocab_size: int
    max_positions: int
    type_vocab_size: int
    layernorm_eps: float
    activation_fn: str  # fairseq name
    dropout: float
    attention_dropout: float
    raw: Dict = field(repr=False, compare=False, default_factory=dict)


def read_config(hf_dir) -> Dict:
    """``hf_dir/config.json`` as a dict (checked to be a JSON object)."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise ConversionError(f"{hf_dir}: no such folder (expected a Hugging Face model folder)")
    path = hf_dir / "config.json"
    if not path.is_file():
        raise ConversionError(f"{path}: missing (a Hugging Face model folder has config.json)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ConversionError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(raw, dict):
        raise ConversionError(f"{path}: expected a JSON object")
    return raw


def read_encoder_shape(hf_dir, model_types: Sequence[str], supported: str, family: str,
                       default_eps: float) -> EncoderShape:
    """Read and validate the config.json of a BERT-architecture encoder (post-LN, learned
    absolute positions): BERT, RoBERTa, XLM-R, ... ``model_types``: the accepted
    ``model_type`` values; ``supported``: what the error says is converted; ``family``:
    the model family named in errors."""
    raw = read_config(hf_dir)
    path = Path(hf_dir) / "config.json"
    model_type = raw.get("model_type")
    if model_type not in model_types:
        raise ConversionError(f"{path}: model_type {model_type!r} is not supported; {supported}")
    position_type = raw.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConversionError(
            f"{path}: position_embedding_type {position_type!r} is not supported; fairseq's "
            f"RoBERTa has learned absolute positions only (expected 'absolute')"
        )
    act = raw.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ConversionError(
            f"{path}: hidden_act {act!r} is not supported (expected one of "
            f"{', '.join(sorted(ACTIVATIONS))})"
        )
    if raw.get("is_decoder") or raw.get("add_cross_attention"):
        raise ConversionError(
            f"{path}: is_decoder/add_cross_attention is set; only encoder-only {family} converts"
        )

    def need(key):
        if not isinstance(raw.get(key), int) or isinstance(raw.get(key), bool) or raw[key] <= 0:
            raise ConversionError(f"{path}: {key} must be a positive integer, got {raw.get(key)!r}")
        return raw[key]

    shape = EncoderShape(
        layers=need("num_hidden_layers"),
        embed_dim=need("hidden_size"),
        ffn_embed_dim=need("intermediate_size"),
        attention_heads=need("num_attention_heads"),
        vocab_size=need("vocab_size"),
        max_positions=need("max_position_embeddings"),
        type_vocab_size=int(raw.get("type_vocab_size", 2)),
        layernorm_eps=float(raw.get("layer_norm_eps", default_eps)),
        activation_fn=ACTIVATIONS[act],
        dropout=float(raw.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(raw.get("attention_probs_dropout_prob", 0.1)),
        raw=raw,
    )
    if shape.embed_dim % shape.attention_heads:
        raise ConversionError(
            f"{path}: hidden_size {shape.embed_dim} is not a multiple of "
            f"num_attention_heads {shape.attention_heads}"
        )
    return shape


# --------------------------------------------------------------------------------------
# Weights, opened lazily
# --------------------------------------------------------------------------------------


def find_weights(hf_dir) -> Path:
    """``model.safetensors`` or else ``pytorch_model.bin`` of ``hf_dir``."""
    hf_dir = Path(hf_dir)
    for name in WEIGHT_FILES:
        if (hf_dir / name).is_file():
            return hf_dir / name
    sharded = sorted(p.name for p in hf_dir.glob("*.index.json"))
    if sharded:
        raise ConversionError(
            f"{hf_dir}: sharded checkpoints ({', '.join(sharded)}) are not supported; "
            f"expected a single {' or '.join(WEIGHT_FILES)}"
        )
    raise ConversionError(f"{hf_dir}: no weights (expected {' or '.join(WEIGHT_FILES)})")


def open_tensors(path) -> Mapping[str, torch.Tensor]:
    """Name -> tensor of a weights file, without reading the tensors' data: safetensors
    hands out views of its memory map; ``.bin`` files are loaded with ``mmap=True``."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            return _SafetensorsMap(safe_open(str(path), framework="pt"))
        except SafetensorError as err:
            raise ConversionError(f"{path}: not a readable safetensors file ({err})") from err
    state = load_torch_file(path)
    if not isinstance(state, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise ConversionError(f"{path}: expected a state dict (tensor name -> tensor)")
    return state


def load_torch_file(path):
    """A torch weights file, its tensors memory-mapped: the safe loader of
    :mod:`span_plugin.convert.safe_load` (allow-listed types only; a file that is not a
    torch file, is damaged or holds anything else raises its
    :class:`~span_plugin.convert.safe_load.CheckpointFileError`)."""
    return safe_load.load_torch_file(path, mmap=True)


class _SafetensorsMap(Mapping):
    """Read-only mapping over an open safetensors file; a lookup is a view of its mmap."""

    def __init__(self, handle):
        self._handle = handle  # keeps the memory map open
        self._keys = list(handle.keys())

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        return self._handle.get_tensor(key)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def __contains__(self, key):
        return key in self._keys


class EncoderWeights:
    """Lookup of a checkpoint's tensors by encoder name, whatever the key prefix
    (``BertModel``: none; ``BertFor*``: ``bert.``; ``RobertaForMaskedLM``: ``roberta.``),
    accepting the old LayerNorm names ``gamma``/``beta``, checking shapes, and
    remembering what was used. ``family``/``example_prefix`` word the errors."""

    ANCHOR = "embeddings.word_embeddings.weight"

    def __init__(self, tensors: Mapping[str, torch.Tensor], source, family="BERT",
                 example_prefix="bert."):
        self.tensors = tensors
        self.source = Path(source)
        self.family = family
        self.example_prefix = example_prefix
        self.used: set = set()
        self.prefix = self._find_prefix()

    def _find_prefix(self):
        anchor = self.ANCHOR
        prefixes = sorted(k[: -len(anchor)] for k in self.tensors if k.endswith(anchor))
        if not prefixes:
            raise ConversionError(
                f"{self.source}: missing tensor {anchor!r} (looked for it under any prefix, "
                f"e.g. {self.example_prefix!r}); is this a {self.family} checkpoint?"
            )
        if len(prefixes) > 1:
            raise ConversionError(
                f"{self.source}: several {self.family} encoders (key prefixes {prefixes}); "
                f"expected one"
            )
        return prefixes[0]

    def _resolve(self, key):
        """The stored key for ``key``, trying the gamma/beta spelling of LayerNorms."""
        if key in self.tensors:
            return key
        old = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta"}
        for new_suffix, old_suffix in old.items():
            if key.endswith(new_suffix) and key[: -len(new_suffix)] + old_suffix in self.tensors:
                return key[: -len(new_suffix)] + old_suffix
        return None

    def has(self, key, encoder=True) -> bool:
        return self._resolve(self.prefix + key if encoder else key) is not None

    def get(self, key, shape, encoder=True) -> torch.Tensor:
        """The tensor ``[prefix]key``, checked against the shape config.json implies.
        ``encoder=False`` for heads, which sit outside the prefix (``cls.``, ``lm_head.``)."""
        full = self.prefix + key if encoder else key
        stored = self._resolve(full)
        if stored is None:
            raise ConversionError(
                f"{self.source}: missing tensor {full!r} (expected shape {tuple(shape)})"
            )
        tensor = self.tensors[stored]
        if tuple(tensor.shape) != tuple(shape):
            raise ConversionError(
                f"{self.source}: tensor {stored!r} has shape {tuple(tensor.shape)}; "
                f"config.json implies {tuple(shape)}"
            )
        self.used.add(stored)
        return tensor

    def unused(self) -> List[str]:
        return sorted(k for k in self.tensors if k not in self.used)


def open_encoder_weights(hf_dir, family="BERT", example_prefix="bert."):
    """(path, :class:`EncoderWeights`) of the weights file of ``hf_dir``."""
    path = find_weights(hf_dir)
    return path, EncoderWeights(open_tensors(path), path, family, example_prefix)
