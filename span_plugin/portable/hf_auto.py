"""The plugin's model type ``span_plugin_<family>`` in ``transformers``' Auto classes
(:func:`register`): config, the tokenizer that makes the n-gram spans
(:class:`SpanPluginTokenizer`), the encoder and the sequence classifier, so that
``pipeline("text-classification", model=DIR)`` runs a span model as ``load_model`` does.
Design notes: docs/EXPORT.md, "Module notes"."""

import torch.nn as nn

from span_plugin.formats.model_folder import FAMILIES, plugin_model_type
from span_plugin.modules.bert_segment_pooler import segment_ids
from span_plugin.modules.head_builders import MODEL_DEFAULTS, build_head_module

# family -> transformers' config and encoder class names
FAMILY_CLASSES = {"roberta": ("RobertaConfig", "RobertaModel"),
                  "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel"),
                  "camembert": ("CamembertConfig", "CamembertModel"),
                  "bert": ("BertConfig", "BertModel")}
TOKENIZER_CLASS = "SpanPluginTokenizer"
# What a pipeline passes that training's own layout answers (padding to the longest,
# the cut of training) rather than transformers' tokenizer.
LAYOUT_OPTIONS = {"padding", "truncation", "max_length", "add_special_tokens"}
_REGISTERED = []


def _class_stem(model_name):
    return model_name[:-len("Model")]


def _sequence_model(config_class, encoder_class, prefix):
    """A ``PreTrainedModel`` class for ``config_class``: the encoder (``encoder_class``)
    under ``prefix`` and the folder's task head under ``span_heads.<name>``, as
    model.safetensors names them."""
    from transformers import PreTrainedModel
    from transformers.modeling_outputs import SequenceClassifierOutput

    class SpanPluginForSequenceClassification(PreTrainedModel):
        base_model_prefix = prefix

        def __init__(self, config):
            super().__init__(config)
            span = config.span_plugin
            args = type("Args", (), {**MODEL_DEFAULTS, **span["model_args"]})
            self.head_name = (span["task_args"].get("classification_head_name")
                              or "sentence_classification_head")
            spec = span["heads"][self.head_name]
            head = build_head_module(spec["kind"], args, **(spec.get("options") or {}))
            self.reads_spans = "spans" in (spec.get("inputs") or ())
            self.reads_pooled = bool(getattr(head, "reads_pooled", False))
            self.token_types = bool(args.bert_token_types)
            setattr(self, prefix, encoder_class(config, add_pooling_layer=self.reads_pooled))
            self.span_heads = nn.ModuleDict({self.head_name: head})
            self.post_init()

        def forward(self, input_ids, attention_mask=None, spans=None, token_type_ids=None,
                    labels=None, **unused):
            """``input_ids [B, T]`` (the pad id after each row), ``spans [B, S, 2]``
            (:class:`SpanPluginTokenizer` makes them) -> ``logits [B, C]``. Token types are
            computed as training did (segment B after the first ``</s>``), not read."""
            if self.reads_spans and spans is None:
                inputs = (self.config.span_plugin.get("data_record") or {}).get("inputs") or 1
                raise ValueError(
                    f"{type(self).__name__}: head {self.head_name!r} reads the n-gram spans "
                    f"of span_plugin's segmentation (spans=[B, S, 2]), which this folder's "
                    f"AutoTokenizer (span_plugin imported) makes for the task's inputs: "
                    f"{'pairs (text, text_pair)' if inputs == 2 else 'one text each'}; or "
                    f"predict with span_plugin.portable.load_model")
            pad = self.config.pad_token_id
            types = segment_ids(input_ids, self.config.eos_token_id) if self.token_types else None
            encoder = getattr(self, prefix)
            features = encoder(input_ids=input_ids, attention_mask=input_ids.ne(pad).long(),
                               token_type_ids=types).last_hidden_state
            side = {"spans": spans} if self.reads_spans else {}
            if self.reads_pooled:
                side["pooled"] = encoder.pooler(features)
            return SequenceClassifierOutput(
                logits=self.span_heads[self.head_name](features, **side))

    SpanPluginForSequenceClassification.config_class = config_class
    return SpanPluginForSequenceClassification


def _encoder_model(config_class, encoder_class):
    """The family's encoder class for ``config_class`` (``AutoModel``: the encoder's
    features), taking and leaving out the ``spans`` :class:`SpanPluginTokenizer` adds."""

    def __init__(self, config, add_pooling_layer=None):
        if add_pooling_layer is None:  # the pooler only where the model has one
            add_pooling_layer = bool(config.span_plugin["model_args"].get("bert_pooler"))
        encoder_class.__init__(self, config, add_pooling_layer=add_pooling_layer)

    def forward(self, *args, spans=None, **kwargs):
        return encoder_class.forward(self, *args, **kwargs)

    return type(f"SpanPlugin{encoder_class.__name__}", (encoder_class,),
                {"config_class": config_class, "__init__": __init__, "forward": forward,
                 # the heads' tensors are the folder's, not the encoder's
                 "_keys_to_ignore_on_load_unexpected": [r"span_heads\."]})


def _tokenizer_class():
    from transformers import BatchEncoding, PreTrainedTokenizerFast

    class SpanPluginTokenizer(PreTrainedTokenizerFast):
        """The folder's ``tokenizer.json`` (``tokenize``, ``decode``, the vocabulary), and
        a ``__call__`` that encodes text as training did: token ids in the layout of
        training, ``attention_mask`` and the n-gram ``spans`` (positions in the ids)."""

        model_input_names = ["input_ids", "attention_mask", "spans"]

        def _predictor(self):
            if getattr(self, "_span_predictor", None) is None:
                from span_plugin.modules.head_builders import HEAD_BUILDERS
                from span_plugin.portable.folder import read_folder
                from span_plugin.portable.tasks import build_predictor
                from span_plugin.portable.text import text_encoder

                found = read_folder(self.name_or_path, HEAD_BUILDERS)
                text, vocab = text_encoder(found)
                self._span_predictor = build_predictor(found, text, vocab, None)
            return self._span_predictor

        def __call__(self, text=None, text_pair=None, return_tensors=None, **options):
            """``text`` (str or list of str), ``text_pair`` (the same, or None) ->
            ``input_ids [B, T]``, ``attention_mask [B, T]``, ``spans [B, S, 2]``, right
            padded (one example: no batch axis unless ``return_tensors``); inputs longer
            than the model are cut as training cut them. Options other than
            :data:`LAYOUT_OPTIONS` (``add_special_tokens=False``,
            ``return_offsets_mapping``, ...), texts of another shape than the task's
            (one text to a pair model) and the folders of other tasks get transformers'
            own encoding: ``tokenizer.json`` run as ``PreTrainedTokenizerFast`` runs it,
            without spans (the span model then refuses them, naming what it reads)."""
            from span_plugin.portable.batches import pad_rows, pad_tokens

            single = isinstance(text, str)
            texts = [text] if single else list(text)
            pairs = None if text_pair is None else (
                [text_pair] if isinstance(text_pair, str) else list(text_pair))
            predictor = self._predictor()
            if (set(options) - LAYOUT_OPTIONS or options.get("add_special_tokens") is False
                    or not hasattr(predictor, "encode")
                    or (1 if pairs is None else 2) != (predictor.num_inputs or 1)):
                # Not the task's own inputs (or not a sentence task): no spans to make.
                return super().__call__(text, text_pair, return_tensors=return_tensors,
                                        **options)

            examples = texts if pairs is None else list(zip(texts, pairs))
            encoded = predictor.encode(examples)
            pad = predictor.vocab.pad
            ids = pad_tokens([t for t, _ in encoded], pad)
            data = {"input_ids": ids, "attention_mask": ids.ne(pad).long(),
                    "spans": pad_rows([s for _, s in encoded], 2)}
            if return_tensors is None:
                lists = {k: v.tolist() for k, v in data.items()}
                if single:  # unpadded, as transformers' tokenizers give one text
                    n = len(encoded[0][0])
                    lists = {"input_ids": lists["input_ids"][0][:n],
                             "attention_mask": lists["attention_mask"][0][:n],
                             "spans": encoded[0][1].tolist()}
                return BatchEncoding(lists)
            if return_tensors != "pt":
                raise ValueError(f"return_tensors={return_tensors!r}: {TOKENIZER_CLASS} gives "
                                 f"torch tensors ('pt') or lists (None)")
            return BatchEncoding(data)

    return SpanPluginTokenizer


def register():
    """Register the plugin's model types with ``transformers``' ``AutoConfig`` (once):
    ``span_plugin_<family>`` of each family in :data:`FAMILY_CLASSES`. The tokenizer and
    model classes (``AutoTokenizer``, ``AutoModel``, ``AutoModelForSequenceClassification``)
    are registered when the first such config is made (:func:`_register_classes`): every
    Auto class reads the config before it looks its class up, and their modules take far
    longer to import than the configs."""
    if _REGISTERED:
        return
    import transformers
    from transformers import AutoConfig

    for family, (config_name, _) in FAMILY_CLASSES.items():
        base = getattr(transformers, config_name)

        def __init__(self, *args, _base=base, **kwargs):
            _register_classes()
            _base.__init__(self, *args, **kwargs)

        config_class = type(f"SpanPlugin{config_name}", (base,),
                            {"model_type": plugin_model_type(family), "__init__": __init__})
        _CONFIGS[family] = config_class
        AutoConfig.register(plugin_model_type(family), config_class, exist_ok=True)
    _REGISTERED.append(True)


_CONFIGS = {}  # family -> the config class of its plugin type
_CLASSES = []


def _register_classes():
    """``AutoTokenizer``, ``AutoModel`` and ``AutoModelForSequenceClassification`` of each
    plugin type (once)."""
    if _CLASSES:
        return
    _CLASSES.append(True)
    import transformers
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = _tokenizer_class()
    for family, (_, model_name) in FAMILY_CLASSES.items():
        config_class, encoder = _CONFIGS[family], getattr(transformers, model_name)
        stem = _class_stem(model_name)
        model_class = _sequence_model(config_class, encoder, FAMILIES[family][0].rstrip("."))
        model_class.__name__ = model_class.__qualname__ = f"SpanPlugin{stem}ForSequenceClassification"
        AutoModelForSequenceClassification.register(config_class, model_class, exist_ok=True)
        AutoModel.register(config_class, _encoder_model(config_class, encoder), exist_ok=True)
        AutoTokenizer.register(config_class, tokenizer_class=tokenizer, exist_ok=True)


__all__ = ["register", "TOKENIZER_CLASS"]
