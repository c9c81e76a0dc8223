"""BERT's segment-B embedding and pooler in the plugin's models: the options, the
modules, and fitting a checkpoint to them.

Two model options, both off by default, so that a fairseq RoBERTa checkpoint and a
conversion made before these parts were kept build and compute exactly as before:

    --bert-token-types   add BERT's segment-B embedding to the tokens after the first
                         </s> (:mod:`span_plugin.modules.bert_segment_pooler`)
    --bert-pooler        the sentence heads read BERT's pooled <s> (dense + tanh)

``span-convert bert`` writes both parts into its checkpoint and records them in
``cfg.model``; ``span-convert flags`` prints the options for such a checkpoint, so the
recipes turn them on for a converted BERT. State-dict keys (model level, outside
``encoder.`` and ``classification_heads.``, which fairseq's and the plugin's upgrades
of a state dict leave alone): ``token_types.weight`` ``[2, H]`` and
``pooler.dense.{weight,bias}``.
"""

import logging

from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr

from span_plugin.models.checkpoint_fit import CheckpointMismatchError
from span_plugin.modules.bert_segment_pooler import Pooler, SegmentEmbedding

logger = logging.getLogger(__name__)

# model attribute -> (option, what it is, in log lines)
PARTS = {
    "token_types": ("--bert-token-types", "BERT's segment-B (token type 1) embedding"),
    "pooler": ("--bert-pooler", "BERT's pooler (dense + tanh on <s>)"),
}


def add_bert_args(parser):
    parser.add_argument("--bert-token-types", action="store_true", default=None,
                        help="add BERT's segment-B embedding to every token after the first "
                        "</s> (BERT's token type 1: B and its </s>); a span-convert bert "
                        "checkpoint holds it (span-convert flags prints this option)")
    parser.add_argument("--bert-pooler", action="store_true", default=None,
                        help="sentence heads read BERT's pretrained pooler (dense + tanh on "
                        "<s>) and end in one linear layer, as BERT's classifier and the "
                        "paper's code; --pooler-dropout (0.1 with it) is the plain head's "
                        "dropout. A span-convert bert checkpoint holds the pooler")


def bert_defaults(args):
    """Both parts off unless asked for; with the pooler, the plain head's dropout on the
    pooled <s> defaults to BERT's classifier dropout (0.1; fairseq's RoBERTa head: 0)."""
    args.bert_token_types = bool(safe_getattr(args, "bert_token_types", False))
    args.bert_pooler = bool(safe_getattr(args, "bert_pooler", False))
    if args.bert_pooler:
        args.pooler_dropout = safe_getattr(args, "pooler_dropout", 0.1)


def attach_bert_parts(model, args, trainable=True):
    """Give ``model`` (a fairseq RobertaModel) the parts ``args`` asks for, as
    ``model.token_types`` and ``model.pooler`` (None when off). Fresh parts start as
    BERT would without them: no segment difference, a pooler in BERT's initialisation.
    ``trainable=False`` carries them through training unchanged (pre-training, which
    reads neither)."""
    dim = args.encoder_embed_dim
    model.token_types = SegmentEmbedding(dim) if args.bert_token_types else None
    model.pooler = None
    if args.bert_pooler:
        model.pooler = Pooler(dim)
        model.pooler.apply(init_bert_params)
    if not trainable:
        for name in PARTS:
            if getattr(model, name) is not None:
                getattr(model, name).requires_grad_(False)


def token_embeddings(model, src_tokens):
    """``[B, T, H]``: the word embeddings of ``src_tokens [B, T]`` plus each token's
    segment row, for ``TransformerEncoder(token_embeddings=...)`` (which adds positions,
    the embedding LayerNorm and dropout after)."""
    embed = model.encoder.sentence_encoder.embed_tokens(src_tokens)
    return embed + model.token_types(src_tokens, model.encoder.dictionary.eos())


def fit_bert_parts(model, state_dict, prefix):
    """Make a checkpoint's state dict (keys under ``prefix``) fit the parts ``model``
    has, saying what happens when they differ:

    - the model has a part the checkpoint lacks (a fairseq RoBERTa checkpoint, or one
      converted before segment B and the pooler were kept): it starts fresh;
    - the checkpoint has a part the model runs without (its option off): it is dropped,
      and the model computes what it computed before these parts existed.
    """
    for name, (option, what) in PARTS.items():
        mine = getattr(model, name, None)
        key = prefix + name + "."
        theirs = {k[len(key):]: k for k in state_dict if k.startswith(key)}
        if mine is None:
            if theirs:
                logger.warning(f"the checkpoint holds {what}, which this model runs without "
                               f"({option} not set): it is dropped" + (
                                   ", and every token is encoded as segment A"
                                   if name == "token_types" else
                                   "; the heads read the <s> feature instead"))
                for k in theirs.values():
                    del state_dict[k]
            continue
        own = mine.state_dict()
        if not theirs:
            logger.warning(f"{option}: the checkpoint has no {what} (a fairseq RoBERTa "
                           f"checkpoint, or a BERT converted before span-convert kept it): "
                           f"it starts fresh" + (" at zero, as segment A"
                                                 if name == "token_types" else "")
                           + "; re-convert the BERT with span-convert bert to use its own")
            state_dict.update({key + k: v for k, v in own.items()})
            continue
        for k, v in own.items():
            saved = state_dict.get(key + k)
            if saved is None or saved.shape != v.shape:
                raise CheckpointMismatchError(
                    f"the checkpoint's {what} ({key + k}) has shape "
                    f"{None if saved is None else tuple(saved.shape)}, this model's "
                    f"{tuple(v.shape)}")


def pooled_first(model, features):
    """``features [B, T, H]`` -> BERT's pooled ``<s>`` ``[B, H]``."""
    if getattr(model, "pooler", None) is None:
        raise ValueError("this head reads BERT's pooled <s>, but the model has no pooler "
                         "(--bert-pooler not set)")
    return model.pooler(features[:, 0, :])

