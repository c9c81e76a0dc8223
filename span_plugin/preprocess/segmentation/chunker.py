"""Chunker segmentation (the paper's Table 6 "NLTK SF"): every chunk is a span. Over the
words the encoder segments, NLTK's POS tagger (read from JSON, no pickle) and an
averaged-perceptron chunker trained here on CoNLL-2000 give IOB chunk tags; each chunk
is a span of whole encoder words. :class:`ChunkTagger` tags; the trained model is cached
under ``$SPAN_CACHE/chunker``. The steps, the cache key and the data folder:
docs/PREPROCESS.md, sections "Chunker segmentation" and "Module notes"."""

import hashlib
import json
import logging
import os
import random
import time

import numpy as np
import regex

from span_plugin.preprocess.file_records import SettingsMismatch, file_entry, sha256, short
from span_plugin.preprocess.segmentation.segment import Segmentation, register_segmentation
from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.options import Option

logger = logging.getLogger(__name__)

TAGGER_DIR = "taggers/averaged_perceptron_tagger_eng"
TAGGER_FILES = {part: f"{TAGGER_DIR}/averaged_perceptron_tagger_eng.{part}.json"
                for part in ("weights", "tagdict", "classes")}
TRAIN_FILE = "corpora/conll2000/train.txt"
TEST_FILE = "corpora/conll2000/test.txt"  # optional: only for the recorded F1
REQUIRED = (*TAGGER_FILES.values(), TRAIN_FILE)

VERSION = 2  # of the features and training below: part of the cache key
PASSES = 3  # more passes: little F1 for their time (docs/PREPROCESS.md, "Chunker segmentation")
SEED = 0
CACHE_FORMAT = "span_plugin chunker 1"
MODEL_FILE = "chunker_model.json"  # a trained model in an NLTK data folder, used first
EXTRA = "span_plugin[chunker]"


class ChunkerError(ValueError):
    """NLTK is not installed, or a cached model or data file cannot be used."""


class ChunkerDataError(FileNotFoundError):
    """A file the chunker needs is not in the NLTK data folder."""


def require_nltk():
    """The nltk package, or a ChunkerError naming the extra that installs it."""
    try:
        import nltk
    except ImportError:
        raise ChunkerError(
            f"--segmentation chunker needs NLTK (3.9 or later), which is not installed: "
            f"pip install '{EXTRA}' (or pip install 'nltk>=3.9')") from None
    return nltk


def find_data(nltk_data=None):
    """The absolute NLTK data folder holding every file of :data:`REQUIRED`.

    nltk_data: the folder given (``--nltk-data``); None searches ``$NLTK_DATA`` and
    NLTK's default folders. Raises :class:`ChunkerDataError` naming the first missing
    file and where to put it."""
    if nltk_data:
        candidates, how = [str(nltk_data)], f"--nltk-data {nltk_data}"
    else:
        env = [p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
        candidates = list(dict.fromkeys(env + list(require_nltk().data.path)))
        how = "$NLTK_DATA and NLTK's default folders: " + ", ".join(candidates)
    for root in candidates:
        if all(os.path.isfile(os.path.join(root, rel)) for rel in REQUIRED):
            return os.path.abspath(root)
    root = candidates[0] if candidates else "DIR"
    missing = next(rel for rel in REQUIRED if not os.path.isfile(os.path.join(root, rel)))
    raise ChunkerDataError(
        f"--segmentation chunker: {os.path.join(root, missing)} is missing (looked in "
        f"{how}). It needs NLTK's averaged_perceptron_tagger_eng in the JSON format of "
        f"NLTK 3.9+ ({TAGGER_DIR}/*.json) and CoNLL-2000 ({TRAIN_FILE}) under one NLTK data "
        f"folder DIR: put them there (python -m nltk.downloader -d DIR "
        f"averaged_perceptron_tagger_eng conll2000) and pass --nltk-data DIR or set "
        f"NLTK_DATA=DIR")


# ---------------------------------------------------------------------------------
# Data


def read_conll2000(path):
    """CoNLL-2000 sentences: lists of ``(word, pos, chunk_tag)``, one line a word,
    blank lines between sentences."""
    sentences, current = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                if current:
                    sentences.append(current)
                    current = []
                continue
            if len(fields) != 3 or not (fields[2] == "O" or fields[2][:2] in ("B-", "I-")):
                raise ChunkerError(f"{path}: line {lineno}: expected 'word POS chunk-tag' "
                                   f"(chunk tag O, B-X or I-X), got {line.rstrip()!r}")
            current.append(tuple(fields))
    if current:
        sentences.append(current)
    return sentences


def load_tagger(root):
    """NLTK's averaged perceptron POS tagger from its three JSON files under ``root``."""
    require_nltk()
    from nltk.tag.perceptron import PerceptronTagger

    params = {}
    for part, rel in TAGGER_FILES.items():
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                params[part] = json.load(f)
        except ValueError as err:
            raise ChunkerError(f"{path}: not the JSON of NLTK's tagger ({err})") from None
    tagger = PerceptronTagger(load=False)
    # The attributes NLTK's own JSON loader sets, set directly: no path checks that
    # would refuse a folder outside nltk.data.path, and the same on every NLTK 3.9+.
    tagger.model.weights = params["weights"]
    tagger.tagdict = params["tagdict"]
    tagger.classes = tagger.model.classes = set(params["classes"])
    return tagger


# ---------------------------------------------------------------------------------
# The chunker


def _norm(word):
    return "!DIGITS" if word[:1].isdigit() else word.lower()


def _padded(words, tags):
    """Normalized words and tags with two boundary symbols on each side."""
    return (["<s2>", "<s1>"] + [_norm(w) for w in words] + ["</s1>", "</s2>"],
            ["<s2>", "<s1>"] + list(tags) + ["</s1>", "</s2>"])


def static_features(i, w, p):
    """Features of word ``i`` that do not depend on the chunk tags before it, from padded
    words ``w`` and tags ``p`` (:func:`_padded`)."""
    j = i + 2
    return [
        "bias", "w " + w[j], "p " + p[j], "w-1 " + w[j - 1], "p-1 " + p[j - 1],
        "w+1 " + w[j + 1], "p+1 " + p[j + 1], "p-2 " + p[j - 2], "p+2 " + p[j + 2],
        "p-1p " + p[j - 1] + " " + p[j], "pp+1 " + p[j] + " " + p[j + 1],
        "p-1pp+1 " + p[j - 1] + " " + p[j] + " " + p[j + 1],
        "p-2p-1 " + p[j - 2] + " " + p[j - 1], "p+1p+2 " + p[j + 1] + " " + p[j + 2],
        "wp " + w[j] + " " + p[j],
    ]


def dynamic_features(i, w, p, prev, prev2):
    """Features of word ``i`` that read the two chunk tags guessed before it."""
    j = i + 2
    return ["c-1 " + prev, "c-2c-1 " + prev2 + " " + prev, "c-1p " + prev + " " + p[j],
            "c-1w " + prev + " " + w[j]]


def features(i, w, p, prev, prev2):
    """All features of word ``i`` as NLTK's perceptron takes them (``{name: 1}``)."""
    return dict.fromkeys(static_features(i, w, p) + dynamic_features(i, w, p, prev, prev2), 1)


class ChunkTagger:
    """IOB chunk tags from words and POS tags: an averaged perceptron over
    :func:`features`, greedy left to right.

    Training uses NLTK's ``AveragedPerceptron`` as it is. Tagging scores with the same
    weights laid out as a dense matrix ``[num_features, num_classes]``: the same sums in
    the same order (rows added one after the other, as NLTK adds them) and the same tie
    rule (the greatest label), so the same tags in fewer operations (timing in
    docs/PREPROCESS.md, "Chunker segmentation")."""

    def __init__(self, weights, classes):
        require_nltk()
        from nltk.tag.perceptron import AveragedPerceptron

        self.model = AveragedPerceptron(weights)
        self.model.classes = set(classes)
        self._dense = None

    @classmethod
    def train(cls, sentences, passes=PASSES, seed=SEED):
        """sentences: lists of ``(word, pos, chunk_tag)``."""
        tagger = cls({}, {t for s in sentences for _, _, t in s})
        model, order, rng = tagger.model, list(sentences), random.Random(seed)
        for _ in range(passes):
            for sentence in order:
                w, p = _padded([x[0] for x in sentence], [x[1] for x in sentence])
                prev = prev2 = "<s>"
                for i, (_, _, gold) in enumerate(sentence):
                    feats = features(i, w, p, prev, prev2)
                    guess, _ = model.predict(feats)
                    model.update(gold, guess, feats)
                    prev2, prev = prev, guess
            rng.shuffle(order)
        model.average_weights()
        return tagger

    def dense(self):
        """``(feature -> row, weights [num_features, num_classes], classes)``, the
        classes in descending order so that argmax's first maximum is NLTK's choice."""
        if self._dense is None:
            classes = sorted(self.model.classes, reverse=True)
            column = {c: k for k, c in enumerate(classes)}
            rows = {f: r for r, f in enumerate(self.model.weights)}
            matrix = np.zeros((len(rows), len(classes)))
            for f, weights in self.model.weights.items():
                for c, v in weights.items():
                    matrix[rows[f], column[c]] = v
            self._dense = rows, matrix, classes
        return self._dense

    def tag(self, words, pos):
        """``[num_words]`` words and POS tags -> ``[num_words]`` IOB chunk tags."""
        rows, matrix, classes = self.dense()
        w, p = _padded(words, pos)
        out, prev, prev2 = [], "<s>", "<s>"
        for i in range(len(words)):
            feats = static_features(i, w, p) + dynamic_features(i, w, p, prev, prev2)
            scores = matrix[[rows[f] for f in feats if f in rows]].sum(axis=0)
            guess = classes[int(scores.argmax())]
            out.append(guess)
            prev2, prev = prev, guess
        return out

    def tag_like_nltk(self, words, pos):
        """:meth:`tag` through NLTK's own ``AveragedPerceptron.predict`` (a reference)."""
        w, p = _padded(words, pos)
        out, prev, prev2 = [], "<s>", "<s>"
        for i in range(len(words)):
            guess, _ = self.model.predict(features(i, w, p, prev, prev2))
            out.append(guess)
            prev2, prev = prev, guess
        return out

    def to_json(self):
        return {"classes": sorted(self.model.classes), "weights": self.model.weights}

    def fingerprint(self):
        """sha256 of the model's canonical JSON (what inference compares)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_lengths(tags):
    """IOB chunk tags ``[num_words]`` -> span lengths ``[num_spans]`` summing to
    num_words: a chunk is one span, a word outside chunks one word (conlleval's chunk
    starts: ``B-X``, or ``I-X`` after anything but ``B-X``/``I-X``)."""
    out, open_type = [], None
    for tag in tags:
        if tag[:2] == "I-" and tag[2:] == open_type:
            out[-1] += 1
            continue
        out.append(1)
        open_type = tag[2:] if tag[:2] in ("B-", "I-") else None
    return out


def retag(tagger, sentences):
    """CoNLL sentences with the tagger's POS tags in place of the corpus's."""
    out = []
    for s in sentences:
        tagged = tagger.tag([x[0] for x in s])
        out.append([(word, pos, chunk) for (word, _, chunk), (_, pos) in zip(s, tagged)])
    return out


def score(sentences, guesses):
    """Chunk precision, recall and F1 (NLTK's ChunkScore: exact chunks with their type)
    of guessed chunk tags ``[num_sentences][num_words]`` against ``sentences``
    (``(word, pos, chunk_tag)``)."""
    require_nltk()
    from nltk.chunk.util import ChunkScore, conlltags2tree

    if len(sentences) != len(guesses):
        raise ValueError(f"{len(guesses)} guessed tag sequences for {len(sentences)} sentences")
    cs = ChunkScore()
    for s, guess in zip(sentences, guesses):
        cs.score(conlltags2tree(s), conlltags2tree([(w, p, g) for (w, p, _), g in zip(s, guess)]))
    return {"precision": cs.precision(), "recall": cs.recall(), "f1": cs.f_measure(),
            "chunks": len(cs.correct())}


def evaluate(chunker, sentences):
    """:func:`score` of ``chunker`` on ``sentences`` with the POS tags they hold."""
    return score(sentences, [chunker.tag([x[0] for x in s], [x[1] for x in s])
                             for s in sentences])


# ---------------------------------------------------------------------------------
# Building (train or load), cached


def cache_dir():
    return os.path.join(os.environ.get("SPAN_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "span_plugin"), "chunker")


def _key(root):
    """Everything the trained model depends on."""
    test = os.path.join(root, TEST_FILE)
    return {"version": VERSION, "nltk": require_nltk().__version__, "passes": PASSES,
            "seed": SEED,
            "tagger": {part: sha256(os.path.join(root, rel)) for part, rel in TAGGER_FILES.items()},
            "train": sha256(os.path.join(root, TRAIN_FILE)),
            "test": sha256(test) if os.path.isfile(test) else None}


def _read_cache(path, key):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        logger.warning("%s: unreadable chunker cache (%s): training again", path, err)
        return None
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or data.get("key") != key:
        logger.warning("%s: chunker cache of other inputs: training again", path)
        return None
    model = data.get("model")
    if not (isinstance(model, dict) and isinstance(model.get("weights"), dict)
            and isinstance(model.get("classes"), list) and "test_scores" in data):
        logger.warning("%s: chunker cache without a whole model: training again", path)
        return None
    return data


def model_data(model):
    """What the cache (and :data:`MODEL_FILE`) holds of a :class:`Model`."""
    return {"format": CACHE_FORMAT, "key": model.key, "model": model.chunker.to_json(),
            "test_scores": model.scores, "train_seconds": model.train_seconds}


def _write_cache(path, data):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as err:
        logger.warning("cannot cache the chunker at %s (%s): it is trained again next time "
                       "(set SPAN_CACHE to a writable folder)", path, err)


class Model:
    """The POS tagger and the trained chunker of one NLTK data folder (a data record
    holds :func:`chunker_record` of it)."""

    description = f"averaged perceptron, features v{VERSION}, {PASSES} passes, seed {SEED}"

    def __init__(self, root, tagger, chunker, key, scores, train_seconds):
        self.root, self.tagger, self.chunker, self.key = root, tagger, chunker, key
        self.scores, self.train_seconds = scores, train_seconds  # scores: None without test.txt
        self.fingerprint = chunker.fingerprint()


_MODELS = {}  # (root, key) -> Model


def build(nltk_data=None, use_cache=True):
    """The :class:`Model` of an NLTK data folder: from memory, from the JSON cache, or
    trained (and cached). ``use_cache=False`` trains, and neither reads nor writes the
    cache."""
    root = find_data(nltk_data)
    key = _key(root)
    mem = (root, json.dumps(key, sort_keys=True))
    if use_cache and mem in _MODELS:
        return _MODELS[mem]
    digest = hashlib.sha256(mem[1].encode("utf-8")).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"conll2000-{digest}.json")
    tagger = load_tagger(root)
    # An exported model folder's chunker/ holds its trained model beside NLTK's files.
    kept = os.path.join(root, MODEL_FILE)
    data = _read_cache(kept, key) if os.path.isfile(kept) else None
    if data is None and use_cache:
        data = _read_cache(path, key)
    if data is not None:
        chunker = ChunkTagger(data["model"]["weights"], data["model"]["classes"])
        scores, seconds = data["test_scores"], data["train_seconds"]
    else:
        logger.info("training the chunker on %s (%d passes)", os.path.join(root, TRAIN_FILE),
                    PASSES)
        start = time.perf_counter()
        train = retag(tagger, read_conll2000(os.path.join(root, TRAIN_FILE)))
        chunker = ChunkTagger.train(train)
        seconds = round(time.perf_counter() - start, 1)
        test = os.path.join(root, TEST_FILE)
        scores = evaluate(chunker, retag(tagger, read_conll2000(test))) if key["test"] else None
        if use_cache:
            _write_cache(path, {"format": CACHE_FORMAT, "key": key, "model": chunker.to_json(),
                                "test_scores": scores, "train_seconds": seconds})
    model = Model(root, tagger, chunker, key, scores, seconds)
    if use_cache:
        _MODELS[mem] = model
    return model


# ---------------------------------------------------------------------------------
# Segmenting the encoder's words


def _gpt2_words(text):
    """GPT-2 scheme words of ``text`` as ``(word, char_start, char_end)``."""
    return [(m.group(), m.start(), m.end()) for m in W._WORD_RE.finditer(text)
            if m.end() > m.start()]


_CASED_BERT = {}


def _bert_words(text):
    """BERT scheme words of ``text`` in their original case and accents, as
    ``(word, char_start, char_end)`` in ``text``."""
    if not _CASED_BERT:
        from tokenizers import PreTokenizedString, normalizers, pre_tokenizers

        _CASED_BERT["norm"] = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
        _CASED_BERT["pre"] = pre_tokenizers.BertPreTokenizer()
        _CASED_BERT["new"] = PreTokenizedString
    norm = _CASED_BERT["norm"]
    pts = _CASED_BERT["new"](text)
    pts.normalize(lambda ns: norm.normalize(ns))
    _CASED_BERT["pre"].pre_tokenize(pts)
    return [(text[a:b], a, b) for _, (a, b), _ in
            pts.get_splits(offset_referential="original", offset_type="char")]


# scheme -> (text -> words with character ranges, words -> keys)
_SCHEMES = {"gpt2": (_gpt2_words, W.match_keys), "bert": (_bert_words, W.bert_keys)}

_QUOTES = ('"', "``", "''")
_QUOTE_RE = regex.compile(r"``|''|\"")


def treebank_tokens(tokenizer, text):
    """Penn Treebank tokens of ``text`` (NLTK's word tokenizer, what the tagger and
    CoNLL-2000 use: ``don't`` -> ``do n't``, ``Mr.`` and ``3.5`` one token, quotes as
    `````/``''``) with their character ranges, ``[(token, start, end)]``."""
    tokens = tokenizer.tokenize(text)
    # The tokenizer rewrites double quotes; align the text's own quote characters.
    quotes = iter(m.group() for m in _QUOTE_RE.finditer(text))
    surface = [next(quotes) if t in _QUOTES else t for t in tokens]
    from nltk.tokenize.util import align_tokens

    return [(t, a, b) for t, (a, b) in zip(tokens, align_tokens(surface, text))]


def units(words, tokens):
    """Group the encoder's words with the Treebank tokens they share characters with.

    words, tokens: ``[(string, start, end)]`` in text order. A token that covers
    characters of two words (``do``/``n't`` over GPT-2's ``don``/``'t``; ``3.5`` over
    ``3 . 5``) joins them into one unit; a token overlapping no word is left out; a
    unit no token overlaps is tagged as its words. Returns ``[(num_words, [token
    strings])]``, units in order, their words summing to ``len(words)``."""
    out, k, reach = [], 0, -1  # reach: end of the last token taken
    for _, start, end in words:
        if not out or reach <= start:
            out.append([0, []])
        out[-1][0] += 1
        while k < len(tokens) and tokens[k][1] < end:
            if tokens[k][2] > start:  # overlaps this word
                out[-1][1].append(tokens[k][0])
                reach = max(reach, tokens[k][2])
            k += 1
    first = 0
    for unit in out:
        if not unit[1]:
            unit[1] = [w for w, _, _ in words[first:first + unit[0]]]
        first += unit[0]
    return [tuple(u) for u in out]


@register_segmentation("chunker")
class ChunkSegmenter(Segmentation):
    """``(keys, text) -> span lengths`` over the words of one word scheme: segmentation
    ``chunker``. It needs no n-gram dictionary; it reads the NLTK data folder
    ``nltk_data`` and records it (:func:`chunker_record`).

    The tagger and chunker see the sentence's Penn Treebank tokens; the encoder's words
    are grouped into units with them (:func:`units`), and a chunk boundary is kept
    where it falls between units, so every span is a run of whole encoder words."""

    needs_dictionary = False
    help = (f"NLTK POS tags + a CoNLL-2000 chunker (pip install '{EXTRA}'; "
            f"docs/PREPROCESS.md)")
    options = (Option("nltk_data", metavar="DIR", help=(
        "--segmentation chunker: NLTK data folder with taggers/averaged_perceptron_tagger_eng "
        "and corpora/conll2000 (default: $NLTK_DATA, then NLTK's default folders)")),)

    def __init__(self, ngrams=None, seed=0, scheme="gpt2", nltk_data=None):
        super().__init__(ngrams, seed, scheme)
        if scheme not in _SCHEMES:
            raise ValueError(f"chunker segmentation: word scheme {scheme!r}: expected one "
                             f"of {tuple(_SCHEMES)}")
        from nltk.tokenize import NLTKWordTokenizer

        self.scheme = scheme
        self.split, self.keys_of = _SCHEMES[scheme]
        self.model = build(nltk_data)
        self.treebank = NLTKWordTokenizer()
        self.mismatches = 0  # sentences tagged on their keys (see units())

    def _warn(self, text, why):
        self.mismatches += 1
        if self.mismatches == 1:
            logger.warning("chunker segmentation: %s in %r: tagging the encoder's lower-cased "
                           "words instead (spans still follow its words; further cases are "
                           "counted in ChunkSegmenter.mismatches)", why, text[:80])

    def units(self, keys, text):
        """The units (:func:`units`) of the encoder's words ``keys``, or one unit per
        key, tagged as the key, if the text's words are not the encoder's."""
        words = self.split(text)
        if len(words) != len(keys) or self.keys_of([w for w, _, _ in words]) != keys:
            self._warn(text, f"the {self.scheme} words are not the encoder's {len(keys)}")
            return [(1, [k]) for k in keys]
        try:
            tokens = treebank_tokens(self.treebank, text)
        except ValueError as err:  # a token NLTK rewrote beyond recognition
            self._warn(text, f"NLTK's word tokenizer: {err}")
            return [(1, [w]) for w, _, _ in words]
        return units(words, tokens)

    def __call__(self, keys, text=""):
        if not keys:
            return []
        groups = self.units(keys, text)
        tokens = [t for _, ts in groups for t in ts]
        pos = [t for _, t in self.model.tagger.tag(tokens)]
        starts, at = set(), 0  # token indices where chunks (and outside words) start
        for n in chunk_lengths(self.model.chunker.tag(tokens, pos)):
            starts.add(at)
            at += n
        lengths, at = [], 0
        for n_words, ts in groups:  # a unit starting a chunk starts a span
            if at in starts or not lengths:
                lengths.append(n_words)
            else:
                lengths[-1] += n_words
            at += len(ts)
        return lengths

    # Its part of the data record: ``encoder.chunker``.

    @classmethod
    def record(cls, spec):
        return {"chunker": chunker_record(build(spec.nltk_data))}

    @classmethod
    def settings_from_record(cls, encoder, checkpoint):
        """The recorded NLTK data folder, if its files and the chunker trained from them
        are still the recorded ones."""
        recorded = encoder["chunker"]
        now = chunker_record(build(recorded["nltk_data"]))  # names a missing file
        entries = [(recorded["tagger"][k], now["tagger"][k]) for k in recorded["tagger"]]
        for was, new in entries + [(recorded["train"], now["train"])]:
            if was["sha256"] != new["sha256"]:
                raise SettingsMismatch(
                    f"{new['path']} (sha256 {short(new['sha256'])}) changed since "
                    f"{checkpoint} was trained (sha256 {short(was['sha256'])}): its "
                    f"chunker would segment differently")
        if now["model_sha256"] != recorded["model_sha256"]:
            raise SettingsMismatch(
                f"the chunker trained from {recorded['nltk_data']} now (NLTK {now['nltk']}, "
                f"model sha256 {short(now['model_sha256'])}) is not the one {checkpoint} was "
                f"trained with (NLTK {recorded['nltk']}, {short(recorded['model_sha256'])})")
        return {"nltk_data": recorded["nltk_data"]}

    @classmethod
    def describe(cls, encoder):
        chunker = encoder.get("chunker")
        if not chunker:
            return []
        scores = chunker.get("test_scores")
        f1 = f"CoNLL-2000 test F1 {scores['f1']:.4f}" if scores else "no test F1"
        return [f"  chunker: {chunker['chunker']} on {chunker['train']['path']}, {f1}, NLTK "
                f"{chunker['nltk']}, model sha256 {short(chunker['model_sha256'])}"]


def chunker_record(model):
    """The ``encoder.chunker`` part of a data record for a :class:`Model`: its NLTK data
    folder and files (tagger JSON, CoNLL-2000 train and test, by sha256), NLTK's
    version, the trained model's sha256 and its CoNLL-2000 test scores."""
    test = os.path.join(model.root, TEST_FILE)
    return {
        "nltk_data": model.root, "nltk": model.key["nltk"],
        "tagger": {part: file_entry(os.path.join(model.root, rel))
                   for part, rel in TAGGER_FILES.items()},
        "train": file_entry(os.path.join(model.root, TRAIN_FILE)),
        "test": file_entry(test) if os.path.isfile(test) else None,
        "chunker": model.description, "model_sha256": model.fingerprint,
        "test_scores": model.scores,  # with the tagger's POS tags; null without test.txt
    }
