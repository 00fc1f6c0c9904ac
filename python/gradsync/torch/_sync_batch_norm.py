"""gs.SyncBatchNorm: Horovod's hvd.SyncBatchNorm (and torch.nn.SyncBatchNorm's semantics) on the
CPU: while training, each batch is normalised with the mean and variance of the whole global
batch (every rank's share), and the backward pass reduces the two sums its input gradient needs
over the ranks as well, so that N ranks on N shares give the one-process gradients of the whole
batch. The weight's and bias's gradients stay per rank (the optimizer averages them, as every
other gradient). In eval mode, or without batch statistics, it is BatchNorm.

Each training forward and backward is one allreduce of 2C + 1 (forward) or 2C (backward) values
per layer, in float64 so that the variance's E[x^2] - E[x]^2 loses nothing; every rank must run
the same layers in the same order (it does, training one model).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _ops
from ._errors import ConfigError
from ._process_sets import global_process_set


def _reduced_dims(x: torch.Tensor) -> list[int]:
    return [0] + list(range(2, x.dim()))


def _per_channel(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return v.view([1, -1] + [1] * (x.dim() - 2))


def _sum_over_ranks(local: torch.Tensor, group: _ops.Group) -> torch.Tensor:
    return _ops.allreduce_(local, "sum", group).wait()


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group):
        channels, dims = x.shape[1], _reduced_dims(x)
        x64 = x.detach().double()
        count = torch.tensor([x.numel() // channels if channels else 0], dtype=torch.float64)
        stats = _sum_over_ranks(torch.cat([x64.sum(dims), (x64 * x64).sum(dims), count]), group)
        n = stats[-1].item()
        if n <= 1:
            raise ConfigError(f"SyncBatchNorm: {int(n)} value per channel over all ranks; "
                              "training needs more than one")
        mean = stats[:channels] / n
        var = (stats[channels:2 * channels] / n - mean * mean).clamp_min(0)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                unbiased = (var * n / (n - 1)).to(running_var.dtype)
                running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)
        invstd = (var + eps).rsqrt()
        xhat = ((x64 - _per_channel(mean, x)) * _per_channel(invstd, x)).to(x.dtype)
        out = xhat
        if weight is not None:
            out = xhat * _per_channel(weight, x) + _per_channel(bias, x)
        ctx.save_for_backward(xhat, weight, invstd.to(x.dtype))
        ctx.n, ctx.group = n, group
        return out

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        channels, dims = xhat.shape[1], _reduced_dims(xhat)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        grad_weight = sum_dy_xhat if weight is not None else None
        grad_bias = sum_dy if weight is not None else None
        totals = _sum_over_ranks(torch.cat([sum_dy, sum_dy_xhat]).double(), ctx.group)
        mean_dy = (totals[:channels] / ctx.n).to(dy.dtype)
        mean_dy_xhat = (totals[channels:] / ctx.n).to(dy.dtype)
        scale = invstd if weight is None else weight * invstd
        grad_x = _per_channel(scale, dy) * (
            dy - _per_channel(mean_dy, dy) - xhat * _per_channel(mean_dy_xhat, dy))
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """BatchNorm over the whole global batch (see the module's text). Horovod's arguments, and
    a process_set= of the ranks that share their statistics (default: every rank)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_set=None,
                 device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.process_set = process_set or global_process_set

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                False, factor, self.eps)
        running = self.training and self.track_running_stats
        return _SyncBatchNorm.apply(x, self.weight, self.bias,
                                    self.running_mean if running else None,
                                    self.running_var if running else None, self.eps, factor,
                                    self.process_set.group("SyncBatchNorm"))
