"""One defaults table: what the span model sets for an argument a checkpoint or command
line leaves out is what exported folders are rebuilt with (``MODEL_DEFAULTS``)."""

from argparse import Namespace

import span_plugin
from span_plugin.modules.head_builders import MODEL_DEFAULTS


def test_the_model_sets_the_table_s_defaults():
    span_plugin.register()
    from span_plugin.models.roberta_span import base_architecture

    args = Namespace()
    base_architecture(args)
    assert {k: getattr(args, k) for k in MODEL_DEFAULTS} == MODEL_DEFAULTS
