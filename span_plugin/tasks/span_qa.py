"""Task ``span_qa``: extractive question answering (SQuAD 1.1/2.0, MRQA) on folders made by
``span-preprocess qa``; one item is a question with all its windows
(:mod:`span_plugin.data.qa_windows`), ``--batch-size`` counts questions. Heads
``--qa-head boundary|sf|span``; answers decoded on word boundaries by default
(``--answer-boundaries``), kept in the task state (:data:`BOUNDARIES_STATE`) so that
older checkpoints decode as they did. docs/QA.md, section "Module notes"."""

import logging
import os
from dataclasses import dataclass, field

import numpy as np
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from span_plugin.data.layout import lay_out
from span_plugin.data.qa_windows import QABatching, QAWindowsDataset
from span_plugin.models.heads import chosen_kind, head_choices
from span_plugin.modules.qa_decoding import ANSWER_BOUNDARIES
from span_plugin.preprocess.binary import indexed
from span_plugin.preprocess.folders.qa import INDEX_DTYPE, QA_DIR, read_records
from span_plugin.runtime.data_record import task_record
from span_plugin.tasks.span_inputs import OneDictionaryTask, SpanInputsTask, length_multiple, length_multiple_field

logger = logging.getLogger(__name__)

# In the task state (so in every checkpoint): the --answer-boundaries of training.
BOUNDARIES_STATE = "span_qa_answer_boundaries"
# How checkpoints made before --answer-boundaries existed were decoded.
LEGACY_BOUNDARIES = "token"


@dataclass
class SpanQAConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "QA folder (span-preprocess qa)"})
    max_positions: int = field(default=512, metadata={
        "help": "the model's positions; at least the folder's window size"})
    qa_head: ChoiceEnum(head_choices("--qa-head")) = field(default="boundary", metadata={
        "help": "boundary: start/end logits per token (BERT, SpanBERT); sf: start/end "
        "logits over [token; conv within its n-gram span] (token-level Span Fine-tuning; "
        "--span-dim, --span-kernel-size); span: candidate spans scored from [start; end; "
        "self-attentive] span representations"})
    max_answer_tokens: int = field(default=30, metadata={
        "help": "longest answer, in tokens (candidates of the span head; decoding of both)"})
    qa_span_dim: int = field(default=128, metadata={
        "help": "span head: width the token features are projected to before the extractors"})
    n_best: int = field(default=20, metadata={"help": "answers kept per question (nbest)"})
    answer_boundaries: ChoiceEnum(list(ANSWER_BOUNDARIES)) = field(default="word", metadata={
        "help": "word: answers start and end on word boundaries of the context (only "
        "candidates whose first token begins a word and last token ends one); token: any "
        "token span. Validation, span-predict and the hub decode as the checkpoint says"})
    null_threshold: float = field(default=0.0, metadata={
        "help": "SQuAD 2.0 folders: answer '' when the no-answer score exceeds the best "
        "answer's by more than this (validation metrics; span-predict can tune it)"})
    classification_head_name: str = field(default="qa_head")
    length_multiple: int = length_multiple_field()
    no_shuffle: bool = False
    seed: int = II("common.seed")


@register_task("span_qa", dataclass=SpanQAConfig)
class SpanQATask(SpanInputsTask, OneDictionaryTask, FairseqTask):
    """Answer spans selected from passages, one head registered by ``--qa-head``."""

    model_inputs = "passage positions"
    task_name = "span_qa"
    folder_command = "span-preprocess qa"
    model_archs = "roberta_qa, roberta_qa_base/large"

    def __init__(self, cfg, dictionary):
        self.dictionary = dictionary  # before the data record is checked against it
        super().__init__(cfg)
        positions = self.window_settings[0]
        if positions > cfg.max_positions:
            raise ValueError(
                f"{cfg.data}: windows of up to {positions} tokens (span-preprocess "
                f"qa --max-positions) do not fit --max-positions {cfg.max_positions}")
        if cfg.max_answer_tokens < 1:
            raise ValueError(f"--max-answer-tokens must be >= 1, got {cfg.max_answer_tokens}")
        self.records = {}
        self.answer_boundaries = str(cfg.answer_boundaries)
        self.state.merge_state_dict({BOUNDARIES_STATE: self.answer_boundaries})

    def load_state_dict(self, state_dict):
        """The state of a checkpoint (fairseq calls this when it loads one for inference,
        after building the task from its config). One made before --answer-boundaries
        existed has no setting in its state: it decodes at token level, as it did."""
        super().load_state_dict(state_dict)
        if BOUNDARIES_STATE not in state_dict:
            self.answer_boundaries = LEGACY_BOUNDARIES
            self.state.merge_state_dict({BOUNDARIES_STATE: LEGACY_BOUNDARIES})

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if not os.path.isdir(os.path.join(cfg.data, QA_DIR)):
            raise FileNotFoundError(
                f"{cfg.data}: not a QA folder (no {QA_DIR}/); build one with "
                f"`span-preprocess qa` (docs/QA.md)")
        dictionary = cls.load_dictionary(os.path.join(cfg.data, "input0", "dict.txt"))
        dictionary.add_symbol("<mask>")  # as sentence_prediction: embedding rows match
        return cls(cfg, dictionary)

    @property
    def qa_labels(self):
        """The ``labels`` part of the data record the task holds (from its folder, or
        from the checkpoint it was loaded with): window settings, file versions."""
        return (task_record(self) or {}).get("labels") or {}

    @property
    def window_settings(self):
        """``(max_positions, doc_stride)`` the folder's windows were cut with (a folder
        without a record: ``--max-positions`` and 128)."""
        labels = self.qa_labels
        return (labels.get("max_positions") or self.cfg.max_positions,
                labels.get("doc_stride", 128))

    @property
    def squad_v2(self):
        """Whether the data holds SQuAD 2.0 files: answers may be "" (no answer)."""
        return "2.0" in set((self.qa_labels.get("versions") or {}).values())

    def build_split(self, split, combine):
        cfg, data = self.cfg, self.cfg.data
        question, question_spans = self.load_input("input0", split)
        passage, passage_spans = self.load_input("input1", split)
        if question is None or passage is None:
            raise FileNotFoundError(f"could not find dataset: {data}/input0/{split} and "
                                    f"{data}/input1/{split}")
        side = {}
        for name in ("window", "offsets", "answer"):
            prefix = os.path.join(data, QA_DIR, f"{split}.{name}")
            side[name] = data_utils.load_indexed_dataset(prefix, None, dataset_impl="mmap")
            if side[name] is None or len(side[name]) != len(passage):
                found = "missing" if side[name] is None else f"{len(side[name])} items"
                raise ValueError(f"{prefix}.bin: {found}, expected one item per window "
                                 f"({len(passage)}); rebuild the folder")
        lengths = np.asarray(passage.sizes) - 1
        bad = np.flatnonzero(np.asarray(side["offsets"].sizes) != 2 * lengths)
        if bad.size:
            raise ValueError(f"{data}/{QA_DIR}/{split}.offsets.bin: window {bad[0] + 1} has "
                             f"{side['offsets'].sizes[bad[0]] // 2} offsets for "
                             f"{lengths[bad[0]]} passage tokens; rebuild the folder")
        records = read_records(os.path.join(data, "raw", f"{split}.jsonl"))
        self.records[split] = records
        layout = lay_out([question, passage], self.dictionary.bos(), self.dictionary.eos())
        too_long = np.flatnonzero(np.asarray(layout.tokens.sizes) > cfg.max_positions)
        if too_long.size:
            raise ValueError(f"{data}/input1/{split}: window {too_long[0] + 1} has "
                             f"{layout.tokens.sizes[too_long[0]]} tokens, more than "
                             f"--max-positions {cfg.max_positions}")
        window_prefix = os.path.join(data, QA_DIR, f"{split}.window")
        if (np.asarray(side["window"].sizes) != 2).any():
            raise ValueError(f"{window_prefix}.bin: items of 2 values expected; rebuild the folder")
        window_question = np.fromfile(indexed.data_file_path(window_prefix),
                                      dtype=INDEX_DTYPE).reshape(-1, 2)[:, 0]
        batching = QABatching(self.dictionary.pad(),
                              shuffle_seed=None if cfg.no_shuffle else cfg.seed,
                              length_multiple=length_multiple(cfg))
        return QAWindowsDataset(layout, window_question, side["offsets"], side["answer"],
                                records, batching,
                                spans=layout.spans([question_spans, passage_spans]))

    def chosen_head(self, model_args):
        """The ``--qa-head``."""
        kind = chosen_kind("--qa-head", str(self.cfg.qa_head))
        options = {"max_answer_tokens": self.cfg.max_answer_tokens}
        if kind == "qa_span":
            options["span_dim"] = self.cfg.qa_span_dim
        return kind, options
