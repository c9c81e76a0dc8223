"""Task ``spanbert_masked_lm``: SpanBERT's span masking over fairseq monolingual text, and
BERT's whole-word and token masking as its ablations (``--masking``), on blocks of up to
``--tokens-per-sample`` tokens; masking (:mod:`span_plugin.data.span_masking`) happens in
the dataset per (seed, epoch, block), word starts from ``dict.txt``
(:mod:`span_plugin.data.word_boundaries`). Data and options: docs/PRETRAIN.md."""

import contextlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq import utils
from fairseq.data import (
    ConcatDataset,
    Dictionary,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    PrependTokenDataset,
    RightPadDataset,
    SortDataset,
    TokenBlockDataset,
    data_utils,
)
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.language_modeling import SAMPLE_BREAK_MODE_CHOICES
from omegaconf import II, MISSING, OmegaConf, open_dict

from span_plugin.data import span_index
from span_plugin.data.masked_blocks import (
    BlockSegmentsDataset,
    FieldDataset,
    LinePiecesDataset,
    SpanMaskedDataset,
)
from span_plugin.data.span_masking import SCHEMES, SpanMasker
from span_plugin.data.word_boundaries import KINDS, build_word_boundaries
from span_plugin.tasks.span_inputs import OneDictionaryTask

logger = logging.getLogger(__name__)

SPAN_MASKING = ChoiceEnum(["geometric", "ngram"])
MASKING = ChoiceEnum(list(SCHEMES))


@dataclass
class SpanBertMaskedLMConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={
        "help": "folder with dict.txt and {split}.{bin,idx}; colon-separated folders are "
        "taken in turn, one per epoch (dict.txt of the first)"})
    sample_break_mode: SAMPLE_BREAK_MODE_CHOICES = field(default="complete_doc", metadata={
        "help": "how text is cut into blocks (fairseq's TokenBlockDataset): complete_doc "
        "packs whole lines and never crosses an empty line (a document break); complete "
        "packs whole lines across documents; eos one line a block; none fills every "
        "block across lines and documents. Lines longer than a block are cut first"})
    tokens_per_sample: int = field(default=512, metadata={
        "help": "block size in tokens, <s> included; at most the model's positions"})
    masking: MASKING = field(default="span", metadata={
        "help": "span: SpanBERT's spans (--span-masking); whole-word: BERT's whole-word "
        "masking; token: BERT's masking of single sub-word tokens"})
    span_masking: SPAN_MASKING = field(default="geometric", metadata={
        "help": "spans of --masking span: geometric, SpanBERT's spans of whole words; "
        "ngram, the n-gram segmenter's spans from {split}.spans.{bin,idx}"})
    mask_prob: float = field(default=0.15, metadata={
        "help": "fraction of the maskable tokens of a block that are chosen"})
    leave_unmasked_prob: float = field(default=0.1, metadata={
        "help": "fraction of chosen spans left unchanged"})
    random_token_prob: float = field(default=0.1, metadata={
        "help": "fraction of chosen spans replaced by random tokens"})
    geometric_p: float = field(default=0.2, metadata={
        "help": "p of the geometric span-length distribution (in words)"})
    max_span_words: int = field(default=10, metadata={
        "help": "longest span in words; the distribution is truncated and renormalised"})
    word_boundaries: ChoiceEnum(list(KINDS)) = field(default="auto", metadata={
        "help": "how word starts are read from dict.txt: gpt2 (needs encoder.json), "
        "wordpiece ('##' continues a word), sentencepiece ('\u2581' starts a word), "
        "token (every token a word), auto"})
    encoder_json: Optional[str] = field(default=None, metadata={
        "help": "GPT-2 encoder.json (local file) for --word-boundaries gpt2; default: "
        "encoder.json beside dict.txt"})
    seed: int = II("common.seed")


def special_ids(dictionary, mask_idx):
    """bool ``[V]``: ids that are never masked (fairseq's specials and ``<mask>``)."""
    special = np.zeros(len(dictionary), dtype=bool)
    special[: dictionary.nspecial] = True
    special[mask_idx] = True
    return special


def replacement_ids(dictionary, special):
    """Ids a random replacement is drawn from: ordinary symbols, not fairseq's
    ``madeupword`` padding entries."""
    return np.array([i for i, s in enumerate(dictionary.symbols)
                     if not special[i] and not s.startswith("madeupword")], dtype=np.int64)


@register_task("spanbert_masked_lm", dataclass=SpanBertMaskedLMConfig)
class SpanBertMaskedLMTask(OneDictionaryTask, FairseqTask):
    """Masked-LM pre-training with span masking (SpanBERT)."""

    cfg: SpanBertMaskedLMConfig

    def __init__(self, cfg, dictionary, dict_path="dict.txt"):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.dict_path = dict_path
        # Added at load as fairseq's masked_lm does (an existing <mask> is kept), so the
        # embedding has the rows of RoBERTa and of span-convert checkpoints.
        self.mask_idx = dictionary.add_symbol("<mask>")
        self._boundaries = None

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        paths = utils.split_paths(cfg.data)
        path = os.path.join(paths[0], "dict.txt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} not found: task spanbert_masked_lm reads a folder made by "
                f"fairseq-preprocess --only-source or span-preprocess binarize (dict.txt, "
                f"{{split}}.bin/.idx)")
        dictionary = Dictionary.load(path)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary, path)

    def word_boundaries(self):
        """The word-start rule of the dictionary, built once."""
        if self._boundaries is None:
            encoder_json = self.cfg.encoder_json
            beside = os.path.join(os.path.dirname(self.dict_path), "encoder.json")
            if not encoder_json and os.path.isfile(beside):
                encoder_json = beside
            self._boundaries = build_word_boundaries(
                self.cfg.word_boundaries, self.dictionary.symbols, self.dictionary.nspecial,
                encoder_json, where=self.dict_path)
        return self._boundaries

    def masker(self):
        special = special_ids(self.dictionary, self.mask_idx)
        return SpanMasker(
            mask_idx=self.mask_idx, pad_idx=self.dictionary.pad(),
            replacement_ids=replacement_ids(self.dictionary, special), special=special,
            mask_prob=self.cfg.mask_prob, random_token_prob=self.cfg.random_token_prob,
            leave_unmasked_prob=self.cfg.leave_unmasked_prob,
            geometric_p=self.cfg.geometric_p, max_span_words=self.cfg.max_span_words,
            scheme=str(self.cfg.masking))

    def _ngram_spans(self):
        return self.cfg.masking == "span" and self.cfg.span_masking == "ngram"

    def _load_text(self, prefix, combine):
        """Token lines of a split (all shards ``train``, ``train1``, ... with combine),
        and with ``--span-masking ngram`` their span index, checked against them."""
        tokens, spans = [], []
        for k in itertools.count():
            shard = prefix + (str(k) if k > 0 else "")
            toks = data_utils.load_indexed_dataset(shard, self.dictionary)
            if toks is None:
                break
            tokens.append(toks)
            if self._ngram_spans():
                sprefix = span_index.span_prefix(shard)
                if not span_index.exists(sprefix):
                    raise FileNotFoundError(
                        f"{sprefix}.{{bin,idx}} not found: --span-masking ngram reads the "
                        f"n-gram segments beside the tokens; make both with `span-preprocess "
                        f"binarize TEXT {shard} ...` (docs/PRETRAIN.md)")
                spn = span_index.load_spans(sprefix)
                span_index.check_alignment(sprefix, spn, np.asarray(toks.sizes) - 1)
                spans.append(spn)
            if not combine:
                break
        if not tokens:
            raise FileNotFoundError(f"{prefix}.{{bin,idx}} not found (split of --data)")
        if len(tokens) == 1:
            return tokens[0], (spans[0] if spans else None)
        return ConcatDataset(tokens), (ConcatDataset(spans) if spans else None)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        cfg = self.cfg
        paths = utils.split_paths(cfg.data)
        prefix = os.path.join(paths[(epoch - 1) % len(paths)], split)
        tokens, spans = self._load_text(prefix, combine)
        sizes = np.asarray(tokens.sizes)
        text_tokens = int(sizes.sum()) - len(sizes)  # without the </s> of every line
        if cfg.masking == "span" and text_tokens < cfg.max_span_words:
            raise ValueError(
                f"{prefix}.bin holds {text_tokens} tokens of text, shorter than one span "
                f"(--max-span-words {cfg.max_span_words}): span masking needs more text")

        block_size = cfg.tokens_per_sample - 1  # one less for <s>
        items, item_sizes, item_lines = tokens, sizes, None
        if cfg.sample_break_mode != "none" and len(sizes) and sizes.max() > block_size:
            # Whole-line modes would make a longer line one oversized block, which
            # fairseq-train drops from training: cut such lines into pieces that fit.
            items = LinePiecesDataset(tokens, sizes, block_size)
            item_sizes, item_lines = items.sizes, items.line
            logger.info(f"{int((sizes > block_size).sum())} of {len(sizes)} lines of {prefix} "
                        f"are longer than a block of {block_size} tokens: cut into pieces")
        blocks = TokenBlockDataset(
            items, item_sizes, block_size, pad=self.dictionary.pad(),
            eos=self.dictionary.eos(), break_mode=cfg.sample_break_mode)
        logger.info(f"loaded {len(blocks)} blocks from: {prefix}")
        segments = None if spans is None else BlockSegmentsDataset(
            blocks, spans, sizes, shift=1, item_lines=item_lines)
        blocks = PrependTokenDataset(blocks, self.dictionary.bos())
        masked = SpanMaskedDataset(
            blocks, self.masker(), cfg.seed, segments=segments,
            word_boundaries=(self.word_boundaries()
                             if segments is None and cfg.masking != "token" else None))
        source = FieldDataset(masked, "source")
        target = FieldDataset(masked, "target")
        pad = self.dictionary.pad()
        dataset = NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": {
                    "src_tokens": RightPadDataset(source, pad_idx=pad),
                    "src_lengths": NumelDataset(source, reduce=False),
                },
                "target": RightPadDataset(target, pad_idx=pad),
                "nsentences": NumSamplesDataset(),
                "ntokens": NumelDataset(source, reduce=True),
            },
            sizes=[source.sizes],
        )
        with data_utils.numpy_seed(cfg.seed):
            shuffle = np.random.permutation(len(dataset))
        self.datasets[split] = SortDataset(dataset, sort_order=[shuffle, source.sizes])
        return self.datasets[split]

    def build_model(self, cfg, from_checkpoint=False):
        with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.nullcontext():
            if getattr(cfg, "max_positions", None) is None:
                cfg.max_positions = self.cfg.tokens_per_sample
        model = super().build_model(cfg, from_checkpoint)
        positions = model.max_positions()
        if positions is not None and positions < self.cfg.tokens_per_sample:
            raise ValueError(
                f"blocks of --tokens-per-sample {self.cfg.tokens_per_sample} tokens are "
                f"longer than the model's {positions} positions (--max-positions): lower "
                f"--tokens-per-sample to at most {positions}")
        return model

    def max_positions(self):
        return self.cfg.tokens_per_sample
