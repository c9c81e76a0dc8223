"""Inference with a fine-tuned ``roberta_span`` (or plain ``roberta``) checkpoint on raw text.

    from span_plugin.inference.hub import SpanHubInterface
    hub = SpanHubInterface.from_pretrained("checkpoints/checkpoint_best.pt")
    hub.predict([("A man plays.", "A man is playing.")])
    # -> [{"label": "1", "probs": {"0": 0.2, "1": 0.8}}]    (regression: {"score": x})

``span_tagging`` / ``span_labeling`` checkpoints load as :class:`ner_hub.NerHubInterface`
(``predict_entities``), ``span_pair_classification`` ones as
:class:`pair_hub.PairHubInterface` (``predict_pairs``).

The data folder, BPE files, n-gram dictionary and segmentation come from the data
record the checkpoint holds (:mod:`span_plugin.preprocess.encoder_settings`); any of them may be
given again and is then checked against it (files by sha256). BPE and segmentation run
on the fly with the encoders of ``span_plugin.preprocess`` (the code ``span-preprocess``
binarizes with); the tokens and spans then go through the task's own dataset wrappers,
so the layout, shortening and the r/l limits are exactly those of training.
"""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.data import ConcatSentencesDataset, PrependTokenDataset, RightPadDataset
from fairseq.dataclass.utils import overwrite_args_by_name

import span_plugin
from span_plugin.preprocess import encoder_settings

from span_plugin.preprocess import provenance
from span_plugin.data.span_datasets import CropWindowDataset, LayoutSpansDataset, layout_starts

span_plugin.register()  # the stack fixes, and every task and model a checkpoint may name


class _Items(list):
    """An in-memory token/span dataset: a list of tensors with ``sizes``."""

    @property
    def sizes(self):
        return np.array([len(x) for x in self], dtype=np.int64)

    def size(self, index):
        return len(self[index])


TASKS = ("span_classification", "sentence_prediction")
NER_TASKS = ("span_tagging", "span_labeling")  # served by ner_hub.NerHubInterface
PAIR_TASKS = ("span_pair_classification",)  # served by pair_hub.PairHubInterface


class SpanHubInterface(nn.Module):
    """A fine-tuned model with its dictionaries and text encoder: ``roberta_span``
    (span heads), or fairseq's plain ``roberta`` fine-tuned with sentence_prediction
    (the baseline; it gets the same tokens, and no spans)."""

    def __init__(self, task, model, encoder, head="sentence_classification_head"):
        super().__init__()
        from fairseq.models.roberta import RobertaModel

        from span_plugin.models.roberta_span import SpanClassificationHead

        if not isinstance(model, RobertaModel):
            raise ValueError(
                f"checkpoint holds a {type(model).__name__} ({_arch(model)}), not a "
                f"RoBERTa-family model (--arch roberta_span_* or roberta_*)"
            )
        if head not in model.classification_heads:
            raise ValueError(
                f"checkpoint has no classification head {head!r}; it has "
                f"{list(model.classification_heads)}"
            )
        self.task = task
        self.model = model.eval()
        self.encoder = encoder
        self.head = head
        self.reads_spans = isinstance(model.classification_heads[head], SpanClassificationHead)
        self.record = provenance.task_record(task)  # how its training data was made
        self.data = getattr(task.cfg, "data", None)
        self.num_inputs = self.record["inputs"] if self.record else None  # None: not known

    @classmethod
    def from_pretrained(
        cls,
        checkpoint,
        data=None,
        bpe=None,
        gpt2_encoder_json=None,
        gpt2_vocab_bpe=None,
        sentencepiece_model=None,
        bpe_codes=None,
        bpe_vocab=None,
        wordpiece=None,
        ngrams=None,
        ngrams_top_k=None,
        segmentation=None,
        seed=None,
        head="sentence_classification_head",
    ):
        """Load ``checkpoint`` (a fine-tuned checkpoint_*.pt).

        Every other argument defaults to what the checkpoint's data record says
        (:mod:`span_plugin.preprocess.encoder_settings`): ``data`` is the task folder it was
        trained on (its dict.txt files must have the recorded hashes); the encoder
        files (``bpe="wordpiece"``: ``wordpiece`` is a tokenizer.json, vocab.txt or a
        span-convert folder), the n-gram dictionary, its top-k, the segmentation and
        its seed. A file given again must have the recorded content; a setting given
        again must be the recorded one: a difference raises an error naming both.
        Checkpoints without a record take the settings given, unchecked.
        """
        from fairseq import checkpoint_utils

        from span_plugin.models import roberta_span, roberta_span_pair  # noqa: F401  (registers the models)
        from span_plugin.tasks import (  # noqa: F401  (registers the tasks)
            span_classification,
            span_pair_classification,
            span_tagging,
        )

        state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
        cfg = state.get("cfg")
        task_name = cfg["task"]["_name"] if cfg is not None else getattr(state["args"], "task", None)
        if task_name not in TASKS + NER_TASKS + PAIR_TASKS:
            model_cfg = cfg["model"] if cfg is not None else state.get("args")
            arch = _field(model_cfg, "arch") or _field(model_cfg, "_name")
            raise ValueError(
                f"{checkpoint}: trained with task {task_name!r} and model {arch!r}; "
                f"SpanHubInterface loads checkpoints fine-tuned with task "
                f"{' or '.join(TASKS + NER_TASKS + PAIR_TASKS)}"
            )
        record = (state.get("task_state") or {}).get(provenance.STATE_KEY)
        task_cfg = cfg["task"] if cfg is not None else state["args"]
        data = _data_folder(data, _field(task_cfg, "data"), record, checkpoint)
        # fairseq applies overrides only when it reads the file itself, not to a state
        # handed to load_model_ensemble_and_task: apply them here.
        overrides = {"load_checkpoint_heads": True, "data": data}
        if cfg is not None:
            overwrite_args_by_name(cfg, overrides)
        else:
            for k, v in overrides.items():
                setattr(state["args"], k, v)
        given = dict(bpe=bpe, gpt2_encoder_json=gpt2_encoder_json, gpt2_vocab_bpe=gpt2_vocab_bpe,
                     sentencepiece_model=sentencepiece_model, bpe_codes=bpe_codes,
                     bpe_vocab=bpe_vocab, wordpiece=wordpiece, ngrams=ngrams,
                     ngrams_top_k=ngrams_top_k, segmentation=segmentation, seed=seed)
        spec = encoder_settings.encoder_spec(
            record, {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in given.items()},
            checkpoint)
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides=overrides, state=state
        )
        if task_name in NER_TASKS:  # entities: predict_entities(text)
            from span_plugin.inference.ner import NerHubInterface

            cls, head = NerHubInterface, task.cfg.classification_head_name
        if task_name in PAIR_TASKS:  # phrase pairs: predict_pairs(sentence1, sentence2, pairs)
            from span_plugin.inference.pairs import PairHubInterface

            cls, head = PairHubInterface, task.cfg.classification_head_name
        hub = cls(task, models[0], spec.build(), head=head)
        hub.record = record
        hub.num_inputs = record["inputs"] if record else (
            2 if os.path.isdir(os.path.join(data, "input1")) else 1)
        return hub

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def regression(self):
        return bool(self.task.cfg.regression_target)

    @property
    def labels(self):
        """Label names in output order (classification)."""
        d = self.task.label_dictionary
        return [d[i + d.nspecial] for i in range(self.task.cfg.num_classes)]

    def _encode_input(self, texts):
        """BPE + segmentation of one input column -> (token items, flat span items)."""
        d = self.task.source_dictionary
        toks, spans = [], []
        for text in texts:
            symbols, offsets = self.encoder.encode(text)
            toks.append(d.encode_line(" ".join(symbols), append_eos=True, add_if_not_exist=False).long())
            spans.append(torch.tensor([o for pair in offsets for o in pair], dtype=torch.long))
        return _Items(toks), _Items(spans)

    def encode(self, examples):
        """Examples (str, or tuples of str for pairs) -> model inputs, as training.

        Returns a list of ``(tokens LongTensor [T_i], spans LongTensor [n_i, 2])``.
        """
        examples = [(e,) if isinstance(e, str) else tuple(e) for e in examples]
        widths = {len(e) for e in examples}
        if len(widths) != 1:
            raise ValueError("mix of single sentences and pairs in one call")
        width = widths.pop()
        if width not in (1, 2):
            raise ValueError(f"examples must be one sentence or a pair, got {width} texts")
        expected = self.num_inputs or width
        if width != expected:
            kinds = {1: "single sentences (one string each)", 2: "sentence pairs ((a, b) tuples)"}
            raise ValueError(f"this model was trained on {kinds[expected]}; got "
                             f"{kinds[width]}: give it what it was trained on")
        cfg = self.task.cfg
        inputs = [self._encode_input([e[k] for e in examples]) for k in range(width)]
        starts = layout_starts([toks.sizes for toks, _ in inputs], cfg.init_token, cfg.separator_token)
        input0 = inputs[0][0]
        if cfg.init_token is not None:
            input0 = PrependTokenDataset(input0, cfg.init_token)
        src = input0
        if width == 2:
            input1 = inputs[1][0]
            if cfg.separator_token is not None:
                input1 = PrependTokenDataset(input1, cfg.separator_token)
            src = ConcatSentencesDataset(input0, input1)
        crop = None
        if cfg.shorten_method != "none":
            crop = src = CropWindowDataset(src, self.task.max_positions(), mode="truncate")
        spans = LayoutSpansDataset(
            [s for _, s in inputs], starts, crop=crop,
            max_spans=getattr(cfg, "max_spans", None),
            max_span_tokens=getattr(cfg, "max_span_tokens", None),
        )
        out = [(src[i], spans[i]) for i in range(len(examples))]
        limit = self.model.max_positions()
        for i, (t, _) in enumerate(out):
            if t.numel() > limit:
                raise ValueError(
                    f"example {i} has {t.numel()} tokens, more than the model's {limit}; "
                    f"the checkpoint was trained with --shorten-method none"
                )
        return out

    @torch.no_grad()
    def predict_logits(self, examples, batch_size=32):
        """Logits ``[N, C]`` (float32) of the examples, in order, batched."""
        if len(examples) == 0:
            return torch.zeros(0, self.task.cfg.num_classes)
        encoded = self.encode(examples)
        pad = self.task.source_dictionary.pad()
        collate_tokens = RightPadDataset(_Items([t for t, _ in encoded]), pad_idx=pad)
        collate_spans = LayoutSpansDataset([_Items()], [np.zeros(0)])  # for its collater
        out = []
        for b in range(0, len(encoded), batch_size):
            chunk = encoded[b : b + batch_size]
            tokens = collate_tokens.collater([t for t, _ in chunk]).to(self.device)
            extra = {}
            if self.reads_spans:
                extra["spans"] = collate_spans.collater([s for _, s in chunk]).to(self.device)
            logits, _ = self.model(tokens, classification_head_name=self.head, **extra)
            out.append(logits.float().cpu())
        return torch.cat(out, dim=0)

    def predict(self, examples, batch_size=32):
        """Predict raw sentences (str) or pairs ((str, str)).

        Returns one dict per example: classification ``{"label": name, "probs":
        {name: p}}``; regression ``{"score": float}`` (in the units of the training
        labels: STS-B folders from span-preprocess hold score / 5).
        """
        logits = self.predict_logits(list(examples), batch_size=batch_size)
        if self.regression:
            return [{"score": float(x)} for x in logits[:, 0]]
        probs = F.softmax(logits, dim=-1)
        names = self.labels
        return [
            {"label": names[int(p.argmax())], "probs": dict(zip(names, map(float, p)))}
            for p in probs
        ]


def _data_folder(data, stored, record, checkpoint):
    """The task folder to read the dictionaries from: ``data`` when given, else the
    folder recorded at training time (absolute), else the path in the checkpoint's
    config. Its dict.txt files must have the hashes of the checkpoint's record."""
    if data is None:
        tried = [p for p in ((record or {}).get("data_dir"), stored) if p]
        data = next((p for p in tried if os.path.isdir(p)), None)
        if data is None:
            raise FileNotFoundError(
                f"{checkpoint}: its data folder ({' or '.join(map(str, tried)) or 'unknown'}) "
                f"is not here: pass data=FOLDER (the folder it was trained on, or a copy; "
                f"its dict.txt files are checked against the checkpoint's record)")
    data = str(data)
    if record is not None:
        provenance.verify_files(data, record, only=provenance.is_dictionary,
                                where=f"the data record in {checkpoint}")
    return data


def _field(cfg, key):
    """A key of a DictConfig/dict or an attribute of an argparse Namespace."""
    if cfg is None:
        return None
    return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)


def _arch(model):
    args = getattr(model, "args", None)
    return getattr(args, "arch", None) or getattr(args, "_name", None) or "unknown arch"
