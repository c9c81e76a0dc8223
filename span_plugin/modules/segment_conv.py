"""A 1-D convolution that does not see across segment boundaries."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SegmentConv1d(nn.Conv1d):
    """``nn.Conv1d(dim, dim, k, padding=k // 2)`` applied to every segment of a packed
    sequence as if the segment stood alone, zero-padded at both ends.

    A kernel-k convolution is the sum of k shifted linear maps; here tap ``j`` of the
    output at position t reads position ``t + j - k // 2`` only when that position
    carries the same segment id as t, so neighbours in another segment, and
    positions in no segment, count as the zero padding they would be if the
    segment were convolved on its own. All taps come from one matrix product,
    then k shifted, masked adds: no loop over examples or segments, no padded
    per-segment buffer.

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
        batch, length, _ = values.shape
        k = self.kernel_size[0]
        half = k // 2
        # Positions in no segment are never read; zeroing them first keeps whatever
        # they hold (huge fp16 padding, garbage) out of the matrix product, so no
        # tap there can overflow to inf and turn into nan when masked.
        in_segment = segment_ids >= 0
        values = values.masked_fill(~in_segment.unsqueeze(-1), 0)
        # [B, N + 2*half, k, H_out]: every tap's linear map of every (padded)
        # position; the bias rides on the centre tap.
        taps_weight = self.weight.permute(2, 0, 1).reshape(k * self.out_channels, self.in_channels)
        taps_bias = F.pad(self.bias, (half * self.out_channels, half * self.out_channels))
        taps = F.linear(F.pad(values, (0, 0, half, half)), taps_weight, taps_bias)
        taps = taps.view(batch, length + 2 * half, k, self.out_channels)

        padded_ids = F.pad(segment_ids, (half, half), value=-1)
        output = taps[:, half : half + length, half]
        for j in range(k):  # over kernel taps, not over examples or segments
            if j == half:
                continue
            same_segment = (padded_ids[:, j : j + length] == segment_ids) & in_segment
            output = torch.addcmul(output, taps[:, j : j + length, j], same_segment.unsqueeze(-1).to(values.dtype))
        return output
