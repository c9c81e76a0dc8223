"""The span model: fairseq's RoBERTa encoder, unchanged (so ``roberta.base``,
``roberta.large`` and ``span-convert`` checkpoints load into it), with heads registered
by name and kind (:mod:`span_plugin.models.heads`): the paper's sentence head (Bao,
Zhang, Zhao: Span Fine-tuning), its plain baseline, token tagging, span labeling and
span-pair heads. For a converted BERT it also holds what fairseq's RoBERTa has no place
for (:mod:`span_plugin.models.bert_attach`): the segment-B embedding and the pooler.

One class, registered under the fairseq model names the tasks document:
``roberta_span`` (span_classification), ``roberta_tagging`` (span_tagging,
span_labeling), ``roberta_span_pair`` (span_pair_classification) and ``roberta_qa``
(span_qa), each with its
``_base`` and ``_large`` architectures. See docs/TASK_MODEL.md.
"""

import logging

from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import RobertaModel, roberta_base_architecture, roberta_large_architecture
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from span_plugin.models.bert_attach import (
    add_bert_args,
    attach_bert_parts,
    bert_defaults,
    fit_bert_parts,
    pooled_first,
    token_embeddings,
)
from span_plugin.models.checkpoint_fit import check_encoder_fits, set_layernorm_eps
from span_plugin.models.compiled import (
    COMPILE_MODES,
    compile_encoder_in_place,
    compile_in_place,
    pad_spans_to_length,
)
from span_plugin.models.heads import build_head, chosen_kind, head_choices, head_inputs
from span_plugin.modules import SPAN_ENCODERS
from span_plugin.modules.head_builders import MODEL_DEFAULTS

logger = logging.getLogger(__name__)

MODEL_NAMES = ("roberta_span", "roberta_tagging", "roberta_span_pair", "roberta_qa")


@register_model("roberta_span")
class RobertaSpanModel(RobertaModel):
    """``forward(src_tokens, classification_head_name=, **net_input)`` returns ``(head
    output, extra)``, the head reading the inputs its kind declares (see
    :mod:`span_plugin.models.heads`), or RobertaModel's output without a head."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument("--span-encoder", choices=SPAN_ENCODERS,
                            help="how span vectors and the sentence span vector are made: "
                            "cnn-cnn (the paper's), cnn-max, attn-max, attn-attn; cnn = "
                            "no-segmentation control")
        parser.add_argument("--span-kernel-size", type=int, metavar="K",
                            help="CNN kernel size (odd; 3)")
        parser.add_argument("--span-dim", type=int, metavar="H",
                            help="width of the span encoder (default: encoder embed dim)")
        parser.add_argument("--layernorm-eps", type=float, metavar="EPS",
                            help="eps of every LayerNorm of the encoder (default: fairseq's "
                            "1e-5). A converted BERT checkpoint records its own (1e-12) as "
                            "layernorm_eps; fairseq's plain roberta model cannot take it, so a "
                            "plain-vs-span comparison leaves it at the default in both")
        parser.add_argument("--no-span-cls-concat", action="store_true", default=None,
                            help="classify from the span vector alone, without the <s> feature")
        parser.add_argument("--head-dropout", type=float, metavar="P",
                            help="dropout before the tagging or span-labeling output (0.1)")
        parser.add_argument("--span-dropout", type=float, metavar="P",
                            help="the span head's dropout, as the paper's code: on the span "
                            "vectors and on the classifier input (0.1; 0: as the head was before "
                            "this option, dropout only where --pooler-dropout puts it)")
        parser.add_argument("--sentence-head", choices=head_choices("--sentence-head"),
                            help="the head register_classification_head builds (the "
                            "span_classification and sentence_prediction tasks): span, the "
                            "paper's (default); plain, the baseline: BERT's classifier over "
                            "its pooler with --bert-pooler, else fairseq's RoBERTa head")
        parser.add_argument("--compile", action="store_true", default=None,
                            help="fine-tune with torch.compile of the encoder and the heads "
                            "(fairseq-train only; pair it with --length-multiple 64 so a few "
                            "graphs serve every batch); a model loaded from a checkpoint "
                            "runs eagerly")
        parser.add_argument("--compile-mode", choices=COMPILE_MODES,
                            help="torch.compile mode: default; reduce-overhead (CUDA graphs: "
                            "least host work per step); max-autotune-no-cudagraphs")
        parser.add_argument("--compile-backend", metavar="NAME",
                            help="torch.compile backend (inductor; aot_eager captures the same "
                            "graphs without generating code, for checks)")
        add_bert_args(parser)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        span_defaults(args)
        model = super().build_model(args, task)
        set_layernorm_eps(model, args.layernorm_eps)
        attach_bert_parts(model, args)
        return model

    def register_head(self, name, kind, **options):
        """Build a head of ``kind`` (``heads.HEAD_KINDS``) and store it as ``name``
        (compiled after :meth:`compile_for_training`); the one way every task adds its
        head."""
        head = build_head(kind, self.args, **options)
        if getattr(self, "compile_mode", None):
            compile_in_place(head, self.compile_mode, self.args.compile_backend)
        self.classification_heads[name] = head

    def compile_for_training(self):
        """``--compile``: compile the encoder now and every head as it is registered
        (:mod:`span_plugin.models.compiled`). The tasks call it for fairseq-train."""
        self.compile_mode = self.args.compile_mode
        # The transformer stack, not RobertaEncoder: BERT's segment-B path calls it
        # through extract_features, which a compiled RobertaEncoder would not cover.
        compile_encoder_in_place(self.encoder.sentence_encoder, self.compile_mode,
                                 self.args.compile_backend)
        for head in self.classification_heads.values():
            compile_in_place(head, self.compile_mode, self.args.compile_backend)
        logger.info(f"torch.compile of the encoder and the heads (backend "
                    f"{self.args.compile_backend}, mode {self.compile_mode}): graphs are "
                    f"built at the first batch of each shape")

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        """fairseq's name for it: the ``--sentence-head`` (the paper's, or the plain
        baseline), replacing one of that name."""
        self.register_head(name, chosen_kind("--sentence-head", self.args.sentence_head),
                           num_classes=num_classes, inner_dim=inner_dim)

    def encode(self, src_tokens, features_only=False, return_all_hiddens=False,
               masked_tokens=None, **unused):
        """RobertaEncoder.forward, with BERT's segment B added to the token embeddings
        when the model has it (``--bert-token-types``); without it, exactly the encoder's
        own call."""
        if getattr(self, "token_types", None) is None:
            return self.encoder(src_tokens, features_only, return_all_hiddens,
                                masked_tokens=masked_tokens, **unused)
        x, extra = self.encoder.extract_features(
            src_tokens, return_all_hiddens=return_all_hiddens,
            token_embeddings=token_embeddings(self, src_tokens))
        if not features_only:
            x = self.encoder.output_layer(x, masked_tokens=masked_tokens)
        return x, extra

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False,
                classification_head_name=None, **net_input):
        """
        Args:
            src_tokens: LongTensor ``[B, T]``.
            classification_head_name: run that head on the features ``[B, T, D]``.
            net_input: the rest of the task's ``net_input`` (``spans [B, S, 2]``,
                ``words [B, W, 2]``, ``phrases [B, P, 4]``, ``passage``: positions into
                T); the head gets the ones its kind declares, by name (a head whose
                ``reads_pooled`` is true also gets ``pooled``, BERT's pooled ``<s>``).
        """
        if classification_head_name is None:
            return self.encode(src_tokens, features_only, return_all_hiddens, **net_input)
        head = self.classification_heads[classification_head_name]
        inputs = self.inputs_of_head(classification_head_name, net_input)
        x, extra = self.encode(src_tokens, True, return_all_hiddens, **net_input)
        if getattr(self, "compile_mode", None) and "spans" in inputs:
            inputs["spans"] = pad_spans_to_length(inputs["spans"], src_tokens.size(1))
        if getattr(head, "reads_pooled", False):
            inputs["pooled"] = pooled_first(self, x)
        return head(x, **inputs), extra

    def inputs_of_head(self, name, net_input):
        """``{input name: tensor}`` of ``net_input`` that head ``name`` declares it reads;
        raises, naming the head and the input, when the batch lacks one."""
        inputs = {}
        for key in head_inputs(self.classification_heads[name]):
            if net_input.get(key) is None:
                given = sorted(k for k, v in net_input.items() if v is not None)
                raise ValueError(
                    f"classification head {name!r} reads {key}, which this batch lacks: pass "
                    f"{key}= to the model (its task puts it in net_input; given: "
                    f"src_tokens{''.join(', ' + k for k in given)})")
            inputs[key] = net_input[key]
        return inputs

    def upgrade_state_dict_named(self, state_dict, name):
        """Refuse an encoder of another vocabulary or positions (a clear error instead of
        fairseq's size mismatch); keep a checkpoint head only where it fits a head of
        this model (same keys and shapes: resume, hub), else drop it so the head starts
        fresh (a plain RoBERTa head, another task's head, other span settings). BERT's
        segment-B embedding and pooler: see :func:`~span_plugin.models.bert_attach.fit_bert_parts`."""
        prefix = name + "." if name != "" else ""
        check_encoder_fits(self, state_dict, prefix, "set --max-positions {n}")
        fit_bert_parts(self, state_dict, prefix)
        head_prefix = prefix + "classification_heads."
        # fairseq's own upgrade reads every checkpoint head as a dense/out_proj head:
        # take them out first, and put back only those that fit after it.
        saved = {k: state_dict.pop(k) for k in list(state_dict) if k.startswith(head_prefix)}
        fitting = {}
        for head_name in sorted({k[len(head_prefix):].split(".")[0] for k in saved}):
            p = head_prefix + head_name + "."
            theirs = {k[len(p):]: v for k, v in saved.items() if k.startswith(p)}
            if (head_name not in self.classification_heads
                    and getattr(self.args, "load_checkpoint_heads", False)
                    and {"dense.weight", "out_proj.weight"} <= set(theirs)):
                self.register_classification_head(head_name, theirs["out_proj.weight"].size(0),
                                                  theirs["dense.weight"].size(0))
            if head_name not in self.classification_heads:
                # fairseq's words for it (RobertaModel.upgrade_state_dict_named)
                logger.warning(f"deleting classification head ({head_name}) from checkpoint "
                               f"not present in current model")
                continue
            mine = self.classification_heads[head_name].state_dict()
            if set(mine) == set(theirs) and all(mine[k].shape == theirs[k].shape for k in mine):
                fitting.update({p + k: v for k, v in theirs.items()})
            else:
                logger.warning(f"checkpoint head {head_name!r} does not fit this model's "
                               f"{type(self.classification_heads[head_name]).__name__} (a "
                               f"plain RoBERTa head or other settings): it starts fresh")
        super().upgrade_state_dict_named(state_dict, name)  # gives every head fresh weights
        state_dict.update(fitting)


for _name in MODEL_NAMES[1:]:  # the same model under the names the tasks document
    register_model(_name)(RobertaSpanModel)


def span_defaults(args):
    """The span model's settings a checkpoint or command line leaves out: the heads' from
    :data:`~span_plugin.modules.head_builders.MODEL_DEFAULTS` (the table exported folders
    are rebuilt with), the model's own here."""
    for key in ("span_encoder", "span_kernel_size", "span_dim", "head_dropout", "span_dropout"):
        setattr(args, key, safe_getattr(args, key, MODEL_DEFAULTS[key]))
    args.no_span_cls_concat = safe_getattr(args, "no_span_cls_concat", False) or False
    args.layernorm_eps = safe_getattr(args, "layernorm_eps", None)
    args.sentence_head = safe_getattr(args, "sentence_head", "span")
    args.compile = safe_getattr(args, "compile", False) or False
    args.compile_mode = safe_getattr(args, "compile_mode", None) or "default"
    args.compile_backend = safe_getattr(args, "compile_backend", None) or "inductor"
    bert_defaults(args)


def base_architecture(args):
    span_defaults(args)
    roberta_base_architecture(args)


def large_architecture(args):
    span_defaults(args)
    roberta_large_architecture(args)


for _name in MODEL_NAMES:
    register_model_architecture(_name, _name)(base_architecture)
    register_model_architecture(_name, _name + "_base")(base_architecture)
    register_model_architecture(_name, _name + "_large")(large_architecture)
