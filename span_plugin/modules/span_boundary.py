"""SpanBERT's span boundary objective (SBO): predict each masked token from the two
tokens around its masked run and its position in the run. Pure torch.

For a masked token at position i of a run of masked tokens ``s..e`` (inclusive), with
boundary tokens ``l = s - 1`` and ``r = e + 1`` (visible: span masking never masks two
runs that touch, nor the block's first and last token):

    h0 = [x_l ; x_r ; p_(i - l)]                  2 D + P
    h1 = LayerNorm(GeLU(W1 h0 + b1))              D
    h2 = LayerNorm(GeLU(W2 h1 + b2))              D
    logits = E h2 + bias                          V   (E: the tied output embeddings)

``p`` is a learned relative position embedding (offset 1 = the first token of the run);
offsets past its table are clamped to the last row.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from span_plugin.modules.span_extractors import build_span_extractor


def masked_runs(mask):
    """Boundaries of every masked token's run.

    mask: bool ``[B, T]``.
    Returns ``(batch, position, left, right)``, each LongTensor ``[N]`` over the masked
    tokens in row-major order (the order of ``features[mask]``): the token's row, its
    position, and the positions of the nearest unmasked token to its left and right
    (clamped to ``[0, T - 1]`` where the run touches the edge of the row).
    """
    size = mask.size(1)
    pos = torch.arange(size, device=mask.device).expand_as(mask)
    left = torch.cummax(torch.where(mask, -1, pos), dim=1).values
    right = torch.cummin(torch.where(mask, size, pos).flip(1), dim=1).values.flip(1)
    batch, position = mask.nonzero(as_tuple=True)
    left = left[batch, position].clamp(min=0)
    right = right[batch, position].clamp(max=size - 1)
    return batch, position, left, right


class SpanBoundaryHead(nn.Module):
    """The SBO network (module docstring).

    Layers are named ``dense`` (W1) and ``out_proj`` (W2): with these names a RoBERTa
    model keeps the head among its ``classification_heads``, and a fine-tuning model
    that has no such head drops it from a checkpoint instead of failing.

    Args:
        embed_dim: D, width of the encoder features.
        vocab_size: V, rows of the output embedding (for the output bias).
        max_positions: rows of the relative position table (offsets 1..max_positions).
        position_dim: P (default D).
        eps: LayerNorm eps.
    """

    def __init__(self, embed_dim, vocab_size, max_positions=128, position_dim=None, eps=1e-5):
        super().__init__()
        position_dim = position_dim or embed_dim
        self.max_positions = max_positions
        # offset i - l of a token is the width of the span (l, i): a width embedding
        self.position_embeddings = build_span_extractor("width", position_dim, max_width=max_positions)
        self.dense = nn.Linear(2 * embed_dim + position_dim, embed_dim)
        self.layer_norm1 = nn.LayerNorm(embed_dim, eps=eps)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.layer_norm2 = nn.LayerNorm(embed_dim, eps=eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def hidden(self, features, batch, left, right, offset):
        """
        Args:
            features: ``[B, T, D]`` encoder output.
            batch, left, right: LongTensor ``[N]``: row and boundary positions of each
                predicted token.
            offset: LongTensor ``[N]``, the token's position minus ``left`` (>= 1).

        Returns:
            ``[N, D]`` (h2 above).
        """
        position = self.position_embeddings(features, torch.stack([left, left + offset], -1))
        h = torch.cat([features[batch, left], features[batch, right], position.to(features.dtype)], dim=-1)
        h = self.layer_norm1(F.gelu(self.dense(h)))
        return self.layer_norm2(F.gelu(self.out_proj(h)))

    def forward(self, features, mask, output_weight):
        """
        Args:
            features: ``[B, T, D]``.
            mask: bool ``[B, T]``, the masked (predicted) tokens.
            output_weight: ``[V, D]``, the tied output embedding.

        Returns:
            logits ``[N, V]`` for the masked tokens in row-major order (the order of
            ``features[mask]`` and of fairseq's LM head with ``masked_tokens``).
        """
        return F.linear(self.masked_hidden(features, mask), output_weight) + self.bias

    def masked_hidden(self, features, mask):
        """``[N, D]`` (h2 above) for the masked tokens of ``mask`` (bool ``[B, T]``), in
        row-major order; ``forward`` without the output projection."""
        batch, position, left, right = masked_runs(mask)
        return self.hidden(features, batch, left, right, position - left)
