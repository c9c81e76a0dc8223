"""``span-export``: thin command line over :mod:`span_plugin.convert.hf_export`.

    span-export hf CHECKPOINT --out DIR [--force]   # encoder -> Hugging Face folder
"""

import argparse
import logging
import sys


def _parser():
    parser = argparse.ArgumentParser(
        prog="span-export", description="Export fairseq checkpoints for use outside fairseq.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("hf", help="an encoder checkpoint (span-convert folder, span "
                       "pre-training run, fairseq RoBERTa model.pt) -> a Hugging Face folder "
                       "that AutoModel, AutoModelForMaskedLM and AutoTokenizer load")
    p.add_argument("checkpoint", help="a fairseq model.pt / checkpoint_*.pt, or a folder with "
                   "model.pt; dict.txt and the tokenizer files beside it or where its record "
                   "says")
    p.add_argument("--out", required=True,
                   help="output folder: config.json, model.safetensors, tokenizer files")
    p.add_argument("--force", action="store_true",
                   help="replace a non-empty output folder (whole)")
    return parser


def _hf(args):
    from span_plugin.convert.hf_export import export_hf

    plan = export_hf(args.checkpoint, args.out, force=args.force)
    c = plan.config
    print(f"wrote {args.out}: {c['architectures'][0]}, {c['num_hidden_layers']} layers, "
          f"H={c['hidden_size']}, vocab {c['vocab_size']}, {plan.source.kind} tokenizer "
          f"(from {plan.source.path})")
    for name in plan.dropped:
        print(f"dropped {name}: the span pre-training objective's head, not the encoder's")


def main(argv=None):
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from span_plugin.convert.hf_source import ConversionError
    from span_plugin.convert.safe_load import CheckpointFileError
    from span_plugin.formats.lines import BadInputError
    from span_plugin.formats.outputs import writing
    from span_plugin.formats.stops import Stopped, report, stop_on_sigterm

    try:
        # The output is never the checkpoint read (nor holds it), and has one writer.
        with stop_on_sigterm(), writing({"--out": args.out}, {"CHECKPOINT": args.checkpoint}):
            _hf(args)
    except (ConversionError, CheckpointFileError, OSError, BadInputError, KeyboardInterrupt,
            Stopped) as err:
        return report(f"span-export {args.cmd}", err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
