"""Model ``roberta_spanbert``: RoBERTa with SpanBERT's span boundary objective head.

The encoder and the masked-LM head are fairseq's RoBERTa, unchanged, so
``roberta.base`` and ``span-convert`` checkpoints continue pre-training from
``--restore-file`` / ``--finetune-from-model`` (the SBO head starts fresh). The SBO head
(:class:`~span_plugin.modules.SpanBoundaryHead`) is kept among RoBERTa's
``classification_heads`` as ``span_boundary``: fine-tuning models (``roberta_span``,
fairseq's ``roberta``) drop a checkpoint head they do not have, with a warning, so the
pre-trained checkpoint fine-tunes with no conversion. See docs/PRETRAIN.md.
"""

import logging

import torch
import torch.nn.functional as F

from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import (
    RobertaModel,
    roberta_base_architecture,
    roberta_large_architecture,
)
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from span_plugin.models.bert_attach import add_bert_args, attach_bert_parts, bert_defaults, fit_bert_parts
from span_plugin.models.checkpoint_fit import check_encoder_fits
from span_plugin.models.heads import build_head

logger = logging.getLogger(__name__)

SBO_HEAD = "span_boundary"


@register_model("roberta_spanbert")
class RobertaSpanBertModel(RobertaModel):
    """RoBERTa + SBO head; ``forward(..., masked_tokens, span_boundary=True)`` also
    returns the SBO logits of the masked tokens in ``extra["sbo_logits"]``."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument(
            "--sbo-max-positions", type=int, metavar="N",
            help="rows of the SBO head's relative position table (offsets in a masked "
            "run; longer runs share the last row); default 128")
        # A converted BERT's segment-B embedding and pooler (span-convert flags prints
        # the options): pre-training reads neither, and carries them on unchanged.
        add_bert_args(parser)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        base_architecture(args)
        model = super().build_model(args, task)
        model.classification_heads[SBO_HEAD] = build_head(
            "span_boundary", args, vocab_size=len(task.source_dictionary))
        attach_bert_parts(model, args, trainable=False)
        return model

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False,
                classification_head_name=None, masked_tokens=None, span_boundary=False,
                **kwargs):
        """
        Args:
            src_tokens: LongTensor ``[B, T]``.
            masked_tokens: bool ``[B, T]``, the tokens to predict.
            span_boundary: also run the SBO head (needs masked_tokens).

        Returns:
            ``(mlm_logits [N, V], extra)``, with ``extra["sbo_logits"]`` ``[N, V]`` when
            span_boundary; otherwise as RobertaModel.forward.
        """
        if not span_boundary:
            return super().forward(src_tokens, features_only, return_all_hiddens,
                                   classification_head_name, masked_tokens=masked_tokens,
                                   **kwargs)
        if masked_tokens is None:
            raise ValueError("span_boundary=True needs masked_tokens (bool [B, T])")
        x, extra = self.encoder.extract_features(src_tokens, return_all_hiddens=return_all_hiddens)
        lm, sbo = self.encoder.lm_head, self.classification_heads[SBO_HEAD]
        # RobertaLMHead.forward up to its output projection, then one projection onto
        # the tied embeddings for both objectives: one [2N, D] x [D, V] product and one
        # [V, D] weight gradient instead of two of each (the projection is most of the
        # heads' cost).
        mlm_hidden = lm.layer_norm(lm.activation_fn(lm.dense(x[masked_tokens])))
        both = F.linear(torch.cat([mlm_hidden, sbo.masked_hidden(x, masked_tokens)]), lm.weight)
        n = mlm_hidden.size(0)
        extra["sbo_logits"] = both[n:] + sbo.bias
        return both[:n] + lm.bias, extra

    def upgrade_state_dict_named(self, state_dict, name):
        """Refuse a checkpoint of another vocabulary or fewer positions (with a message
        that says so, instead of a size mismatch); give a RoBERTa or converted BERT
        checkpoint, which has no SBO head, a fresh one (RobertaModel copies the
        model's own head weights into the state for heads the checkpoint lacks)."""
        prefix = name + "." if name != "" else ""
        check_encoder_fits(
            self, state_dict, prefix,
            "set --max-positions {n} and --tokens-per-sample to at most {n}, so that "
            "blocks fit the pre-trained position embeddings")
        own = self.state_dict()
        head = prefix + "classification_heads." + SBO_HEAD + "."
        mine = {k: v for k, v in own.items() if k.startswith("classification_heads." + SBO_HEAD + ".")}
        theirs = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(head)}
        if theirs and (set(theirs) != set(mine)
                       or any(theirs[k].shape != mine[k].shape for k in mine)):
            logger.warning("the checkpoint's SBO head has other sizes (--sbo-max-positions?): "
                           "it is dropped and the head starts fresh")
            for k in theirs:
                del state_dict[prefix + k]
        fit_bert_parts(self, state_dict, prefix)
        super().upgrade_state_dict_named(state_dict, name)


def _sbo_defaults(args):
    args.sbo_max_positions = safe_getattr(args, "sbo_max_positions", 128)
    bert_defaults(args)


@register_model_architecture("roberta_spanbert", "roberta_spanbert")
def base_architecture(args):
    _sbo_defaults(args)
    roberta_base_architecture(args)


@register_model_architecture("roberta_spanbert", "roberta_spanbert_base")
def roberta_spanbert_base_architecture(args):
    base_architecture(args)


@register_model_architecture("roberta_spanbert", "roberta_spanbert_large")
def roberta_spanbert_large_architecture(args):
    _sbo_defaults(args)
    roberta_large_architecture(args)
