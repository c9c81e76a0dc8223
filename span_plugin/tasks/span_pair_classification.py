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

import contextlib
import logging
import os
from dataclasses import dataclass, field

import numpy as np
from fairseq.data import (
    ConcatSentencesDataset,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    PrependTokenDataset,
    RightPadDataset,
    SortDataset,
    data_utils,
)
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from omegaconf import OmegaConf, open_dict

from span_plugin.preprocess import provenance
from span_plugin.data.phrase_pairs import PhrasePairsDataset, check_phrase_files, count_cut_pairs
from span_plugin.data.span_datasets import CropWindowDataset, layout_starts
from span_plugin.preprocess.pairs import PHRASE_LABEL_DIR, phrase_prefix, read_phrase_labels
from span_plugin.tasks.span_classification import SpanClassificationConfig, SpanClassificationTask

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
class SpanPairClassificationTask(SpanClassificationTask):
    """Phrase-pair classification plus sentence-pair classification, one batch, one loss
    ``w_p * phrasal + w_s * sentential`` (criterion ``span_pair_classification``)."""

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

    def load_dataset(self, split, combine=False, **kwargs):
        cfg = self.cfg
        provenance.verify_folder(cfg.data)
        input0, _ = self._load_input("input0", split, False)
        input1, _ = self._load_input("input1", split, False)
        if input0 is None or input1 is None:
            raise FileNotFoundError(f"{cfg.data}: input0/{split} and input1/{split} are needed "
                                    f"(span-pair folders hold sentence pairs)")
        lengths = [np.asarray(input0.sizes) - 1, np.asarray(input1.sizes) - 1]
        prefixes = [phrase_prefix(os.path.join(cfg.data, k, split)) for k in ("input0", "input1")]
        spans0, spans1, labels = check_phrase_files(
            prefixes, os.path.join(cfg.data, PHRASE_LABEL_DIR, split), lengths,
            len(self.phrase_labels))
        starts = layout_starts([input0.sizes, input1.sizes], cfg.init_token, cfg.separator_token)

        if cfg.init_token is not None:
            input0 = PrependTokenDataset(input0, cfg.init_token)
        if cfg.separator_token is not None:
            input1 = PrependTokenDataset(input1, cfg.separator_token)
        src_tokens = ConcatSentencesDataset(input0, input1)
        max_len = None
        if cfg.shorten_method == "truncate":
            max_len = self.max_positions()
            src_tokens = CropWindowDataset(src_tokens, max_len, mode="truncate", seed=cfg.seed)
            cut = count_cut_pairs(prefixes[1], spans1, starts[1], max_len)
            self.cut_pairs[split] = cut
            if cut:
                logger.warning(f"{split}: truncation to {max_len} tokens cuts {cut} phrase "
                               f"pairs; they are left out")

        def pairs(part):
            return PhrasePairsDataset(spans0, spans1, labels, starts[0], starts[1], max_len, part)

        dataset = {
            "id": IdDataset(),
            "net_input": {
                "src_tokens": RightPadDataset(src_tokens, pad_idx=self.source_dictionary.pad()),
                "src_lengths": NumelDataset(src_tokens, reduce=False),
                "phrases": pairs("phrases"),
            },
            "phrase_target": pairs("target"),
            "nsentences": NumSamplesDataset(),
            "ntokens": NumelDataset(src_tokens, reduce=True),
        }
        if self.label_dictionary is not None:
            target = self._load_target(split)
            if target is not None:
                if len(target) != len(src_tokens):
                    raise ValueError(f"{os.path.join(cfg.data, 'label', split)}: {len(target)} "
                                     f"labels for {len(src_tokens)} sentence pairs")
                dataset["target"] = target
        dataset = NestedDictionaryDataset(dataset, sizes=[src_tokens.sizes])
        if not cfg.no_shuffle:
            with data_utils.numpy_seed(cfg.seed):
                dataset = SortDataset(dataset, sort_order=[np.random.permutation(len(dataset))])
        logger.info(f"Loaded {split} with #samples: {len(dataset)}")
        self.datasets[split] = dataset
        return dataset

    def build_model(self, cfg, from_checkpoint=False):
        from fairseq import models

        from span_plugin.models.roberta_span_pair import RobertaSpanPairModel

        with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.ExitStack():
            cfg.max_positions = self.cfg.max_positions
        model = models.build_model(cfg, self, from_checkpoint)
        if not isinstance(model, RobertaSpanPairModel):
            raise ValueError(f"task span_pair_classification needs --arch roberta_span_pair "
                             f"(or roberta_span_pair_base/large); got {type(model).__name__}")
        model.register_span_pair_heads(
            self.cfg.classification_head_name,
            phrase_classes=len(self.phrase_labels) if self.cfg.phrasal_weight > 0 else 0,
            sentence_classes=self.cfg.num_classes if self.cfg.sentential_weight > 0 else 0,
            features=self.cfg.phrase_features, dropout=self.cfg.head_dropout)
        return model
