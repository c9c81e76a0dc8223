"""The one name users' scripts import: ``from span_plugin.hub import SpanHubInterface``.

``SpanHubInterface.from_pretrained(path)`` returns the predictor of the model's task
(:mod:`span_plugin.portable`: ``predict``, ``predict_entities``, ``predict_answers``,
``predict_pairs``, ...). A folder of ``span-export hf`` is read without fairseq; a
fine-tuned ``checkpoint_*.pt`` is loaded by fairseq (:mod:`span_plugin.inference.checkpoint`)
and predicted with the same code. Every predictor is an instance of this class.
"""


class _AnyPredictor(type):
    def __instancecheck__(cls, obj):
        from span_plugin.portable.base import Predictor

        return isinstance(obj, Predictor)


class SpanHubInterface(metaclass=_AnyPredictor):
    """The entry point of prediction (module docstring)."""

    @classmethod
    def from_pretrained(cls, checkpoint, data=None, head=None, **given):
        """The predictor of ``checkpoint``.

        A fine-tuned checkpoint_*.pt: ``data`` is the task folder it was trained on
        (default: the one its data record names; its dict.txt files must have the
        recorded hashes); ``given`` the encoder settings (``bpe=``, ``ngrams=``,
        ``ngrams_top_k=``, ``segmentation=``, ``seed=``) and files (each tokenizer's, by
        any of their keywords, e.g. ``gpt2_encoder_json=``; ``wordpiece=`` a
        tokenizer.json, vocab.txt or span-convert folder), all by default what the
        record says; one given again must be the recorded one (files by sha256), else a
        ValueError naming both. Checkpoints without a record take them unchecked.

        A folder of ``span-export hf``: ``data`` only names a task folder whose splits
        span-predict reads; the folder holds its encoder, so none may be given.

        ``head``: the head to predict with (default: the one the task trained).
        """
        from span_plugin.portable import exported_predictor, is_exported_folder

        if is_exported_folder(checkpoint):
            return exported_predictor(checkpoint, data, head, **given)
        from span_plugin.requires import require_fairseq

        require_fairseq("SpanHubInterface on a fairseq checkpoint")
        from span_plugin.inference.checkpoint import load_predictor

        return load_predictor(checkpoint, data, head, **given)
