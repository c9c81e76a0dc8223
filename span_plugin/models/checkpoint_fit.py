"""Refuse a starting checkpoint whose encoder does not fit the model being built.

fairseq reports such a checkpoint as a size mismatch of ``embed_tokens`` under "please
ensure that the architectures match"; these checks say which input is at fault (the data
folder's dictionary, or the positions option) before any training step. Also the
LayerNorm eps a converted checkpoint needs.
"""

import torch.nn as nn

EMBED = "encoder.sentence_encoder.embed_tokens.weight"
POSITIONS = "encoder.sentence_encoder.embed_positions.weight"


class CheckpointMismatchError(ValueError):
    """A checkpoint whose vocabulary or positions do not fit the model being trained."""


def _saved(state_dict, prefix, key):
    """A tensor of a checkpoint under ``encoder.`` or (older RoBERTa files) ``decoder.``."""
    for k in (prefix + key, prefix + key.replace("encoder.", "decoder.", 1)):
        if k in state_dict:
            return state_dict[k]
    return None


def check_encoder_fits(model, state_dict, prefix, positions_fix):
    """Raise :class:`CheckpointMismatchError` when ``state_dict`` (keys under ``prefix``)
    has another number of embedding rows or of learned positions than ``model``, a
    fairseq RoBERTa. ``positions_fix``: what the user sets to fit the checkpoint's
    positions, a template of the checkpoint's count ``{n}``."""
    own = model.state_dict()
    rows, saved = own[EMBED].size(0), _saved(state_dict, prefix, EMBED)
    if saved is not None and saved.size(0) != rows:
        hint = (" It has one row fewer: its dictionary had no <mask> symbol (tasks "
                "add <mask> to dict.txt at load; this one did)." if saved.size(0) == rows - 1
                else "")
        raise CheckpointMismatchError(
            f"the checkpoint has a vocabulary of {saved.size(0)} embedding rows, this "
            f"model {rows} (the data folder's dict.txt plus <mask>): it was trained "
            f"with another dictionary.{hint} Binarize the text with the checkpoint's "
            f"own dict.txt (roberta.base: gpt2_bpe/dict.txt; span-convert: the "
            f"dict.txt beside model.pt)")
    saved = _saved(state_dict, prefix, POSITIONS)
    if saved is not None and POSITIONS in own and saved.size(0) != own[POSITIONS].size(0):
        pad = model.encoder.sentence_encoder.padding_idx
        theirs, ours = saved.size(0) - pad - 1, own[POSITIONS].size(0) - pad - 1
        raise CheckpointMismatchError(
            f"the checkpoint has {theirs} positions, this model {ours}: "
            + positions_fix.format(n=theirs))


def set_layernorm_eps(model, eps):
    """Give every LayerNorm of ``model`` the ``eps`` a converted checkpoint records (BERT:
    1e-12): fairseq builds them all with 1e-5 and has no option for it. None: keep."""
    if eps is None:
        return
    for module in model.modules():
        if isinstance(module, nn.LayerNorm) or hasattr(module, "normalized_shape"):
            module.eps = float(eps)
