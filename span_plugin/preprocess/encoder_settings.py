"""The text encoder a checkpoint was trained with, rebuilt from its data record.

A checkpoint's task state holds the record of its data folder
(:mod:`span_plugin.preprocess.provenance`): BPE kind and files with their hashes, n-gram dictionary
(hash, top-k, word scheme), segmentation and seed. :func:`encoder_spec` turns it into an
:class:`~span_plugin.preprocess.encoding.EncoderSpec`:

- a setting not given is the record's; a file not given is the recorded path, which must
  still hold the recorded content;
- a file given again must have the recorded content (same sha256), wherever it lies;
- any difference is a :class:`SettingsMismatch` naming both sides, so inference never
  tokenizes or segments differently from training without saying so.

Checkpoints without a record (data made before span_plugin 0.2) use the settings given,
with a warning that they cannot be checked.
"""

import logging
import os

from span_plugin.preprocess import provenance

logger = logging.getLogger(__name__)

# EncoderSpec field -> the hub's / span-predict's name for it.
GIVEN_NAMES = {
    "encoder_json": "gpt2_encoder_json", "vocab_bpe": "gpt2_vocab_bpe",
    "sentencepiece_model": "sentencepiece_model", "bpe_codes": "bpe_codes",
    "bpe_vocab": "bpe_vocab", "wordpiece": "wordpiece",
}
SETTINGS = ("bpe", *GIVEN_NAMES.values(), "ngrams", "ngrams_top_k", "segmentation", "seed")


class SettingsMismatch(ValueError):
    """A setting or file given for inference that differs from the checkpoint's."""


def _file(name, given, entry, checkpoint):
    """The path to use for one recorded file (``entry``: {"path", "sha256"})."""
    recorded = f"{entry['path']} (sha256 {provenance.short(entry['sha256'])})"
    if given is not None:
        if not os.path.isfile(given):
            raise FileNotFoundError(f"{name}={given}: no such file")
        actual = provenance.sha256(given)
        if actual != entry["sha256"]:
            raise SettingsMismatch(
                f"{name}={given} (sha256 {provenance.short(actual)}) is not the file "
                f"{checkpoint} was trained with: {recorded}")
        return str(given)
    path = entry["path"]
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{checkpoint} was trained with {recorded}, which is not here: pass "
            f"{name}=PATH of a file with that content")
    actual = provenance.sha256(path)
    if actual != entry["sha256"]:
        raise SettingsMismatch(
            f"{path} changed since {checkpoint} was trained (sha256 now "
            f"{provenance.short(actual)}, recorded {provenance.short(entry['sha256'])}): "
            f"pass {name}=PATH of a file with the recorded content")
    return path


def _same(name, given, recorded, checkpoint):
    if given is not None and given != recorded:
        raise SettingsMismatch(f"{name}={given!r}, but {checkpoint} was trained with "
                               f"{name}={recorded!r}")


def _chunker_data(recorded, checkpoint):
    """The NLTK data folder of a checkpoint trained on chunker spans: the recorded one,
    if its files and the chunker trained from them are still the recorded ones."""
    from span_plugin.preprocess.chunker import build

    now = provenance.chunker_record(build(recorded["nltk_data"]))  # names a missing file
    entries = [(recorded["tagger"][k], now["tagger"][k]) for k in recorded["tagger"]]
    for was, new in entries + [(recorded["train"], now["train"])]:
        if was["sha256"] != new["sha256"]:
            raise SettingsMismatch(
                f"{new['path']} (sha256 {provenance.short(new['sha256'])}) changed since "
                f"{checkpoint} was trained (sha256 {provenance.short(was['sha256'])}): its "
                f"chunker would segment differently")
    if now["model_sha256"] != recorded["model_sha256"]:
        raise SettingsMismatch(
            f"the chunker trained from {recorded['nltk_data']} now (NLTK {now['nltk']}, model "
            f"sha256 {provenance.short(now['model_sha256'])}) is not the one {checkpoint} was "
            f"trained with (NLTK {recorded['nltk']}, {provenance.short(recorded['model_sha256'])})")
    return recorded["nltk_data"]


def encoder_spec(record, given, checkpoint):
    """EncoderSpec for inference. ``given``: {setting: value or None} with the keys of
    :data:`SETTINGS`; ``record``: the checkpoint's data record, or None."""
    from span_plugin.preprocess.encoding import EncoderSpec
    from span_plugin.tokenizers.wordpiece import resolve_wordpiece
    from span_plugin.preprocess.ngrams import default_ngrams_path

    given = {k: given.get(k) for k in SETTINGS}
    if record is None:
        logger.warning(
            "%s holds no data record (its folder was made before span_plugin 0.2): the "
            "encoder settings given are used as they are and cannot be checked", checkpoint)
        spec = EncoderSpec(
            bpe=given["bpe"] or "gpt2", ngrams=given["ngrams"],
            ngrams_top_k=given["ngrams_top_k"], segmentation=given["segmentation"] or "greedy",
            seed=given["seed"] or 0,
            **{field: given[name] for field, name in GIVEN_NAMES.items()})
        if spec.bpe == "gpt2" and not (spec.encoder_json and spec.vocab_bpe):
            raise ValueError(f"{checkpoint} holds no data record: give the encoder files "
                             f"its folder was made with (gpt2_encoder_json, gpt2_vocab_bpe)")
        return spec

    enc = record["encoder"]
    _same("bpe", given["bpe"], enc["bpe"], checkpoint)
    for field, name in GIVEN_NAMES.items():
        if given[name] is not None and field not in enc["files"]:
            raise SettingsMismatch(f"{name}={given[name]} given, but {checkpoint} was trained "
                                   f"with the {enc['bpe']} encoder, which reads no such file")
    files = {}
    for field, entry in enc["files"].items():
        if field == "wordpiece_config":
            continue
        path = given[GIVEN_NAMES[field]]
        if field == "wordpiece" and path is not None:
            path, config = resolve_wordpiece(path)
            if "wordpiece_config" in enc["files"]:
                _file("wordpiece config", config, enc["files"]["wordpiece_config"], checkpoint)
        files[field] = _file(GIVEN_NAMES[field], path, entry, checkpoint)
    if "wordpiece_config" in enc["files"] and given["wordpiece"] is None:
        _file("wordpiece config", None, enc["files"]["wordpiece_config"], checkpoint)

    ng = enc["ngrams"]
    _same("segmentation", given["segmentation"], enc["segmentation"], checkpoint)
    _same("seed", given["seed"], enc["seed"], checkpoint)
    if ng is None:
        if given["ngrams"] is not None:
            raise SettingsMismatch(f"ngrams={given['ngrams']} given, but {checkpoint} was "
                                   f"trained with segmentation 'none' (no dictionary)")
        ngrams, top_k = None, None
    else:
        _same("ngrams_top_k", given["ngrams_top_k"], ng["top_k"], checkpoint)
        entry = ng
        if ng.get("packaged") and given["ngrams"] is None:
            # The packaged dictionary of this installation must be the one trained with.
            entry = dict(ng, path=default_ngrams_path(ng["words"]))
            try:
                ngrams = _file("ngrams", None, entry, checkpoint)
            except SettingsMismatch as e:
                raise SettingsMismatch(
                    f"{e} (the packaged dictionaries were counted on WikiText-2 and GLUE "
                    f"training text up to span_plugin 0.2 and on Wikipedia since 0.3: give the "
                    f"one this checkpoint was trained with; docs/PREPROCESS.md)") from None
        else:
            ngrams = _file("ngrams", given["ngrams"], entry, checkpoint)
        top_k = ng["top_k"]
    nltk_data = None
    if enc["segmentation"] == "chunker":
        nltk_data = _chunker_data(enc["chunker"], checkpoint)
    return EncoderSpec(bpe=enc["bpe"], ngrams=ngrams, ngrams_top_k=top_k,
                       segmentation=enc["segmentation"], seed=enc["seed"], nltk_data=nltk_data,
                       **files)
