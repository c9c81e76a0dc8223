"""``span-export``: thin command line over :mod:`span_plugin.convert.hf_export`.

    span-export hf CHECKPOINT --out DIR [--force] [--data D] [--gpt2-encoder-json F
                       --gpt2-vocab-bpe F | --wordpiece F]   # encoder -> HF folder; fine-tuned
                       # model -> that folder + heads, labels, data record (docs/EXPORT.md)
    span-export onnx CHECKPOINT --out DIR [--force] [--data D] [tokenizer files]
                                                   # fine-tuned model -> model.onnx + onnx.json
"""

import argparse
import logging
import sys

from span_plugin.cli.guarded import run_guarded
from span_plugin.tokenizers import file_options
from span_plugin.tokenizers.options import add_arguments

TOKENIZER_FIELDS = ("encoder_json", "vocab_bpe", "wordpiece")  # the kinds export has


def _parser():
    parser = argparse.ArgumentParser(
        prog="span-export", description="Export fairseq checkpoints for use outside fairseq.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("hf", help="an encoder checkpoint (span-convert folder, span "
                       "pre-training run, fairseq RoBERTa model.pt) -> a Hugging Face folder "
                       "that AutoModel, AutoModelForMaskedLM and AutoTokenizer load; a "
                       "fine-tuned checkpoint of any span task -> that folder plus its heads, "
                       "labels and data record (docs/EXPORT.md)")
    p.add_argument("checkpoint", help="a fairseq model.pt / checkpoint_*.pt, or a folder with "
                   "model.pt; dict.txt and the tokenizer files beside it or where its record "
                   "says")
    p.add_argument("--out", required=True,
                   help="output folder: config.json, model.safetensors, tokenizer files")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier span-export hf folder (whole); a folder that is "
                   "not one, or that holds or is inside an input, is refused")
    p.add_argument("--data", help="fine-tuned checkpoints: the task folder it was trained on "
                   "(default: as its record says); its dictionaries are checked against it")
    p.add_argument("--ngrams", help="fine-tuned checkpoints: the n-gram dictionary it was "
                   "trained with, when it moved (default: as its record says; checked by sha256)")
    add_arguments(p.add_argument_group(
        "tokenizer files (default: beside the checkpoint, else where its record says)"),
        [file_options()[field] for field in TOKENIZER_FIELDS])
    o = sub.add_parser("onnx", help="a fine-tuned checkpoint (sentence/pair classification, "
                       "regression, tagging, QA) -> model.onnx with dynamic batch and length "
                       "axes, and onnx.json (its inputs, outputs, labels and data record)")
    o.add_argument("checkpoint", help="a fine-tuned checkpoint_*.pt")
    o.add_argument("--out", required=True, help="output folder: model.onnx, onnx.json")
    o.add_argument("--force", action="store_true",
                   help="replace an earlier span-export onnx folder (whole); a folder that is "
                   "not one, or that holds or is inside an input, is refused")
    o.add_argument("--data", help="the task folder it was trained on (default: as its record says)")
    add_arguments(o.add_argument_group("tokenizer files (default: as its record says)"),
                  [file_options()[field] for field in TOKENIZER_FIELDS])
    return parser


def _onnx(args):
    from span_plugin.inference.onnx_export import export_onnx

    files = {f: getattr(args, f) for f in TOKENIZER_FIELDS if getattr(args, f)}
    meta = export_onnx(args.checkpoint, args.out, force=args.force, data=args.data, **files)
    print(f"wrote {args.out}: model.onnx ({meta['task']}, head {meta['head_kind']}), inputs "
          f"{', '.join(meta['inputs'])}; outputs {', '.join(meta['outputs'])}; ONNX Runtime "
          f"within {meta['check']['max_abs_diff']:.1e} of torch on its check batches")


def _hf(args):
    from span_plugin.inference.model_export import export_model

    files = {f: getattr(args, f) for f in TOKENIZER_FIELDS if getattr(args, f)}
    plan, span = export_model(args.checkpoint, args.out, force=args.force, files=files,
                              data=args.data, ngrams_given=args.ngrams)
    c = plan.config
    print(f"wrote {args.out}: {c['architectures'][0]}, {c['num_hidden_layers']} layers, "
          f"H={c['hidden_size']}, vocab {c['vocab_size']}, {plan.source.kind} tokenizer "
          f"(from {plan.source.path})")
    if span is not None:
        heads = ", ".join(f"{name} ({head['kind']})" for name, head in span["heads"].items())
        files = ", ".join(f for f in span["files"].values() if f) or (
            "nothing (its segmentation reads no n-gram dictionary or chunker)")
        print(f"task {span['task']}: heads {heads}; copied in: {files}")
    if plan.dropped:
        print(f"dropped classification_heads.span_boundary.* ({len(plan.dropped)} tensors): "
              f"the span pre-training objective's head, not part of the encoder")


def inputs_of(args):
    """Every input of the command, by flag: the checkpoint, the files and folders given,
    and those the checkpoint's records name (its data folder, tokenizer files, n-gram
    dictionary, chunker, source tables: :func:`span_plugin.convert.export_source.recorded_inputs`)."""
    from span_plugin.convert.export_source import recorded_inputs
    from span_plugin.tokenizers import file_options

    options = file_options()
    inputs = {"CHECKPOINT": args.checkpoint, "--data": args.data,
              "--ngrams": getattr(args, "ngrams", None)}
    inputs.update({options[f].flags[0]: getattr(args, f) for f in TOKENIZER_FIELDS})
    inputs.update(recorded_inputs(args.checkpoint))
    return inputs


# Why --out may not lie inside an input folder either (the data folder, a span-convert
# folder given as CHECKPOINT, NLTK's data): the export would add to it, and with --force
# replace a part of it.
INSIDE = "an export there would add to that folder, or replace a part of it"


def main(argv=None):
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The output is never an input read (the checkpoint, the files and folders given or
    # recorded), nor holds one, nor lies inside one; it has one writer; --force replaces
    # only an earlier export (span_plugin/formats/exports.py).
    inputs = inputs_of(args)
    return run_guarded(f"span-export {args.cmd}", {"--out": args.out}, inputs,
                       lambda: (_onnx if args.cmd == "onnx" else _hf)(args),
                       sealed=dict.fromkeys(inputs, INSIDE))


if __name__ == "__main__":
    sys.exit(main())
