"""``span-export int8-check DIR``: what the portable int8 path
(``load_model(DIR, quantize="int8")``) costs a ``span-export hf`` folder, measured and
written into it.

The folder's model predicts labelled examples (a split of ``--data``, default the folder
the data record names when it is here, or ``--input``) in
float32 and in int8 (:mod:`span_plugin.export.int8_guard`); the figures go into
``config.json`` (``span_plugin.int8``) and the model card (``README.md``, its int8
section), and ``files.json`` is written again with their new sha256. The folder is
rewritten whole (a staged copy, checked as a reader checks it, renamed into place) or
not at all; a drop past ``max_drop`` writes nothing unless forced.
"""

import json
import os
import shutil

from span_plugin.convert.hf_source import ConversionError
from span_plugin.files.atomic import staged_folder
from span_plugin.export.model_card import with_int8_section
from span_plugin.formats.model_folder import CONFIG, MANIFEST, write_manifest
from span_plugin.export import int8_guard

CARD = "README.md"


def method():
    """How the portable int8 path computes on this machine, for the record."""
    from span_plugin.portable.quantize import full_range_activations

    bits = "8 bits, AVX512-VNNI" if full_range_activations() else "7 bits, no AVX512-VNNI"
    return (f"torch dynamic quantization of the encoder's Linear layers (qint8 weights, one "
            f"scale per output channel; activations quantized per batch, {bits}); embeddings, "
            f"LayerNorms, pooler and heads float32")


def measure_folder(folder, data=None, split="valid", input_path=None):
    """The guard's record (no verdict) of ``folder``'s model in float32 and int8."""
    from span_plugin.portable import load_model

    fp32 = load_model(folder)
    if data is None and input_path is None:
        data = int8_guard.recorded_data(fp32.record)
    fp32.use_data(data)
    int8 = load_model(folder, quantize="int8").use_data(data)
    examples = int8_guard.read_examples(fp32, split, input_path)
    return int8_guard.measure(fp32, int8, examples, method())


def _copy_into(src, dst):
    """Every file of ``src`` into the empty folder ``dst``: hard links where the file
    system allows (the weights are not rewritten), copies otherwise."""
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in files:
            a, b = os.path.join(root, name), os.path.join(dst, rel, name)
            try:
                os.link(a, b)
            except OSError:
                shutil.copy2(a, b)


def write_record(folder, record):
    """``folder`` rewritten whole with ``record`` in ``config.json`` and the card, and
    ``files.json`` listing the new sha256; the result checked as ``load_model`` checks a
    folder before it replaces the old one."""
    from span_plugin.portable import check_model_folder

    with staged_folder(folder) as tmp:
        _copy_into(folder, tmp)
        config_path = tmp / CONFIG
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["span_plugin"]["int8"] = record
        for name in (CONFIG, CARD, MANIFEST):  # new contents, not through the old links
            if (tmp / name).exists():
                (tmp / name).unlink()
        config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        card = os.path.join(folder, CARD)
        if os.path.isfile(card):
            with open(card, encoding="utf-8") as f:
                text = f.read()
            with open(tmp / CARD, "w", encoding="utf-8", newline="\n") as f:
                f.write(with_int8_section(text, record))
        write_manifest(tmp)
        check_model_folder(tmp)


def int8_check(folder, data=None, split="valid", input_path=None,
               max_drop=int8_guard.DEFAULT_MAX_DROP, force_int8=False, min_agreement=None):
    """Measure, judge and record (module docstring); returns the record written.
    Raises :class:`~span_plugin.export.int8_guard.Int8Refused` (nothing written) past
    ``max_drop`` (or under ``min_agreement``) unless ``force_int8``; a folder or examples that cannot be read: one
    ConversionError line."""
    folder = os.fspath(folder)
    try:
        record = measure_folder(folder, data, split, input_path)
    except ValueError as err:  # ModelFolderError among them: one line naming the file
        line = str(err)
        raise ConversionError(line if folder in line else f"{folder}: {line}") from None
    record = int8_guard.judge(record, max_drop, force_int8, where=folder, min_agreement=min_agreement)
    write_record(folder, record)
    return record
