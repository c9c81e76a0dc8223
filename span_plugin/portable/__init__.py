"""Prediction: one predictor per task (:mod:`.tasks`), over an exported folder's parts
read without fairseq (:func:`load_model`: safetensors and JSON; .importlinter forbids
fairseq here) or a fine-tuned checkpoint's loaded by fairseq
(:mod:`span_plugin.inference.checkpoint`); raw text encoded with the tokenizer,
segmentation and input layout of training; ``span-predict``'s writers beside them.

    from span_plugin.portable import load_model
    model = load_model("exported/MRPC")
    model.predict([("A man plays.", "A man is playing.")])

Importing this package registers the plugin's model type with ``transformers``' Auto
classes (:mod:`.hf_auto`) as soon as ``transformers`` is imported (it does not import it).
"""

import importlib.abc
import importlib.util
import sys


def load_model(folder, head=None, device="cpu", encoder="torch", quantize=None, onnx=None):
    """The predictor of the exported model in ``folder``, checked whole first
    (:func:`span_plugin.formats.model_folder.check_folder`, then the heads' tensors
    against their options, the tokenizer against the embeddings, finite weights): every
    refusal is a :class:`~span_plugin.formats.model_folder.ModelFolderError`, one line
    naming the file and field. ``head``: the head to predict with (default: the one the
    task trained). ``device``: where it runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``; one
    torch cannot use is a ValueError saying why). ``encoder``: ``"torch"``, the plugin's
    plain-torch encoder (``transformers`` is not imported; it computes what
    transformers' class does and starts and runs faster: benchmarks/RESULTS.md), or
    ``"transformers"``, its ``AutoModel``. ``quantize``: None (float32) or ``"int8"``,
    the encoder's Linear layers in int8 on the CPU (:mod:`span_plugin.portable.quantize`;
    what it costs in accuracy: ``span-export int8-check``). ``onnx``: a folder that
    ``span-export onnx`` wrote of the same model (float32 or int8): ONNX Runtime computes
    the network, on the CPU, with as many threads as torch's ``get_num_threads()``; the
    folder's torch weights are not loaded (:mod:`span_plugin.portable.onnx_network`)."""
    from span_plugin.formats.model_folder import ModelFolderError
    from span_plugin.modules.head_builders import HEAD_BUILDERS
    from span_plugin.portable.folder import read_folder
    from span_plugin.portable.model import ENCODERS, load_network
    from span_plugin.portable.quantize import check_quantize, quantize_encoder
    from span_plugin.portable.tasks import build_predictor
    from span_plugin.portable.text import text_encoder

    if encoder not in ENCODERS:
        raise ValueError(f"encoder {encoder!r}; expected one of {', '.join(ENCODERS)}")
    device = usable_device(device)
    check_quantize(quantize, device)
    if onnx is not None and (device.type != "cpu" or quantize is not None):
        raise ValueError(f"onnx={str(onnx)!r} runs on the CPU as the graph was written "
                         f"(an int8 graph is span-export onnx --quantize int8); "
                         f"device={str(device)!r} and quantize={quantize!r} do not apply")
    try:
        found = read_folder(folder, HEAD_BUILDERS)
        text, vocab = text_encoder(found)
        network = None if onnx is not None else load_network(found, vocab, encoder)
        if quantize == "int8":
            network.encoder = quantize_encoder(network.encoder)
    except (ValueError, OSError):  # ModelFolderError among them: one line naming the file
        raise
    except Exception as err:  # noqa: BLE001 - what no check above foresaw: still one line
        line = (str(err).strip().splitlines() or [""])[0][:300]
        raise ModelFolderError(f"{folder}: not loadable as an exported model "
                               f"({type(err).__name__}: {line})") from err
    model = build_predictor(found, text, vocab, network, head=head)
    if onnx is not None:
        import torch

        from span_plugin.portable.onnx_network import onnx_network

        model.network = onnx_network(model, onnx, threads=torch.get_num_threads())
    model.quantize = quantize
    return model.to(device)


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


def exported_predictor(folder, data=None, head=None, device="cpu", encoder="torch", **given):
    """What ``SpanHubInterface.from_pretrained(folder)`` returns for an exported folder:
    :func:`load_model`'s predictor, ``data`` the task folder whose splits span-predict
    reads. Encoder settings (``bpe=``, ``ngrams=``, tokenizer files) cannot be given: the
    folder holds the ones it was trained with."""
    named = sorted(k for k, v in given.items() if v is not None)
    if named:
        raise ValueError(f"{folder} is an exported model folder: it holds its tokenizer, "
                         f"n-gram dictionary and segmentation; {named[0]}= cannot be given")
    return load_model(folder, head=head, device=device, encoder=encoder).use_data(data)


class _RegisterAfterTransformers(importlib.abc.MetaPathFinder):
    """Runs :func:`span_plugin.portable.hf_auto.register` right after ``transformers``
    is imported (a post-import hook: the other finders find it; its loader's
    ``exec_module`` is wrapped), then takes itself off ``sys.meta_path``. A look-up that
    imports nothing (``importlib.util.find_spec``) leaves it in place."""

    def find_spec(self, name, path=None, target=None):
        if name != "transformers":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, hook = spec.loader.exec_module, self

        def exec_module(module):
            run(module)
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
            _register()

        spec.loader.exec_module = exec_module
        return spec


def _register():
    """Register the plugin's model type; a transformers this fails with is said in one
    warning, never an error of the user's ``import transformers``."""
    import warnings

    try:
        from span_plugin.portable.hf_auto import register

        register()
    except Exception as err:  # noqa: BLE001 - the import of transformers must not fail
        warnings.warn(f"span_plugin: the span_plugin_* model types are not registered with "
                      f"transformers ({type(err).__name__}: {err}); load exported span "
                      f"models with span_plugin.portable.load_model", stacklevel=2)


if "transformers" in sys.modules:
    _register()
elif not any(isinstance(f, _RegisterAfterTransformers) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterTransformers())
