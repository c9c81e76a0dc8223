"""Model ``roberta_span_pair``: RoBERTa (unchanged encoder, so ``roberta.base`` and
``span-convert`` checkpoints load) with the transfer fine-tuning heads of
:mod:`span_plugin.modules.span_pair_heads`. Task ``span_pair_classification`` registers
them; a checkpoint head that does not fit (another task's head) starts fresh, as in
``roberta_tagging``.
"""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import roberta_large_architecture

from span_plugin.modules.span_pair_heads import SpanPairHeads
from span_plugin.models.roberta_span import _span_defaults
from span_plugin.models.roberta_span import base_architecture as span_base_architecture
from span_plugin.models.roberta_tagging import RobertaTaggingModel


@register_model("roberta_span_pair")
class RobertaSpanPairModel(RobertaTaggingModel):
    """``forward(src_tokens, phrases=, classification_head_name=)`` returns
    ``({"phrasal": [P, C_p] or None, "sentential": [B, C_s] or None}, extra)``; P counts
    the non-empty phrase pairs (source start < end) in row-major order."""

    def register_span_pair_heads(self, name, phrase_classes, sentence_classes,
                                 features="max4", dropout=0.1):
        self.classification_heads[name] = SpanPairHeads(
            self.args.encoder_embed_dim, phrase_classes, sentence_classes, features, dropout)

    def forward(self, src_tokens, phrases=None, features_only=True, return_all_hiddens=False,
                classification_head_name=None, **kwargs):
        kwargs.pop("spans", None)
        kwargs.pop("words", None)
        x, extra = self.encoder(src_tokens, True, return_all_hiddens, **kwargs)
        if classification_head_name is None:
            return x, extra
        head = self.classification_heads[classification_head_name]
        valid = None if phrases is None else phrases[..., 1] > phrases[..., 0]
        return head(x, phrases=phrases, valid=valid), extra


@register_model_architecture("roberta_span_pair", "roberta_span_pair")
def base_architecture(args):
    from span_plugin.models.roberta_tagging import _tagging_defaults

    _tagging_defaults(args)
    span_base_architecture(args)


@register_model_architecture("roberta_span_pair", "roberta_span_pair_base")
def roberta_span_pair_base_architecture(args):
    base_architecture(args)


@register_model_architecture("roberta_span_pair", "roberta_span_pair_large")
def roberta_span_pair_large_architecture(args):
    from span_plugin.models.roberta_tagging import _tagging_defaults

    _tagging_defaults(args)
    _span_defaults(args)
    roberta_large_architecture(args)
