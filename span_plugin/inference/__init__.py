"""Inference on raw text from a checkpoint alone: one hub base (:mod:`.hub`) and an
adapter per task, each registered for its task names when :mod:`.hub` is imported.
The package itself imports nothing, so that the pure modules here (the ``span-predict``
outputs: ``glue_files``, ``conll_files``, ``qa_files``, ``pair_files``) serve exported
folders (:mod:`span_plugin.portable`) without loading fairseq."""
