"""fastBPE from a local codes file (and optional vocabulary); tokens carry ``@@``.

The GPT-2 words (:mod:`span_plugin.tokenizers.words`) are joined by single spaces (the
pre-tokenized text fastBPE expects) and encoded in one call; a token not ending in
``@@`` ends a word.
"""

from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.base import Tokenizer, offsets_in_words, register_tokenizer
from span_plugin.tokenizers.options import Option


@register_tokenizer("fastbpe")
class FastBPETokenizer(Tokenizer):
    files = (Option("bpe_codes", help="fastBPE codes file"),)
    optional_files = (Option("bpe_vocab", help="fastBPE vocabulary file (optional)"),)
    needs = "fastbpe needs a local bpe_codes path"

    def __init__(self, bpe_codes, bpe_vocab=None):
        from span_plugin.requires import require

        # part of the training install: its C++ compiles only when built without isolation
        require("fastBPE", "--bpe fastbpe", "bash install.sh builds it (or pip install cython, "
                "then pip install --no-build-isolation fastBPE==0.1.0)")
        import fastBPE

        args = [str(bpe_codes)] + ([str(bpe_vocab)] if bpe_vocab else [])
        self.bpe = fastBPE.fastBPE(*args)

    def pieces(self, text):
        words = W.split_words(text)
        if not words:
            return [], [], []
        tokens = self.bpe.apply([" ".join(words)])[0].split(" ")
        starts, new_word = [], True
        for i, t in enumerate(tokens):
            if new_word:
                starts.append(i)
            new_word = not t.endswith("@@")
        if len(starts) != len(words):
            raise ValueError(f"fastBPE gave {len(starts)} words for {len(words)} input "
                             f"words in {text[:80]!r}")
        return tokens, starts, W.match_keys(words)

    def offsets(self, text):
        tokens, starts, _ = self.pieces(text)
        return offsets_in_words(text, tokens, starts,
                                lambda t: t[:-2] if t.endswith("@@") else t)

    def decode(self, tokens):
        return " ".join(tokens).replace("@@ ", "")
