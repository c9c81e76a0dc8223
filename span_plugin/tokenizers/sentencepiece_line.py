"""sentencepiece over the whole line, as XLM-R and CamemBERT were trained: the same
pieces as fairseq's ``sentencepiece`` BPE and Hugging Face's XLMRobertaTokenizer /
CamembertTokenizer ("York," gives ``▁York ,``, where the ``sentencepiece`` kind, which
encodes GPT-2 words one by one, gives ``▁York ▁,``).

Words are sentencepiece's own: a piece starting with ``▁`` starts one (the ``spm`` word
scheme of :mod:`span_plugin.tokenizers.words`: whitespace-separated pieces of the
normalized text). Keys are the scheme's keys of each word's characters in the line, so
an n-gram dictionary counted with ``--words spm`` matches them.
"""

from itertools import accumulate

from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.base import Tokenizer, register_tokenizer
from span_plugin.tokenizers.sentencepiece import load_model

UNK = "<unk>"  # fairseq's (and Hugging Face's) unknown token, id 3


@register_tokenizer("sentencepiece-line")
class SentencePieceLineTokenizer(Tokenizer):
    word_scheme = "spm"
    files = ("sentencepiece_model",)  # the sentencepiece kind's --sentencepiece-model
    needs = "sentencepiece-line needs a local sentencepiece .model path (--sentencepiece-model)"

    def __init__(self, sentencepiece_model):
        self.sp = load_model(sentencepiece_model)

    def _encode(self, text):
        """``(tokens, char ranges, word starts)``: each piece, the characters it came
        from (sentencepiece reports UTF-8 byte offsets; leading whitespace included),
        and the token indices where a word starts."""
        encoded = self.sp.encode(text, out_type="proto").pieces
        # The first piece starts a word even where the model adds no "▁" prefix. An
        # unknown piece comes back as its characters; fairseq's symbol for it is <unk>.
        starts = [i for i, p in enumerate(encoded) if i == 0 or p.piece.startswith(W.SPM_SPACE)]
        unk = self.sp.unk_id()
        tokens = [UNK if p.id == unk else p.piece for p in encoded]
        if text.isascii():
            return tokens, [(p.begin, p.end) for p in encoded], starts
        # char_of: byte offset of each character's start (and of the end) -> its index;
        # a piece never splits a character
        byte_starts = accumulate((len(c.encode("utf-8")) for c in text), initial=0)
        char_of = {b: i for i, b in enumerate(byte_starts)}
        return tokens, [(char_of[p.begin], char_of[p.end]) for p in encoded], starts

    def pieces(self, text):
        tokens, ranges, starts = self._encode(text)
        ends = starts[1:] + [len(tokens)]
        surfaces = [text[ranges[a][0]:ranges[b - 1][1]] for a, b in zip(starts, ends)]
        return tokens, starts, W.spm_keys(surfaces)

    def offsets(self, text):
        """A word's first range starts at its first character that is not a space to
        sentencepiece (a space, or a zero-width or control character it drops); a bare
        "▁" piece is the empty range before the word's next character."""
        _, ranges, starts = self._encode(text)
        starts, out = set(starts), []
        for i, (lo, hi) in enumerate(ranges):
            if i in starts:
                while lo < hi and (text[lo].isspace()
                                   or not ("!" <= text[lo] <= "~" or W.spm_words(text[lo]))):
                    lo += 1
            out.append((lo, hi))
        return out

    def decode(self, tokens):
        return self.sp.decode(list(tokens))
