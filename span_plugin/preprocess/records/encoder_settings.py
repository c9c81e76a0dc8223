"""The text encoder a checkpoint was trained with, rebuilt from its data record.

A checkpoint's task state holds the record of its data folder
(:mod:`span_plugin.preprocess.records.provenance`): BPE kind and files with their hashes, n-gram
dictionary (hash, top-k, word scheme), segmentation and seed. :func:`encoder_spec` turns it
into an :class:`~span_plugin.preprocess.segmentation.encoding.EncoderSpec`:

- a setting not given is the record's; a file not given is the recorded path, which must
  still hold the recorded content;
- a file given again must have the recorded content (same sha256), wherever it lies;
- any difference is a :class:`SettingsMismatch` naming both sides, so inference never
  tokenizes or segments differently from training without saying so.

Which files a kind records and how a given path is compared (a WordPiece folder stands for
its tokenizer file and config) is declared by the kind (its Options); what a segmentation
takes back from the record (the chunker's NLTK data) by the segmentation.

Checkpoints without a record (data made before span_plugin 0.2) use the settings given,
with a warning that they cannot be checked.
"""

import logging

from span_plugin.preprocess.file_records import SettingsMismatch, recorded_file
from span_plugin.tokenizers import file_options, tokenizer_kind
from span_plugin.tokenizers.options import values_by_field

logger = logging.getLogger(__name__)

# The settings every encoder has; the files are the tokenizers' (file_options), given by
# any of their keywords (``gpt2_encoder_json`` or ``encoder_json``).
SETTINGS = ("bpe", "ngrams", "ngrams_top_k", "segmentation", "seed")

__all__ = ["SETTINGS", "SettingsMismatch", "encoder_spec", "given_files"]


def given_files(given, where="encoder settings"):
    """``{keyword: path or None}`` -> ``{EncoderSpec field: path}`` of the files given;
    an unknown keyword is a TypeError naming the known ones."""
    return values_by_field(given, file_options().values(), where)


def _same(name, given, recorded, checkpoint):
    if given is not None and given != recorded:
        raise SettingsMismatch(f"{name}={given!r}, but {checkpoint} was trained with "
                               f"{name}={recorded!r}")


def _files(enc, files, checkpoint):
    """The tokenizer files of a record's ``encoder``, each checked (given ``files``:
    {field: path}): {field: path to use}."""
    options = file_options()
    for field, path in files.items():
        if field not in enc["files"]:
            raise SettingsMismatch(f"{options[field].name}={path} given, but {checkpoint} was "
                                   f"trained with the {enc['bpe']} encoder, which reads no "
                                   f"such file")
    given = {}  # record key -> the path given for it (a WordPiece folder: two files)
    for field, path in files.items():
        given.update(options[field].recorded_files(path))
    out = {}
    for key, entry in enc["files"].items():
        name = options[key].name if key in options else key.replace("_", " ")
        path = recorded_file(name, given.get(key), entry, checkpoint)
        if key in options:
            out[key] = path
    return out


def encoder_spec(record, given, checkpoint):
    """EncoderSpec for inference. ``given``: {setting: value or None}: the keys of
    :data:`SETTINGS` and the tokenizers' files by keyword; ``record``: the checkpoint's
    data record, or None."""
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec
    from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path
    from span_plugin.preprocess.segmentation.segmentations import segmentation_kind

    given = dict(given)
    settings = {k: given.pop(k, None) for k in SETTINGS}
    files = given_files(given)
    if record is None:
        logger.warning(
            "%s holds no data record (its folder was made before span_plugin 0.2): the "
            "encoder settings given are used as they are and cannot be checked", checkpoint)
        spec = EncoderSpec(
            bpe=settings["bpe"] or "gpt2", ngrams=settings["ngrams"],
            ngrams_top_k=settings["ngrams_top_k"],
            segmentation=settings["segmentation"] or "greedy", seed=settings["seed"] or 0,
            **files)
        tokenizer = tokenizer_kind(spec.bpe)
        if any(not files.get(f) for f in tokenizer.required):
            names = ", ".join(o.name for o in tokenizer.options if o.field in tokenizer.required)
            raise ValueError(f"{checkpoint} holds no data record: give the encoder files "
                             f"its folder was made with ({names})")
        return spec

    enc = record["encoder"]
    _same("bpe", settings["bpe"], enc["bpe"], checkpoint)
    files = _files(enc, files, checkpoint)

    ng = enc["ngrams"]
    _same("segmentation", settings["segmentation"], enc["segmentation"], checkpoint)
    _same("seed", settings["seed"], enc["seed"], checkpoint)
    if ng is None:
        if settings["ngrams"] is not None:
            raise SettingsMismatch(f"ngrams={settings['ngrams']} given, but {checkpoint} was "
                                   f"trained with segmentation {enc['segmentation']!r} (no "
                                   f"dictionary)")
        ngrams, top_k = None, None
    else:
        _same("ngrams_top_k", settings["ngrams_top_k"], ng["top_k"], checkpoint)
        entry = ng
        if ng.get("packaged") and settings["ngrams"] is None:
            # The packaged dictionary of this installation must be the one trained with.
            entry = dict(ng, path=default_ngrams_path(ng["words"]))
            try:
                ngrams = recorded_file("ngrams", None, entry, checkpoint)
            except SettingsMismatch as e:
                raise SettingsMismatch(
                    f"{e} (the packaged dictionaries were counted on WikiText-2 and GLUE "
                    f"training text up to span_plugin 0.2 and on Wikipedia since 0.3: give the "
                    f"one this checkpoint was trained with; docs/PREPROCESS.md)") from None
        else:
            ngrams = recorded_file("ngrams", settings["ngrams"], entry, checkpoint)
        top_k = ng["top_k"]
    options = segmentation_kind(enc["segmentation"]).settings_from_record(enc, checkpoint)
    return EncoderSpec(bpe=enc["bpe"], ngrams=ngrams, ngrams_top_k=top_k,
                       segmentation=enc["segmentation"], seed=enc["seed"], **files, **options)
