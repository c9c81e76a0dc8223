"""span-convert speed and peak memory on a BERT-large-shaped checkpoint.

Writes a random BERT-large checkpoint in Hugging Face layout (BertForPreTraining keys:
``bert.`` encoder, pooler, MLM and NSP heads; 24 layers, H = 1024, 16 heads, FFN 4096,
vocabulary 30,522, 512 positions; ~1.3 GB of float32) to a temporary folder, once as
``model.safetensors`` and once as ``pytorch_model.bin``, and times ``span-convert bert``
on each as its own process. Peak memory is the child's ``ru_maxrss`` (from ``os.wait4``,
so each conversion is measured alone), reported against the checkpoint's size. Targets:
under a minute, peak RSS under 2x the checkpoint. All files are deleted at the end.

    .venv/bin/python benchmarks/convert_speed.py [--tmp-dir DIR]
    .venv/bin/python benchmarks/convert_speed.py --quick   # seconds: a tiny BERT, no targets
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

BIN = Path(sys.executable).parent
LARGE = dict(layers=24, hidden=1024, heads=16, ffn=4096, vocab=30522, positions=512)
TINY = dict(layers=2, hidden=32, heads=2, ffn=64, vocab=200, positions=64)  # --quick
TARGET_SECONDS = 60
TARGET_RSS_RATIO = 2.0


def bert_large_state(layers, hidden, ffn, vocab, positions, seed=0):
    """Random tensors under BertForPreTraining's names, float32."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    sd = {
        "bert.embeddings.word_embeddings.weight": rand(vocab, hidden),
        "bert.embeddings.position_embeddings.weight": rand(positions, hidden),
        "bert.embeddings.token_type_embeddings.weight": rand(2, hidden),
        "bert.embeddings.LayerNorm.weight": torch.ones(hidden),
        "bert.embeddings.LayerNorm.bias": torch.zeros(hidden),
    }
    for n in range(layers):
        p = f"bert.encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            sd[p + name + ".weight"], sd[p + name + ".bias"] = rand(hidden, hidden), rand(hidden)
        sd[p + "intermediate.dense.weight"], sd[p + "intermediate.dense.bias"] = (
            rand(ffn, hidden), rand(ffn))
        sd[p + "output.dense.weight"], sd[p + "output.dense.bias"] = rand(hidden, ffn), rand(hidden)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            sd[p + ln + ".weight"], sd[p + ln + ".bias"] = torch.ones(hidden), torch.zeros(hidden)
    sd.update({
        "bert.pooler.dense.weight": rand(hidden, hidden),
        "bert.pooler.dense.bias": rand(hidden),
        "cls.predictions.transform.dense.weight": rand(hidden, hidden),
        "cls.predictions.transform.dense.bias": rand(hidden),
        "cls.predictions.transform.LayerNorm.weight": torch.ones(hidden),
        "cls.predictions.transform.LayerNorm.bias": torch.zeros(hidden),
        "cls.predictions.bias": rand(vocab),
        "cls.seq_relationship.weight": rand(2, hidden),
        "cls.seq_relationship.bias": rand(2),
    })
    return sd


def write_hf_folder(folder, state, fmt, layers, hidden, heads, ffn, vocab, positions):
    """config.json, vocab.txt (BERT's special-token positions) and the weights."""
    folder.mkdir(parents=True)
    config = {
        "model_type": "bert", "architectures": ["BertForPreTraining"],
        "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
        "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": positions,
        "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"w{i}" for i in range(vocab - len(tokens))]
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return folder / "model.safetensors"
    torch.save(state, folder / "pytorch_model.bin")
    return folder / "pytorch_model.bin"


def run_measured(cmd):
    """Run ``cmd``; return (wall seconds, peak RSS bytes of that process alone)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{out.decode()[-3000:]}")
    return wall, usage.ru_maxrss * 1024  # Linux reports KiB


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tmp-dir", help="where to write the ~1.3 GB files (default: system temp)")
    parser.add_argument("--quick", action="store_true",
                        help="a check in seconds: a tiny BERT; the targets are not checked")
    args = parser.parse_args()
    shape = TINY if args.quick else LARGE

    _, import_rss = run_measured([sys.executable, "-c", "import span_plugin.convert"])
    print(f"import span_plugin.convert alone: peak RSS {import_rss / 2**20:.0f} MiB")
    state = bert_large_state(**{k: v for k, v in shape.items() if k != "heads"})
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp_dir, prefix="convert_speed_") as tmp:
        for fmt in ("safetensors", "bin"):
            hf = Path(tmp) / f"hf_{fmt}"
            weights = write_hf_folder(hf, state, fmt, **shape)
            size = weights.stat().st_size
            out = Path(tmp) / f"out_{fmt}"
            wall, rss = run_measured([str(BIN / "span-convert"), "bert", "--hf-dir", str(hf),
                                      "--out", str(out)])
            out_size = (out / "model.pt").stat().st_size
            rows.append((fmt, size, wall, rss, out_size))
            print(f"{weights.name}: {size / 1e9:.2f} GB -> model.pt {out_size / 1e9:.2f} GB in "
                  f"{wall:.1f} s, peak RSS {rss / 1e9:.2f} GB = {rss / size:.2f}x the checkpoint",
                  flush=True)
            for path in (weights, out / "model.pt"):  # free the disk before the next format
                path.unlink()

    print("\n| weights file | size (GB) | wall (s) | peak RSS (GB) | RSS / size |")
    print("|---|---|---|---|---|")
    for fmt, size, wall, rss, _ in rows:
        print(f"| {fmt} | {size / 1e9:.2f} | {wall:.1f} | {rss / 1e9:.2f} | {rss / size:.2f} |")
    if args.quick:  # a tiny checkpoint is far below the interpreter's own memory
        print("\ntargets: not checked (--quick)")
        return 0
    ok = all(wall < TARGET_SECONDS and rss < TARGET_RSS_RATIO * size
             for _, size, wall, rss, _ in rows)
    print(f"\ntargets (< {TARGET_SECONDS} s, peak RSS < {TARGET_RSS_RATIO}x checkpoint): "
          f"{'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
