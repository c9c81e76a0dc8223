"""Task ``span_pair_classification``: transfer fine-tuning with phrasal and sentential
paraphrases (Arase and Tsujii) on folders made by ``span-preprocess pairs``
(docs/SPAN_PAIRS.md).

Pairs are laid out as in ``span_classification`` (``<s> A </s> </s> B </s>`` with
``--init-token 0 --separator-token 2``). ``net_input`` holds ``src_tokens`` and
``phrases`` (LongTensor ``[B, K, 4]``: source start, end, target start, end, positions in
``src_tokens``; zero rows pad). Targets: ``phrase_target`` ``[B, K]`` (label ids, -100
pads) and, when the folder has sentence labels, ``target`` ``[B]``.

Truncation (``--shorten-method truncate``) drops the phrase pairs whose target it cuts
and logs how many; ``random_crop`` is refused (it would move phrases out of the window
at random).
"""

import logging
import os
from dataclasses import dataclass, field

import numpy as np
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from span_plugin.data.layout import lay_out
from span_plugin.data.phrase_pairs import check_phrase_files, count_cut_pairs
from span_plugin.preprocess.folders.pairs import PHRASE_LABEL_DIR, phrase_prefix, read_phrase_labels
from span_plugin.tasks.span_classification import SpanClassificationConfig
from span_plugin.tasks.span_inputs import SentenceSpanTask, length_multiple

logger = logging.getLogger(__name__)


@dataclass
class SpanPairClassificationConfig(SpanClassificationConfig):
    phrase_features: ChoiceEnum(["max4", "mean2"]) = field(
        default="max4", metadata={"help": "phrase pair vector: max4 = max-pool, [h_s; h_t; "
                                  "h_s*h_t; |h_s-h_t|] (2019); mean2 = mean-pool, [h_s; h_t] (2021)"})
    phrasal_weight: float = field(default=1.0, metadata={"help": "w_p of the phrasal loss "
                                                         "(0: no phrasal head)"})
    sentential_weight: float = field(
        default=1.0, metadata={"help": "w_s of the sentential loss (0: no sentential head; "
                               "a folder without sentence labels needs 0)"})
    head_dropout: float = field(default=0.1, metadata={"help": "dropout in both heads"})


@register_task("span_pair_classification", dataclass=SpanPairClassificationConfig)
class SpanPairClassificationTask(SentenceSpanTask):
    """Phrase-pair classification plus sentence-pair classification, one batch, one loss
    ``w_p * phrasal + w_s * sentential`` (criterion ``span_pair_classification``).
    Options, dictionaries and sentence labels as ``span_classification``."""

    model_inputs = "phrase pairs"
    task_name = "span_pair_classification"
    model_archs = "roberta_span_pair, roberta_span_pair_base/large"

    def __init__(self, cfg, data_dictionary, label_dictionary):
        super().__init__(cfg, data_dictionary, label_dictionary)
        self.phrase_labels = read_phrase_labels(cfg.data)
        if cfg.phrasal_weight < 0 or cfg.sentential_weight < 0 or (
                cfg.phrasal_weight == 0 and cfg.sentential_weight == 0):
            raise ValueError("--phrasal-weight and --sentential-weight must be >= 0, not both 0")
        if cfg.shorten_method == "random_crop":
            raise ValueError("span_pair_classification: --shorten-method random_crop would "
                             "move phrases out of the window at random; use truncate")
        if cfg.sentential_weight > 0 and label_dictionary is None:
            raise ValueError(f"{cfg.data}: no sentence labels (label/dict.txt): pass "
                             f"--sentential-weight 0 for phrasal training only")
        self.cut_pairs = {}

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if not os.path.exists(os.path.join(cfg.data, "label", "dict.txt")):
            # sentence_prediction needs a label dictionary; phrasal-only folders have none.
            data_dict = cls.load_dictionary(os.path.join(cfg.data, "input0", "dict.txt"))
            data_dict.add_symbol("<mask>")
            return cls(cfg, data_dict, None)
        return super().setup_task(cfg, **kwargs)

    def uses_label_classes(self):
        return self.cfg.sentential_weight > 0

    def build_split(self, split, combine):
        cfg = self.cfg
        inputs = [self.load_tokens(k, split)[0] for k in ("input0", "input1")]
        if None in inputs:
            raise FileNotFoundError(f"{cfg.data}: input0/{split} and input1/{split} are needed "
                                    f"(span-pair folders hold sentence pairs)")
        lengths = [np.asarray(toks.sizes) - 1 for toks in inputs]  # without </s>
        prefixes = [phrase_prefix(os.path.join(cfg.data, k, split)) for k in ("input0", "input1")]
        spans0, spans1, labels = check_phrase_files(
            prefixes, os.path.join(cfg.data, PHRASE_LABEL_DIR, split), lengths,
            len(self.phrase_labels))
        layout = lay_out(inputs, cfg.init_token, cfg.separator_token, shorten=cfg.shorten_method,
                         max_len=self.max_positions(), seed=cfg.seed)
        max_len = layout.truncated_at
        if max_len is not None:
            cut = count_cut_pairs(prefixes[1], spans1, layout.starts[1], max_len)
            self.cut_pairs[split] = cut
            if cut:
                logger.warning(f"{split}: truncation to {max_len} tokens cuts {cut} phrase "
                               f"pairs; they are left out")
        targets = {"phrase_target": layout.phrase_pairs(spans0, spans1, labels, "target"),
                   **self.sentence_targets(split, len(inputs[0]))}
        return layout.dataset(
            self.source_dictionary.pad(),
            net_input={"phrases": layout.phrase_pairs(spans0, spans1, labels, "phrases")},
            targets=targets, shuffle_seed=None if cfg.no_shuffle else cfg.seed,
            length_multiple=length_multiple(cfg),
        )

    def chosen_head(self, model_args):
        cfg = self.cfg
        return "span_pair", dict(
            phrase_classes=len(self.phrase_labels) if cfg.phrasal_weight > 0 else 0,
            sentence_classes=cfg.num_classes if cfg.sentential_weight > 0 else 0,
            features=cfg.phrase_features, dropout=cfg.head_dropout)
