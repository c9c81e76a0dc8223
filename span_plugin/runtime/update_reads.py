"""One device read per training update, in fairseq's own Trainer: right after clipping, the
gradient norm (with the AMP scale and growth tracker) comes to the host in one copy
(:func:`read_once`) and every test of it is made on that copy, so updates are stepped,
skipped, retried and stopped exactly where fairseq does. ``SPAN_PLUGIN_FAIRSEQ_UPDATE=1``
restores fairseq's own update. Which reads go and why: docs/GPU.md, section
"Module notes"."""

import logging
import os
from collections.abc import Mapping

import numpy as np
import torch

from span_plugin.runtime.padded_encoder import forward_with_padding_mask
from span_plugin.runtime.patching import replace

logger = logging.getLogger(__name__)

OPT_OUT = "SPAN_PLUGIN_FAIRSEQ_UPDATE"
# The update's one read, as profiler traces show it (benchmarks/gpu_profile.py).
READ_LABEL = "span_plugin::device_read"
_HOST_COPY = "_span_host_copy"  # attribute marking a tensor as a copy already on the host


def enabled() -> bool:
    """Whether updates read the device once (unless ``SPAN_PLUGIN_FAIRSEQ_UPDATE=1``)."""
    return os.environ.get(OPT_OUT, "").strip().lower() not in {"1", "true", "yes"}


def read_once(*scalars: torch.Tensor) -> list:
    """0-dim ``scalars`` -> their float32 copies on the host, in one device-to-host copy:
    the update's one synchronisation (free on the CPU, where they already are)."""
    with torch.autograd.profiler.record_function(READ_LABEL):
        stacked = torch.stack([s.detach().reshape(()).float() for s in scalars]).cpu()
    return [mark_host_copy(copy) for copy in stacked.unbind()]


def mark_host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """Mark ``tensor`` as already read to the host: testing it waits for nothing."""
    setattr(tensor, _HOST_COPY, True)
    return tensor


def is_host_copy(value) -> bool:
    """Whether ``value`` is a tensor :func:`read_once` (or :func:`mark_host_copy`) made."""
    return torch.is_tensor(value) and getattr(value, _HOST_COPY, False)


# ----------------------------------------------------------------------------------
# The gradient norm, read once


def _trainer_clip_grad_norm(original):
    def clip_grad_norm(self, clip_norm):
        norm = original(self, clip_norm)
        if not enabled() or self.tpu or not torch.is_tensor(norm) or is_host_copy(norm):
            return norm
        (norm,) = read_once(norm)
        return norm

    return clip_grad_norm


def _fp16_clip_grad_norm(original):
    """``--fp16``: fairseq's clip and loss-scaler tests, made on the host copy; the clip
    factor is still computed from the device norm, as fairseq does."""

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        if not enabled() or self.scaler is None:  # --bf16 reads nothing here
            return original(self, max_norm, aggregate_norm_fn)
        self._sync_fp16_grads_to_fp32()
        norm = self._multiply_factor * self.fp32_optimizer.clip_grad_norm(0, aggregate_norm_fn)
        if torch.is_tensor(self._multiply_factor):
            self._multiply_factor = self._multiply_factor.to(norm.device)
        (host_norm,) = read_once(norm)
        if host_norm > max_norm > 0.0:
            self._multiply_factor *= max_norm / norm
        self.scaler.check_overflow(host_norm)  # raises OverflowError, lowers the scale
        return host_norm

    return clip_grad_norm


def _memory_efficient_fp16_clip_grad_norm(original):
    """``--memory-efficient-fp16`` reads the norm itself: that read becomes the copy
    the trainer's tests see."""

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        if not enabled() or self.scaler is None:
            return original(self, max_norm, aggregate_norm_fn)
        max_norm = float(max_norm)
        norm = self._multiply_factor * self.wrapped_optimizer.clip_grad_norm(0, aggregate_norm_fn)
        (host_norm,) = read_once(norm)
        host_value = float(host_norm)
        if host_value > max_norm > 0.0:
            self._multiply_factor *= max_norm / host_value
        self.scaler.check_overflow(host_value)
        return host_norm

    return clip_grad_norm


# ----------------------------------------------------------------------------------
# --amp: GradScaler on the device


def _steps_on_device(amp_optimizer) -> bool:
    """Whether this AMP update can skip an overflowing step on the device."""
    return (enabled() and amp_optimizer._grad_scaler.is_enabled()
            and getattr(amp_optimizer.fp32_optimizer.optimizer, "_step_supports_amp_scaling", False))


def scale_after_update(scale: float, tracker: int, overflow: bool, scaler) -> float:
    """GradScaler.update's rule (``torch._amp_update_scale_``) on the host: the scale
    after an update that did (not) overflow, from the scale and growth tracker before it,
    in float32 as on the device."""
    if overflow:
        return float(np.float32(scale) * np.float32(scaler.get_backoff_factor()))
    if tracker + 1 == scaler.get_growth_interval():
        grown = np.float32(scale) * np.float32(scaler.get_growth_factor())
        return float(grown) if np.isfinite(grown) else scale
    return scale


def _amp_clip_grad_norm(original):
    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        self._span_logged_scale = None
        if not _steps_on_device(self):
            return original(self, max_norm, aggregate_norm_fn)
        scaler = self._grad_scaler
        scaler.unscale_(self.optimizer)
        norm = self.fp32_optimizer.clip_grad_norm(max_norm, aggregate_norm_fn)
        host_norm, scale, tracker = read_once(norm, scaler._get_scale_async(), scaler._growth_tracker)
        scale, tracker = float(scale), int(tracker)
        overflow = not torch.isfinite(host_norm).item()
        if overflow:
            backed_off = scale * scaler.get_backoff_factor()
            if backed_off <= self.min_loss_scale:
                raise FloatingPointError(
                    f"AMP: the loss scale would fall to {backed_off}, not above --min-loss-scale "
                    f"{self.min_loss_scale}: the loss is probably exploding (restart, or train in fp32)")
            logger.info("AMP: overflow detected, setting loss scale to %s", backed_off)
        # A finite norm means no gradient is inf or NaN: GradScaler's found_inf is 0.
        self._span_scale_after = scale_after_update(scale, tracker, overflow, scaler)
        return host_norm

    return clip_grad_norm


def _amp_step(original):
    def step(self):
        if not _steps_on_device(self) or getattr(self, "_span_scale_after", None) is None:
            return original(self)
        scaler, optimizer = self._grad_scaler, self.fp32_optimizer.optimizer
        # fairseq steps its wrapper, which GradScaler unscales a second time: the fused
        # step divides by the scale once more, on the device (exact for the scale's
        # powers of two).
        optimizer.grad_scale = scaler._get_scale_async()
        scaler.step(optimizer)  # skipped on the device when found_inf
        scaler.update()
        self._span_logged_scale, self._span_scale_after = self._span_scale_after, None

    return step


class _ScaleKnownOnHost:
    """The AMP scaler as fairseq's trainer sees it right after a step: ``get_scale()``
    answers from the host (the value the device holds after ``update``)."""

    def __init__(self, scaler, scale: float):
        self._scaler, self._scale = scaler, scale

    def get_scale(self) -> float:
        return self._scale

    def __getattr__(self, name):
        return getattr(self._scaler, name)


def _amp_scaler(original):
    def scaler(self):
        known = getattr(self, "_span_logged_scale", None)
        return original.fget(self) if known is None or not enabled() else _ScaleKnownOnHost(
            self._grad_scaler, known)

    return property(scaler)


# ----------------------------------------------------------------------------------
# Stats smoothed when read; the encoder's padding mask


class SmoothedWhenRead(Mapping):
    """The dict ``Trainer.train_step`` returns (the update's smoothed stats and its
    sample size), computed on first access: fairseq's train loop only tests it for None."""

    def __init__(self, aggregator, sample_size):
        self._aggregator, self._sample_size, self._values = aggregator, sample_size, None

    def _smoothed(self) -> dict:
        if self._values is None:
            values = self._aggregator.get_smoothed_values()
            values["sample_size"] = self._sample_size
            for key in ("ppl", "wps", "wpb", "bsz"):
                values.pop(key, None)
            self._values = dict(values)
        return self._values

    def __getitem__(self, key):
        return self._smoothed()[key]

    def __iter__(self):
        return iter(self._smoothed())

    def __len__(self):
        return len(self._smoothed())

    def __repr__(self):
        return repr(self._smoothed())


def _reduce_and_log_stats(original):
    from fairseq.logging import metrics

    def reduce_and_log_stats(self, logging_outputs, sample_size, grad_norm=None):
        if not enabled() or self.tpu:
            return original(self, logging_outputs, sample_size, grad_norm)
        # fairseq logs a non-finite norm's update nowhere; here grad_norm is the host copy.
        if grad_norm is not None and (not torch.is_tensor(grad_norm) or torch.isfinite(grad_norm).item()):
            metrics.log_speed("ups", 1.0, priority=100, round=2)
            metrics.log_scalar("gnorm", grad_norm, priority=400, round=3)
            clip = self.cfg.optimization.clip_norm
            if clip > 0:
                metrics.log_scalar("clip", torch.where(grad_norm > clip, grad_norm.new_tensor(100),
                                                       grad_norm.new_tensor(0)), priority=500, round=1)
        with metrics.aggregate() as aggregator:
            if logging_outputs is not None:
                self.task.reduce_metrics(logging_outputs, self.get_criterion())
            if "loss" not in aggregator:
                if "loss" not in self._warn_once:
                    self._warn_once.add("loss")
                    logger.warning("the criterion's reduce_metrics logged no 'loss'")
                metrics.log_scalar("loss", -1)
            return SmoothedWhenRead(aggregator, sample_size)

    return reduce_and_log_stats


def _encoder_forward(original):
    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens=False,
                           token_embeddings=None):
        if self.training and enabled() and src_tokens.device.type != "xla":
            return forward_with_padding_mask(self, src_tokens, src_lengths, return_all_hiddens,
                                             token_embeddings)
        return original(self, src_tokens, src_lengths, return_all_hiddens, token_embeddings)

    return forward_scriptable


def install():
    """Patch fairseq's Trainer, loss-scaling optimizers and encoder (idempotent)."""
    from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase
    from fairseq.optim.amp_optimizer import AMPOptimizer
    from fairseq.optim.fp16_optimizer import _FP16OptimizerMixin, _MemoryEfficientFP16OptimizerMixin
    from fairseq.trainer import Trainer

    replace(Trainer, "clip_grad_norm", _trainer_clip_grad_norm)
    replace(Trainer, "_reduce_and_log_stats", _reduce_and_log_stats)
    replace(_FP16OptimizerMixin, "clip_grad_norm", _fp16_clip_grad_norm)
    replace(_MemoryEfficientFP16OptimizerMixin, "clip_grad_norm", _memory_efficient_fp16_clip_grad_norm)
    replace(AMPOptimizer, "clip_grad_norm", _amp_clip_grad_norm)
    replace(AMPOptimizer, "step", _amp_step)
    replace(AMPOptimizer, "scaler", _amp_scaler)
    replace(TransformerEncoderBase, "forward_scriptable", _encoder_forward)
