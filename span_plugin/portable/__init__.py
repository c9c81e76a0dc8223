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
    """The predictor of the exported model in ``folder``, checked whole first (a missing,
    changed, unlisted or pickle file, or an unknown head kind, is a
    :class:`~span_plugin.formats.model_folder.ModelFolderError` naming the file).
    ``head``: the head to predict with (default: the one the task trained).
    ``encoder``: ``"torch"``, the plugin's plain-torch encoder (``transformers`` is not
    imported; it computes what transformers' class does and starts and runs faster:
    benchmarks/RESULTS.md), or ``"transformers"``, its ``AutoModel``."""
    from span_plugin.modules.head_builders import HEAD_BUILDERS
    from span_plugin.portable import ner, pairs, qa, sentence  # noqa: F401  (register them)
    from span_plugin.portable.base import PREDICTORS
    from span_plugin.portable.folder import read_folder
    from span_plugin.portable.model import load_network
    from span_plugin.portable.text import text_encoder

    found = read_folder(folder, HEAD_BUILDERS)
    text, vocab = text_encoder(found)
    network = load_network(found, vocab, encoder)
    return PREDICTORS[found.task](found, text, vocab, network, head=head).to(device)
