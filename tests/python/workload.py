"""What the test jobs train: a small model (a conv layer and two linear ones; no BatchNorm,
whose batch statistics would differ between a rank's share and the whole batch), deterministic
global batches, and a training loop over gs.DistributedOptimizer, so that a job takes a second
or two.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import gradsync.torch as gs

GLOBAL_BATCH = 12  # divisible by 1, 2 and 3 ranks
STEPS = 4
MOMENTUM_WARMUP = 2  # compress_momentum's dense steps in the tests of 1-bit Adam


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(4 * 6 * 6, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv(x)).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def fresh_model() -> Net:
    torch.manual_seed(7)
    return Net()


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(GLOBAL_BATCH, 1, 8, 8, generator=g), torch.randint(0, 10, (GLOBAL_BATCH,),
                                                                           generator=g)


def share(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the step's global batch."""
    x, y = batch(step)
    n = GLOBAL_BATCH // gs.size()
    return x[gs.rank() * n:(gs.rank() + 1) * n], y[gs.rank() * n:(gs.rank() + 1) * n]


def make_optimizer(kind: str, model: nn.Module) -> torch.optim.Optimizer:
    # Adam's eps as in the C++ tests (api_fixture.h): with 1e-8 an element whose gradient is
    # near eps turns a rounding difference d into lr * d / eps.
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-3)
    if kind == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-3)
    if kind == "rmsprop":
        return torch.optim.RMSprop(model.parameters(), lr=1e-3)
    if kind == "sgd-plain":
        return torch.optim.SGD(model.parameters(), lr=0.1)
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(config: dict, steps: int = STEPS, start: int = 0, model=None, optimizer=None):
    """Trains with gs.DistributedOptimizer under `config` (its options plus "optimizer");
    returns the losses, the model and the optimizer."""
    options = {k: v for k, v in config.items() if k != "optimizer"}
    if model is None:
        model = gs.DistributedModel(fresh_model())
        optimizer = gs.DistributedOptimizer(make_optimizer(config.get("optimizer", "sgd"), model),
                                            named_parameters=model.named_parameters(), **options)
    losses = []
    for step in range(start, start + steps):
        x, y = share(step)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        optimizer.report_loss(loss)  # the guard's loss signal (a no-op without compression)
        loss.backward()
        optimizer.step()
        losses.append(gs.allreduce(loss.detach()).item())
    optimizer.wait_for_parameters()
    return losses, model, optimizer


def parameters(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]
