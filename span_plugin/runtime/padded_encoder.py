"""fairseq's Transformer encoder forward without its data-dependent branch.

``TransformerEncoderBase.forward_scriptable`` tests ``padding_mask.any()`` and hands the
layers no mask when a batch has no padding. On a GPU that test waits for the device on
every forward (and under ``torch.compile`` it breaks the graph). Always passing the mask
gives the same outputs: an all-False mask adds 0 to the attention logits and multiplies
the embeddings by 1. Used by the compiled encoder (``models/compiled.py``) and, in
training, by the one-read update (``runtime/update_reads.py``).
"""

import torch


def forward_with_padding_mask(self, src_tokens, src_lengths=None, return_all_hiddens=False,
                              token_embeddings=None):
    """``self``: a fairseq ``TransformerEncoderBase``; ``src_tokens [B, T]`` -> fairseq's
    dict (``encoder_out``: ``[T, B, C]``, ``encoder_padding_mask``: ``[B, T]``)."""
    padding_mask = src_tokens.eq(self.padding_idx)  # [B, T]
    x, embedding = self.forward_embedding(src_tokens, token_embeddings)
    x = (x * (1 - padding_mask.unsqueeze(-1).type_as(x))).transpose(0, 1)  # [T, B, C]
    states, fc_results = ([x] if return_all_hiddens else []), []
    for layer in self.layers:
        out = layer(x, encoder_padding_mask=padding_mask)
        x, fc_result = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
        if return_all_hiddens:
            states.append(x)
            fc_results.append(fc_result)
    if self.layer_norm is not None:
        x = self.layer_norm(x)
    lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)
    return {
        "encoder_out": [x], "encoder_padding_mask": [padding_mask],
        "encoder_embedding": [embedding], "encoder_states": states,
        "fc_results": fc_results, "src_tokens": [], "src_lengths": [lengths.contiguous()],
    }
