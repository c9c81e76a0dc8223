"""``--optimizer torch_adamw``: fairseq's ``adam`` (decoupled weight decay) stepped by
torch's fused AdamW, for a host that dispatches a handful of kernels an update.

fairseq's ``adam`` steps each parameter tensor in a Python loop (about ten operators a
tensor) unless NVIDIA's apex is installed, and its ``clip_grad_norm`` takes one norm a
tensor without apex: where the optimizer sees a tensor a weight (fp32 on the CPU,
``--amp``, ``--bf16``'s master copies; ``--fp16`` flattens them) that is about a
thousand operators an update at base size, each a kernel launch on a GPU (benchmarks/RESULTS.md).
This one takes the same options (``--adam-betas``, ``--adam-eps``, ``--weight-decay``)
and steps every tensor at once with ``torch.optim.AdamW(fused=True)``; gradient norms
are one ``_foreach_norm``.

One difference of formula, not of method: torch adds ``eps`` to ``sqrt(v / (1 - b2^t))``
(the Adam paper's Algorithm 1), fairseq to ``sqrt(v)`` before the bias correction (the
paper's "efficient version"). The two agree when ``eps`` is small against the gradients'
scale, and exactly as ``eps`` -> 0 (tests/test_torch_adamw.py); a run that must
reproduce an ``adam`` run bit for bit keeps ``adam``. The optimizer state is torch's,
so a checkpoint of one optimizer resumes only with the same one (fairseq says so, and
``--reset-optimizer`` starts the state afresh).
"""

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf

# What a group holds that says how (not what) to step: this process's choice, never a
# loaded checkpoint's (a state saved on a GPU resumes on the CPU, and the reverse).
_IMPLEMENTATION_KEYS = ("fused", "foreach", "capturable", "differentiable")


@dataclass
class TorchAdamWConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas for Adam optimizer"})
    adam_eps: float = field(default=1e-8, metadata={"help": "epsilon for Adam optimizer"})
    weight_decay: float = field(default=0.0, metadata={"help": "weight decay (decoupled, as fairseq's adam)"})
    lr: List[float] = II("optimization.lr")


def parse_betas(value) -> tuple:
    """``--adam-betas`` as two floats in [0, 1). fairseq's ``adam`` ``eval``s the string;
    this reads it as a literal only, so a configuration file cannot run code."""
    text = value
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"--adam-betas {text!r}: expected two numbers, e.g. '(0.9, 0.98)'") from None
    elif not isinstance(value, (tuple, list)):
        value = OmegaConf.to_container(value)
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in value)):
        raise ValueError(f"--adam-betas {text!r}: expected two numbers in [0, 1), e.g. '(0.9, 0.98)'")
    return tuple(float(b) for b in value)


@register_optimizer("torch_adamw", dataclass=TorchAdamWConfig)
class TorchAdamW(FairseqOptimizer):
    def __init__(self, cfg: TorchAdamWConfig, params):
        super().__init__(cfg)
        params = list(params)
        tensors = [t for g in params for t in (g["params"] if isinstance(g, dict) else [g])]
        # fused: a few kernels an update on CUDA and the CPU; elsewhere torch's default
        fused = True if {t.device.type for t in tensors} <= {"cuda", "cpu"} else None
        self._optimizer = torch.optim.AdamW(params, fused=fused, **self.optimizer_config)
        self._implementation = {k: self._optimizer.defaults[k] for k in _IMPLEMENTATION_KEYS}

    @property
    def optimizer_config(self):
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {"lr": lr, "betas": parse_betas(self.cfg.adam_betas), "eps": self.cfg.adam_eps,
                "weight_decay": self.cfg.weight_decay}

    @property
    def supports_flat_params(self):
        return True  # --fp16 hands it one flat fp32 tensor (--bf16 one a weight)

    def load_state_dict(self, state_dict, optimizer_overrides=None):
        super().load_state_dict(state_dict, optimizer_overrides)
        for group in self.param_groups:
            group.update(self._implementation)
        for state in self.optimizer.state.values():  # fused keeps the step count on the device
            if torch.is_tensor(state.get("step")) and "exp_avg" in state:
                state["step"] = state["step"].to(device=state["exp_avg"].device, dtype=torch.float32)

    def average_params(self):
        # fairseq's adam averages its moments over workers at BMUF's syncs; refuse rather
        # than let workers' moments drift apart unnoticed.
        raise NotImplementedError("--optimizer torch_adamw does not average its moments under "
                                  "--use-bmuf: use --optimizer adam")

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """fairseq's ``utils.clip_grad_norm_`` with one ``_foreach_norm`` for every
        gradient instead of one norm a tensor: the total 2-norm (float32) of the
        gradients, which are scaled to ``max_norm`` when ``max_norm > 0`` and larger."""
        grads = [p.grad.detach() for p in self.params if p.grad is not None]
        if not grads:
            return next(self.params).new_tensor(0.0)
        norms = torch._foreach_norm([g.float() for g in grads])  # float() of fp32 is the tensor itself
        total = torch.linalg.vector_norm(torch.stack(norms))
        if aggregate_norm_fn is not None:
            total = aggregate_norm_fn(total)
        if max_norm > 0:
            coef = (float(max_norm) / (total + 1e-6)).clamp_(max=1)
            torch._foreach_mul_(grads, coef)
        return total
