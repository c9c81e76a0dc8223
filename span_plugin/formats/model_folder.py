"""The integrity rules of an exported model folder (``span-export hf`` of a fine-tuned
checkpoint; docs/EXPORT.md), checked whole: the writer calls :func:`write_manifest`
last, a reader :func:`check_folder` first, before it opens any other file; every
refusal is a :class:`ModelFolderError` naming the file. The rules (``files.json``, JSON
bounds, the tensors' header, ``config.json``): docs/EXPORT.md, section "Module notes"."""

import hashlib
import json
import math
import os
import stat

MANIFEST = "files.json"
FORMAT = 1
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
PICKLE_SUFFIXES = (".pt", ".bin", ".pkl", ".pickle", ".pth", ".ckpt")
HEAD_PREFIX = "span_heads."
# JSON files of a folder: a config of thousands of settings is a few hundred kB, a
# tokenizer.json of a large vocabulary tens of MB; no format nests past ten levels.
MAX_JSON_BYTES = 256 << 20
MAX_JSON_DEPTH = 64
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
# safetensors dtype -> bytes per element
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
# model_type -> the tensors' prefix and whether positions start after the pad (RoBERTa's)
FAMILIES = {"roberta": ("roberta.", True), "xlm-roberta": ("roberta.", True),
            "camembert": ("roberta.", True), "bert": ("bert.", False)}
# A fine-tuned model whose heads no transformers class computes is exported under the
# plugin's own model type: span_plugin_<family>. transformers refuses it by name unless
# span_plugin.portable registered it (span_plugin/portable/hf_auto.py).
PLUGIN_TYPE_PREFIX = "span_plugin_"
# Where a head stored under a transformers class's names keeps its tensors.
TASK_CLASS_PREFIX = "classifier."
# Head kinds by what their label list holds (a kind not here: the reader's to know).
CLASS_HEADS = ("sentence", "plain")
TAG_HEADS = ("token", "sf")
SPAN_HEAD = "span"
PAIR_HEAD = "span_pair"
QA_HEADS = ("qa_boundary", "qa_boundary_sf", "qa_span")  # answers, no label names
# Sizes no tensor holds, bounded by the model's positions (an answer, a span of words,
# a window longer than the model reads means nothing and costs memory per position).
POSITION_BOUNDED = ("max_answer_tokens", "max_words", "max_span_words", "max_span_tokens")


class ModelFolderError(ValueError):
    """A model folder that is not whole, or holds what a reader must not load."""


def plugin_model_type(family):
    """The plugin's model type of an encoder family: ``span_plugin_roberta``."""
    return PLUGIN_TYPE_PREFIX + family


def encoder_family(model_type):
    """The encoder family of a config's ``model_type``: itself (``roberta``), or the
    family under the plugin's type (``span_plugin_roberta`` -> ``roberta``)."""
    if isinstance(model_type, str) and model_type.startswith(PLUGIN_TYPE_PREFIX):
        return model_type[len(PLUGIN_TYPE_PREFIX):]
    return model_type


def head_tensor_names(name, head, shapes):
    """``{key in the head's module: tensor name in model.safetensors}`` of head ``name``
    (its ``span_plugin.heads`` entry ``head``): the entry's ``tensors`` when the head is
    stored under a transformers class's names (``classifier.*``), else every
    ``span_heads.<name>.*`` tensor of ``shapes``."""
    mapped = head.get("tensors") if isinstance(head, dict) else None
    if mapped is not None:
        return dict(mapped)
    prefix = f"{HEAD_PREFIX}{name}."
    return {k[len(prefix):]: k for k in shapes if k.startswith(prefix)}


def file_sha256(path) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


# ---- files and JSON ---------------------------------------------------------------


def _kind_of(mode):
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path, what="file"):
    """``os.lstat`` of ``path``, which must be a regular file (not a link: it could read
    something outside the folder; not a device or FIFO)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ModelFolderError(f"{path}: missing (the {what} of an exported model)") from None
    if stat.S_ISLNK(st.st_mode):
        raise ModelFolderError(f"{path}: a link (the {what} of a model folder must be a "
                               f"file in the folder itself)")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFolderError(f"{path}: {_kind_of(st.st_mode)}, not a regular file (the "
                               f"{what} of an exported model)")
    return st


def _not_a_number(text):
    raise ValueError(f"{text} is not a number JSON allows")


def _too_deep(value, limit):
    """The path (``a.b[3]``) of the first value nested deeper than ``limit``, or None."""
    stack = [(value, "", 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return where or "(top)"
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                sub = f"{where}.{key}" if isinstance(node, dict) else f"{where}[{key}]"
                stack.append((child, sub.lstrip("."), depth + 1))
    return None


def parse_json(data, path, limit=MAX_JSON_DEPTH, part=None):
    """``data`` (bytes of the file ``path``; ``part``: of which part of it) parsed: UTF-8
    JSON nested at most ``limit`` levels, without ``NaN``/``Infinity``; else a one-line
    :class:`ModelFolderError`."""
    where = f"{path}: {part}" if part else f"{path}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ModelFolderError(f"{where}: not UTF-8 ({err.reason} at byte {err.start})") from None
    try:
        value = json.loads(text, parse_constant=_not_a_number)
    except RecursionError:
        raise ModelFolderError(f"{where}: JSON nested deeper than {limit} levels") from None
    except ValueError as err:  # JSONDecodeError, NaN/Infinity
        raise ModelFolderError(f"{where}: not readable JSON ({err})") from None
    deep = _too_deep(value, limit)
    if deep is not None:
        raise ModelFolderError(f"{where}: {deep}: JSON nested deeper than {limit} levels")
    return value


def read_json(path, what="file"):
    """The JSON value of the regular file ``path`` (:func:`regular_file`), of at most
    :data:`MAX_JSON_BYTES` (:func:`parse_json`)."""
    st = regular_file(path, what)
    if st.st_size > MAX_JSON_BYTES:
        raise ModelFolderError(f"{path}: {st.st_size:,} bytes, more than the "
                               f"{MAX_JSON_BYTES:,} a JSON file of a model folder may have")
    with open(path, "rb") as f:
        data = f.read(MAX_JSON_BYTES + 1)
    return parse_json(data, path)


# ---- the listing ----------------------------------------------------------------------


def _entries(folder):
    """Every entry below ``folder`` but the manifest, as (relative name, path), sorted;
    directories are walked, not listed."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in dirs + files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if rel == MANIFEST or (name in dirs and not os.path.islink(path)):
                continue
            found.append((rel, path))
    return sorted(found)


def _refuse_unsafe(folder, rel, path):
    if os.path.islink(path):
        raise ModelFolderError(f"{path}: a link in a model folder (every file must be in "
                               f"{folder} itself)")
    if rel.lower().endswith(PICKLE_SUFFIXES):
        raise ModelFolderError(f"{path}: a pickle file in a model folder (suffixes "
                               f"{', '.join(PICKLE_SUFFIXES)} are refused; weights go in "
                               f"model.safetensors)")
    if not os.path.isfile(path):
        raise ModelFolderError(f"{path}: {_kind_of(os.lstat(path).st_mode)} in a model "
                               f"folder (it holds regular files only)")


def write_manifest(folder) -> None:
    """Write ``folder/files.json`` listing the sha256 of every other file in ``folder``
    (refusing links and pickle files, as :func:`verify_folder` would)."""
    folder = os.fspath(folder)
    files = {}
    for rel, path in _entries(folder):
        _refuse_unsafe(folder, rel, path)
        files[rel] = file_sha256(path)
    text = json.dumps({"format": FORMAT, "files": files}, indent=2, sort_keys=True) + "\n"
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _encoder_only(folder):
    """Whether ``folder`` is an encoder folder of ``span-export hf`` (a config.json
    without a ``span_plugin`` section, no files.json)."""
    config = os.path.join(folder, CONFIG)
    try:
        return os.path.isfile(config) and "span_plugin" not in read_json(config)
    except ModelFolderError:
        return False


def _read_manifest(folder):
    path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise ModelFolderError(f"{folder}: not a folder (expected an exported model folder)")
    if not os.path.lexists(path):
        if _encoder_only(folder):
            raise ModelFolderError(
                f"{path}: missing: {folder} is an encoder without task heads (span-export "
                f"hf of an encoder checkpoint); load it with transformers' AutoModel or "
                f"AutoModelForMaskedLM; to predict with load_model or span-predict --model, "
                f"export a fine-tuned checkpoint: span-export hf CHECKPOINT_best.pt --out DIR")
        raise ModelFolderError(f"{path}: missing (an exported model folder lists its files' "
                               f"sha256 there; span-export hf of a fine-tuned checkpoint "
                               f"writes it)")
    manifest = read_json(path, "file listing")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ModelFolderError(f"{path}: format {got!r}, expected {FORMAT}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ModelFolderError(f"{path}: 'files' must map file names to sha256 strings")
    for rel in files:
        if not _inside_name(rel) or rel == MANIFEST:
            raise ModelFolderError(f"{path}: entry {rel!r} is not a file name inside the folder")
    return files


def _inside_name(rel):
    """Whether ``rel`` is a relative ``/``-separated name that stays inside a folder."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and "\\" not in rel and "\x00" not in rel \
        and ".." not in parts and "" not in parts and "." not in parts


def _verify(folder):
    """``(config.json's dict, {name: sha256} listed)`` after the listing's checks."""
    listed = _read_manifest(folder)
    present = dict(_entries(folder))
    for rel, path in present.items():
        _refuse_unsafe(folder, rel, path)
    for rel, digest in sorted(listed.items()):
        path = os.path.join(folder, *rel.split("/"))
        if rel not in present:
            raise ModelFolderError(f"{path}: missing (listed in {MANIFEST})")
        actual = file_sha256(path)
        if actual != digest:
            raise ModelFolderError(f"{path}: changed since export (sha256 {actual[:12]}, "
                                   f"{MANIFEST} lists {digest[:12]})")
    for rel, path in present.items():
        if rel not in listed:
            raise ModelFolderError(f"{path}: not listed in {MANIFEST} (a model folder holds "
                                   f"only the files it was exported with)")
    config = os.path.join(folder, CONFIG)
    if CONFIG not in listed:
        raise ModelFolderError(f"{config}: missing (not listed in {MANIFEST})")
    data = read_json(config, "config")
    if not isinstance(data, dict):
        raise ModelFolderError(f"{config}: expected a JSON object, got {type(data).__name__}")
    return data, listed


def verify_folder(folder) -> dict:
    """Check ``folder`` against its ``files.json`` (the listing's rules above) and return
    ``config.json``'s dict. Raises :class:`ModelFolderError` naming the first bad file.
    The listing only: readers call :func:`check_folder`, which checks the rest."""
    return _verify(os.fspath(folder))[0]


# ---- the tensors' header ----------------------------------------------------------------


def safetensors_header(path):
    """``{tensor name: (dtype, shape)}`` of a safetensors file, from its header alone
    (nothing is loaded): the header a JSON object of at most :data:`MAX_HEADER_BYTES`,
    each entry of a known dtype, its bytes (``data_offsets``) inside the data and as many
    as its shape needs. Raises :class:`ModelFolderError` naming the file and tensor."""
    size = regular_file(path, "weights").st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ModelFolderError(f"{path}: {size} bytes, not a safetensors file (no header)")
        n = int.from_bytes(head, "little")
        if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
            raise ModelFolderError(f"{path}: not a safetensors file (its header claims "
                                   f"{n:,} bytes in a file of {size:,})")
        header = parse_json(f.read(n), path, limit=4, part="header")
    if not isinstance(header, dict):
        raise ModelFolderError(f"{path}: not a safetensors file (its header is a "
                               f"{type(header).__name__}, not a JSON object)")
    data_bytes = size - 8 - n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict):
            raise ModelFolderError(f"{where}: header entry is {type(entry).__name__}, not an "
                                   f"object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPE_BYTES:
            raise ModelFolderError(f"{where}: dtype {dtype!r}, not one of safetensors'")
        if not (isinstance(shape, list) and all(_count(d) for d in shape)):
            raise ModelFolderError(f"{where}: shape {shape!r} is not a list of sizes")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_count, offsets))
                and offsets[0] <= offsets[1] <= data_bytes):
            raise ModelFolderError(f"{where}: data_offsets {offsets!r} outside the file's "
                                   f"{data_bytes:,} bytes of data")
        need = math.prod(shape) * DTYPE_BYTES[dtype]
        if offsets[1] - offsets[0] != need:
            raise ModelFolderError(f"{where}: shape {shape} of {dtype} needs {need:,} bytes, "
                                   f"data_offsets hold {offsets[1] - offsets[0]:,}")
        out[name] = (dtype, tuple(shape), tuple(offsets))
    at = 0  # the tensors' bytes follow each other and fill the data, as safetensors writes them
    for name, (_, _, (begin, end)) in sorted(out.items(), key=lambda kv: kv[1][2]):
        if begin != at:
            raise ModelFolderError(f"{path}: tensor {name!r}: data_offsets start at {begin:,}, "
                                   f"where the bytes before end at {at:,} (overlapping or "
                                   f"with a gap)")
        at = end
    if at != data_bytes:
        raise ModelFolderError(f"{path}: {data_bytes - at:,} bytes after the last tensor "
                               f"(the header describes {at:,} of {data_bytes:,})")
    return {name: (dtype, shape) for name, (dtype, shape, _) in out.items()}


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ---- config.json against the tensors and itself ---------------------------------------


class _Where:
    """Messages naming config.json and a field."""

    def __init__(self, path):
        self.path = path

    def fail(self, field, why):
        raise ModelFolderError(f"{self.path}: {field}: {why}")

    def get(self, section, key, kind, field, optional=False):
        value = section.get(key)
        if value is None and optional:
            return None
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is int and ok and value < 0:
            ok = False
        if not ok:
            want = {int: "a count", dict: "a JSON object", str: "a string"}.get(kind, str(kind))
            self.fail(field, f"missing (expected {want})" if key not in section
                      else f"{repr(value)[:80]} is not {want}")
        return value


def _encoder_sizes(where, config, shapes):
    """The encoder's sizes of config.json against the tensors' shapes (and its family
    against their prefix); returns ``(prefix, family)``."""
    family = encoder_family(config.get("model_type"))
    if family not in FAMILIES:
        where.fail("model_type", f"{config.get('model_type')!r}; an exported model is one of "
                   f"{', '.join(FAMILIES)} (or the plugin's {PLUGIN_TYPE_PREFIX}<that>)")
    prefix, _ = FAMILIES[family]
    word = f"{prefix}embeddings.word_embeddings.weight"
    if word not in shapes:
        found = [p for p, _ in FAMILIES.values()
                 if f"{p}embeddings.word_embeddings.weight" in shapes]
        if found:
            where.fail("model_type", f"{family!r}, but model.safetensors holds a "
                       f"{found[0].rstrip('.')} encoder ({found[0]}*): they must agree")
        where.fail("model_type", f"{family!r}, but model.safetensors has no {word}")
    archs = config.get("architectures")
    if archs is not None:
        if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
            where.fail("architectures", f"{archs!r} is not a list of class names")
        if not archs[0].lower().replace("spanplugin", "", 1).startswith(family.replace("-", "")):
            where.fail("architectures", f"{archs[0]!r} is not a {family} class (model_type "
                       f"{family!r})")
        # The plugin's classes only under the plugin's type: a standard type would let
        # transformers load the encoder with a random head in place of the span head.
        if archs[0].startswith("SpanPlugin") != (config.get("model_type") != family):
            where.fail("model_type", f"{config.get('model_type')!r} with architectures "
                       f"{archs[0]!r}: span_plugin's classes go with its type "
                       f"{plugin_model_type(family)!r}, transformers' classes with {family!r}")
    sizes = {k: where.get(config, k, int, k) for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "max_position_embeddings", "type_vocab_size", "pad_token_id")}
    hidden = sizes["hidden_size"]
    # tensor -> the config fields of its rows and columns
    expect = {word: ("vocab_size", "hidden_size"),
              f"{prefix}embeddings.position_embeddings.weight":
                  ("max_position_embeddings", "hidden_size"),
              f"{prefix}embeddings.token_type_embeddings.weight":
                  ("type_vocab_size", "hidden_size"),
              f"{prefix}encoder.layer.0.intermediate.dense.weight":
                  ("intermediate_size", "hidden_size")}
    for name, keys in expect.items():
        want = tuple(sizes[k] for k in keys)
        got = shapes.get(name, (None, None))[1]
        if got is None:
            where.fail(keys[0], f"model.safetensors has no {name}")
        if tuple(got) != want:
            key = next((k for k, w, g in zip(keys, want, tuple(got) + (None,) * 2) if w != g),
                       keys[0])
            where.fail(key, f"{sizes[key]}, but model.safetensors' {name} has shape "
                       f"{list(got)} ({', '.join(keys)} give {list(want)})")
    layers = {int(k[len(prefix) + len("encoder.layer."):].split(".")[0]) for k in shapes
              if k.startswith(f"{prefix}encoder.layer.")
              and k[len(prefix) + len("encoder.layer."):].split(".")[0].isdigit()}
    if layers != set(range(sizes["num_hidden_layers"])):
        where.fail("num_hidden_layers", f"{sizes['num_hidden_layers']} but model.safetensors "
                   f"holds {prefix}encoder.layer.N.* for {len(layers)} layers")
    if sizes["num_attention_heads"] == 0 or hidden % sizes["num_attention_heads"]:
        where.fail("num_attention_heads", f"{sizes['num_attention_heads']} does not divide "
                   f"hidden_size {hidden}")
    if sizes["pad_token_id"] >= sizes["vocab_size"]:
        where.fail("pad_token_id", f"{sizes['pad_token_id']} is past the vocabulary "
                   f"({sizes['vocab_size']} ids)")
    return prefix, family, sizes


def _check_positions(where, family, sizes, model_args, task_args):
    """The model's and the task's max_positions against the position table; returns the
    model's."""
    _, after_pad = FAMILIES[family]
    table = sizes["max_position_embeddings"]
    usable = table - (sizes["pad_token_id"] + 1 if after_pad else 0)
    positions = where.get(model_args, "max_positions", int, "span_plugin.model_args.max_positions")
    if positions > usable:
        if after_pad:
            where.fail("span_plugin.model_args.max_positions",
                       f"{positions} + pad_token_id {sizes['pad_token_id']} + 1 is more than "
                       f"max_position_embeddings {table} (a {family} model's positions start "
                       f"after the pad id)")
        where.fail("span_plugin.model_args.max_positions", f"{positions}, more than "
                   f"max_position_embeddings {table}")
    for key in ("encoder_embed_dim", "encoder_layers"):
        value = where.get(model_args, key, int, f"span_plugin.model_args.{key}", optional=True)
        hf = "hidden_size" if key == "encoder_embed_dim" else "num_hidden_layers"
        if value is not None and value != sizes[hf]:
            where.fail(f"span_plugin.model_args.{key}", f"{value}, but {hf} is {sizes[hf]}")
    task = where.get(task_args, "max_positions", int, "span_plugin.task_args.max_positions",
                     optional=True)
    if task is not None and task > positions:
        where.fail("span_plugin.task_args.max_positions",
                   f"{task}, more than the model's {positions} positions")
    return positions


def _label_list(where, field, names, want):
    if not (isinstance(names, list) and all(isinstance(n, str) and n for n in names)):
        where.fail(field, f"{str(names)[:80]} is not a list of label names")
    if len(set(names)) != len(names):
        where.fail(field, f"names a label twice ({names})")
    if want is not None and len(names) != want:
        where.fail(field, f"{len(names)} names for a head of {want} classes")
    return names


def _check_heads(where, span, shapes, positions):
    """Heads: types, tensors, options' sizes, labels; the task's classes."""
    heads = span.get("heads")
    if not isinstance(heads, dict) or not heads:
        where.fail("span_plugin.heads", "no task head to predict with (expected "
                   "{name: {kind, options, inputs}})")
    labels = where.get(span, "labels", dict, "span_plugin.labels", optional=True) or {}
    task_args = span["task_args"]
    regression = bool(task_args.get("regression_target"))
    owned = {k.split(".")[1] for k in shapes if k.startswith(HEAD_PREFIX) and k.count(".") >= 2}
    mapped = {}  # tensor name -> the head stored under a transformers class's names
    for name, head in heads.items():
        if isinstance(head, dict) and head.get("tensors") is not None:
            field = f"span_plugin.heads.{name}.tensors"
            names = head["tensors"]
            if not (isinstance(names, dict) and names and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in names.items())):
                where.fail(field, f"{repr(names)[:80]} is not an object of tensor names")
            for key, tensor in names.items():
                if not tensor.startswith(TASK_CLASS_PREFIX) or tensor not in shapes:
                    where.fail(f"{field}.{key}", f"{tensor!r}: expected a {TASK_CLASS_PREFIX}* "
                               f"tensor of model.safetensors")
                if tensor in mapped:
                    where.fail(f"{field}.{key}", f"{tensor!r} is head {mapped[tensor]!r}'s too")
                mapped[tensor] = name
            owned.add(name)
    stray = sorted(k for k in shapes if k.startswith(TASK_CLASS_PREFIX) and k not in mapped)
    if stray:
        where.fail("span_plugin.heads", f"no head's tensors name {stray[0]}, which "
                   f"model.safetensors holds")
    for name in sorted(owned - set(heads)):
        where.fail("span_plugin.heads", f"has no head {name!r}, but model.safetensors holds "
                   f"{HEAD_PREFIX}{name}.*")
    for name in sorted(set(labels) - set(heads)):
        where.fail(f"span_plugin.labels.{name}",
                   "labels of a head that is not in span_plugin.heads")
    for name, head in heads.items():
        field = f"span_plugin.heads.{name}"
        if not isinstance(head, dict):
            where.fail(field, f"{repr(head)[:80]} is not an object {{kind, options, inputs}}")
        if not isinstance(head.get("kind"), str):
            where.fail(f"{field}.kind", f"{head.get('kind')!r} is not a head kind")
        options = head.get("options") if head.get("options") is not None else {}
        if not isinstance(options, dict) or not all(
                v is None or isinstance(v, (bool, int, float, str)) for v in options.values()):
            where.fail(f"{field}.options", f"{repr(options)[:80]} is not an object of settings")
        inputs = head.get("inputs") if head.get("inputs") is not None else []
        if not (isinstance(inputs, list) and all(isinstance(i, str) for i in inputs)):
            where.fail(f"{field}.inputs", f"{inputs!r} is not a list of input names")
        if name not in owned:
            where.fail(field, f"model.safetensors holds no {HEAD_PREFIX}{name}.* tensors")
        for key, value in options.items():
            if isinstance(value, int) and not isinstance(value, bool):
                if value < 0:
                    where.fail(f"{field}.options.{key}", f"{value} is negative")
                if key in POSITION_BOUNDED and not 0 < value <= positions:
                    where.fail(f"{field}.options.{key}", f"{value}: expected 1..{positions}, "
                               f"the model's positions")
        _check_head_labels(where, name, head["kind"], options, labels.get(name), regression)
    for key in POSITION_BOUNDED:
        value = where.get(task_args, key, int, f"span_plugin.task_args.{key}", optional=True)
        if value is not None and not 0 < value <= positions:
            where.fail(f"span_plugin.task_args.{key}", f"{value}: expected 1..{positions}, the "
                       f"model's positions")
    head = heads.get(task_args.get("classification_head_name"))
    classes = task_args.get("num_classes")
    if isinstance(head, dict) and head.get("kind") in CLASS_HEADS and classes is not None:
        have = (head.get("options") or {}).get("num_classes")
        if classes != have:
            where.fail("span_plugin.task_args.num_classes", f"{classes!r}, but head "
                       f"{task_args['classification_head_name']!r} has {have!r} classes")


def _check_head_labels(where, name, kind, options, names, regression):
    field = f"span_plugin.labels.{name}"
    classes = options.get("num_classes")
    if kind in CLASS_HEADS:
        if regression:
            if classes != 1:
                where.fail(f"span_plugin.heads.{name}.options.num_classes",
                           f"{classes!r}: a regression head has 1 output")
            if names:
                where.fail(field, "label names for a regression head (it has none)")
            return
        if names is None:
            where.fail(field, f"missing: head {name!r} of kind {kind!r} predicts classes "
                       f"and needs their names")
        _label_list(where, field, names, classes)
    elif kind in TAG_HEADS or kind == SPAN_HEAD:
        if names is None:
            where.fail(field, f"missing: head {name!r} of kind {kind!r} needs its label names")
        _label_list(where, field, names, classes)
        if kind == SPAN_HEAD and names[0] != "O":
            where.fail(field, f"class 0 of a span-labeling head is 'O' (no entity), not "
                       f"{names[0]!r}")
    elif kind == PAIR_HEAD:
        if not isinstance(names, dict) or set(names) - {"phrasal", "sentential"}:
            where.fail(field, f"{str(names)[:80]} is not {{'phrasal': [...], 'sentential': [...]}}")
        for part, key in (("phrasal", "phrase_classes"), ("sentential", "sentence_classes")):
            want = options.get(key) or 0
            if want and part not in names:
                where.fail(f"{field}.{part}", f"missing for {want} classes ({key})")
            if part in names:
                _label_list(where, f"{field}.{part}", names[part], want)
    elif kind in QA_HEADS and names:
        where.fail(field, f"label names for head {name!r} of kind {kind!r}, which has none")


def _check_record_labels(where, span):
    """The data record's label names against the heads' (classes and tags)."""
    record = span.get("data_record")
    labels = (record or {}).get("labels") if isinstance(record, dict) else None
    if not isinstance(labels, dict):
        return
    heads, names = span["heads"], span.get("labels") or {}
    for name, head in heads.items():
        kind, mine = head["kind"], names.get(name)
        if labels.get("kind") == "classes" and isinstance(labels.get("names"), list):
            if kind == PAIR_HEAD and isinstance(mine, dict):
                mine = mine.get("sentential")
            if kind in (*CLASS_HEADS, PAIR_HEAD) and mine is not None and mine != labels["names"]:
                where.fail(f"span_plugin.labels.{name}", f"{mine}, but the data record's labels "
                           f"are {labels['names']}")
        elif labels.get("kind") == "tags" and kind == SPAN_HEAD and mine is not None:
            types = labels.get("types")
            if isinstance(types, list) and mine[1:] != types:
                where.fail(f"span_plugin.labels.{name}", f"{mine}, but the data record's entity "
                           f"types are {types}")


def _check_files(where, folder, span, listed):
    """``span_plugin.files``: each name inside the folder and listed; the n-gram file
    with the sha256 the data record holds for it. Returns the files' dict."""
    files = where.get(span, "files", dict, "span_plugin.files", optional=True) or {}
    real = os.path.realpath(folder)
    for key, name in files.items():
        field = f"span_plugin.files.{key}"
        if name is None:
            continue
        if not isinstance(name, str) or not _inside_name(name):
            where.fail(field, f"{name!r} is not a file name inside the folder")
        path = os.path.join(folder, *name.split("/"))
        if os.path.commonpath([real, os.path.realpath(path)]) != real:
            where.fail(field, f"{name!r} leads outside the folder")
        if name not in listed and not any(rel.startswith(name + "/") for rel in listed):
            where.fail(field, f"{name!r} is not a file of the folder (not listed in {MANIFEST})")
    record = span.get("data_record")
    encoder = (record or {}).get("encoder") if isinstance(record, dict) else None
    ngrams = (encoder or {}).get("ngrams") if isinstance(encoder, dict) else None
    name = files.get("ngrams")
    if isinstance(ngrams, dict):
        if name is None:
            where.fail("span_plugin.files.ngrams", "missing, but the data record names an "
                       "n-gram dictionary (data_record.encoder.ngrams)")
        if name not in listed:
            where.fail("span_plugin.files.ngrams", f"{name!r} names a folder; the n-gram "
                       f"dictionary is one file")
        recorded = ngrams.get("sha256")
        if listed[name] != recorded:
            where.fail("span_plugin.data_record.encoder.ngrams.sha256",
                       f"{str(recorded)[:12]}, but {name} has sha256 {listed[name][:12]}: "
                       f"not the n-gram dictionary the model was trained with")
    elif name is not None:
        where.fail("span_plugin.files.ngrams", f"{name!r}, but the data record names no "
                   f"n-gram dictionary (data_record.encoder.ngrams)")
    return files


def check_config(folder, config, listed, shapes):
    """``config.json``'s dict (``config``) of ``folder`` against the listing (``listed``:
    ``{name: sha256}``), the tensors' ``shapes`` (:func:`safetensors_header`) and itself:
    the rules of the module's docstring. Returns the ``span_plugin`` section."""
    where = _Where(os.path.join(folder, CONFIG))
    span = config.get("span_plugin")
    if not isinstance(span, dict):
        raise ModelFolderError(
            f"{where.path}: no 'span_plugin' section: an encoder exported without task "
            f"heads; load it with transformers' AutoModel (load_model reads the folders of "
            f"span-export hf of a fine-tuned checkpoint)")
    if span.get("format") != FORMAT:
        where.fail("span_plugin.format", f"{span.get('format')!r}, expected {FORMAT}")
    where.get(span, "task", str, "span_plugin.task")
    for key in ("model_args", "task_args"):
        where.get(span, key, dict, f"span_plugin.{key}")
    where.get(span, "data_record", dict, "span_plugin.data_record", optional=True)
    unknown = sorted(k for k in shapes if not k.startswith(HEAD_PREFIX)
                     and not k.startswith(("roberta.", "bert.", "lm_head.", "cls.",
                                           TASK_CLASS_PREFIX)))
    if unknown:
        raise ModelFolderError(f"{os.path.join(folder, WEIGHTS)}: tensor {unknown[0]!r} is "
                               f"neither the encoder's, its masked-LM head's nor a head's")
    _, family, sizes = _encoder_sizes(where, config, shapes)
    positions = _check_positions(where, family, sizes, span["model_args"], span["task_args"])
    _check_heads(where, span, shapes, positions)
    _check_record_labels(where, span)
    _check_files(where, folder, span, listed)
    return span


def check_folder(folder):
    """The whole check of an exported folder, before anything in it is used:
    ``(config.json's dict, {name: sha256} listed, {tensor: (dtype, shape)})``. Raises
    :class:`ModelFolderError`, one line naming the file and field."""
    folder = os.fspath(folder)
    config, listed = _verify(folder)
    if WEIGHTS not in listed:
        raise ModelFolderError(f"{os.path.join(folder, WEIGHTS)}: missing (not listed in "
                               f"{MANIFEST})")
    shapes = safetensors_header(os.path.join(folder, WEIGHTS))
    check_config(folder, config, listed, shapes)
    return config, listed, shapes
