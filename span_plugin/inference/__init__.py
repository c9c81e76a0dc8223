"""Fine-tuned fairseq checkpoints as predictors (:mod:`.checkpoint`): fairseq loads and
checks them; the predictors of :mod:`span_plugin.portable` predict."""
