"""The ``transformers`` class of an exported fine-tuned model, chosen and applied to the
export's plan (:mod:`span_plugin.export.model_export` calls :func:`choose_class`).

A model with one head that one of ``transformers``' task classes computes exactly
(:func:`span_plugin.convert.hf_heads.transformers_task_class`) becomes that class when
the folder's ``AutoTokenizer`` also gives the ids of training: the hub encodes probe
texts as training did and the tokenizer written for the folder must give the same ids
and token types. Then ``pipeline("text-classification", model=DIR)`` predicts as the hub
with ``transformers`` alone. Any other model is written under the plugin's model type
(``span_plugin_<family>``): ``transformers`` refuses it by name unless
:mod:`span_plugin.portable` is imported, which registers it. Either way ``config.json``
gets the label names (``id2label``, ``label2id``) and ``span_export.transformers`` says
which class it is and why.
"""

import json
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from span_plugin.convert.hf_heads import (label_config, plugin_architecture, plugin_model_type,
                                          transformers_task_class)
from span_plugin.convert.hf_source import ConversionError
from span_plugin.formats.model_folder import HEAD_PREFIX, encoder_family
from span_plugin.modules.bert_segment_pooler import segment_ids
from span_plugin.tokenizers.wordpiece import BERT_MASK, BERT_SPECIALS


# Texts the tokenizer must encode as training did before a transformers class is kept:
# punctuation, digits, case, accents, a contraction, white space around the text.
PROBES = ("A man plays a flute.", "  The film's 2 stars, honestly?  ",
          "Café owners in São Paulo said 1,200 jobs were cut.", "It isn't 100% sure: maybe.")
# The tokenizer class span_plugin.portable registers for its model type (hf_auto.py).
PLUGIN_TOKENIZER = "SpanPluginTokenizer"
TAGGING_TASKS = ("span_tagging",)


def _hf_ids(kind: str, symbols: List[str], tokenizer) -> Optional[List[int]]:
    """fairseq index -> the folder tokenizer's id (None: the same ids, GPT-2 BPE's)."""
    if kind == "gpt2":
        return None
    vocab = tokenizer.get_vocab()
    specials = {fs: bert for bert, fs in BERT_SPECIALS} if kind == "wordpiece" else {}
    specials["<mask>"] = BERT_MASK if kind == "wordpiece" else "<mask>"
    return [vocab.get(specials.get(s, s), -1) for s in symbols]


def _probe_examples(task: str, inputs: Optional[int]):
    if task in TAGGING_TASKS:
        return [p.split() for p in PROBES]
    if inputs == 2:
        return [(a, b) for a, b in zip(PROBES, PROBES[1:] + PROBES[:1])]
    return list(PROBES)


def tokenizer_difference(hub, plan, write_tokenizer, task: str) -> Optional[str]:
    """Where the tokenizer ``write_tokenizer`` writes differs from the hub's encoding of
    :data:`PROBES` (ids, then token types): None when it does not."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        write_tokenizer(Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    mapping = _hf_ids(plan.source.kind, plan.source.symbols, tokenizer)
    eos = hub.vocab.eos
    typed = bool(hub.folder.model_args.get("bert_token_types"))
    inputs = (hub.record or {}).get("inputs")
    for example in _probe_examples(task, inputs):
        if task in TAGGING_TASKS:
            tokens = hub._encode_words(example)[0]
            got = tokenizer(" ".join(example))
        else:
            tokens = hub.encode([example])[0][0]
            got = tokenizer(*example) if isinstance(example, tuple) else tokenizer(example)
        want = tokens.tolist() if mapping is None else [mapping[i] for i in tokens.tolist()]
        if got["input_ids"] != want:
            return (f"its tokenizer gives ids {got['input_ids'][:12]} for {example!r}, "
                    f"training {want[:12]}")
        types = (segment_ids(tokens.unsqueeze(0), eos)[0].tolist() if typed
                 else [0] * len(want))
        if got.get("token_type_ids", [0] * len(want)) != types:
            return (f"its tokenizer gives token types {got.get('token_type_ids')} for "
                    f"{example!r}, training {types}")
    return None


def choose_class(hub, plan, heads: Dict, labels: Dict, span: Dict) -> Dict:
    """Make ``plan`` (its config and tensors, heads already under ``span_heads.``) a
    transformers task class or the plugin's model type; ``heads``' entry of a head
    stored under the class's names gets ``tensors``. Returns what
    ``span_export.transformers`` records: ``{"class", "pipeline", "why"}``."""
    config, task = plan.config, span["task"]
    regression = bool(span["task_args"].get("regression_target"))
    name, head = next(iter(heads.items())) if len(heads) == 1 else (None, None)
    chosen, why = None, f"it has {len(heads)} heads"
    if head is not None:
        keys = sorted(k[len(HEAD_PREFIX + name) + 1:] for k in plan.tensors
                      if k.startswith(f"{HEAD_PREFIX}{name}."))
        chosen, why = transformers_task_class(config["architectures"], head["kind"],
                                              head["options"], span["model_args"], keys,
                                              config["hidden_size"])
        if chosen is not None:
            why = tokenizer_difference(hub, plan, plan.write_tokenizer, task) or ""
            chosen = None if why else chosen
    names = labels.get(name) if head is not None else None
    if isinstance(names, list) or regression:
        config.update(label_config(names, regression))
    if chosen is not None:
        for key, tensor in chosen.tensors.items():
            plan.tensors[tensor] = plan.tensors.pop(f"{HEAD_PREFIX}{name}.{key}")
        head["tensors"] = chosen.tensors
        config["architectures"] = [chosen.architecture]
        return {"class": chosen.architecture, "pipeline": chosen.pipeline, "why": None}
    family = encoder_family(config["model_type"])
    config["model_type"] = plugin_model_type(family)
    config["architectures"] = [plugin_architecture(config["architectures"], task)]
    write_tokenizer = plan.write_tokenizer

    def write_plugin_tokenizer(out: Path) -> None:  # AutoTokenizer's class: the plugin's
        write_tokenizer(out)
        path = out / "tokenizer_config.json"
        settings = json.loads(path.read_text(encoding="utf-8"))
        settings["tokenizer_class"] = PLUGIN_TOKENIZER
        path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n",
                        encoding="utf-8")

    plan.write_tokenizer = write_plugin_tokenizer
    return {"class": config["architectures"][0], "pipeline": None,
            "why": why}


def check_choice(folder) -> None:
    """A folder of a transformers class must load in ``transformers`` with no weight
    missing or unexpected (else its head would run at random): a ConversionError naming
    them."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    import transformers

    config = AutoConfig.from_pretrained(folder)
    cls = getattr(transformers, config.architectures[0])
    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the report is checked here, not printed
    hf_logging.disable_progress_bar()
    try:
        _, report = cls.from_pretrained(folder, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()
    # A pooler the class does not read (BertForTokenClassification) changes nothing.
    report["unexpected_keys"] = [k for k in report.get("unexpected_keys") or []
                                 if ".pooler." not in k]
    bad = {k: sorted(map(str, v)) for k, v in report.items()
           if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise ConversionError(f"{folder}: transformers' {config.architectures[0]} loads it "
                              f"with {bad}: not its own class")


__all__ = ["choose_class", "check_choice", "tokenizer_difference", "PROBES"]
