"""GPT-2 byte-level BPE (RoBERTa's), from local ``encoder.json`` and ``vocab.bpe``.

Tokens are the decimal BPE ids as strings, identical to fairseq's
``examples/roberta/multiprocessing_bpe_encoder.py`` output for the same line. Each word
is one GPT-2 pre-token, so its tokens are exactly that pre-token's BPE tokens. A
whitespace-only pre-token (from runs of spaces) has no word; its tokens join the
following word (or the last word at the end of a line).
"""

import json

from span_plugin.formats.lines import MAX_TOKENIZER_BYTES, regular_file
from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.base import Tokenizer, register_tokenizer, skip_leading_space
from span_plugin.tokenizers.options import Option


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters: printable Latin-1
    bytes map to themselves, the other 68 bytes to U+0100 onwards in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@register_tokenizer("gpt2")
class GPT2Tokenizer(Tokenizer):
    # The flags and hub keywords keep fairseq's names (--gpt2-encoder-json).
    files = (Option("encoder_json", names=("gpt2_encoder_json",), help="GPT-2 encoder.json"),
             Option("vocab_bpe", names=("gpt2_vocab_bpe",), help="GPT-2 vocab.bpe"))
    needs = "gpt2 BPE needs local encoder_json and vocab_bpe paths"
    CACHE_LIMIT = 1 << 20

    def __init__(self, encoder_json, vocab_bpe):
        for path, flag in ((encoder_json, "--gpt2-encoder-json"), (vocab_bpe, "--gpt2-vocab-bpe")):
            regular_file(path, flag, MAX_TOKENIZER_BYTES)
        with open(encoder_json, encoding="utf-8") as f:
            try:
                self.encoder = json.load(f)
            except (ValueError, RecursionError) as err:  # UnicodeDecodeError is one
                raise ValueError(f"{encoder_json}: not valid JSON ({err}); expected GPT-2's "
                                 f"encoder.json (--gpt2-encoder-json)") from None
        if not isinstance(self.encoder, dict) or not all(
                isinstance(v, int) for v in self.encoder.values()):
            raise ValueError(f"{encoder_json}: expected GPT-2's encoder.json, a JSON object "
                             f"of token -> id (--gpt2-encoder-json)")
        with open(vocab_bpe, encoding="utf-8") as f:
            lines = f.read().split("\n")
        # First line is a version header, the last is empty.
        self._tables(self.encoder, [tuple(m.split()) for m in lines[1:-1]])

    @classmethod
    def from_tables(cls, encoder, merges):
        """The tokenizer of an ``encoder`` (BPE token -> id, ids distinct) and its
        ``merges`` (pairs of BPE tokens, highest priority first), as a Hugging Face
        ``tokenizer.json`` holds them: an exported model folder carries no encoder.json."""
        self = cls.__new__(cls)
        self._tables(dict(encoder), [tuple(m) for m in merges])
        return self

    def _tables(self, encoder, merges):
        self.encoder = encoder
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_map = bytes_to_unicode()
        self.byte_unmap = {c: b for b, c in self.byte_map.items()}
        self._cache = {}

    def _bpe(self, symbol_text):
        """Merge the lowest-ranked adjacent pair, all its occurrences left to right,
        until no pair has a rank (GPT-2's algorithm)."""
        parts = list(symbol_text)
        ranks = self.ranks
        while len(parts) > 1:
            best, best_rank = None, None
            for pair in zip(parts, parts[1:]):
                r = ranks.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            a, b = best
            merged, i, n = [], 0, len(parts)
            while i < n:
                if i < n - 1 and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def pretoken_tokens(self, pretoken):
        """The token strings (decimal ids) of one pre-token, cached."""
        toks = self._cache.get(pretoken)
        if toks is None:
            mapped = "".join(self.byte_map[b] for b in pretoken.encode("utf-8"))
            toks = tuple(str(self.encoder[p]) for p in self._bpe(mapped))
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[pretoken] = toks
        return toks

    def pieces(self, text):
        tokens, starts, words = [], [], []
        pending = None  # token offset of whitespace pre-tokens waiting for a word
        for pt in W.PRETOKEN_RE.findall(text):
            if pt[-1] in W.REGEX_SPACE:
                if pending is None:
                    pending = len(tokens)
            else:
                starts.append(len(tokens) if pending is None else pending)
                pending = None
                words.append(pt[1:] if pt[0] == " " and len(pt) > 1 else pt)
            tokens.extend(self.pretoken_tokens(pt))
        return tokens, starts, W.match_keys(words)

    def offsets(self, text):
        """A whitespace-only token is the empty range at its end."""
        out, pos = [], 0
        for pt in W.PRETOKEN_RE.findall(text):
            char_of_byte = []
            for k, ch in enumerate(pt):
                char_of_byte += [k] * len(ch.encode("utf-8"))
            byte = 0
            for t in self.pretoken_tokens(pt):
                n = len(self.decoder[int(t)])  # one mapped character per byte
                lo, hi = char_of_byte[byte], char_of_byte[byte + n - 1] + 1
                out.append((pos + lo, pos + hi))
                byte += n
            pos += len(pt)
        return skip_leading_space(text, out)

    def decode(self, tokens):
        """Token strings (decimal ids) -> text."""
        chars = "".join(self.decoder[int(t)] for t in tokens)
        return bytes(self.byte_unmap[c] for c in chars).decode("utf-8", errors="replace")
