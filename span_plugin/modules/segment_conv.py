"""A 1-D convolution that does not see across segment boundaries."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SegmentConv1d(nn.Conv1d):
    """``nn.Conv1d(dim, dim, k, padding=k // 2)`` applied to every segment of a packed
    sequence as if the segment stood alone, zero-padded at both ends.

    Tap ``j`` of the output at position t reads position ``t + j - k // 2`` only when
    that position carries the same segment id as t, so neighbours in another
    segment, and positions in no segment, count as the zero padding they would be
    if the segment were convolved on its own. The k windows of every position are
    one strided view of the padded input; masking them and one matrix product with
    the flattened weight give every output: no loop over examples or segments, no
    padded per-segment buffer, and a handful of kernels forward and backward (each
    a launch on a GPU).

    The parameters are those of ``nn.Conv1d`` (weight ``[H_out, H_in, k]``, bias
    ``[H_out]``, same initialisation), so ``F.conv1d`` with ``self.weight`` on one
    segment reproduces the result.
    """

    def __init__(self, dim: int, kernel_size: int = 3):
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
        super().__init__(dim, dim, kernel_size, padding=kernel_size // 2)

    def forward(self, values: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        """
        Args:
            values: ``[B, N, H_in]``, in any float dtype.
            segment_ids: LongTensor ``[B, N]``; negative means "in no segment".

        Returns:
            ``[B, N, H_out]`` in the dtype of ``values``. Positions in no segment
            hold unspecified values: callers mask them.
        """
        batch, length, dim = values.shape
        k = self.kernel_size[0]
        half = k // 2
        if length == 0:  # nothing to convolve (unfold needs k positions); keep the graph
            return F.linear(values, self.weight[:, :, half], self.bias)
        # Positions in no segment are never read; zeroing them first keeps whatever
        # they hold (huge fp16 padding, garbage) out of the matrix product, so no
        # tap there can overflow to inf and turn into nan when masked.
        in_segment = segment_ids >= 0
        values = values.masked_fill(~in_segment.unsqueeze(-1), 0)
        neighbour_ids = F.pad(segment_ids, (half, half), value=-1).unfold(1, k, 1)  # [B, N, k]
        same_segment = (neighbour_ids == segment_ids.unsqueeze(-1)) & in_segment.unsqueeze(-1)
        mask = same_segment.to(values.dtype)
        padded = F.pad(values, (0, 0, half, half))
        if torch.compiler.is_compiling():
            # Traced (torch.compile, ONNX export): the k shifted slices stacked tap-major,
            # [B, N, k, H_in], so that each mask entry scales a run of H_in values (tap
            # last, ONNX Runtime broadcasts it over runs of k, element by element); the
            # weight's reorder is folded into a constant or fused. Not the eager
            # unfold: inductor's unfold_backward is wrong on the CPU in torch 2.13
            # (input gradients dropped, or a heap corruption, when the windows are
            # masked and reshaped; pytorch/pytorch#171370 for the same operator on CUDA).
            windows = torch.stack([padded[:, j:j + length] for j in range(k)], dim=2)
            windows = windows * mask.unsqueeze(-1)
            weight = self.weight.transpose(1, 2)  # [H_out, k, H_in]
        else:
            # Eagerly one strided view, [B, N, H_in, k] (no copy), and the weight flattened
            # in its (H_in, k) order, also a view (tap-major would copy it every call)
            windows = padded.unfold(1, k, 1) * mask.unsqueeze(2)
            weight = self.weight
        # windows[b, t, ..., j] = values[b, t + j - half] (zeros past either end)
        return F.linear(windows.reshape(batch, length, dim * k), weight.reshape(self.out_channels, -1), self.bias)
