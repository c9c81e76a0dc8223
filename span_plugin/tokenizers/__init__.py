"""Text tokenizers (GPT-2 BPE, sentencepiece, fastBPE, WordPiece) behind one interface
and registry (:mod:`.base`), with word boundaries (:mod:`.words`) and character offsets:
plain Python, no torch, no fairseq. Importing this package registers every kind."""

# Each import registers its kind; this order is the order of --bpe choices.
from span_plugin.tokenizers import gpt2  # noqa: F401
from span_plugin.tokenizers import sentencepiece  # noqa: F401
from span_plugin.tokenizers import sentencepiece_line  # noqa: F401
from span_plugin.tokenizers import fastbpe  # noqa: F401
from span_plugin.tokenizers import wordpiece  # noqa: F401
from span_plugin.tokenizers.base import (TOKENIZERS, Tokenizer, build_tokenizer, file_options,
                                         register_tokenizer, tokenizer_kind)
from span_plugin.tokenizers.options import Option

__all__ = ["TOKENIZERS", "Option", "Tokenizer", "build_tokenizer", "file_options",
           "register_tokenizer", "tokenizer_kind"]
