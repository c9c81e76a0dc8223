"""Moved to :mod:`span_plugin.formats.text_inputs` (the fairseq-free predictors read
them too); the names stay importable here."""

from span_plugin.formats.text_inputs import (InputCutWarning, as_list, check_text,  # noqa: F401
                                             question_pairs, text_examples, warn_cut)
