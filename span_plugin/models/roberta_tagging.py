"""Model ``roberta_tagging``: RoBERTa (unchanged encoder, so ``roberta.base`` and
``span-convert`` checkpoints load) with token-level heads from
:mod:`span_plugin.modules.tagging_heads`: ``token`` (baseline), ``sf`` (token-level Span
Fine-tuning) or ``span`` (span labeling). Tasks ``span_tagging`` and ``span_labeling``
register the head. Span options (``--span-dim``, ``--span-kernel-size``,
``--layernorm-eps``) are those of ``roberta_span``.
"""

import logging

from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import roberta_large_architecture
from fairseq.utils import safe_getattr

from span_plugin.modules.tagging_heads import SpanLabelingHead, SpanTokenTaggingHead, TokenTaggingHead
from span_plugin.models.roberta_span import RobertaSpanModel, _span_defaults
from span_plugin.models.roberta_span import base_architecture as span_base_architecture

logger = logging.getLogger(__name__)


@register_model("roberta_tagging")
class RobertaTaggingModel(RobertaSpanModel):
    """``forward(src_tokens, spans=, words=, classification_head_name=)`` returns the
    head's output: tagging heads logits ``[B, T, C]``; the span head
    ``(logits [B, W, L, C], valid [B, W, L])``."""

    @staticmethod
    def add_args(parser):
        RobertaSpanModel.add_args(parser)
        parser.add_argument("--head-dropout", type=float, metavar="P",
                            help="dropout before the tagging or span-labeling output (0.1)")

    def register_tagging_head(self, name, kind, num_classes, max_words=8):
        a = self.args
        dim = a.encoder_embed_dim
        if kind == "token":
            head = TokenTaggingHead(dim, num_classes, dropout=a.head_dropout)
        elif kind == "sf":
            head = SpanTokenTaggingHead(dim, num_classes, span_dim=a.span_dim,
                                        kernel_size=a.span_kernel_size, dropout=a.head_dropout)
        elif kind == "span":
            head = SpanLabelingHead(dim, num_classes, max_words=max_words, dropout=a.head_dropout)
        else:
            raise ValueError(f"unknown tagging head {kind!r}: token, sf or span")
        self.classification_heads[name] = head

    def forward(self, src_tokens, spans=None, words=None, features_only=True,
                return_all_hiddens=False, classification_head_name=None, **kwargs):
        x, extra = self.encoder(src_tokens, True, return_all_hiddens, **kwargs)
        if classification_head_name is None:
            return x, extra
        head = self.classification_heads[classification_head_name]
        return head(x, spans=spans, words=words), extra

    def upgrade_state_dict_named(self, state_dict, name):
        """Keep a checkpoint head only when it is this model's head of the same kind and
        shapes (resume, hub); anything else (a GLUE head, another tagging head) is
        dropped and the head starts fresh."""
        prefix = (name + "." if name else "") + "classification_heads."
        saved = {k: state_dict.pop(k) for k in list(state_dict) if k.startswith(prefix)}
        super().upgrade_state_dict_named(state_dict, name)  # copies in the fresh heads
        for head_name, head in self.classification_heads.items():
            p = prefix + head_name + "."
            mine = {p + k: v for k, v in head.state_dict().items()}
            theirs = {k: v for k, v in saved.items() if k.startswith(p)}
            if not theirs:
                continue
            if set(mine) == set(theirs) and all(mine[k].shape == theirs[k].shape for k in mine):
                state_dict.update(theirs)
            else:
                logger.warning(f"checkpoint head {head_name!r} does not fit this model's "
                               f"{type(head).__name__}: it starts from fresh weights")


def _tagging_defaults(args):
    args.head_dropout = safe_getattr(args, "head_dropout", 0.1)


@register_model_architecture("roberta_tagging", "roberta_tagging")
def base_architecture(args):
    _tagging_defaults(args)
    span_base_architecture(args)


@register_model_architecture("roberta_tagging", "roberta_tagging_base")
def roberta_tagging_base_architecture(args):
    base_architecture(args)


@register_model_architecture("roberta_tagging", "roberta_tagging_large")
def roberta_tagging_large_architecture(args):
    _tagging_defaults(args)
    _span_defaults(args)
    roberta_large_architecture(args)
