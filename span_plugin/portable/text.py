"""Raw text -> the model's token ids and n-gram spans, from an exported folder alone: the
tokenizer kind of the folder's data record built from the folder's own tokenizer files,
and the segmentation of the record with the folder's copy of its n-gram dictionary (or
chunker). The tokens and spans are those of training (the same
:class:`~span_plugin.preprocess.segmentation.encoding.SpanTokenizer` code); only the
ids differ in where they come from: the Hugging Face tokenizer's vocabulary, which the
exported embedding table is in.

No torch, no fairseq.
"""

import os

from span_plugin.formats.model_folder import FAMILIES, ModelFolderError, encoder_family, read_json
from span_plugin.preprocess.segmentation.encoding import SpanTokenizer
from span_plugin.preprocess.segmentation.ngrams import load_ngrams
from span_plugin.preprocess.segmentation.segmentations import Segmenter, segmentation_kind
from span_plugin.tokenizers.gpt2 import GPT2Tokenizer
from span_plugin.tokenizers.sentencepiece_line import SentencePieceLineTokenizer
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
    layout = read_json(path, "tokenizer")
    if not isinstance(layout, dict) or not isinstance(layout.get("model"), dict):
        raise ModelFolderError(f"{path}: model: missing (not a tokenizers library file)")
    return path, layout


def embedding_rows(folder):
    """The rows of the folder's word embeddings (its ids are below them), from the
    tensors' header."""
    prefix = FAMILIES.get(encoder_family(folder.config.get("model_type")), ("",))[0]
    found = folder.shapes.get(f"{prefix}embeddings.word_embeddings.weight")
    return found[1][0] if found else None  # None: a folder read without its header


def _check_ids(folder, path, ids, specials, names):
    """Every id a symbol maps to below the embedding rows; the four specials there
    (``names``: how the tokenizer spells fairseq's ``<s> <pad> </s> <unk>``)."""
    rows = embedding_rows(folder)
    for fairseq, theirs in zip(FAIRSEQ_SPECIALS.values(), names):
        if fairseq not in specials:
            raise ModelFolderError(f"{path}: model.vocab: no {theirs!r} (the special token "
                                   f"every exported model needs: {', '.join(names)})")
    bad = next((s for s, i in ids.items() if not isinstance(i, int) or isinstance(i, bool)
                or not 0 <= i < (rows if rows is not None else i + 1)), None)
    if bad is not None:
        where = f"the model has {rows} embedding rows (ids 0..{rows - 1})" if rows else \
            "ids are counts from 0"
        raise ModelFolderError(f"{path}: model.vocab: {bad!r} has id {ids[bad]!r}, but {where}")
    pad = folder.config.get("pad_token_id")
    if pad is not None and specials["<pad>"] != pad:
        raise ModelFolderError(f"{folder.where}: pad_token_id: {pad}, but the tokenizer's "
                               f"{names[1]} is id {specials['<pad>']}")


def _gpt2(folder):
    """GPT-2 BPE from tokenizer.json: its vocabulary maps each BPE token to the fairseq
    index it was trained with (many tokens to ``<unk>``), so the tokenizer gets
    distinct stand-in ids and the vocabulary maps them on."""
    path, layout = _tokenizer_json(folder)
    model = layout["model"]
    if model.get("type") != "BPE":
        raise ModelFolderError(f"{path}: model.type: a {model.get('type')} tokenizer, but the "
                               f"data record names gpt2 (byte-level BPE)")
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not vocab:
        raise ModelFolderError(f"{path}: model.vocab: not a table of BPE tokens")
    if not isinstance(merges, list) or not all(
            isinstance(m, str) and len(m.split(" ")) == 2
            or isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m)
            for m in merges):
        raise ModelFolderError(f"{path}: model.merges: not a list of BPE token pairs")
    merges = [m.split(" ") if isinstance(m, str) else m for m in merges]
    specials = {s: vocab[s] for s in FAIRSEQ_SPECIALS.values() if s in vocab}
    _check_ids(folder, path, vocab, specials, list(FAIRSEQ_SPECIALS.values()))
    tokenizer = GPT2Tokenizer.from_tables({t: k for k, t in enumerate(vocab)}, merges)
    ids = {str(k): i for k, i in enumerate(vocab.values())}
    return tokenizer, Vocabulary(ids, specials)


def _wordpiece(folder):
    """BERT's WordPiece, the library tokenizer saved whole; its symbols name BERT's
    specials as fairseq does (``[CLS]`` is ``<s>``)."""
    path, layout = _tokenizer_json(folder)
    model = layout["model"]
    if model.get("type") != "WordPiece":
        raise ModelFolderError(f"{path}: model.type: a {model.get('type')} tokenizer, but "
                               f"the data record names wordpiece")
    table = model.get("vocab")
    if not isinstance(table, dict) or not table:
        raise ModelFolderError(f"{path}: model.vocab: not a table of WordPiece tokens")
    names = [b for b, s in WordPieceTokenizer.SPECIALS.items() if s in FAIRSEQ_SPECIALS.values()]
    for name in [*names, model.get("unk_token")]:
        if name not in table:
            raise ModelFolderError(f"{path}: model.vocab: no {name!r} (the special token "
                                   f"every exported BERT-family model needs: {', '.join(names)})")
    _check_ids(folder, path, table, {WordPieceTokenizer.SPECIALS[b]: table[b] for b in names},
               names)
    try:
        tokenizer = WordPieceTokenizer(path)
    except ValueError as err:
        raise ModelFolderError(f"{path}: {err}") from None
    back = {v: k for k, v in WordPieceTokenizer.SPECIALS.items()}
    vocab = tokenizer.library.get_vocab()
    ids = {back.get(t, t): i for t, i in vocab.items()}
    ids.update({s: vocab[b] for b, s in WordPieceTokenizer.SPECIALS.items() if b in vocab})
    specials = {s: vocab[b] for b, s in WordPieceTokenizer.SPECIALS.items()
                if s in FAIRSEQ_SPECIALS.values() and b in vocab}
    names = [back[s] for s in FAIRSEQ_SPECIALS.values()]
    _check_ids(folder, path, vocab, specials, names)
    return tokenizer, Vocabulary(ids, specials)


# XLMRobertaTokenizer's and CamembertTokenizer's vocabulary file, beside tokenizer.json
SPM_FILE = "sentencepiece.bpe.model"


def _sentencepiece_line(folder):
    """XLM-R's and CamemBERT's sentencepiece over the whole line, from the folder's
    sentencepiece model; the ids from tokenizer.json's Unigram vocabulary (``[piece,
    score]`` in id order), which must hold every piece of that model (a piece without an
    id would become ``<unk>`` here, where transformers' tokenizer cuts the text otherwise)."""
    path, layout = _tokenizer_json(folder)
    model = layout["model"]
    if model.get("type") != "Unigram":
        raise ModelFolderError(f"{path}: model.type: a {model.get('type')} tokenizer, but "
                               f"the data record names sentencepiece-line (a Unigram model)")
    entries = model.get("vocab")
    if not isinstance(entries, list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) for e in entries):
        raise ModelFolderError(f"{path}: model.vocab: not a list of [piece, score]")
    ids = {}
    for i, (piece, _) in enumerate(entries):
        ids.setdefault(piece, i)
    spm_path = os.path.join(folder.path, SPM_FILE)
    if not os.path.isfile(spm_path):
        raise ModelFolderError(f"{spm_path}: missing (the sentencepiece model the data "
                               f"record's sentencepiece-line tokenizer reads)")
    try:
        tokenizer = SentencePieceLineTokenizer(spm_path)
    except ValueError as err:
        raise ModelFolderError(str(err)) from None
    sp = tokenizer.sp
    missing = next((sp.id_to_piece(i) for i in range(sp.get_piece_size())
                    if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))
                    and sp.id_to_piece(i) not in ids), None)
    if missing is not None:
        raise ModelFolderError(f"{path}: model.vocab: no {missing!r}, a piece of {spm_path}: "
                               f"the two files are not one tokenizer's")
    names = list(FAIRSEQ_SPECIALS.values())
    specials = {s: ids[s] for s in names if s in ids}
    _check_ids(folder, path, ids, specials, names)
    return tokenizer, Vocabulary(ids, specials)


TOKENIZER_KINDS = {"gpt2": _gpt2, "wordpiece": _wordpiece,
                   "sentencepiece-line": _sentencepiece_line}


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
        _check_chunker_model(folder, encoder)
    segmenter = Segmenter(ngrams, segmentation=segmentation, seed=encoder.get("seed") or 0,
                          scheme=tokenizer.word_scheme, **options)
    return SpanTokenizer(tokenizer, segmenter), vocab


def _check_chunker_model(folder, encoder):
    """The chunker the folder's files give is the one of the data record (its model's
    sha256)."""
    from span_plugin.preprocess.segmentation import chunker

    recorded = (encoder.get("chunker") or {}).get("model_sha256")
    model = chunker.build(folder.file("chunker"))
    if model.fingerprint != recorded:
        raise ModelFolderError(
            f"{folder.where}: span_plugin.data_record.encoder.chunker.model_sha256: "
            f"{str(recorded)[:12]}, but the chunker of {folder.file('chunker')} is "
            f"{model.fingerprint[:12]}: not the chunker the model was trained with")
