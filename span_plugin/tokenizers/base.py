"""The one tokenizer interface (:class:`Tokenizer`: symbols of ``dict.txt``, word starts,
each token's characters) and its registry (:func:`register_tokenizer`). A kind declares
its files once (:class:`~span_plugin.tokenizers.options.Option`); the command lines, the
hub and the data record derive from that. How to add a kind: docs/ARCHITECTURE.md,
section "Module notes"."""

from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.options import Option

TOKENIZERS = {}  # kind name -> Tokenizer subclass, in registration order


def file_options():
    """``{field: Option}`` of every registered kind's files, in registration order."""
    return {o.field: o for cls in TOKENIZERS.values() for o in cls.options}


def _declared(option, known):
    """The registry's Option for a kind's declaration (an Option or a bare field)."""
    if isinstance(option, str):
        return known.get(option) or Option(option)
    if known.get(option.field, option) != option:
        raise ValueError(f"tokenizer file {option.field!r} is declared twice, differently: "
                         f"{known[option.field]} and {option}")
    return option


def register_tokenizer(name):
    """Class decorator: make ``cls`` the tokenizer of kind ``name``."""
    def add(cls):
        if name in TOKENIZERS:
            raise ValueError(f"tokenizer kind {name!r} is registered twice "
                             f"({TOKENIZERS[name].__name__} and {cls.__name__})")
        known = file_options()
        cls.options = tuple(_declared(o, known) for o in (*cls.files, *cls.optional_files))
        cls.required = tuple(o.field for o in cls.options[:len(cls.files)])
        cls.kind = name
        TOKENIZERS[name] = cls
        return cls
    return add


def tokenizer_kind(kind):
    """The registered Tokenizer subclass of ``kind``."""
    cls = TOKENIZERS.get(kind)
    if cls is None:
        raise ValueError(f"bpe {kind!r}: expected one of {tuple(TOKENIZERS)}")
    return cls


class Tokenizer:
    """Subclasses give :meth:`pieces`, :meth:`offsets` and :meth:`decode`.

    ``files``: the files (Options, or bare fields) the constructor takes as keyword
    arguments, all required; ``optional_files``: those it may do without. ``needs``:
    what to tell a user who left a required file out.
    """

    kind = None  # set by register_tokenizer
    word_scheme = "gpt2"  # the words its keys are made of (words.WORD_SCHEMES)
    files = ()
    optional_files = ()
    needs = None
    options = ()  # set by register_tokenizer: the Options of files + optional_files
    required = ()  # set by register_tokenizer: the fields of files

    @classmethod
    def recorded_paths(cls, files):
        """Its part of a data record: ``{record key: path}`` of the files it is built
        from (``files``: {field: path or None}), as each Option records a path."""
        out = {}
        for option in cls.options:
            path = files.get(option.field)
            if path:
                out.update({k: p for k, p in option.recorded_files(path).items() if p})
        return out

    def pieces(self, text):
        """``(tokens, word_starts, keys)`` of ``text``: the dict.txt symbols, the token
        index where each word starts, and each word's matching key (``[num_words]``)."""
        raise NotImplementedError

    def offsets(self, text):
        """``[(char_start, char_end)]`` per token of :meth:`pieces`: the characters of
        the token's content in ``text`` (leading whitespace left out)."""
        raise NotImplementedError(f"{type(self).__name__} gives no character offsets")

    def decode(self, tokens):
        """dict.txt symbols -> text."""
        raise NotImplementedError

    def tokens_with_offsets(self, text):
        """``(tokens, offsets)`` of ``text`` (already stripped), checked to agree."""
        tokens = self.pieces(text)[0]
        offsets = self.offsets(text)
        if len(offsets) != len(tokens):
            raise ValueError(f"{type(self).__name__}: {len(offsets)} offsets for "
                             f"{len(tokens)} tokens in {text[:80]!r}")
        return tokens, offsets


def build_tokenizer(kind, **files):
    """The tokenizer of ``kind`` from its files (EncoderSpec fields; None = not given;
    fields the kind does not read are ignored)."""
    cls = tokenizer_kind(kind)
    missing = [f for f in cls.required if not files.get(f)]
    if missing:
        raise ValueError(cls.needs or f"{kind} needs local {' and '.join(missing)} paths")
    return cls(**{o.field: files.get(o.field) for o in cls.options})


def skip_leading_space(text, offsets):
    """Offsets with each range's leading whitespace left out."""
    fixed = []
    for lo, hi in offsets:
        while lo < hi and text[lo].isspace():
            lo += 1
        fixed.append((lo, hi))
    return fixed


def offsets_in_words(text, tokens, starts, surface):
    """Offsets for tokenizers that encode the GPT-2 words one by one (sentencepiece,
    fastBPE): a token's range is its ``surface(token)`` inside its word when the
    surfaces spell the word, else the whole word (only word boundaries are then
    addressable). ``starts``: the token index where each word starts."""
    words = [(m.start(), m.end()) for m in W._WORD_RE.finditer(text) if m.end() > m.start()]
    if len(words) != len(starts):
        raise ValueError(f"{len(words)} words but the tokenizer gave {len(starts)}: {text[:80]!r}")
    bounds = starts + [len(tokens)]
    out = []
    for (ws, we), a, b in zip(words, bounds, bounds[1:]):
        lens = [len(surface(t)) for t in tokens[a:b]]
        if sum(lens) == we - ws:
            pos = ws
            for n in lens:
                out.append((pos, pos + n))
                pos += n
        else:
            out += [(ws, we)] * (b - a)
    return out
