"""sentencepiece from a local ``.model`` file; tokens are pieces.

The line is split into the GPT-2 words (:mod:`span_plugin.tokenizers.words`) and each
word is encoded on its own, so it starts with the ``▁`` word marker, also for
punctuation that followed a word without a space in the text. Tokens of a word are the
pieces of that word.
"""

import os

from span_plugin.formats.lines import MAX_TOKENIZER_BYTES, regular_file
from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.base import Tokenizer, offsets_in_words, register_tokenizer
from span_plugin.tokenizers.options import Option


def load_model(path):
    """A ``SentencePieceProcessor`` of the ``.model`` file ``path``; a file that is none
    (a text vocabulary, a folder) is a ValueError naming it, not sentencepiece's
    RuntimeError."""
    import sentencepiece as spm

    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (--sentencepiece-model)")
    regular_file(path, "--sentencepiece-model", MAX_TOKENIZER_BYTES)
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except RuntimeError as err:
        raise ValueError(f"{path}: not a sentencepiece model ({err}); expected the binary "
                         f".model file sentencepiece trained (--sentencepiece-model)") from None


@register_tokenizer("sentencepiece")
class SentencePieceTokenizer(Tokenizer):
    files = (Option("sentencepiece_model", help="sentencepiece .model file"),)
    needs = "sentencepiece needs a local sentencepiece_model path"

    def __init__(self, sentencepiece_model):
        self.sp = load_model(sentencepiece_model)

    def pieces(self, text):
        words = W.split_words(text)
        tokens, starts = [], []
        for pieces in (self.sp.encode(words, out_type=str) if words else []):
            starts.append(len(tokens))
            tokens.extend(pieces)
        return tokens, starts, W.match_keys(words)

    def offsets(self, text):
        tokens, starts, _ = self.pieces(text)
        return offsets_in_words(text, tokens, starts, lambda t: t.lstrip("\u2581"))

    def decode(self, tokens):
        return self.sp.decode(list(tokens))
