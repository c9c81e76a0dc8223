"""``span-export``: thin command line over :mod:`span_plugin.convert.hf_export`.

    span-export hf CHECKPOINT --out DIR [--force] [--data D] [--gpt2-encoder-json F
                       --gpt2-vocab-bpe F | --wordpiece F | --sentencepiece-model F]
                       # encoder -> HF folder; fine-tuned
                       # model -> that folder + heads, labels, data record (docs/EXPORT.md)
    span-export onnx CHECKPOINT|DIR --out DIR [--force] [--data D] [tokenizer files]
                     [--quantize int8 [--max-drop 0.5] [--min-agreement P] [--split S | --input F] [--force-int8]]
                                                   # fine-tuned model or hf folder -> model.onnx + onnx.json
    span-export int8-check DIR [--data D | --input F] [--split S] [--max-drop 0.5] [--min-agreement P] [--force-int8]
                                                   # what int8 costs an hf folder, recorded in it
"""

import argparse
import logging
import sys

from span_plugin.cli.guarded import run_guarded
from span_plugin.tokenizers import file_options
from span_plugin.tokenizers.options import add_arguments

# the files of the kinds export has (gpt2, wordpiece, sentencepiece-line)
TOKENIZER_FIELDS = ("encoder_json", "vocab_bpe", "wordpiece", "sentencepiece_model")


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
    o = sub.add_parser("onnx", help="a fine-tuned checkpoint or a span-export hf folder (sentence/pair classification, "
                       "regression, tagging, QA) -> model.onnx with dynamic batch and length "
                       "axes, and onnx.json (its inputs, outputs, labels and data record)")
    o.add_argument("checkpoint", help="a fine-tuned checkpoint_*.pt, or a folder of span-export "
                   "hf (its own network is traced; the graph takes the folder's token ids)")
    o.add_argument("--out", required=True, help="output folder: model.onnx, onnx.json")
    o.add_argument("--force", action="store_true",
                   help="replace an earlier span-export onnx folder (whole); a folder that is "
                   "not one, or that holds or is inside an input, is refused")
    o.add_argument("--data", help="the task folder it was trained on (default: as its record says)")
    add_arguments(o.add_argument_group("tokenizer files (default: as its record says)"),
                  [file_options()[field] for field in TOKENIZER_FIELDS])
    q = o.add_argument_group("int8 (docs/EXPORT.md, int8 on the CPU)")
    q.add_argument("--quantize", choices=["int8"],
                   help="write the int8 graph (ONNX Runtime's dynamic quantization of the "
                   "MatMul/Gemm weights) once the float32 and int8 graphs have predicted the "
                   "validation split and int8 lost at most --max-drop points")
    _guard_arguments(q)
    c = sub.add_parser("int8-check", help="measure what int8 costs a span-export hf folder "
                       "(load_model(DIR, quantize='int8'), span-predict --quantize int8): "
                       "float32 and int8 predict a labelled split, and both figures go into "
                       "its config.json and model card")
    c.add_argument("folder", metavar="DIR", help="a span-export hf folder of a fine-tuned model")
    c.add_argument("--data", help="the task folder whose split to predict (default: the one "
                   "its data record names, when it is here); or --input")
    _guard_arguments(c)
    return parser


def _guard_arguments(group):
    """The accuracy guard's flags (span_plugin/export/int8_guard.py)."""
    from span_plugin.formats.flag_values import finite
    from span_plugin.export.int8_guard import DEFAULT_MAX_DROP

    group.add_argument("--split", default="valid", help="the labelled split of the data "
                       "folder to measure on (default: valid)")
    group.add_argument("--input", help="measure on this labelled file instead: a GLUE TSV "
                       "of the model's task, a CoNLL file, SQuAD / MRQA, span pairs' JSON Lines")
    group.add_argument("--max-drop", type=finite, default=DEFAULT_MAX_DROP, metavar="POINTS",
                       help="refuse int8 when the task's metric drops by more than this many "
                       "points (default: %(default)s)")
    group.add_argument("--min-agreement", type=finite, metavar="POINTS",
                       help="refuse int8 when float32 and int8 predict alike fewer than this "
                       "share (in %%) of the examples: labels, sentences' entity sets, answer "
                       "texts; regression: 100 x Pearson of the scores (default: not judged)")
    group.add_argument("--force-int8", action="store_true",
                       help="keep int8 past --max-drop or --min-agreement (the figures are "
                       "written all the same)")


def _onnx(args):
    from span_plugin.export.onnx_export import export_onnx

    from span_plugin.export.int8_guard import DEFAULT_MAX_DROP

    if not args.quantize:
        given = [flag for flag, on in (("--force-int8", args.force_int8), ("--input", args.input),
                                       ("--split", args.split != "valid"),
                                       ("--max-drop", args.max_drop != DEFAULT_MAX_DROP),
                                       ("--min-agreement", args.min_agreement is not None)) if on]
        if given:
            from span_plugin.convert.hf_source import ConversionError

            raise ConversionError(f"{given[0]} applies to --quantize int8 (the accuracy guard), "
                                  f"which was not given")
    files = {f: getattr(args, f) for f in TOKENIZER_FIELDS if getattr(args, f)}
    from span_plugin.export.int8_guard import GuardSettings

    guard = (GuardSettings(args.max_drop, args.split, args.input, args.force_int8, args.min_agreement)
             if args.quantize == "int8" else None)
    meta = export_onnx(args.checkpoint, args.out, force=args.force, data=args.data, int8=guard,
                       **files)
    print(f"wrote {args.out}: model.onnx ({meta['task']}, head {meta['head_kind']}), inputs "
          f"{', '.join(meta['inputs'])}; outputs {', '.join(meta['outputs'])}; ONNX Runtime "
          f"within {meta['check']['max_abs_diff']:.1e} of torch on its check batches")
    if "int8" in meta:
        from span_plugin.export.int8_guard import summary

        print(f"model.onnx is the int8 graph; {summary(meta['int8'])}")


def _int8_check(args):
    from span_plugin.export.int8_check import int8_check
    from span_plugin.export.int8_guard import summary

    record = int8_check(args.folder, data=args.data, split=args.split, input_path=args.input,
                        max_drop=args.max_drop, force_int8=args.force_int8,
                        min_agreement=args.min_agreement)
    print(f"wrote {args.folder}: config.json span_plugin.int8, README.md, files.json; "
          f"{summary(record)}")


def _hf(args):
    from span_plugin.export.model_export import export_model

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
              "--ngrams": getattr(args, "ngrams", None), "--input": getattr(args, "input", None)}
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
    if args.cmd == "int8-check":
        # The folder is rewritten whole in place: it is the output; the data read is not.
        return run_guarded("span-export int8-check", {"DIR": args.folder},
                           {"--data": args.data, "--input": args.input},
                           lambda: _int8_check(args))
    # The output is never an input read (the checkpoint, the files and folders given or
    # recorded), nor holds one, nor lies inside one; it has one writer; --force replaces
    # only an earlier export (span_plugin/files/exports.py).
    inputs = inputs_of(args)
    return run_guarded(f"span-export {args.cmd}", {"--out": args.out}, inputs,
                       lambda: (_onnx if args.cmd == "onnx" else _hf)(args),
                       sealed=dict.fromkeys(inputs, INSIDE))


if __name__ == "__main__":
    sys.exit(main())
