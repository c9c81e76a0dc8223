"""``span-convert``: thin command line over :mod:`span_plugin.convert`.

    span-convert bert --hf-dir HF_MODEL_DIR --out OUT_DIR [--force] [--seed N] [--roberta-only]
    span-convert roberta --hf-dir HF_MODEL_DIR --out OUT_DIR [--force] [--seed N]
    span-convert flags OUT_DIR/model.pt      # fairseq-train model flags, one line
    span-convert hydra-overrides OUT_DIR     # the hydra twin of MODEL_DIR=OUT_DIR recipes
"""

import argparse
import logging
import shlex
import sys

from span_plugin.cli.guarded import run_guarded


def _parser():
    parser = argparse.ArgumentParser(
        prog="span-convert", description="Convert checkpoints into fairseq RoBERTa format."
    )
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("bert", help="Hugging Face BERT-architecture folder -> fairseq RoBERTa")
    p.add_argument("--hf-dir", required=True,
                   help="folder with config.json, model.safetensors or pytorch_model.bin, "
                        "vocab.txt (tokenizer.json optional)")
    p.add_argument("--out", required=True,
                   help="output folder: model.pt, dict.txt, tokenizer files, hf_config.json")
    p.add_argument("--force", action="store_true", help="overwrite an existing OUT/model.pt")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of a fresh LM head, for checkpoints without one")
    p.add_argument("--roberta-only", action="store_true",
                   help="leave out BERT's segment-B embedding and pooler: a checkpoint "
                        "fairseq's own roberta loads, which encodes every token as segment A")

    p = sub.add_parser("roberta", help="Hugging Face RoBERTa-family folder (RoBERTa, XLM-R, "
                       "CamemBERT) -> fairseq RoBERTa, token ids kept")
    p.add_argument("--hf-dir", required=True,
                   help="folder with config.json, model.safetensors or pytorch_model.bin, and "
                        "vocab.json + merges.txt (byte-level BPE) or sentencepiece.bpe.model")
    p.add_argument("--out", required=True,
                   help="output folder: model.pt, dict.txt, encoder.json + vocab.bpe or "
                        "sentencepiece.bpe.model, tokenizer files, hf_config.json")
    p.add_argument("--force", action="store_true", help="overwrite an existing OUT/model.pt")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of a fresh LM head, for checkpoints without one")

    p = sub.add_parser("flags", help="print the fairseq-train model flags of a checkpoint "
                       "(sizes; BERT's segment B and pooler when it holds them)")
    p.add_argument("checkpoint", help="a fairseq checkpoint, or a folder with model.pt")

    p = sub.add_parser("hydra-overrides", help="print the fairseq-hydra-train overrides that "
                       "make a recipes/hydra GLUE config start from a converted model")
    p.add_argument("model_dir", help="a span-convert output folder")
    return parser


def _bert(args):
    from span_plugin.convert.bert import convert_bert
    from span_plugin.convert.flags import train_flags

    plan = convert_bert(args.hf_dir, args.out, overwrite=args.force, seed=args.seed,
                        roberta_only=args.roberta_only)
    rec, shape = plan.record, plan.shape
    print(f"wrote {args.out}/model.pt: {shape.layers} layers, H={shape.embed_dim}, "
          f"{shape.attention_heads} heads, FFN {shape.ffn_embed_dim}, vocab {shape.vocab_size}, "
          f"{shape.max_positions} positions (from {plan.weights_path})")
    print(f"lm_head: {rec['lm_head']}; LayerNorm eps {shape.layernorm_eps} "
          f"(cfg.model.layernorm_eps)")
    print(f"segment B: {rec['token_types']}; pooler: {rec['pooler']}; architecture "
          f"{plan.model_cfg['_name']}")
    for item in rec["dropped"]:
        print(f"dropped {item['tensor']}: {item['reason']}")
    print("fairseq-train flags: " + shlex.join(train_flags(plan.model_cfg)))


def _roberta(args):
    from span_plugin.convert.flags import train_flags
    from span_plugin.convert.roberta import convert_roberta

    plan = convert_roberta(args.hf_dir, args.out, overwrite=args.force, seed=args.seed)
    rec, shape = plan.record, plan.shape
    print(f"wrote {args.out}/model.pt: {shape.layers} layers, H={shape.embed_dim}, "
          f"{shape.attention_heads} heads, FFN {shape.ffn_embed_dim}, vocab {shape.vocab_size}, "
          f"{plan.model_cfg['max_positions']} positions (from {plan.weights_path})")
    files = "encoder.json, vocab.bpe" if plan.vocab.kind == "gpt2" else "sentencepiece.bpe.model"
    print(f"tokenizer: {plan.vocab.kind} ({files}); dict.txt index == Hugging Face id"
          + (f" ({rec['placeholders']} ids kept as madeupword placeholders)"
             if rec["placeholders"] else ""))
    print(f"lm_head: {rec['lm_head']}; LayerNorm eps {shape.layernorm_eps} "
          f"(cfg.model.layernorm_eps); architecture {plan.model_cfg['_name']}")
    for item in rec["dropped"]:
        print(f"dropped {item['tensor']}: {item['reason']}")
    print("fairseq-train flags: " + shlex.join(train_flags(plan.model_cfg)))


def _flags(args):
    from span_plugin.convert.flags import checkpoint_train_flags

    print(shlex.join(checkpoint_train_flags(args.checkpoint)))


def _hydra(args):
    from span_plugin.convert.flags import hydra_overrides

    print(shlex.join(hydra_overrides(args.model_dir)))


def main(argv=None):
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    commands = {"bert": _bert, "roberta": _roberta, "flags": _flags, "hydra-overrides": _hydra}
    # The output folder is never the Hugging Face folder read, and has one writer.
    return run_guarded(f"span-convert {args.cmd}", {"--out": getattr(args, "out", None)},
                       {"--hf-dir": getattr(args, "hf_dir", None)}, lambda: commands[args.cmd](args))


if __name__ == "__main__":
    sys.exit(main())
