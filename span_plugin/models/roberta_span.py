"""Model ``roberta_span``: RoBERTa whose classification heads read n-gram spans.

The encoder is fairseq's RoBERTa, unchanged (so ``roberta.base``/``roberta.large``
weights load into it). Heads are :class:`SpanClassificationHead`: a span encoder turns
the token features and the example's spans into a sentence span vector s, which is
joined with the ``<s>`` feature and classified by dense/tanh/dropout/projection
(Bao, Zhang, Zhao: Span Fine-tuning). See docs/TASK_MODEL.md.
"""

import logging

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import (
    RobertaModel,
    roberta_base_architecture,
    roberta_large_architecture,
)
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from span_plugin.modules import SPAN_ENCODERS, build_span_encoder
from span_plugin.models.checkpoint_fit import check_encoder_fits

logger = logging.getLogger(__name__)


class SpanClassificationHead(nn.Module):
    """The paper's head: span encoder -> s; [s; x_<s>] -> dense -> tanh -> projection.

    Args:
        input_dim: D, width of the encoder's token features.
        span_dim: H, width of the span encoder; when it differs from D the features
            go through a Linear(D, H) first.
        inner_dim: width of the dense layer.
        num_classes: outputs (1 for regression).
        span_encoder: one of ``SPAN_ENCODERS`` ("cnn" is the no-segmentation control).
        kernel_size: CNN kernel of the cnn kinds.
        concat_cls: join s with the ``<s>`` feature (the paper's default); False feeds
            s alone (the paper's Figure 4 setting).
    """

    def __init__(
        self,
        input_dim,
        span_dim,
        inner_dim,
        num_classes,
        span_encoder="cnn-cnn",
        kernel_size=3,
        concat_cls=True,
        activation_fn="tanh",
        pooler_dropout=0.0,
        q_noise=0,
        qn_block_size=8,
        do_spectral_norm=False,
    ):
        super().__init__()
        self.span_proj = nn.Linear(input_dim, span_dim) if span_dim != input_dim else None
        self.span_encoder = build_span_encoder(span_encoder, span_dim, kernel_size)
        self.concat_cls = concat_cls
        self.dense = nn.Linear(span_dim + (input_dim if concat_cls else 0), inner_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = apply_quant_noise_(
            nn.Linear(inner_dim, num_classes), q_noise, qn_block_size
        )
        if do_spectral_norm:
            if q_noise != 0:
                raise NotImplementedError("spectral norm together with quant noise")
            self.out_proj = torch.nn.utils.spectral_norm(self.out_proj)

    def forward(self, features, spans, **kwargs):
        """
        Args:
            features: ``[B, T, D]`` encoder output; position 0 is ``<s>``.
            spans: LongTensor ``[B, S, 2]``, (start, end) into T, end exclusive;
                (0, 0) rows are padding. An example with no span gets s = 0.

        Returns:
            logits ``[B, num_classes]``.
        """
        if spans.dtype != torch.long:
            raise TypeError(f"spans must be a LongTensor [B, S, 2], got {spans.dtype}")
        token_features = features if self.span_proj is None else self.span_proj(features)
        x = self.span_encoder(token_features, spans)  # [B, H]
        if self.concat_cls:
            x = torch.cat([x, features[:, 0, :]], dim=-1)  # [B, H + D]
        x = self.dropout(x)
        x = self.dense(x)
        x = self.activation_fn(x)
        x = self.dropout(x)
        return self.out_proj(x)


@register_model("roberta_span")
class RobertaSpanModel(RobertaModel):
    """RoBERTa with span classification heads; ``forward`` takes ``spans``."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument(
            "--span-encoder",
            choices=SPAN_ENCODERS,
            help="how span vectors and the sentence span vector are made: cnn-cnn (the "
            "paper's), cnn-max, attn-max, attn-attn; cnn = no-segmentation control",
        )
        parser.add_argument(
            "--span-kernel-size", type=int, metavar="K", help="CNN kernel size (odd; 3)"
        )
        parser.add_argument(
            "--span-dim",
            type=int,
            metavar="H",
            help="width of the span encoder (default: encoder embed dim)",
        )
        parser.add_argument(
            "--layernorm-eps",
            type=float,
            metavar="EPS",
            help="eps of every LayerNorm of the encoder (default: fairseq's 1e-5). A "
            "converted BERT checkpoint records its own (1e-12) as layernorm_eps; fairseq's "
            "plain roberta model cannot take it, so a plain-vs-span comparison leaves it "
            "at the default in both",
        )
        parser.add_argument(
            "--no-span-cls-concat",
            action="store_true",
            default=None,
            help="classify from the span vector alone, without the <s> feature",
        )

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        base_architecture(args)
        model = super().build_model(args, task)
        if args.layernorm_eps is not None:
            # fairseq builds every LayerNorm with eps 1e-5 and has no option for it.
            for module in model.modules():
                if isinstance(module, nn.LayerNorm) or hasattr(module, "normalized_shape"):
                    module.eps = float(args.layernorm_eps)
        return model

    def forward(
        self,
        src_tokens,
        spans=None,
        features_only=False,
        return_all_hiddens=False,
        classification_head_name=None,
        **kwargs,
    ):
        """
        Args:
            src_tokens: LongTensor ``[B, T]``.
            spans: LongTensor ``[B, S, 2]``, positions into T; needed by span heads.
            classification_head_name: run that head on the features.

        Returns:
            ``(logits [B, C], extra)`` with a head, else as RobertaModel.forward.
        """
        if classification_head_name is not None:
            features_only = True
        x, extra = self.encoder(src_tokens, features_only, return_all_hiddens, **kwargs)
        if classification_head_name is not None:
            head = self.classification_heads[classification_head_name]
            if isinstance(head, SpanClassificationHead):
                if spans is None:
                    raise ValueError(
                        f"classification head {classification_head_name!r} reads spans: "
                        f"pass spans=LongTensor[B, S, 2] (task span_classification puts "
                        f"them in net_input)"
                    )
                x = head(x, spans)
            else:
                x = head(x)
        return x, extra

    def _build_head(self, num_classes, inner_dim=None):
        a = self.args
        return SpanClassificationHead(
            input_dim=a.encoder_embed_dim,
            span_dim=a.span_dim or a.encoder_embed_dim,
            inner_dim=inner_dim or a.encoder_embed_dim,
            num_classes=num_classes,
            span_encoder=a.span_encoder,
            kernel_size=a.span_kernel_size,
            concat_cls=not a.no_span_cls_concat,
            activation_fn=a.pooler_activation_fn,
            pooler_dropout=a.pooler_dropout,
            q_noise=a.quant_noise_pq,
            qn_block_size=a.quant_noise_pq_block_size,
            do_spectral_norm=a.spectral_norm_classification_head,
        )

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        """Register a :class:`SpanClassificationHead` (replacing one of that name)."""
        if name in self.classification_heads:
            old = self.classification_heads[name]
            if (
                num_classes != old.out_proj.out_features
                or (inner_dim or self.args.encoder_embed_dim) != old.dense.out_features
            ):
                logger.warning(
                    f"re-registering head {name!r} with num_classes {num_classes} "
                    f"(prev: {old.out_proj.out_features})"
                )
        self.classification_heads[name] = self._build_head(num_classes, inner_dim)

    def upgrade_state_dict_named(self, state_dict, name):
        """Refuse an encoder of another vocabulary or positions (a clear error instead
        of fairseq's size mismatch); drop checkpoint heads that do not fit this model's
        span heads.

        A plain RoBERTa head (``dense``/``out_proj`` only) or a span head of other
        settings (encoder kind, width, concat) is removed here, so RobertaModel's
        logic then gives this model's head its fresh weights; a ``roberta.base``
        checkpoint (no heads) loads with fresh span heads as well.
        """
        prefix = name + "." if name != "" else ""
        check_encoder_fits(self, state_dict, prefix, "set --max-positions {n}")
        head_prefix = prefix + "classification_heads."
        ckpt_heads = {
            k[len(head_prefix):].split(".")[0] for k in state_dict if k.startswith(head_prefix)
        }
        for head_name in sorted(ckpt_heads):
            p = head_prefix + head_name + "."
            saved = {k[len(p):]: v for k, v in state_dict.items() if k.startswith(p)}
            if head_name in self.classification_heads:
                expected = self.classification_heads[head_name].state_dict()
            elif getattr(self.args, "load_checkpoint_heads", False):
                if "out_proj.weight" not in saved or "dense.weight" not in saved:
                    expected = None
                else:
                    expected = self._build_head(
                        saved["out_proj.weight"].size(0), saved["dense.weight"].size(0)
                    ).state_dict()
            else:
                continue  # RobertaModel's logic deletes it
            fits = expected is not None and set(saved) == set(expected) and all(
                saved[k].shape == expected[k].shape for k in expected
            )
            if not fits:
                logger.warning(
                    f"checkpoint head {head_name!r} does not fit this model's span head "
                    f"(a plain RoBERTa head or other span settings): it is dropped and "
                    f"the head starts from fresh weights"
                )
                for k in saved:
                    del state_dict[p + k]
        super().upgrade_state_dict_named(state_dict, name)


def _span_defaults(args):
    args.span_encoder = safe_getattr(args, "span_encoder", "cnn-cnn")
    args.span_kernel_size = safe_getattr(args, "span_kernel_size", 3)
    args.span_dim = safe_getattr(args, "span_dim", None)
    args.no_span_cls_concat = safe_getattr(args, "no_span_cls_concat", False) or False
    args.layernorm_eps = safe_getattr(args, "layernorm_eps", None)


@register_model_architecture("roberta_span", "roberta_span")
def base_architecture(args):
    _span_defaults(args)
    roberta_base_architecture(args)


@register_model_architecture("roberta_span", "roberta_span_base")
def roberta_span_base_architecture(args):
    base_architecture(args)


@register_model_architecture("roberta_span", "roberta_span_large")
def roberta_span_large_architecture(args):
    _span_defaults(args)
    roberta_large_architecture(args)
