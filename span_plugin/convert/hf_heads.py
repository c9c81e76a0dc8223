"""Which ``transformers`` class an exported fine-tuned model is (:class:`TaskClass`), and
under which names its head tensors are stored: a plain head one of ``transformers``'
task classes computes exactly is exported as that class; every other head under the
plugin's own model type. The table of heads and classes: docs/EXPORT.md, section
"Module notes"."""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from span_plugin.formats.model_folder import plugin_model_type

# Encoder classes whose sequence classifier is fairseq's RoBERTa head on <s>.
ROBERTA_CLASSES = ("Roberta", "XLMRoberta", "Camembert")
SEQUENCE, TOKENS = "text-classification", "token-classification"


@dataclass
class TaskClass:
    """A head as a transformers class: ``architecture`` (``RobertaForSequenceClassification``),
    ``tensors`` (the head module's key -> the tensor's name in model.safetensors),
    ``pipeline``: the ``transformers.pipeline`` task that runs it."""

    architecture: str
    tensors: Dict[str, str]
    pipeline: str


def encoder_class(architectures: List[str]) -> str:
    """``Roberta`` of ``["RobertaModel"]`` / ``["RobertaForMaskedLM"]``."""
    name = architectures[0]
    for suffix in ("ForMaskedLM", "Model"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _renamed(keys, prefix, strip=""):
    return {k: prefix + (k[len(strip):] if strip and k.startswith(strip) else k) for k in keys}


def transformers_task_class(architectures: List[str], kind: str, options: Dict,
                            model_args: Dict, head_keys: List[str], hidden: int
                            ) -> Tuple[Optional[TaskClass], str]:
    """``(TaskClass, "")`` when one of transformers' own classes computes head ``kind``
    (its ``options``, the model's ``model_args``, its tensors' ``head_keys``) on the
    encoder of ``architectures`` (hidden size ``hidden``); else ``(None, why not)``."""
    family = encoder_class(architectures)
    if model_args.get("spectral_norm_classification_head"):
        return None, "its head is spectrally normalised (no transformers class is)"
    if kind == "plain":
        if model_args.get("bert_pooler"):
            if family != "Bert":
                return None, (f"its head reads BERT's pooler, which {family}ForSequence"
                              f"Classification does not")
            return TaskClass(f"{family}ForSequenceClassification",
                             _renamed(head_keys, "classifier.", "out_proj."), SEQUENCE), ""
        if family not in ROBERTA_CLASSES:
            return None, (f"its head reads <s> without the pooler, where {family}ForSequence"
                          f"Classification reads the pooler")
        activation = model_args.get("pooler_activation_fn") or "tanh"
        inner = options.get("inner_dim") or hidden
        if activation != "tanh" or inner != hidden:
            return None, (f"its head's activation {activation} / inner size {inner} are not "
                          f"{family}ForSequenceClassification's (tanh, {hidden})")
        return TaskClass(f"{family}ForSequenceClassification",
                         _renamed(head_keys, "classifier."), SEQUENCE), ""
    if kind == "token":
        return TaskClass(f"{family}ForTokenClassification",
                         _renamed(head_keys, "classifier.", "out_proj."), TOKENS), ""
    return None, (f"its `{kind}` head reads span_plugin's own inputs (n-gram spans, word or "
                  f"phrase positions), which no transformers tokenizer makes")


def plugin_architecture(architectures: List[str], task: str) -> str:
    """The class name under the plugin's model type: ``SpanPluginRobertaForSequence
    Classification`` for sentence tasks (what the plugin registers with
    ``AutoModelForSequenceClassification``), ``SpanPluginRobertaModel`` otherwise."""
    suffix = ("ForSequenceClassification"
              if task in ("span_classification", "sentence_prediction") else "Model")
    return f"SpanPlugin{encoder_class(architectures)}{suffix}"


def label_config(names: Optional[List[str]], regression: bool) -> Dict:
    """``id2label``, ``label2id`` and ``problem_type`` of a sentence or token head whose
    classes are ``names`` (class index order); regression: one output, ``score``."""
    if regression:
        names = ["score"]
    if not names:
        return {}
    return {"id2label": {str(i): n for i, n in enumerate(names)},
            "label2id": {n: i for i, n in enumerate(names)},
            "problem_type": "regression" if regression else "single_label_classification"}


__all__ = ["TaskClass", "encoder_class", "transformers_task_class", "plugin_architecture",
           "label_config", "plugin_model_type"]
