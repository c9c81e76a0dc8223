"""Runs fairseq-train's real entry point in one worker process started by torchrun,
then saves this rank's final parameters (fairseq itself saves only rank 0's).

Usage: torchrun --nproc_per_node N dist_worker.py OUT_PREFIX <fairseq-train arguments...>

On CPU, fairseq cannot infer its torchrun settings (it divides the rank by the CUDA
device count before any plugin code runs), so the rank comes in as explicit flags,
as a CPU user would pass them (docs/GPU.md, "Several processes").
"""

import os
import sys

import torch
from fairseq import trainer as fairseq_trainer
from fairseq_cli import train

trainers = []
init = fairseq_trainer.Trainer.__init__


def remember(self, *args, **kwargs):
    init(self, *args, **kwargs)
    trainers.append(self)


fairseq_trainer.Trainer.__init__ = remember

if __name__ == "__main__":
    out = f"{sys.argv.pop(1)}.rank{os.environ['RANK']}.pt"
    sys.argv[0] = "fairseq-train"
    sys.argv += [
        "--distributed-init-method", "env://", "--distributed-no-spawn",
        "--distributed-world-size", os.environ["WORLD_SIZE"],
        "--distributed-rank", os.environ["RANK"], "--device-id", os.environ["LOCAL_RANK"],
        "--distributed-backend", "gloo",
    ]
    train.cli_main()
    (trainer,) = trainers
    state = {k: v.detach().clone() for k, v in trainer.get_model().state_dict().items()}
    torch.save({"rank": torch.distributed.get_rank(), "model": state}, out)
