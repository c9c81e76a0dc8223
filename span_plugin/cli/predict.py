"""``span-predict``: predictions of a fine-tuned checkpoint, for the task it records.
Each task's output, its options and an example command are in its section below.

``--model DIR`` predicts with a folder of ``span-export hf`` instead, without fairseq
(not even imported): the same outputs and files, the encoder from the folder itself;
``--onnx GRAPH`` beside it has ONNX Runtime compute the network from the model's
``span-export onnx`` graph.

The encoder (BPE files, n-gram dictionary, segmentation) is the one the checkpoint's
data record names; encoder options given here are checked against it (files by their
content) and a difference is an error naming both. Checkpoints without a record need
them. A flag of another task's output is an error.
"""

import argparse
import logging
import os
import sys

from span_plugin.requires import MissingPackageError, require_fairseq


MODEL_SEALED = ("an exported folder is checked whole against its files.json, so nothing "
                "may be written into it")


def exported(argv):
    """Whether the command line names an exported folder (``--model``): then nothing that
    loads fairseq is imported."""
    return any(a == "--model" or a.startswith("--model=") for a in argv)


def build_parser():
    from span_plugin.formats.flag_values import count
    from span_plugin.portable.outputs import COMMON
    from span_plugin.portable.tasks import task_outputs
    from span_plugin.tokenizers import TOKENIZERS, file_options
    from span_plugin.tokenizers.options import add_arguments

    p = argparse.ArgumentParser(prog="span-predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="fine-tuned checkpoint_*.pt")
    source.add_argument("--model", metavar="DIR", help="a folder of span-export hf (fairseq "
                        "is not loaded)")
    p.add_argument("--quantize", choices=["int8"], help="with --model: the encoder's Linear "
                   "layers in int8 on the CPU (torch's dynamic quantization; what it costs: "
                   "span-export int8-check, docs/EXPORT.md)")
    p.add_argument("--onnx", metavar="GRAPH", help="with --model: a folder span-export onnx "
                   "wrote of the same model (float32 or int8): ONNX Runtime computes the "
                   "network on the CPU; the encoding, batching and outputs stay the folder's")
    p.add_argument("--data", help="the task folder it was trained on (default: the one "
                   "its record names; its dict.txt files are checked); with --model, the "
                   "task folder whose splits are read")
    for flag in COMMON:
        flag.add_to(p)
    for output in task_outputs():
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
    return {"--checkpoint": args.checkpoint, "--model": args.model, "--onnx": args.onnx,
            "--data": args.data, "--ngrams": args.ngrams,
            **{options[field].flags[0]: path for field, path in encoder_files(args).items()}}


def check_flags(args, output, outputs, task, checkpoint):
    """Raise ValueError for an option given that ``output`` does not read (one of another
    task's output), naming what it reads."""
    from span_plugin.portable.outputs import COMMON

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


def load_exported(args):
    """The predictor of ``--model DIR`` (no fairseq). The encoder options are the folder's
    own: giving one is an error."""
    from span_plugin.portable import load_model

    own = ("--checkpoint", "--model", "--onnx", "--data")
    given = [flag for flag, path in files_read(args).items()
             if path is not None and flag not in own]
    given += ["--" + k.replace("_", "-") for k in ("bpe", "ngrams_top_k", "segmentation", "seed")
              if getattr(args, k) is not None]
    if given:
        raise ValueError(f"{given[0]} does not apply to --model {args.model}: an exported "
                         f"folder holds its tokenizer, n-gram dictionary and segmentation")
    if args.from_validation:
        raise ValueError(f"--from-validation reads a checkpoint's stored validation "
                         f"predictions; --model {args.model} is an exported folder")
    if not (args.data or args.input or getattr(args, "glue_dir", None)):
        raise ValueError(f"--model {args.model} names no data folder to read splits from: "
                         f"give --input FILE (or --glue-dir DIR --task TASK), or --data "
                         f"FOLDER, the task folder whose splits to predict")
    model = load_model(args.model, quantize=args.quantize, onnx=args.onnx)
    model.use_data(args.data)  # its dictionaries: the record's
    args.checkpoint = args.model  # what the writers name as the source of the predictions
    return model


def load_checkpoint(args):
    from span_plugin.hub import SpanHubInterface

    for flag, value in (("--quantize", args.quantize), ("--onnx", args.onnx)):
        if value:
            raise ValueError(f"{flag} {value} applies to --model DIR (a span-export hf "
                             f"folder), not to --checkpoint {args.checkpoint}")

    return SpanHubInterface.from_pretrained(
        args.checkpoint, data=args.data, bpe=args.bpe, ngrams=args.ngrams,
        ngrams_top_k=args.ngrams_top_k, segmentation=args.segmentation, seed=args.seed,
        **encoder_files(args))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    portable = exported(argv)
    if not portable:
        try:
            require_fairseq("--checkpoint")
        except MissingPackageError as err:  # the lean install
            build_parser().parse_known_args(argv)  # --help and argparse's errors still work
            from span_plugin.files.stops import report

            return report("span-predict", err)
    args = build_parser().parse_args(argv)
    from span_plugin.formats.model_folder import ModelFolderError
    from span_plugin.files.outputs import writing
    from span_plugin.files.stops import Stopped, report, stop_on_sigterm
    from span_plugin.portable.outputs import paths_given

    errors = (ValueError, OSError, KeyboardInterrupt, Stopped, ModelFolderError,
              MissingPackageError)
    if not portable:
        from span_plugin.convert.safe_load import DamagedCheckpointError

        errors += (DamagedCheckpointError,)
    _quiet_logging()
    from span_plugin.portable.tasks import TASKS, task_outputs

    outputs = task_outputs()
    try:
        # No output over an input, nor inside the exported folder (checked whole against
        # its files.json: a file added to it, or an output's lock, would make it fail to
        # load); one writer of each output (span_plugin.files.outputs).
        with stop_on_sigterm(), writing(*paths_given(args, outputs, files_read(args)),
                                        sealed={"--model": MODEL_SEALED}):
            for output in outputs if not portable else ():
                if output.before_load and not output.before_load(args):
                    return 0  # every prediction written without the model
            hub = load_exported(args) if portable else load_checkpoint(args)
            task = hub.task_name
            source = args.checkpoint
            output = TASKS[task].output
            check_flags(args, output, outputs, task, source)
            output.write(hub, args)
    except errors as err:
        # Settings that differ from the checkpoint's, a damaged checkpoint, a pair
        # model given single sentences, a flag of another task, a missing file, a full
        # disk, SIGINT, SIGTERM: one line, no traceback (outputs are written atomically).
        return report("span-predict", err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
