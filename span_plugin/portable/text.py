"""Raw text -> the model's token ids and n-gram spans, from an exported folder alone: the
tokenizer kind of the folder's data record built from the folder's own tokenizer files,
and the segmentation of the record with the folder's copy of its n-gram dictionary (or
chunker). The tokens and spans are those of training (the same
:class:`~span_plugin.preprocess.segmentation.encoding.SpanTokenizer` code); only the
ids differ in where they come from: the Hugging Face tokenizer's vocabulary, which the
exported embedding table is in.

No torch, no fairseq.
"""

import json
import os

from span_plugin.formats.model_folder import ModelFolderError
from span_plugin.preprocess.segmentation.encoding import SpanTokenizer
from span_plugin.preprocess.segmentation.ngrams import load_ngrams
from span_plugin.preprocess.segmentation.segmentations import Segmenter, segmentation_kind
from span_plugin.tokenizers.gpt2 import GPT2Tokenizer
from span_plugin.tokenizers.wordpiece import WordPieceTokenizer

# fairseq's dictionary indices of its specials (what task arguments such as
# --init-token 0 --separator-token 2 name), by symbol.
FAIRSEQ_SPECIALS = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"}


class Vocabulary:
    """Encoder symbols -> the exported model's ids. ``ids``: ``{symbol: id}``; ``unk``:
    the id of a symbol it lacks (fairseq's dictionary maps those to ``<unk>`` too);
    ``specials``: ``{fairseq symbol: id}`` of ``<s> <pad> </s> <unk>``."""

    def __init__(self, ids, specials):
        self.ids = ids
        self.specials = specials
        self.bos, self.pad, self.eos, self.unk = (specials[s] for s in FAIRSEQ_SPECIALS.values())

    def line(self, symbols):
        """The ids of one encoded line and ``</s>`` (as fairseq-preprocess binarizes
        it): list of int ``[len + 1]``."""
        ids, unk = self.ids, self.unk
        return [ids.get(s, unk) for s in symbols] + [self.eos]

    def fairseq_index(self, index):
        """The id of fairseq's special at dictionary ``index`` (0 ``<s>`` ... 3
        ``<unk>``; None stays None)."""
        if index is None:
            return None
        if index not in FAIRSEQ_SPECIALS:
            raise ValueError(f"token index {index} is not one of fairseq's specials "
                             f"{FAIRSEQ_SPECIALS}: an exported model cannot map it")
        return self.specials[FAIRSEQ_SPECIALS[index]]


def _tokenizer_json(folder):
    path = os.path.join(folder.path, "tokenizer.json")
    if not os.path.isfile(path):
        raise ModelFolderError(f"{path}: missing (the tokenizer of an exported model)")
    with open(path, encoding="utf-8") as f:
        return path, json.load(f)


def _gpt2(folder):
    """GPT-2 BPE from tokenizer.json: its vocabulary maps each BPE token to the fairseq
    index it was trained with (many tokens to ``<unk>``), so the tokenizer gets
    distinct stand-in ids and the vocabulary maps them on."""
    path, layout = _tokenizer_json(folder)
    model = layout.get("model") or {}
    if model.get("type") != "BPE":
        raise ModelFolderError(f"{path}: a {model.get('type')} tokenizer, but the data record "
                               f"names gpt2 (byte-level BPE)")
    vocab = model["vocab"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    tokenizer = GPT2Tokenizer.from_tables({t: k for k, t in enumerate(vocab)}, merges)
    ids = {str(k): i for k, i in enumerate(vocab.values())}
    specials = {s: vocab[s] for s in FAIRSEQ_SPECIALS.values()}
    return tokenizer, Vocabulary(ids, specials)


def _wordpiece(folder):
    """BERT's WordPiece, the library tokenizer saved whole; its symbols name BERT's
    specials as fairseq does (``[CLS]`` is ``<s>``)."""
    path, _ = _tokenizer_json(folder)
    tokenizer = WordPieceTokenizer(path)
    back = {v: k for k, v in WordPieceTokenizer.SPECIALS.items()}
    vocab = tokenizer.library.get_vocab()
    ids = {back.get(t, t): i for t, i in vocab.items()}
    ids.update({s: vocab[b] for b, s in WordPieceTokenizer.SPECIALS.items() if b in vocab})
    specials = {s: ids[s] for s in FAIRSEQ_SPECIALS.values()}
    return tokenizer, Vocabulary(ids, specials)


TOKENIZER_KINDS = {"gpt2": _gpt2, "wordpiece": _wordpiece}


def text_encoder(folder):
    """``(SpanTokenizer, Vocabulary)`` of a :class:`~span_plugin.portable.folder.ModelFolder`."""
    encoder = (folder.record or {}).get("encoder")
    if not isinstance(encoder, dict):
        raise ModelFolderError(f"{folder.where}: span_plugin.data_record has no encoder "
                               f"(tokenizer kind and segmentation): the text cannot be "
                               f"encoded as in training")
    kind = encoder.get("bpe")
    if kind not in TOKENIZER_KINDS:
        raise ModelFolderError(f"{folder.where}: tokenizer kind {kind!r}; an exported model "
                               f"reads {', '.join(TOKENIZER_KINDS)}")
    tokenizer, vocab = TOKENIZER_KINDS[kind](folder)
    segmentation = encoder.get("segmentation") or "greedy"
    seg = segmentation_kind(segmentation)
    ngrams = None
    if seg.needs_dictionary:
        path = folder.file("ngrams")
        if path is None:
            raise ModelFolderError(f"{folder.where}: segmentation {segmentation!r} reads an "
                                   f"n-gram dictionary, but span_plugin.files names none")
        top_k = (encoder.get("ngrams") or {}).get("top_k")
        ngrams = load_ngrams(path, top_k=top_k, words=tokenizer.word_scheme)
    options = {}
    if any(o.field == "nltk_data" for o in seg.options):
        options["nltk_data"] = folder.file("chunker")
    segmenter = Segmenter(ngrams, segmentation=segmentation, seed=encoder.get("seed") or 0,
                          scheme=tokenizer.word_scheme, **options)
    return SpanTokenizer(tokenizer, segmenter), vocab
