"""``span-predict``: predictions of a fine-tuned checkpoint, for the task it records.
Each task's output, its options and an example command are in its section below.

The encoder (BPE files, n-gram dictionary, segmentation) is the one the checkpoint's
data record names; encoder options given here are checked against it (files by their
content) and a difference is an error naming both. Checkpoints without a record need
them. A flag of another task's output is an error.
"""

import argparse
import logging
import os
import sys


def build_parser():
    from span_plugin.inference.hub import adapter_outputs  # the package registers the adapters
    from span_plugin.formats.flag_values import count
    from span_plugin.inference.outputs import COMMON
    from span_plugin.tokenizers import TOKENIZERS, file_options
    from span_plugin.tokenizers.options import add_arguments

    p = argparse.ArgumentParser(prog="span-predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="fine-tuned checkpoint_*.pt")
    p.add_argument("--data", help="the task folder it was trained on (default: the one "
                   "its record names; its dict.txt files are checked)")
    for flag in COMMON:
        flag.add_to(p)
    for output in adapter_outputs():
        g = p.add_argument_group(output.title, output.usage)
        for flag in output.flags:
            flag.add_to(g)
    g = p.add_argument_group("text encoder (default: the checkpoint's record; given "
                             "again, checked against it)")
    g.add_argument("--bpe", choices=TOKENIZERS.keys())
    add_arguments(g, file_options().values())  # each tokenizer's files (--gpt2-encoder-json, ...)
    g.add_argument("--ngrams", help="n-gram dictionary")
    g.add_argument("--ngrams-top-k", type=count)
    g.add_argument("--segmentation")
    g.add_argument("--seed", type=int, help="seed of segmentation random")
    return p


def encoder_files(args):
    """The tokenizer files given on the command line, by EncoderSpec field (a hub
    keyword each)."""
    from span_plugin.tokenizers import file_options

    return {field: getattr(args, field) for field in file_options()
            if getattr(args, field) is not None}


def files_read(args):
    """The files read besides those of the outputs' own options, by flag."""
    from span_plugin.tokenizers import file_options

    options = file_options()
    return {"--checkpoint": args.checkpoint, "--data": args.data, "--ngrams": args.ngrams,
            **{options[field].flags[0]: path for field, path in encoder_files(args).items()}}


def check_flags(args, output, outputs, task, checkpoint):
    """Raise ValueError for an option given that ``output`` does not read (one of another
    task's output), naming what it reads."""
    from span_plugin.inference.outputs import COMMON

    known = dict.fromkeys([f.dest for f in COMMON]
                          + [d for other in outputs for d in other.takes])
    wrong = [d for d in known if d not in output.takes and getattr(args, d) is not None]
    if wrong:
        raise ValueError(
            f"{'--' + wrong[0].replace('_', '-')} does not apply to a {task} checkpoint "
            f"({checkpoint}); it takes {', '.join('--' + d.replace('_', '-') for d in output.takes)}")


def _quiet_logging():
    """fairseq configures the root logger at import (one of its modules at DEBUG);
    keep its INFO chatter out of this command's output."""
    level = os.environ.get("LOGLEVEL", "WARNING").upper()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    logging.getLogger("fairseq").setLevel(max(logging.WARNING, logging.getLogger().level))


def main(argv=None):
    args = build_parser().parse_args(argv)
    from span_plugin.formats.outputs import writing
    from span_plugin.formats.stops import Stopped, report, stop_on_sigterm
    from span_plugin.inference.hub import SpanHubInterface, adapter_outputs
    from span_plugin.inference.outputs import paths_given
    from span_plugin.runtime.checkpoints import DamagedCheckpointError

    _quiet_logging()
    outputs = adapter_outputs()
    try:
        # No output over an input; one writer of each output (span_plugin.formats.outputs).
        with stop_on_sigterm(), writing(*paths_given(args, outputs, files_read(args))):
            for output in outputs:
                if output.before_load and not output.before_load(args):
                    return 0  # every prediction written without the model
            hub = SpanHubInterface.from_pretrained(
                args.checkpoint, data=args.data, bpe=args.bpe, ngrams=args.ngrams,
                ngrams_top_k=args.ngrams_top_k, segmentation=args.segmentation, seed=args.seed,
                **encoder_files(args))
            task = hub.task.cfg._name
            if hub.output is None:
                raise ValueError(f"{args.checkpoint}: span-predict writes no output for task "
                                 f"{task!r}; load it with SpanHubInterface.from_pretrained")
            check_flags(args, hub.output, outputs, task, args.checkpoint)
            hub.output.write(hub, args)
    except (ValueError, OSError, DamagedCheckpointError, KeyboardInterrupt, Stopped) as err:
        # Settings that differ from the checkpoint's, a damaged checkpoint, a pair
        # model given single sentences, a flag of another task, a missing file, a full
        # disk, SIGINT, SIGTERM: one line, no traceback (outputs are written atomically).
        return report("span-predict", err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
