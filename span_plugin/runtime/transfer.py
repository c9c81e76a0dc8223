"""The encoder of a transfer fine-tuning run (``recipes/transfer/paraphrase.sh``) as a
starting model for the GLUE recipes.

    python -m span_plugin.runtime.transfer strip CHECKPOINT OUT.pt
    python -m span_plugin.runtime.transfer strip CHECKPOINT OUT_DIR --model-dir MODEL_DIR

Every ``classification_heads.*`` weight and the optimizer state are removed, so a run
started from it with ``--finetune-from-model`` gets fresh heads: fairseq's
``RobertaModel.upgrade_state_dict_named`` keeps a checkpoint head whose name and shapes
match the new one, so a 2-class transfer head could otherwise become MRPC's starting
head. The encoder (and its LM head) is kept as trained. With ``--model-dir`` (the run
started from a ``span-convert bert`` folder) OUT_DIR becomes such a folder: the new
model.pt next to copies of that folder's dict.txt and tokenizer files. Files are written
atomically (:mod:`span_plugin.runtime.checkpoints`).
"""

import argparse
import io
import os
import sys

from span_plugin.files.atomic import atomic_copy, atomic_write
from span_plugin.runtime.checkpoints import load_state
from span_plugin.runtime.data_record import check_checkpoint_dictionary

HEAD_PREFIX = "classification_heads."
RECORD_KEY = "span_transfer"  # where the stripped checkpoint says what it came from


def strip_heads(state):
    """Remove the classification heads and the optimizer state of a fairseq checkpoint
    state, in place; returns the names of the removed heads."""
    model = state.get("model")
    if not isinstance(model, dict):
        raise ValueError("not a fairseq checkpoint: it has no 'model' entry")
    heads = sorted({k.split(".")[1] for k in model if k.startswith(HEAD_PREFIX)})
    for k in [k for k in model if k.startswith(HEAD_PREFIX)]:
        del model[k]
    # Optimizer moments are useless to a new task and as large as the model.
    state["last_optimizer_state"] = None
    return heads


def write_stripped(checkpoint, out, model_dir=None):
    """Write ``checkpoint`` without heads to ``out`` (a file), or with ``model_dir`` to
    the folder ``out`` (model.pt plus the model folder's other files). Returns the path
    of the written model file."""
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f"{checkpoint}: no such checkpoint (did the transfer run finish?)")
    state = load_state(checkpoint)
    if model_dir is not None:  # the folder's dict.txt goes with the weights: the right one
        check_checkpoint_dictionary(checkpoint, os.path.join(model_dir, "dict.txt"), state)
    heads = strip_heads(state)
    state[RECORD_KEY] = {"from": os.path.abspath(checkpoint), "heads_removed": heads}
    target = out
    if model_dir is not None:
        for f in ("model.pt", "dict.txt"):
            if not os.path.isfile(os.path.join(model_dir, f)):
                raise FileNotFoundError(f"{model_dir}/{f} not found: --model-dir is a folder "
                                        f"made by 'span-convert bert'")
        os.makedirs(out, exist_ok=True)
        for name in sorted(os.listdir(model_dir)):  # dict.txt, tokenizer files, config
            src = os.path.join(model_dir, name)
            if name != "model.pt" and os.path.isfile(src):
                atomic_copy(src, os.path.join(out, name))
        target = os.path.join(out, "model.pt")
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write(target, lambda f: f.write(buf.getbuffer()))
    return target, heads


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m span_plugin.runtime.transfer",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("strip", help="write a checkpoint without its classification heads")
    q.add_argument("checkpoint")
    q.add_argument("out", help="the file to write, or with --model-dir the folder")
    q.add_argument("--model-dir", help="the span-convert folder the run started from")
    args = p.parse_args(argv)
    from span_plugin.files.outputs import writing

    try:
        with writing({"out": args.out}, {"checkpoint": args.checkpoint, "--model-dir": args.model_dir}):
            target, heads = write_stripped(args.checkpoint, args.out, args.model_dir)
    except (OSError, ValueError) as err:
        print(f"span_plugin.runtime.transfer: {err}", file=sys.stderr)
        return 2
    print(f"span_plugin.runtime.transfer: wrote {target} (encoder of {args.checkpoint}; heads removed: "
          f"{', '.join(heads) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
