"""Inference from an exported model folder without fairseq (no module of this layer
imports it; .importlinter says so): the folder of ``span-export hf`` of a fine-tuned
checkpoint (docs/EXPORT.md), read from safetensors and JSON only, into a plain-torch
encoder (or ``transformers``' own class) and the plugin's pure-torch heads; raw text
encoded with the tokenizer, segmentation and input layout of training.

    from span_plugin.portable import load_model
    model = load_model("exported/MRPC")
    model.predict([("A man plays.", "A man is playing.")])   # as the fairseq hub's

``load_model`` returns the predictor of the folder's task, with the methods and outputs
of the hub's adapter for it: ``predict``/``predict_logits`` (sentence classification and
regression), ``predict_entities``/``predict_words`` (tagging, span labeling),
``predict_answers``/``predict_examples`` (QA), ``predict_pairs`` (span pairs).
"""


def load_model(folder, head=None, device="cpu", encoder="torch"):
    """The predictor of the exported model in ``folder``, checked whole first
    (:func:`span_plugin.formats.model_folder.check_folder`, then the heads' tensors
    against their options, the tokenizer against the embeddings, finite weights): every
    refusal is a :class:`~span_plugin.formats.model_folder.ModelFolderError`, one line
    naming the file and field. ``head``: the head to predict with (default: the one the
    task trained). ``device``: where it runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``; one
    torch cannot use is a ValueError saying why). ``encoder``: ``"torch"``, the plugin's
    plain-torch encoder (``transformers`` is not imported; it computes what
    transformers' class does and starts and runs faster: benchmarks/RESULTS.md), or
    ``"transformers"``, its ``AutoModel``."""
    from span_plugin.formats.model_folder import ModelFolderError
    from span_plugin.modules.head_builders import HEAD_BUILDERS
    from span_plugin.portable import ner, pairs, qa, sentence  # noqa: F401  (register them)
    from span_plugin.portable.base import PREDICTORS
    from span_plugin.portable.folder import read_folder
    from span_plugin.portable.model import ENCODERS, load_network
    from span_plugin.portable.text import text_encoder

    if encoder not in ENCODERS:
        raise ValueError(f"encoder {encoder!r}; expected one of {', '.join(ENCODERS)}")
    device = usable_device(device)
    try:
        found = read_folder(folder, HEAD_BUILDERS)
        text, vocab = text_encoder(found)
        network = load_network(found, vocab, encoder)
    except (ValueError, OSError):  # ModelFolderError among them: one line naming the file
        raise
    except Exception as err:  # noqa: BLE001 - what no check above foresaw: still one line
        line = (str(err).strip().splitlines() or [""])[0][:300]
        raise ModelFolderError(f"{folder}: not loadable as an exported model "
                               f"({type(err).__name__}: {line})") from err
    return PREDICTORS[found.task](found, text, vocab, network, head=head).to(device)


def check_model_folder(folder):
    """Every check :func:`load_model` makes before it reads a weight (the folder whole,
    the tokenizer, each head's tensors' shapes against its options), without loading the
    network: what ``span-export hf`` runs on the folder it wrote. Returns the
    :class:`~span_plugin.portable.folder.ModelFolder`."""
    from span_plugin.modules.head_builders import HEAD_BUILDERS
    from span_plugin.portable.folder import read_folder
    from span_plugin.portable.model import check_head_shapes, model_arguments
    from span_plugin.portable.text import text_encoder

    found = read_folder(folder, HEAD_BUILDERS)
    text_encoder(found)
    args = model_arguments(found)
    for name, spec in found.heads.items():
        check_head_shapes(found, name, spec, args)
    return found


def usable_device(device):
    """``device`` as a ``torch.device`` this torch can run on; else a ValueError saying
    why (a CUDA device on a torch without CUDA or without a GPU, one past the GPUs)."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {device!r} is not a device torch knows ({err})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch is built without CUDA" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise ValueError(f"device {device!r}: CUDA is not available ({why}); use "
                             f"device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: there are {torch.cuda.device_count()} CUDA "
                             f"devices (cuda:0..cuda:{torch.cuda.device_count() - 1})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available here; use device='cpu'")
    return dev


def is_exported_folder(path):
    """Whether ``path`` is a model folder of ``span-export hf`` (it lists its files in
    ``files.json``; a link there is refused when it is loaded)."""
    import os

    from span_plugin.formats.model_folder import MANIFEST

    try:
        return os.path.isdir(path) and os.path.lexists(os.path.join(path, MANIFEST))
    except TypeError:
        return False


def exported_predictor(folder, data=None, head="sentence_classification_head", device="cpu",
                       encoder="torch", **given):
    """What ``SpanHubInterface.from_pretrained(folder)`` returns for an exported folder:
    :func:`load_model`'s predictor, ``data`` the task folder whose splits span-predict
    reads. Encoder settings (``bpe=``, ``ngrams=``, tokenizer files) cannot be given: the
    folder holds the ones it was trained with."""
    named = sorted(k for k, v in given.items() if v is not None)
    if named:
        raise ValueError(f"{folder} is an exported model folder: it holds its tokenizer, "
                         f"n-gram dictionary and segmentation; {named[0]}= cannot be given")
    model = load_model(folder, head=None if head == "sentence_classification_head" else head,
                       device=device, encoder=encoder)
    return model.use_data(data)
