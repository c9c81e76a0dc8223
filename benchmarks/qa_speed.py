"""Extractive QA: preprocessing speed of the SQuAD v1.1 dev file, and the cost per
training step of the sf and span heads against the boundary head.

1. ``span-preprocess qa`` of all 10,570 dev questions (WordPiece of all-MiniLM-L6-v2,
   windows of ``--max-positions`` with ``--doc-stride``), one process: questions/s.
2. One MiniLM-sized encoder (``roberta_qa``: 6 layers, H = 384, WordPiece vocabulary,
   random weights: the cost does not depend on them) with the three heads on it. Each
   step is forward + head loss + backward on the same real batches of the folder above
   (16 questions and all their windows, n-gram spans included); steps alternate
   (boundary, sf, span, boundary, ...)
   after a warm-up, and medians of process CPU time are compared (wall time on a
   shared machine mostly measures the neighbours). No optimizer step (it costs both
   the same, so the ratio is stricter).

    .venv/bin/python benchmarks/qa_speed.py [--max-positions 256] [--doc-stride 64] [--steps 7]
    .venv/bin/python benchmarks/qa_speed.py --quick   # seconds: 10 paragraphs, a tiny encoder
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from common import DATA, ROOT, minilm_dir
from common import MINILM as MINILM_SIZES
from common import TINY as TINY_SIZES  # --quick

sys.path.insert(0, str(ROOT))
SQUAD_DEV = os.path.join(DATA, "squad", "dev-v1.1.json")
QUICK_PARAGRAPHS = 10  # of the first article, in --quick


def first_paragraphs(out, paragraphs):
    """A SQuAD file of the first ``paragraphs`` paragraphs of the dev file's first article."""
    with open(SQUAD_DEV, encoding="utf-8") as f:
        data = json.load(f)
    article = dict(data["data"][0], paragraphs=data["data"][0]["paragraphs"][:paragraphs])
    path = os.path.join(out, "dev-part.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(data, data=[article]), f)
    return path


def preprocess(out, max_positions, doc_stride, squad=SQUAD_DEV):
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.folders.qa import QASettings, prepare_qa

    converted = os.path.join(out, "minilm")  # its dict.txt, as the recipes make it
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "span-convert"), "bert",
                    "--hf-dir", minilm_dir(), "--out", converted], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dict_path = os.path.join(converted, "dict.txt")
    spec = EncoderSpec(bpe="wordpiece", wordpiece=converted)
    start = time.perf_counter()
    summaries = prepare_qa(os.path.join(out, "bin"), {"valid": squad},
                           FolderOptions(spec, dict_path, command="benchmark"),
                           QASettings(max_positions=max_positions, doc_stride=doc_stride))
    seconds = time.perf_counter() - start
    s = summaries["valid"]
    print(f"preprocess: {s.questions} questions, {s.windows} windows in {seconds:.1f} s "
          f"({s.questions / seconds:.0f} questions/s, one process)")
    return os.path.join(out, "bin")


def step_costs(folder, steps, max_positions, sizes=MINILM_SIZES, questions=16):
    import span_plugin
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    span_plugin.register()
    torch.manual_seed(0)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        folder, "--user-dir", os.path.join(ROOT, "span_plugin"), "--task", "span_qa",
        "--criterion", "span_qa", "--arch", "roberta_qa", *sizes, "--max-positions", "512",
        "--cpu"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    data = task.load_dataset("valid")
    model = task.build_model(cfg.model)  # the boundary head, "qa_head"
    model.register_head("sf_head", "qa_boundary_sf", max_answer_tokens=30)
    model.register_head("span_head", "qa_span", max_answer_tokens=30)
    model.train()
    batches = [data.collater([data[i] for i in range(k * questions, (k + 1) * questions)])
               for k in range(steps + 1)]
    times = {"qa_head": [], "sf_head": [], "span_head": []}
    for k, batch in enumerate(batches):
        for name in times:
            model.zero_grad()
            t0 = time.process_time()
            out, _ = model(**batch["net_input"], classification_head_name=name)
            loss, _ = model.classification_heads[name].loss(out, batch["target"])
            loss.backward()
            if k > 0:  # the first batch warms up
                times[name].append(time.process_time() - t0)
    boundary, sf, span = (statistics.median(times[n]) for n in times)
    windows = statistics.median(b["target"].size(0) for b in batches)
    print(f"step ({questions} questions, median {windows:.0f} windows of <= {max_positions} tokens), "
          f"CPU s: boundary {boundary:.2f}, sf {sf:.2f}, span {span:.2f}; sf / boundary = "
          f"{sf / boundary:.3f} ({100 * (sf / boundary - 1):+.1f}%), span / boundary = "
          f"{span / boundary:.3f} ({100 * (span / boundary - 1):+.1f}%)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-positions", type=int, default=256)
    p.add_argument("--doc-stride", type=int, default=64)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--questions", type=int, default=16, help="questions per step")
    p.add_argument("--quick", action="store_true",
                   help=f"a check in seconds: {QUICK_PARAGRAPHS} paragraphs, a tiny encoder, 1 step "
                   "of 4 questions")
    args = p.parse_args()
    if args.quick:
        args.steps, args.questions = 1, 4
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as tmp:
        squad = first_paragraphs(tmp, QUICK_PARAGRAPHS) if args.quick else SQUAD_DEV
        folder = preprocess(tmp, args.max_positions, args.doc_stride, squad)
        step_costs(folder, args.steps, args.max_positions, TINY_SIZES if args.quick else MINILM_SIZES,
                   args.questions)


if __name__ == "__main__":
    main()
